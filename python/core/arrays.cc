#include "python/core/arrays.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/dtype.h"
#include "python/core/errors.h"
#include "runtime/quantized/quantize.h"

namespace fuselage::python {
namespace {

namespace py = pybind11;

absl::Status Refused(const std::string& what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

// The fuselage dtype of a numpy array's elements, if tensors can hold it.
std::optional<DType> DTypeOfArray(const py::array& array) {
  const py::dtype dtype = array.dtype();
  const char kind = dtype.kind();
  const py::ssize_t size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'b' && size == 1) return DType::kBool;
  return std::nullopt;
}

py::dtype NumpyDType(DType storage) {
  switch (storage) {
    case DType::kFloat32:
      return py::dtype::of<float>();
    case DType::kInt8:
      return py::dtype::of<int8_t>();
    case DType::kUInt8:
      return py::dtype::of<uint8_t>();
    case DType::kInt32:
      return py::dtype::of<int32_t>();
    case DType::kInt64:
      return py::dtype::of<int64_t>();
    case DType::kBool:
      return py::dtype::of<bool>();
    default:
      break;
  }
  ThrowIfError(
      absl::InternalError(absl::StrCat("a tensor of ", DTypeName(storage), " has no numpy dtype")));
  return py::dtype::of<float>();  // not reached
}

// The owner handle of the bytes a numpy array lends a tensor (TensorFromArray): a
// reference to the array, dropped with the GIL held, on whichever thread frees the tensor
// (often inside a run, with the GIL released). ArrayOver recognizes the array's bytes
// coming back by this deleter type.
struct ArrayReference {
  void operator()(const void* p) const {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  }
};

// The array's bytes as a tensor of `dtype` (its storage dtype for quantized ones).
Tensor TensorFromArray(py::array array, DType dtype, QuantParams qparams, const std::string& what) {
  // A non-contiguous view (a slice, a transpose) is made contiguous: the engine's tensors
  // are dense row-major buffers.
  if (!(array.flags() & py::array::c_style)) {
    array = py::array::ensure(array, py::array::c_style | py::array::forcecast);
  }
  const std::optional<DType> element = DTypeOfArray(array);
  if (!element.has_value() || *element != StorageDType(dtype)) {
    ThrowIfError(Refused(
        what,
        absl::StrCat("a numpy array of ", std::string(py::str(array.dtype())),
                     element.has_value()
                         ? absl::StrCat(" where ", DTypeName(StorageDType(dtype)), " was expected")
                         : "; expected float32, int8, uint8, int32, "
                           "int64 or bool (e.g. x.astype(numpy.float32))")));
  }
  Shape shape;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) shape.push_back(array.shape(d));
  const absl::string_view bytes(static_cast<const char*>(array.data()),
                                static_cast<size_t>(array.nbytes()));
  // The tensor reads the array's bytes in place (a torch tensor's too: .numpy() shares
  // its memory) and holds a reference to the array (ArrayReference).
  std::shared_ptr<const void> owner(new py::object(array), ArrayReference());
  auto tensor =
      Tensor::BorrowBytes(dtype, std::move(shape), bytes, std::move(owner), std::move(qparams));
  if (!tensor.ok()) ThrowIfError(Refused(what, tensor.status().message()));
  return *std::move(tensor);
}

// The QuantParams of `q`: a float scale and int zero point, or arrays with an axis.
QuantParams QParamsOf(const QuantizedArray& q, const std::string& what) {
  if (!q.axis.has_value()) {
    return QuantParams::PerTensor(q.scale.cast<double>(), q.zero_point.cast<int64_t>());
  }
  auto scales = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(q.scale);
  auto zero_points =
      py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(q.zero_point);
  if (!scales || !zero_points || scales.ndim() != 1 || zero_points.ndim() != 1 ||
      scales.size() != zero_points.size()) {
    ThrowIfError(Refused(what,
                         "a per-channel QuantizedArray needs 1-d scale and zero_point "
                         "arrays of equal length"));
  }
  return QuantParams::PerChannel(
      std::vector<double>(scales.data(), scales.data() + scales.size()),
      std::vector<int64_t>(zero_points.data(), zero_points.data() + zero_points.size()), *q.axis);
}

Tensor TensorFromQuantized(const QuantizedArray& q, const std::string& what) {
  const std::optional<DType> dtype = DTypeFromName(q.dtype);
  if (!dtype.has_value() || !IsQuantized(*dtype)) {
    ThrowIfError(Refused(what, absl::StrCat("QuantizedArray dtype '", q.dtype,
                                            "'; expected torch.quint8, torch.qint8 or "
                                            "torch.qint32")));
  }
  return TensorFromArray(q.values, *dtype, QParamsOf(q, what), what);
}

// A torch tensor: a quantized one through its integer representation and qparams, any
// other through .numpy(), which shares the tensor's memory.
Tensor TensorFromTorch(py::handle tensor, const std::string& what) {
  if (tensor.attr("is_quantized").cast<bool>()) {
    QuantizedArray q;
    q.dtype = py::str(tensor.attr("dtype"));
    q.values = tensor.attr("int_repr")().attr("contiguous")().attr("numpy")();
    const std::string qscheme = py::str(tensor.attr("qscheme")());
    if (qscheme == "torch.per_tensor_affine") {
      q.scale = tensor.attr("q_scale")();
      q.zero_point = tensor.attr("q_zero_point")();
    } else if (qscheme == "torch.per_channel_affine") {
      q.scale = tensor.attr("q_per_channel_scales")().attr("numpy")();
      q.zero_point = tensor.attr("q_per_channel_zero_points")().attr("numpy")();
      q.axis = tensor.attr("q_per_channel_axis")().cast<int64_t>();
    } else {
      ThrowIfError(Refused(what, absl::StrCat("a quantized torch tensor with qscheme ", qscheme,
                                              "; expected per_tensor_affine or "
                                              "per_channel_affine")));
    }
    // int_repr() made a copy that nothing else holds or writes, so the engine takes its
    // bytes as its own (one more copy, of int8 values) rather than borrowing them: what a
    // kernel derives from an owned weight (oneDNN's reordered int8 weight) is cached
    // across calls, which for borrowed bytes it never is (graph/tensor.h).
    const Tensor borrowed = TensorFromQuantized(q, what);
    auto owned = Tensor::CopyFromBytes(borrowed.dtype(), borrowed.shape(), borrowed.bytes(),
                                       borrowed.qparams());
    if (!owned.ok()) ThrowIfError(Refused(what, owned.status().message()));
    return *std::move(owned);
  }
  // .numpy() shares the memory of a detached CPU tensor (what fuselage.from_torch hands
  // over); a tensor that requires grad or lives elsewhere is detached and moved first.
  // Trying .numpy() first saves two Python calls a tensor, which add up over the
  // thousands of tensors of a large model.
  py::array array;
  if (!tensor.attr("requires_grad").cast<bool>() && tensor.attr("is_cpu").cast<bool>()) {
    array = tensor.attr("numpy")();
  } else {
    array = tensor.attr("detach")().attr("cpu")().attr("numpy")();
  }
  const std::optional<DType> dtype = DTypeOfArray(array);
  if (!dtype.has_value()) {
    ThrowIfError(
        Refused(what, absl::StrCat("a torch tensor of ", std::string(py::str(tensor.attr("dtype"))),
                                   "; expected torch.float32, int8, uint8, int32, "
                                   "int64 or bool")));
  }
  return TensorFromArray(array, *dtype, {}, what);
}

bool IsTorchTensor(py::handle object) {
  // torch.Tensor (nn.Parameter is a subclass), looked up once if torch is imported: a
  // tensor can only exist once it is. Kept for the process's life, never released (a
  // static py::object would be destroyed after the interpreter).
  static PyObject* tensor_type = nullptr;
  if (tensor_type == nullptr) {
    const py::dict modules = py::module_::import("sys").attr("modules");
    if (!modules.contains("torch")) return false;
    tensor_type = py::object(modules["torch"].attr("Tensor")).release().ptr();
  }
  const int is_tensor = PyObject_IsInstance(object.ptr(), tensor_type);
  if (is_tensor < 0) throw py::error_already_set();
  return is_tensor == 1;
}

// A numpy array over `tensor`'s bytes with `storage` as its element type. The array owns
// a reference to the buffer (in a capsule); the buffer is detached first if anything else
// shares it (copy-on-write), so the array is the sole writer.
//
// Bytes a numpy array lent the engine (TensorFromArray: a torch tensor's weights handed
// over by from_torch) go back as a view of that array, not a copy: the engine never
// writes borrowed bytes, so they are still the lender's values (resnet50's 94 MB of
// weights were copied on every to_torch).
//
// With `share`, a buffer the engine shares is not copied: the array is a view of it.
py::array ArrayOver(Tensor tensor, DType storage, bool share) {
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  if (const std::shared_ptr<const void>* lent = tensor.bytes_owner();
      lent != nullptr && std::get_deleter<ArrayReference>(*lent) != nullptr) {
    const py::object& lender = *static_cast<const py::object*>(lent->get());
    return py::array(NumpyDType(storage), shape, tensor.raw_data(), lender);
  }
  auto* owner = new Tensor(std::move(tensor));
  void* data = owner->numel() == 0 ? nullptr
               : share           ? const_cast<void*>(owner->raw_data())
                                 : owner->mutable_raw_data();
  py::capsule keep(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  if (data == nullptr) return py::array(NumpyDType(storage), shape);
  return py::array(NumpyDType(storage), shape, data, keep);
}

}  // namespace

Tensor TensorFromPython(py::handle object, const std::string& what) {
  if (py::isinstance<QuantizedArray>(object)) {
    return TensorFromQuantized(object.cast<const QuantizedArray&>(), what);
  }
  if (IsTorchTensor(object)) return TensorFromTorch(object, what);
  if (!py::isinstance<py::array>(object)) {
    ThrowIfError(Refused(
        what, absl::StrCat("a ", std::string(py::str(py::type::handle_of(object).attr("__name__"))),
                           "; expected a numpy array, a torch tensor or a "
                           "fuselage QuantizedArray")));
  }
  py::array array = py::reinterpret_borrow<py::array>(object);
  const std::optional<DType> dtype = DTypeOfArray(array);
  if (!dtype.has_value()) {
    ThrowIfError(
        Refused(what, absl::StrCat("a numpy array of ", std::string(py::str(array.dtype())),
                                   "; expected float32, int8, uint8, int32, int64 "
                                   "or bool (e.g. x.astype(numpy.float32))")));
  }
  return TensorFromArray(array, *dtype, {}, what);
}

py::object PythonFromTensor(Tensor tensor, bool share) {
  if (!tensor.is_quantized()) {
    const DType dtype = tensor.dtype();
    return ArrayOver(std::move(tensor), dtype, share);
  }
  QuantizedArray q;
  q.dtype = std::string(DTypeName(tensor.dtype()));
  const QuantParams qparams = tensor.qparams();
  if (qparams.scheme == QScheme::kPerChannelAffine) {
    py::array_t<double> scales(static_cast<py::ssize_t>(qparams.scales.size()));
    py::array_t<int64_t> zero_points(static_cast<py::ssize_t>(qparams.zero_points.size()));
    for (size_t i = 0; i < qparams.scales.size(); ++i) {
      scales.mutable_at(i) = qparams.scales[i];
      zero_points.mutable_at(i) = qparams.zero_points[i];
    }
    q.scale = scales;
    q.zero_point = zero_points;
    q.axis = qparams.axis;
  } else {
    q.scale = py::float_(qparams.scales.size() > 0 ? qparams.scales[0] : 1.0);
    q.zero_point = py::int_(qparams.zero_points.size() > 0 ? qparams.zero_points[0] : 0);
  }
  const DType storage = StorageDType(tensor.dtype());
  q.values = ArrayOver(std::move(tensor), storage, share);
  return py::cast(std::move(q));
}

void RegisterArrays(py::module_& module) {
  py::class_<QuantizedArray>(module, "QuantizedArray", R"doc(
A quantized tensor: integer `values` (a numpy array: int8 for torch.qint8, uint8 for
torch.quint8, int32 for torch.qint32) with `scale` and `zero_point`, floats per tensor or
numpy arrays along `axis` per channel; value = (values - zero_point) * scale.
`run` returns one for each quantized output and accepts one as an input.)doc")
      .def(py::init([](py::array values, std::string dtype, py::object scale, py::object zero_point,
                       std::optional<int64_t> axis) {
             return QuantizedArray{std::move(values), std::move(dtype), std::move(scale),
                                   std::move(zero_point), axis};
           }),
           py::arg("values"), py::arg("dtype"), py::arg("scale"), py::arg("zero_point"),
           py::arg("axis") = py::none())
      .def_readonly("values", &QuantizedArray::values)
      .def_readonly("dtype", &QuantizedArray::dtype)
      .def_readonly("scale", &QuantizedArray::scale)
      .def_readonly("zero_point", &QuantizedArray::zero_point)
      .def_readonly("axis", &QuantizedArray::axis)
      .def_property_readonly("shape",
                             [](const QuantizedArray& q) { return q.values.attr("shape"); })
      .def(
          "dequantize",
          [](const QuantizedArray& q) {
            const Tensor t = TensorFromQuantized(q, "QuantizedArray");
            return PythonFromTensor(ValueOrThrow(quantized::Dequantize(t)));
          },
          "The float32 values, (values - zero_point) * scale, as a numpy array.")
      .def("__repr__", [](const QuantizedArray& q) {
        return absl::StrCat("QuantizedArray(dtype=", q.dtype,
                            ", shape=", std::string(py::str(q.values.attr("shape"))),
                            ", scale=", std::string(py::repr(q.scale)),
                            ", zero_point=", std::string(py::repr(q.zero_point)),
                            q.axis.has_value() ? absl::StrCat(", axis=", *q.axis) : "", ")");
      });
}

}  // namespace fuselage::python
