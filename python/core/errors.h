// How the extension turns an absl::Status into a Python exception: a model that does not
// load or parse becomes fuselage.ModelFileError, an ONNX model the ONNX reader refuses
// fuselage.OnnxImportError and fuselage.OnnxExportError. any other engine error
// fuselage._core.EngineError (a fuselage.FuselageError whose `code` is the Status code's
// name, e.g. "INVALID_ARGUMENT"); both carry the Status message, which names the node,
// field or file at fault.
//
//   absl::StatusOr<Tensor> t = ...;
//   Tensor value = ValueOrThrow(std::move(t));              // EngineError on failure
//   ThrowIfError(gm->Verify());
//   auto gm = ValueOrThrow(ParseModel(bytes), ErrorKind::kModelFile);
#ifndef FUSELAGE_PYTHON_CORE_ERRORS_H_
#define FUSELAGE_PYTHON_CORE_ERRORS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace fuselage::python {

enum class ErrorKind { kEngine, kModelFile, kOnnxImport, kOnnxExport };

// Creates fuselage._core.EngineError in `module`, a subclass of fuselage.FuselageError
// (imported from fuselage.errors), and remembers it, fuselage.ModelFileError and
// fuselage.OnnxImportError and fuselage.OnnxExportError.
void RegisterErrors(pybind11::module_& module);

// Raises the Python exception for a non-OK `status` (throws pybind11::error_already_set);
// does nothing for OK.
void ThrowIfError(const absl::Status& status, ErrorKind kind = ErrorKind::kEngine);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result, ErrorKind kind = ErrorKind::kEngine) {
  ThrowIfError(result.status(), kind);
  return *std::move(result);
}

}  // namespace fuselage::python

#endif  // FUSELAGE_PYTHON_CORE_ERRORS_H_
