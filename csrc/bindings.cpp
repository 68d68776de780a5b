// Python bindings of the tensor collectives (module mxkv_hybrid._C).
#include <mpi.h>
#include <pybind11/buffer_info.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bucket_plan.h"
#include "code_sums.h"
#include "communicator.h"
#include "dtype.h"
#include "elastic_step.h"
#include "mxnet_api.h"
#include "shared_link_clock.h"
#include "tensor_collectives.h"

namespace py = pybind11;
using mxkv::NDArrayHandle;
using mxkv::TensorRequest;

namespace {

// [(input handles, output handles), ...] -> requests; handles are ctypes addresses.
std::vector<TensorRequest> to_requests(
    const std::vector<std::pair<std::vector<uintptr_t>, std::vector<uintptr_t>>>& spec) {
  std::vector<TensorRequest> requests(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    for (uintptr_t h : spec[i].first)
      requests[i].inputs.push_back(reinterpret_cast<NDArrayHandle>(h));
    for (uintptr_t h : spec[i].second)
      requests[i].outputs.push_back(reinterpret_cast<NDArrayHandle>(h));
  }
  return requests;
}

// Runs `fn` without the GIL; an EntryError becomes ValueError(message, entry index).
template <typename Fn>
bool run_collective(Fn&& fn) {
  try {
    mxkv::Status status;
    {
      py::gil_scoped_release release;
      status = fn();
    }
    return status == mxkv::Status::kOk;
  } catch (const mxkv::EntryError& e) {
    PyErr_SetObject(PyExc_ValueError, py::make_tuple(e.what(), e.index).ptr());
    throw py::error_already_set();
  }
}

template <typename Fn>
Fn* as_function(const py::dict& addresses, const char* name) {
  return reinterpret_cast<Fn*>(addresses[name].cast<uintptr_t>());
}

// A float32 NDArray's memory, once MXNet's engine is done with it (code_sums' kernels).
mxkv::ArrayView float32_array(uintptr_t handle, const char* what) {
  mxkv::wait_for_engine();
  auto view = mxkv::resolve_array(reinterpret_cast<mxkv::NDArrayHandle>(handle));
  if (view.dtype != mxkv::kFloat32)
    throw std::invalid_argument(std::string(what) + " must be float32");
  return view;
}

}  // namespace

using Spec = std::vector<std::pair<std::vector<uintptr_t>, std::vector<uintptr_t>>>;

void bind_remote_array(py::module& m);  // remote_array_bindings.cpp

// clang-format off: the definitions' hand layout (see .clang-format)
PYBIND11_MODULE(_C, m) {
  m.doc() = "mxkv_hybrid tensor collectives and remote memory (C++)";
  bind_remote_array(m);
  py::register_exception<mxkv::MPIFailure>(m, "MPIFailure", PyExc_RuntimeError);

  m.def("bind_mxnet_api", [](const py::dict& addresses) {
    mxkv::MXNetApi& api = mxkv::mxnet_api();
    using mxkv::NDArrayHandle;
    api.get_data = as_function<int(NDArrayHandle, void**)>(addresses, "MXNDArrayGetData");
    api.get_shape = as_function<int(NDArrayHandle, int*, const int**)>(addresses, "MXNDArrayGetShapeEx");
    api.get_dtype = as_function<int(NDArrayHandle, int*)>(addresses, "MXNDArrayGetDType");
    api.get_context = as_function<int(NDArrayHandle, int*, int*)>(addresses, "MXNDArrayGetContext");
    api.get_storage_type = as_function<int(NDArrayHandle, int*)>(addresses, "MXNDArrayGetStorageType");
    api.wait_all = as_function<int()>(addresses, "MXNDArrayWaitAll");
    api.push_async = as_function<std::remove_pointer_t<decltype(api.push_async)>>(
        addresses, "MXEnginePushAsyncND");
    api.get_last_error = as_function<const char*()>(addresses, "MXGetLastError");
  }, "Binds the MXNet C API functions, given {name: address} of the loaded libmxnet.");

  m.def("elastic_step",
        [](double alpha, const std::vector<std::tuple<uintptr_t, uintptr_t, uintptr_t>>& entries,
           bool ready) {
          std::vector<mxkv::ElasticArrays> arrays;
          for (const auto& [x, c, e] : entries)
            arrays.push_back({reinterpret_cast<NDArrayHandle>(x), reinterpret_cast<NDArrayHandle>(c),
                              reinterpret_cast<NDArrayHandle>(e)});
          py::gil_scoped_release release;
          mxkv::elastic_step(alpha, arrays, ready);
        },
        py::arg("alpha"), py::arg("entries"), py::arg("ready") = false,
        "[(weight, centre, elastic) NDArray handles] (float32/float64): elastic = alpha "
        "(weight - centre); weight -= elastic, fused, one pass (EASGD's elastic step). First "
        "waits for all of MXNet's engine, unless `ready`: no operation is pending on them.");

  m.def("digits_per_word", &mxkv::digits_per_word, py::arg("groups"),
        "Values one float32 word of summed 2-bit digits carries for `groups` groups.");
  m.def("pack_2bit_digits",
        [](uintptr_t values, py::array_t<float, py::array::c_style> residual, float threshold,
           int groups, uintptr_t packed) {
          const auto in = float32_array(values, "pack_2bit_digits: values");
          const auto out = float32_array(packed, "pack_2bit_digits: packed");
          const size_t n = static_cast<size_t>(in.count);
          if (static_cast<size_t>(residual.size()) != n ||
              static_cast<size_t>(out.count) != mxkv::packed_words(n, groups))
            throw std::invalid_argument("pack_2bit_digits: residual must match values, and "
                                        "packed hold packed_words(n, groups) words");
          float* kept = residual.mutable_data();
          py::gil_scoped_release unlocked;
          mxkv::pack_2bit_digits(static_cast<const float*>(in.data), kept, n, threshold, groups,
                                 static_cast<float*>(out.data));
        },
        py::arg("values"), py::arg("residual"), py::arg("threshold"), py::arg("groups"),
        py::arg("packed"),
        "NDArray `packed` (handle) = the 2-bit digits of residual += NDArray `values`, base "
        "2 groups + 1 in float32 words (residual updated; csrc/code_sums.h).");
  m.def("unpack_2bit_digit_sums",
        [](uintptr_t summed, float threshold, int groups, double scale, uintptr_t out) {
          const auto words = float32_array(summed, "unpack_2bit_digit_sums: summed");
          const auto values = float32_array(out, "unpack_2bit_digit_sums: out");
          const size_t n = static_cast<size_t>(values.count);
          if (static_cast<size_t>(words.count) != mxkv::packed_words(n, groups))
            throw std::invalid_argument("unpack_2bit_digit_sums: summed must hold "
                                        "packed_words(out.size, groups) words");
          py::gil_scoped_release unlocked;
          mxkv::unpack_2bit_digit_sums(static_cast<const float*>(words.data), n, threshold,
                                       groups, scale, static_cast<float*>(values.data));
        },
        py::arg("summed"), py::arg("threshold"), py::arg("groups"), py::arg("scale"),
        py::arg("out"),
        "NDArray `out` (handle) = scale x the sums of the groups' quantised values that the "
        "summed words (an NDArray handle) hold.");
  m.def("one_bit_slot_words", &mxkv::one_bit_slot_words, py::arg("n"),
        "Words of one group's slot of 1-bit codes of n values (csrc/code_sums.h).");
  m.def("pack_1bit_slot",
        [](uintptr_t values, py::array_t<float, py::array::c_style> residual, int group,
           int groups, uintptr_t words) {
          const auto in = float32_array(values, "pack_1bit_slot: values");
          const auto out = float32_array(words, "pack_1bit_slot: words");
          const size_t n = static_cast<size_t>(in.count);
          if (static_cast<size_t>(residual.size()) != n || group < 0 || group >= groups ||
              static_cast<size_t>(out.count) != static_cast<size_t>(groups) * mxkv::one_bit_slot_words(n))
            throw std::invalid_argument("pack_1bit_slot: residual must match values, and "
                                        "words hold groups x one_bit_slot_words(n) words");
          float* kept = residual.mutable_data();
          py::gil_scoped_release unlocked;
          mxkv::pack_1bit_slot(static_cast<const float*>(in.data), kept, n, group, groups,
                               static_cast<float*>(out.data));
        },
        py::arg("values"), py::arg("residual"), py::arg("group"), py::arg("groups"),
        py::arg("words"),
        "NDArray `words` (handle) = zeros but for `group`'s slot: the 1-bit codes of "
        "residual += NDArray `values` (residual updated).");
  m.def("unpack_1bit_slots",
        [](uintptr_t summed, int groups, double scale, uintptr_t out) {
          const auto words = float32_array(summed, "unpack_1bit_slots: summed");
          const auto values = float32_array(out, "unpack_1bit_slots: out");
          const size_t n = static_cast<size_t>(values.count);
          if (static_cast<size_t>(words.count) != static_cast<size_t>(groups) * mxkv::one_bit_slot_words(n))
            throw std::invalid_argument("unpack_1bit_slots: summed must hold groups x "
                                        "one_bit_slot_words(out.size) words");
          py::gil_scoped_release unlocked;
          mxkv::unpack_1bit_slots(static_cast<const float*>(words.data), n, groups, scale,
                                  static_cast<float*>(values.data));
        },
        py::arg("summed"), py::arg("groups"), py::arg("scale"), py::arg("out"),
        "NDArray `out` (handle) = scale x the sum of the 1-bit values in every group's slot.");
  m.def("bucket_elements",
        [](const std::vector<std::pair<int, int64_t>>& tensors, size_t bucket_bytes) {
          std::vector<mxkv::Tensor> spec(tensors.size());
          for (size_t i = 0; i < tensors.size(); ++i) {
            spec[i].dtype = tensors[i].first;
            spec[i].count = tensors[i].second;
          }
          std::vector<int64_t> elements;
          for (const mxkv::Bucket& bucket : mxkv::plan_buckets(spec, bucket_bytes))
            elements.push_back(bucket.elements());
          return elements;
        },
        py::arg("tensors"), py::arg("bucket_bytes"),
        "[(dtype code, elements)] -> the elements of each bucket the collectives make of "
        "them (plan_buckets: small tensors fused up to bucket_bytes, larger ones alone).");

  m.def("line_buffer_stderr", [] {
    // Once used, stderr holds a 1-byte buffer that a null buffer argument would keep.
    static char buffer[BUFSIZ];
    std::setvbuf(stderr, buffer, _IOLBF, sizeof buffer);
    std::cerr.unsetf(std::ios_base::unitbuf);
  }, "C stdio's stderr (and std::cerr, which writes through it) is written once per line "
     "instead of once per piece, so MXNet's C++ log lines reach mpiexec whole.");

  py::class_<mxkv::SharedLinkClock>(m, "SharedLinkClock",
                                    "A group's emulated link shared by its ranks (tests).")
      .def(py::init<const std::string&>(), py::arg("name"))
      .def(
          "reserve",
          [](mxkv::SharedLinkClock& self, int direction, double from_seconds, double seconds) {
            using Clock = mxkv::SharedLinkClock::Clock;
            const auto from = Clock::time_point(std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(from_seconds)));
            const auto end = self.reserve(static_cast<mxkv::SharedLinkClock::Direction>(direction),
                                          from, seconds);
            return std::chrono::duration<double>(end.time_since_epoch()).count();
          },
          py::arg("direction"), py::arg("from_seconds"), py::arg("seconds"),
          "Books `seconds` of direction 0 (out) or 1 (in) from `from_seconds` (steady clock) "
          "or when the link is free; returns when the booking ends.");
  py::class_<mxkv::TensorCollectives>(m, "TensorCollectives")
      .def(py::init([](int64_t fortran_comm, size_t bucket_bytes, const std::string& algorithm,
                       const std::vector<std::pair<int64_t, std::string>>& table, int compress,
                       size_t segment_bytes) {
             mxkv::AllreduceOptions options;
             options.algorithm = mxkv::algorithm_from_name(algorithm);
             for (const auto& [max_bytes, name] : table)
               options.table.push_back({max_bytes, mxkv::algorithm_from_name(name)});
             options.compress = compress;
             return new mxkv::TensorCollectives(MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm)),
                                                bucket_bytes, options, segment_bytes);
           }),
           py::arg("fortran_comm"), py::arg("bucket_bytes"), py::arg("algorithm"),
           py::arg("table"), py::arg("compress"), py::arg("segment_bytes"),
           "Collectives on a private duplicate of the communicator whose Fortran handle is given "
           "(mpi4py: comm.py2f()). algorithm: auto|mpi|ring|rhd|rd; table: [(max bytes or -1, "
           "algorithm)] for auto; compress: dtype code float32 values travel in, or -1.")
      .def_property_readonly("rank", &mxkv::TensorCollectives::rank)
      .def_property_readonly("size", &mxkv::TensorCollectives::size)
      .def_property_readonly("bucket_bytes", &mxkv::TensorCollectives::bucket_bytes)
      .def_property_readonly("overlapped_buckets", &mxkv::TensorCollectives::overlapped_buckets,
                             "Buckets queued behind MXNet's engine so far (MXKV_OVERLAP=1).")
      .def_property_readonly("overlapped_buckets_pending",
                             &mxkv::TensorCollectives::overlapped_buckets_pending,
                             "Of those, the buckets not yet reduced.")
      .def_property_readonly("overlapped_bucket_seconds",
                             &mxkv::TensorCollectives::overlapped_bucket_seconds,
                             "Seconds the communication thread has been in its current bucket "
                             "(0: idle).")
      .def_property_readonly("bytes_sent_inside", &mxkv::TensorCollectives::bytes_sent_inside,
                             "Bytes sent (as they travel) to ranks of this rank's group so far.")
      .def_property_readonly("bytes_sent_across", &mxkv::TensorCollectives::bytes_sent_across,
                             "Bytes sent (as they travel) to ranks of other groups so far.")
      .def_property_readonly("hierarchical", &mxkv::TensorCollectives::hierarchical)
      .def("span_groups", &mxkv::TensorCollectives::span_groups, py::arg("group_of_rank"),
           py::arg("megabits_per_second"), py::arg("latency_seconds"), py::arg("shared_link"),
           "Names the group of every rank (bytes across groups are counted apart) and the "
           "emulated link between groups (0 megabits per second: none), shared by a group's "
           "ranks through the shared-memory segment `shared_link` ('': one per rank).")
      .def_static("unlink_shared_link", &mxkv::SharedLinkClock::unlink, py::arg("name"),
                  "Removes a shared link's segment name once every rank has opened it.")
      .def("set_hierarchy",
           [](mxkv::TensorCollectives& self, int64_t local, int64_t cross) {
             self.set_hierarchy(MPI_Comm_f2c(static_cast<MPI_Fint>(local)),
                                MPI_Comm_f2c(static_cast<MPI_Fint>(cross)));
           },
           py::arg("local"), py::arg("cross"),
           "Every allreduce from now on is hierarchical: Fortran handles of this rank's group "
           "and of the ranks with its index in every group.")
      .def("allreduce",
           [](mxkv::TensorCollectives& self, const Spec& spec, uint64_t key_signature, bool average) {
             auto requests = to_requests(spec);
             return run_collective([&] { return self.allreduce(requests, key_signature, average); });
           },
           py::arg("spec"), py::arg("key_signature"), py::arg("average"),
           "Allreduce [(inputs, outputs), ...]; False (nothing moved) if ranks disagree on the call.")
      .def("allreduce_overlapped",
           [](mxkv::TensorCollectives& self, const Spec& spec, uint64_t key_signature, bool average) {
             auto requests = to_requests(spec);
             return run_collective([&] {
               return self.allreduce_overlapped(requests, key_signature, average);
             });
           },
           py::arg("spec"), py::arg("key_signature"), py::arg("average"),
           "allreduce behind MXNet's engine, overlapping backward; False if ranks disagree.")
      .def("finish_overlapped",
           [](mxkv::TensorCollectives& self, bool stop) {
             py::gil_scoped_release release;
             self.finish_overlapped(stop);
           },
           py::arg("stop"), "Waits for the overlapped buckets; ends their thread when stop.")
      .def("broadcast",
           [](mxkv::TensorCollectives& self, const Spec& spec, uint64_t key_signature, int root) {
             auto requests = to_requests(spec);
             return run_collective([&] { return self.broadcast(requests, key_signature, root); });
           },
           py::arg("spec"), py::arg("key_signature"), py::arg("root"),
           "Broadcast root's inputs[0] into every output; False if ranks disagree on the call.")
      .def("sparse_row_sum",
           [](mxkv::TensorCollectives& self, py::array_t<int64_t, py::array::c_style> ids,
              py::buffer rows, int64_t row_len, int dtype, uint64_t signature,
              bool average) -> py::object {
             py::buffer_info info = rows.request();
             const int64_t count = static_cast<int64_t>(ids.size());
             if (static_cast<size_t>(info.itemsize) != mxkv::dtype_size(dtype) ||
                 info.size != count * row_len)
               throw std::invalid_argument("rows must hold ids.size() * row_len values of dtype");
             if (info.size > 0 && info.strides.back() != info.itemsize)
               throw std::invalid_argument("rows must be contiguous");
             auto result = std::make_unique<mxkv::SparseRows>();
             if (!run_collective([&] {
                   return self.sparse_row_sum(ids.data(), info.ptr, count, row_len, dtype,
                                              signature, average, *result);
                 }))
               return py::none();
             const char* path = mxkv::sparse_path_name(result->path);
             py::array_t<int64_t> union_ids(static_cast<py::ssize_t>(result->indices.size()),
                                            result->indices.data());
             mxkv::SparseRows* owned = result.release();
             py::capsule keep(owned, [](void* p) { delete static_cast<mxkv::SparseRows*>(p); });
             py::array bytes(py::dtype("uint8"),
                             {static_cast<py::ssize_t>(owned->values.size())},
                             {static_cast<py::ssize_t>(1)}, owned->values.data(), keep);
             return py::make_tuple(union_ids, bytes, path);
           },
           py::arg("ids"), py::arg("rows"), py::arg("row_len"), py::arg("dtype"),
           py::arg("signature"), py::arg("average"),
           "The sum (average) over ranks of row_sparse rows: (union ids, their rows as bytes, "
           "'allgather' or 'union allreduce'); None if ranks disagree on the call.")
      .def("allreduce_quantised",
           [](mxkv::TensorCollectives& self, const Spec& spec, uint64_t key_signature,
              const std::vector<uint64_t>& residual_keys, int kind, float threshold,
              bool average) {
             auto requests = to_requests(spec);
             const mxkv::Quantiser quantiser{static_cast<mxkv::Quantiser::Kind>(kind), threshold};
             return run_collective([&] {
               return self.allreduce_quantised(requests, key_signature, residual_keys, quantiser,
                                               average);
             });
           },
           py::arg("spec"), py::arg("key_signature"), py::arg("residual_keys"), py::arg("kind"),
           py::arg("threshold"), py::arg("average"),
           "Outputs = sum (average) over ranks of the quantised inputs (float32; kind 0: MXNet's "
           "2-bit with `threshold`, 1: 1-bit SGD's; residual kept per residual key); False "
           "if ranks disagree on the call.")
      .def("quantiser_residual", &mxkv::TensorCollectives::quantiser_residual,
           py::arg("residual_key"),
           "This rank's quantisation residual under a residual key (empty if none yet).")
      .def("set_quantiser_residual", &mxkv::TensorCollectives::set_quantiser_residual,
           py::arg("residual_key"), py::arg("residual"),
           "Replaces this rank's quantisation residual under a residual key (a checkpoint's).")
      .def("allreduce_vector",
           [](mxkv::TensorCollectives& self, py::buffer array, int dtype,
              const std::string& algorithm, double scale) {
             py::buffer_info info = array.request(/*writable=*/true);
             if (static_cast<size_t>(info.itemsize) != mxkv::dtype_size(dtype))
               throw std::invalid_argument("the array's item size does not match the dtype code");
             if (info.size > 0 && info.strides.back() != info.itemsize)
               throw std::invalid_argument("the array must be contiguous");
             const mxkv::Algorithm chosen = mxkv::algorithm_from_name(algorithm);
             py::gil_scoped_release release;
             self.allreduce_vector(info.ptr, info.size, dtype, chosen, scale);
           },
           py::arg("array"), py::arg("dtype"), py::arg("algorithm"), py::arg("scale") = 1.0,
           "In place: array = scale * sum over ranks, by the named algorithm (for tests and "
           "benchmarks); a 16-bit dtype code takes a uint16 array of its bits.")
      .def("algorithm_for",
           [](const mxkv::TensorCollectives& self, int dtype, int64_t bytes) {
             return std::string(mxkv::algorithm_name(
                 mxkv::choose_algorithm(self.options(), dtype, bytes)));
           },
           py::arg("dtype"), py::arg("bytes"), "The algorithm a bucket of this dtype and size takes.")
      .def("enable_timeline",
           [](mxkv::TensorCollectives& self, bool on) { self.timeline().enable(on); },
           py::arg("on"), "Records per-bucket events from now on (MXKV_TIMELINE).")
      .def("drain_timeline",
           [](mxkv::TensorCollectives& self) {
             py::list out;
             for (const mxkv::TimelineEvent& e : self.timeline().drain())
               out.append(py::make_tuple(e.name, e.algorithm, e.start_us, e.duration_us, e.bytes,
                                         e.thread));
             return out;
           },
           "The events recorded since the last call: [(name, algorithm, start_us, "
           "duration_us, bytes, thread), ...] on CLOCK_MONOTONIC.")
      .def("plan",
           [](const mxkv::TensorCollectives& self, const std::vector<std::pair<int, int64_t>>& shape) {
             std::vector<mxkv::Tensor> tensors(shape.size());
             for (size_t i = 0; i < shape.size(); ++i) {
               tensors[i].dtype = shape[i].first;
               tensors[i].count = shape[i].second;
             }
             py::list buckets;
             for (const mxkv::Bucket& b : self.plan(tensors)) {
               py::list segments;
               for (const mxkv::Segment& s : b.segments) segments.append(py::make_tuple(s.tensor, s.offset, s.count));
               buckets.append(py::make_tuple(b.fused, segments));
             }
             return buckets;
           },
           py::arg("tensors"),
           "The bucket plan for [(dtype code, element count), ...]: [(fused, [(tensor, offset, count)])].");
}
// clang-format on
