// numpy arrays (and torch tensors) in and out of the engine's Tensors, for `run` and
// `calibrate`.
//
// In: a numpy array of float32, int8, uint8, int32, int64 or bool, a torch tensor (read
// through .numpy(), which shares its memory; a quantized one through its int_repr and
// qparams), or a QuantizedArray. A C-contiguous, aligned array's bytes are read in place,
// without a copy (Tensor::BorrowBytes; a kernel that writes copies them first, so the
// caller's array is never changed); any other layout is made contiguous first.
// Out: a tensor's bytes become a numpy array without a copy when the tensor is the only
// holder of its buffer (an interpreter output usually is); a buffer the model still shares
// (an output that is a weight) is copied, so writing to the array never changes the model.
// A quantized tensor becomes a QuantizedArray: its integer values plus scale and zero point.
//
//   Tensor x = TensorFromPython(array, "input 0 (x)");
//   py::object y = PythonFromTensor(std::move(output));
#ifndef FUSELAGE_PYTHON_CORE_ARRAYS_H_
#define FUSELAGE_PYTHON_CORE_ARRAYS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "graph/tensor.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"

namespace fuselage::python {

// A quantized tensor as numpy sees it: `values` holds the integers (int8 for qint8,
// uint8 for quint8, int32 for qint32); per tensor, `scale` is a float and `zero_point` an
// int; per channel they are float64 / int64 arrays along `axis`.
struct QuantizedArray {
  pybind11::array values;
  std::string dtype;  // "torch.quint8", "torch.qint8", "torch.qint32"
  pybind11::object scale;
  pybind11::object zero_point;
  std::optional<int64_t> axis;  // per channel only
};

// Binds QuantizedArray in `module` (with dequantize() and the conversions above).
void RegisterArrays(pybind11::module_& module);

// The Tensor of `object` (see the file comment). `what` names it in errors ("input 0
// (x)", "sample 3, input 1 (y)"): EngineError for an unsupported type or dtype.
Tensor TensorFromPython(pybind11::handle object, const std::string& what);

// A numpy array, or a QuantizedArray for a quantized tensor (see the file comment). The
// array is the buffer's only writer (a buffer another tensor shares is copied first) unless
// `share`: then it is a view of the buffer as it is, whose writes the other tensors see.
pybind11::object PythonFromTensor(Tensor tensor, bool share = false);

}  // namespace fuselage::python

#endif  // FUSELAGE_PYTHON_CORE_ARRAYS_H_
