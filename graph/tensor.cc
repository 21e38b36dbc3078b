#include "graph/tensor.h"

#include <cstring>
#include <new>
#include <ostream>
#include <utility>

#include "graph/check.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuselage {

QuantParams QuantParams::PerTensor(double scale, int64_t zero_point) {
  QuantParams q;
  q.scheme = QScheme::kPerTensorAffine;
  q.scales = {scale};
  q.zero_points = {zero_point};
  return q;
}

QuantParams QuantParams::PerChannel(std::vector<double> scales,
                                    std::vector<int64_t> zero_points, int64_t axis) {
  QuantParams q;
  q.scheme = QScheme::kPerChannelAffine;
  q.scales = std::move(scales);
  q.zero_points = std::move(zero_points);
  q.axis = axis;
  return q;
}

bool operator==(const QuantParams& a, const QuantParams& b) {
  return a.scheme == b.scheme && a.scales == b.scales && a.zero_points == b.zero_points &&
         (a.scheme != QScheme::kPerChannelAffine || a.axis == b.axis);
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) {
  return os << "[" << absl::StrJoin(shape, ", ") << "]";
}

TensorBuffer* TensorBuffer::Allocate(size_t size) {
  static_assert(sizeof(TensorBuffer) % alignof(std::max_align_t) == 0,
                "the data after the header must stay aligned for any element type");
  static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= alignof(std::max_align_t),
                "operator new must return blocks aligned for any element type");
  void* block = ::operator new(sizeof(TensorBuffer) + size);
  return new (block) TensorBuffer(size);
}

TensorBuffer* TensorBuffer::Copy(absl::string_view bytes) {
  TensorBuffer* buffer = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(buffer->data(), bytes.data(), bytes.size());
  return buffer;
}

void TensorBuffer::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    this->~TensorBuffer();
    ::operator delete(static_cast<void*>(this));
  }
}

absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape) {
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape dimension ", i, " is ", d, "; expected >= 0"));
    }
    if (d != 0 && numel > Tensor::kMaxElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(shape, ", "), "] has more than ", Tensor::kMaxElements,
          " elements"));
    }
    numel *= d;
  }
  return numel;
}

absl::StatusOr<Tensor> Tensor::WithoutData(DType dtype, Shape shape, QuantParams qparams) {
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors of dtype ", DTypeName(dtype), " are not supported"));
  }
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = *numel;
  t.qparams_ = std::move(qparams);
  return t;
}

absl::StatusOr<Tensor> Tensor::Uninitialized(DType dtype, Shape shape, QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t nbytes = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (nbytes != 0) t->buffer_ = TensorBuffer::Allocate(nbytes);
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, Shape shape, QuantParams qparams) {
  auto t = Uninitialized(dtype, std::move(shape), std::move(qparams));
  if (t.ok() && t->buffer_ != nullptr) std::memset(t->buffer_->data(), 0, t->nbytes());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, Shape shape, std::string bytes,
                                         QuantParams qparams) {
  return CopyFromBytes(dtype, std::move(shape), bytes, std::move(qparams));
}

absl::StatusOr<Tensor> Tensor::CopyFromBytes(DType dtype, Shape shape, absl::string_view bytes,
                                             QuantParams qparams) {
  auto t = WithoutData(dtype, std::move(shape), std::move(qparams));
  if (!t.ok()) return t.status();
  const size_t expected = static_cast<size_t>(t->numel_) * DTypeSize(dtype);
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data has ", bytes.size(), " bytes; expected ", expected, " for ",
        DTypeName(dtype), " shape ", t->ShapeString()));
  }
  if (expected != 0) t->buffer_ = TensorBuffer::Copy(bytes);
  return t;
}

Tensor Tensor::FromFloats(Shape shape, absl::Span<const float> values) {
  auto t = CopyFromBytes(
      DType::kFloat32, std::move(shape),
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

Tensor Tensor::FromInt64s(Shape shape, absl::Span<const int64_t> values) {
  auto t = CopyFromBytes(DType::kInt64, std::move(shape),
                         absl::string_view(reinterpret_cast<const char*>(values.data()),
                                           values.size() * sizeof(int64_t)));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

const void* Tensor::raw_data() const {
  // What empty tensors point at: aligned like a buffer's data, never written (0 bytes).
  alignas(std::max_align_t) static char empty[alignof(std::max_align_t)] = {};
  return buffer_ != nullptr ? buffer_->data() : empty;
}

void* Tensor::mutable_raw_data() {
  if (buffer_ == nullptr) return const_cast<void*>(raw_data());
  if (buffer_->shared()) {
    TensorBuffer* copy = TensorBuffer::Copy(bytes());
    buffer_->Unref();
    buffer_ = copy;
  }
  return buffer_->data();
}

absl::StatusOr<Tensor> Tensor::Reshaped(Shape shape) const {
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  if (*numel != numel_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(), " (",
                                                   numel_, " elements) to [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

bool operator==(const Tensor& a, const Tensor& b) {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.qparams_ == b.qparams_ &&
         a.bytes() == b.bytes();
}

std::string Tensor::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape_, ", "), "]");
}

}  // namespace fuselage
