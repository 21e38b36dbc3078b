// Tensor: a dense, contiguous, row-major buffer with a shape, an element type and, for
// quantized dtypes, per-tensor or per-channel quantization parameters.
//
// Tensors are values. Copies share the immutable byte buffer until one is written
// (mutable_data() detaches), so passing weights around is cheap.
#ifndef FUSELAGE_GRAPH_TENSOR_H_
#define FUSELAGE_GRAPH_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/dtype.h"

namespace fuselage {

enum class QScheme : uint8_t {
  kNone = 0,
  kPerTensorAffine = 1,
  kPerChannelAffine = 2,
};

struct QuantParams {
  QScheme scheme = QScheme::kNone;
  std::vector<double> scales;       // 1 for per-tensor, shape[axis] for per-channel.
  std::vector<int64_t> zero_points; // same length as scales.
  int64_t axis = 0;                 // per-channel only.

  static QuantParams PerTensor(double scale, int64_t zero_point);
  static QuantParams PerChannel(std::vector<double> scales, std::vector<int64_t> zero_points,
                                int64_t axis);
  friend bool operator==(const QuantParams& a, const QuantParams& b);
};

class Tensor {
 public:
  Tensor() = default;  // An empty float32 tensor of shape [0].

  // A zero-filled tensor. Fails on a negative dimension, a dtype tensors cannot have, or
  // an element count past kMaxElements.
  static absl::StatusOr<Tensor> Zeros(DType dtype, std::vector<int64_t> shape,
                                      QuantParams qparams = {});
  // Takes `bytes` as the data; its size must equal numel * element size.
  static absl::StatusOr<Tensor> FromBytes(DType dtype, std::vector<int64_t> shape,
                                          std::string bytes, QuantParams qparams = {});
  // Convenience for tests and kernels (shape must match values.size(); CHECKs that).
  static Tensor FromFloats(std::vector<int64_t> shape, absl::Span<const float> values);
  static Tensor FromInt64s(std::vector<int64_t> shape, absl::Span<const int64_t> values);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return bytes_ ? bytes_->size() : 0; }
  const QuantParams& qparams() const { return qparams_; }
  void set_qparams(QuantParams qparams) { qparams_ = std::move(qparams); }
  bool is_quantized() const { return IsQuantized(dtype_); }

  const std::string& bytes() const;
  const void* raw_data() const { return bytes().data(); }
  void* mutable_raw_data();

  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }

  // Same data, new shape of equal element count.
  absl::StatusOr<Tensor> Reshaped(std::vector<int64_t> shape) const;

  // Same dtype, shape, qparams and bytes.
  friend bool operator==(const Tensor& a, const Tensor& b);
  std::string ShapeString() const;  // "[1, 3, 224, 224]"

  // Upper bound on elements of one tensor: 2^31. Beyond it a model is hostile or wrong.
  static constexpr int64_t kMaxElements = int64_t{1} << 31;

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_ = {0};
  int64_t numel_ = 0;
  QuantParams qparams_;
  std::shared_ptr<std::string> bytes_;
};

// Element count of `shape`, or an error for a negative dimension or a count past
// Tensor::kMaxElements (checked without overflow).
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_TENSOR_H_
