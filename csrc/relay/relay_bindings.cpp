// mxkv_hybrid.launch._tls: the relay's TLS connections (tls_stream.h) for Python. Every call
// that waits releases the GIL, so each connection's thread runs beside the others.
#include <pybind11/pybind11.h>

#include "tls_stream.h"

namespace py = pybind11;
using mxkv::relay::TlsContext;
using mxkv::relay::TlsStream;

// clang-format off
PYBIND11_MODULE(_tls, m) {
  m.doc() = "TLS 1.3 connections between relays, in OpenSSL (csrc/relay/tls_stream.h)";
  py::register_exception<mxkv::relay::TlsFailure>(m, "TlsError", PyExc_OSError);
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const mxkv::relay::TimedOut& error) {
      PyErr_SetString(PyExc_TimeoutError, error.what());
    }
  });
  py::class_<TlsContext, std::shared_ptr<TlsContext>>(m, "TlsContext")
      .def(py::init<const std::string&, bool>(), py::arg("key_path"), py::arg("server"));
  py::class_<TlsStream>(m, "TlsStream")
      .def(py::init<std::shared_ptr<TlsContext>, int>(), py::arg("context"), py::arg("fd"))
      .def("handshake", &TlsStream::handshake, py::arg("seconds"),
           py::call_guard<py::gil_scoped_release>())
      .def("read_line", [](TlsStream& stream, size_t most, double seconds) {
             std::string line;
             {
               py::gil_scoped_release released;
               line = stream.read_line(most, seconds);
             }
             return py::bytes(line);
           }, py::arg("most"), py::arg("seconds"))
      .def("write", [](TlsStream& stream, py::bytes bytes, double seconds) {
             std::string text = bytes;
             py::gil_scoped_release released;
             stream.write(text, seconds);
           }, py::arg("bytes"), py::arg("seconds"))
      .def("carry", &TlsStream::carry, py::arg("plain_fd"),
           py::call_guard<py::gil_scoped_release>())
      .def("stop", &TlsStream::stop);
}
// clang-format on
