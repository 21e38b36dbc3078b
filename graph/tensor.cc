#include "graph/tensor.h"

#include <cstring>
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

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, std::vector<int64_t> shape,
                                     QuantParams qparams) {
  const size_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors of dtype ", DTypeName(dtype), " are not supported"));
  }
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  return FromBytes(dtype, std::move(shape),
                   std::string(static_cast<size_t>(*numel) * element_size, '\0'),
                   std::move(qparams));
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, std::vector<int64_t> shape,
                                         std::string bytes, QuantParams qparams) {
  const size_t element_size = DTypeSize(dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors of dtype ", DTypeName(dtype), " are not supported"));
  }
  auto numel = CheckedNumel(shape);
  if (!numel.ok()) return numel.status();
  const size_t expected = static_cast<size_t>(*numel) * element_size;
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data has ", bytes.size(), " bytes; expected ", expected, " for ",
        DTypeName(dtype), " shape [", absl::StrJoin(shape, ", "), "]"));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = *numel;
  t.qparams_ = std::move(qparams);
  t.bytes_ = std::make_shared<std::string>(std::move(bytes));
  return t;
}

Tensor Tensor::FromFloats(std::vector<int64_t> shape, absl::Span<const float> values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  auto t = FromBytes(DType::kFloat32, std::move(shape), std::move(bytes));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

Tensor Tensor::FromInt64s(std::vector<int64_t> shape, absl::Span<const int64_t> values) {
  std::string bytes(values.size() * sizeof(int64_t), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  auto t = FromBytes(DType::kInt64, std::move(shape), std::move(bytes));
  FUSELAGE_CHECK(t.ok());
  return *std::move(t);
}

const std::string& Tensor::bytes() const {
  static const std::string* empty = new std::string();
  return bytes_ ? *bytes_ : *empty;
}

void* Tensor::mutable_raw_data() {
  if (!bytes_) bytes_ = std::make_shared<std::string>();
  if (bytes_.use_count() > 1) bytes_ = std::make_shared<std::string>(*bytes_);
  return bytes_->data();
}

absl::StatusOr<Tensor> Tensor::Reshaped(std::vector<int64_t> shape) const {
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
