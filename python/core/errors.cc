#include "python/core/errors.h"

#include <string>

namespace fuselage::python {
namespace {

namespace py = pybind11;

// Owned references, set once at import (the module is never unloaded).
PyObject* engine_error = nullptr;
PyObject* model_file_error = nullptr;

}  // namespace

void RegisterErrors(py::module_& module) {
  py::module_ errors = py::module_::import("fuselage.errors");
  py::object base = errors.attr("FuselageError");
  model_file_error = py::object(errors.attr("ModelFileError")).release().ptr();
  engine_error = PyErr_NewExceptionWithDoc(
      "fuselage._core.EngineError",
      "An engine error: a pass, a backend config or an interpreter run refused its input. "
      "`code` is the absl::Status code's name (\"INVALID_ARGUMENT\", \"NOT_FOUND\", ...); "
      "the message names the node, field or file at fault.",
      base.ptr(), nullptr);
  if (engine_error == nullptr) throw py::error_already_set();
  module.attr("EngineError") = py::handle(engine_error);
  module.attr("ModelFileError") = py::handle(model_file_error);
}

void ThrowIfError(const absl::Status& status, ErrorKind kind) {
  if (status.ok()) return;
  const std::string message(status.message());
  PyObject* type = kind == ErrorKind::kModelFile ? model_file_error : engine_error;
  py::object error = py::reinterpret_borrow<py::object>(type)(message);
  error.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

}  // namespace fuselage::python
