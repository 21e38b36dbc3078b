// Float tensor math the float kernels are made of, free of graphs and registries:
// activations, broadcasting binary ops, batch norm, pooling, mean, and the shape ops
// (cat, flatten, reshape). Inputs are float32 unless stated (shape-only ops take any
// dtype); layout is NCHW. Every shape mismatch is an InvalidArgument saying what was
// expected; none aborts.
#ifndef FUSELAGE_RUNTIME_FLOAT_OPS_H_
#define FUSELAGE_RUNTIME_FLOAT_OPS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace fuselage {

// A float32 tensor of `shape` with uninitialized-equivalent (zero) contents.
absl::StatusOr<Tensor> NewFloatTensor(std::vector<int64_t> shape);

// `dim` in [-rank, rank) made non-negative, else InvalidArgument.
absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank);

// ---- Elementwise ------------------------------------------------------------------
Tensor Relu(const Tensor& x);
Tensor Hardtanh(const Tensor& x, float min_val, float max_val);
// torch.clamp: max then min, so min > max gives max everywhere, as PyTorch; NaN stays NaN.
// An absent bound does not clamp.
Tensor Clamp(const Tensor& x, std::optional<float> min_val, std::optional<float> max_val);
Tensor Hardswish(const Tensor& x);    // x * relu6(x + 3) / 6
Tensor Hardsigmoid(const Tensor& x);  // relu6(x + 3) / 6
Tensor Sigmoid(const Tensor& x);

// NumPy/PyTorch broadcasting of two shapes, or InvalidArgument naming both.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                     absl::Span<const int64_t> b);
// a + alpha * b, broadcasting.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b, float alpha = 1.0f);
// a * b, broadcasting.
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& a, float scalar);
Tensor MulScalar(const Tensor& a, float scalar);

// ---- Normalization ----------------------------------------------------------------
// Eval-mode batch norm over dim 1 of an [N, C, ...] input with per-channel running
// statistics; `weight` / `bias` may be null (affine=False).
absl::StatusOr<Tensor> BatchNorm(const Tensor& x, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor* weight,
                                 const Tensor* bias, double eps);

// ---- Pooling (input [N, C, H, W] or unbatched [C, H, W]) -----------------------------
struct Pool2dParams {
  std::vector<int64_t> kernel_size = {1, 1};
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
  int64_t divisor_override = 0;   // avg pool only; 0 = none
};
absl::StatusOr<Tensor> MaxPool2d(const Tensor& x, const Pool2dParams& params);
absl::StatusOr<Tensor> AvgPool2d(const Tensor& x, const Pool2dParams& params);
// Output size entries < 0 mean "keep the input size" (PyTorch's None).
absl::StatusOr<Tensor> AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// ---- Reductions -------------------------------------------------------------------
// Mean over `dims` (empty: all dims), accumulated in double.
absl::StatusOr<Tensor> Mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim);

// ---- Shape ops (any dtype; quantization parameters are kept) ------------------------
// Concatenation along `dim`; all tensors must share dtype, rank and the other dims.
absl::StatusOr<Tensor> Cat(absl::Span<const Tensor> tensors, int64_t dim);
absl::StatusOr<Tensor> Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim);
// `shape` may hold one -1, inferred from the element count.
absl::StatusOr<Tensor> Reshape(const Tensor& x, std::vector<int64_t> shape);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_OPS_H_
