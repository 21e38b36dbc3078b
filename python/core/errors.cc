#include "python/core/errors.h"

#include <string>

namespace fuselage::python {
namespace {

namespace py = pybind11;

// Owned references, set once at import (the module is never unloaded).
PyObject* engine_error = nullptr;
PyObject* model_file_error = nullptr;
PyObject* onnx_import_error = nullptr;
PyObject* onnx_export_error = nullptr;

}  // namespace

void RegisterErrors(py::module_& module) {
  py::module_ errors = py::module_::import("fuselage.errors");
  py::object base = errors.attr("FuselageError");
  model_file_error = py::object(errors.attr("ModelFileError")).release().ptr();
  onnx_import_error = py::object(errors.attr("OnnxImportError")).release().ptr();
  onnx_export_error = py::object(errors.attr("OnnxExportError")).release().ptr();
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
  PyObject* type = kind == ErrorKind::kModelFile    ? model_file_error
                   : kind == ErrorKind::kOnnxImport ? onnx_import_error
                   : kind == ErrorKind::kOnnxExport ? onnx_export_error
                                                    : engine_error;
  // A message may quote bytes of a damaged file (a node name that is not UTF-8): those
  // are shown escaped, never a UnicodeDecodeError in place of the error.
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  py::object error = py::reinterpret_borrow<py::object>(type)(py::reinterpret_steal<py::object>(text));
  error.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

}  // namespace fuselage::python
