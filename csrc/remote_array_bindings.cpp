// Python bindings of RemoteArray (part of module mxkv_hybrid._C).
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dtype.h"
#include "holder_progress.h"
#include "mxnet_api.h"
#include "remote_array.h"

namespace py = pybind11;

namespace {

using Handles = std::vector<std::pair<int64_t, uintptr_t>>;  // (start, NDArray handle)
using Transfer = void (mxkv::RemoteArray::*)(const mxkv::RemoteArray::Ranges&,
                                             const mxkv::RemoteArray::Counts&);

// Resolves the arrays (after MXNet's engine is done with them; `ready`: the caller has
// made sure no operation on them is pending, so nothing is waited for, and operations on
// other arrays go on) into ranges of the remote array, then runs `transfer` on them
// without the GIL.
void run_on(mxkv::RemoteArray& self, const Handles& handles, Transfer transfer, bool ready) {
  py::gil_scoped_release release;
  if (!ready) mxkv::wait_for_engine();
  mxkv::RemoteArray::Ranges ranges;
  mxkv::RemoteArray::Counts counts;
  for (const auto& [start, handle] : handles) {
    mxkv::ArrayView view = mxkv::resolve_array(reinterpret_cast<mxkv::NDArrayHandle>(handle));
    if (view.dtype != self.dtype()) {
      throw std::invalid_argument(std::string("an array of ") + mxkv::dtype_name(view.dtype) +
                                  " cannot move to or from a remote array of " +
                                  mxkv::dtype_name(self.dtype()));
    }
    ranges.emplace_back(start, view.data);
    counts.push_back(view.count);
  }
  (self.*transfer)(ranges, counts);
}

// A method taking [(start, NDArray handle)] that runs `transfer` on them.
void bind_transfer(py::class_<mxkv::RemoteArray>& cls, const char* name, Transfer transfer,
                   const char* doc) {
  cls.def(
      name,
      [transfer](mxkv::RemoteArray& self, const Handles& arrays, bool ready) {
        run_on(self, arrays, transfer, ready);
      },
      py::arg("arrays"), py::arg("ready") = false, doc);
}

}  // namespace

// clang-format off: the definitions' hand layout (see .clang-format)
void bind_remote_array(py::module& m) {
  py::class_<mxkv::HolderProgress>(m, "HolderProgress")
      .def(py::init([](int64_t fortran_comm, double period_us) {
             py::gil_scoped_release release;
             return new mxkv::HolderProgress(MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm)),
                                             std::chrono::microseconds(static_cast<int64_t>(period_us)));
           }),
           py::arg("fortran_comm"), py::arg("period_us"),
           "Collective over the communicator: a thread that enters MPI every `period_us` "
           "microseconds, so one-sided operations on this rank's windows move on while it "
           "computes (needs MPI_THREAD_MULTIPLE).")
      .def("stop", &mxkv::HolderProgress::stop, py::call_guard<py::gil_scoped_release>(),
           "Ends the thread (collective over the communicator); once.");
  py::class_<mxkv::RemoteArray> cls(m, "RemoteArray");
  cls
      .def(py::init([](int64_t fortran_comm, int64_t total, int dtype, const std::vector<int>& holders) {
             return new mxkv::RemoteArray(MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm)), total,
                                          dtype, holders);
           }),
           py::arg("fortran_comm"), py::arg("total"), py::arg("dtype"), py::arg("holders"),
           "Collective over the communicator (mpi4py: comm.py2f()): `total` zeros of MXNet dtype "
           "code `dtype` (float32/float64) in balanced chunks, chunk i in a window on rank holders[i].")
      .def("barrier", &mxkv::RemoteArray::barrier, py::call_guard<py::gil_scoped_release>())
      .def("finish_read", &mxkv::RemoteArray::finish_read,
           py::call_guard<py::gil_scoped_release>(),
           "The reads of the earliest start_read() not yet finished are complete.")
      .def("complete", &mxkv::RemoteArray::complete, py::call_guard<py::gil_scoped_release>(),
           "Every transfer this rank started on the array is done, here and at the holders.")
      .def_property_readonly("total", &mxkv::RemoteArray::total)
      .def_property_readonly("bytes_read", &mxkv::RemoteArray::bytes_read)
      .def_property_readonly("bytes_accumulated", &mxkv::RemoteArray::bytes_accumulated)
      .def_property_readonly("chunks", [](const mxkv::RemoteArray& self) {
        py::list out;
        for (const mxkv::RemoteChunk& c : self.chunks()) out.append(py::make_tuple(c.holder, c.start, c.count));
        return out;
      }, "[(holder, start, count)] per chunk.");
  bind_transfer(cls, "read", &mxkv::RemoteArray::read,
                "[(start, NDArray handle)]: each array = remote[start:start+its size] (atomic "
                "per element).");
  bind_transfer(cls, "start_read", &mxkv::RemoteArray::start_read,
                "As read, started only: done at finish_read() (the earliest started first) or "
                "complete(); the arrays are not to be touched before.");
  bind_transfer(cls, "copy_out", &mxkv::RemoteArray::copy_out,
                "[(start, NDArray handle)]: as read, not atomic against accumulates (MPI_Get), "
                "for ranges nobody writes meanwhile.");
  bind_transfer(cls, "accumulate", &mxkv::RemoteArray::accumulate,
                "[(start, NDArray handle)]: remote[start:start+its size] += each array (atomic "
                "per element).");
  bind_transfer(cls, "start_accumulate", &mxkv::RemoteArray::start_accumulate,
                "As accumulate, started only: done at complete(); the arrays are not to be "
                "touched before.");
  bind_transfer(cls, "write", &mxkv::RemoteArray::write,
                "[(start, NDArray handle)]: remote[start:start+its size] = each array (set-up, "
                "restore).");
}
// clang-format on
