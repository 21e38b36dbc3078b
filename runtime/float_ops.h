// Float tensor math the float kernels are made of, free of graphs and registries:
// activations, broadcasting binary ops, normalizations, softmax, matmul, pooling,
// resampling, padding, reductions, and the shape ops (cat, stack, flatten, reshape,
// permute, split). Inputs are float32 unless stated (shape-only ops take any
// dtype); layout is NCHW. Every shape mismatch is an InvalidArgument saying what was
// expected; none aborts.
#ifndef FUSELAGE_RUNTIME_FLOAT_OPS_H_
#define FUSELAGE_RUNTIME_FLOAT_OPS_H_

#include <cstdint>
#include <optional>
#include <string>
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
Tensor Tanh(const Tensor& x);
Tensor Erf(const Tensor& x);   // torch.erf (ONNX Erf: a GELU torch.onnx writes out)
Tensor Silu(const Tensor& x);  // x * sigmoid(x)
// x * Phi(x) with the exact erf form, or PyTorch's tanh approximation when `tanh_approx`.
Tensor Gelu(const Tensor& x, bool tanh_approx);
Tensor Elu(const Tensor& x, float alpha);  // x > 0 ? x : alpha * (exp(x) - 1)
Tensor LeakyRelu(const Tensor& x, float negative_slope);
// x > 0 ? x : w * x, with `weight` holding one slope, or one per channel (dim 1; dim 0
// of a 1-d input).
absl::StatusOr<Tensor> Prelu(const Tensor& x, const Tensor& weight);

// NumPy/PyTorch broadcasting of two shapes, or InvalidArgument naming both.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                     absl::Span<const int64_t> b);
// a + alpha * b, broadcasting.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b, float alpha = 1.0f);
// a * b, broadcasting.
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
// a / b, broadcasting (true division).
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& a, float scalar);
Tensor MulScalar(const Tensor& a, float scalar);
Tensor DivScalar(const Tensor& a, float scalar);  // a / scalar
Tensor RDivScalar(float scalar, const Tensor& b);  // scalar / b

// ---- Normalization ----------------------------------------------------------------
// Eval-mode batch norm over dim 1 of an [N, C, ...] input with per-channel running
// statistics; `weight` / `bias` may be null (affine=False).
absl::StatusOr<Tensor> BatchNorm(const Tensor& x, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor* weight,
                                 const Tensor* bias, double eps);
// Layer norm over the trailing dims `normalized_shape`; weight / bias (that shape) may
// be null. Statistics in double, biased variance, as PyTorch.
absl::StatusOr<Tensor> LayerNorm(const Tensor& x, absl::Span<const int64_t> normalized_shape,
                                 const Tensor* weight, const Tensor* bias, double eps);
// Group norm of an [N, C, ...] input: C split into `num_groups` groups, each normalized
// over its channels and the spatial dims; per-channel weight / bias may be null.
absl::StatusOr<Tensor> GroupNorm(const Tensor& x, int64_t num_groups, const Tensor* weight,
                                 const Tensor* bias, double eps);
// Instance norm with the input's own statistics: each (n, c) plane of an [N, C, ...]
// input normalized over its spatial dims (group norm with one channel per group).
absl::StatusOr<Tensor> InstanceNorm(const Tensor& x, const Tensor* weight, const Tensor* bias,
                                    double eps);

// ---- Softmax and matrix products ----------------------------------------------------
// Softmax / log-softmax along `dim`, max-subtracted as PyTorch.
absl::StatusOr<Tensor> Softmax(const Tensor& x, int64_t dim);
absl::StatusOr<Tensor> LogSoftmax(const Tensor& x, int64_t dim);
// torch.matmul: 1-d operands promoted and their dim removed again, batch dims broadcast.
absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b);

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
absl::StatusOr<Tensor> AdaptiveMaxPool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// ---- Resampling and padding ----------------------------------------------------------
// F.interpolate of an [N, C, H, W] input to out_h x out_w. mode "nearest" or "bilinear"
// (align_corners applies to bilinear only). scale_h / scale_w > 0 are the user's
// scale factors, which PyTorch uses for the source index (1 / scale) instead of
// in / out; 0 means "from the sizes".
struct InterpolateParams {
  int64_t out_h = 0;
  int64_t out_w = 0;
  std::string mode = "nearest";
  bool align_corners = false;
  double scale_h = 0.0;
  double scale_w = 0.0;
};
absl::StatusOr<Tensor> Interpolate(const Tensor& x, const InterpolateParams& params);
// F.pad(mode="constant"): `pads` as (last-dim left, last-dim right, next-to-last left,
// ...); negative entries crop.
absl::StatusOr<Tensor> ConstantPad(const Tensor& x, absl::Span<const int64_t> pads, float value);

// ---- Reductions -------------------------------------------------------------------
// Mean over `dims` (empty: all dims), accumulated in double.
absl::StatusOr<Tensor> Mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim);
// Sum / maximum over `dims` (empty: all dims); sum accumulated in double. amax of an
// empty reduction is an error, as in PyTorch; NaN propagates.
absl::StatusOr<Tensor> Sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim);
absl::StatusOr<Tensor> Amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim);

// ---- Shape ops (any dtype; quantization parameters are kept) ------------------------
// Concatenation along `dim`; all tensors must share dtype, rank and the other dims.
absl::StatusOr<Tensor> Cat(absl::Span<const Tensor> tensors, int64_t dim);
absl::StatusOr<Tensor> Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim);
// torch.pixel_shuffle: [*, C*r*r, H, W] -> [*, C, H*r, W*r], and its inverse
// torch.pixel_unshuffle. Rearranges values only, so any dtype.
absl::StatusOr<Tensor> PixelShuffle(const Tensor& x, int64_t upscale_factor);
absl::StatusOr<Tensor> PixelUnshuffle(const Tensor& x, int64_t downscale_factor);
// `shape` may hold one -1, inferred from the element count.
absl::StatusOr<Tensor> Reshape(const Tensor& x, std::vector<int64_t> shape);
// Dims reordered: output dim i is input dim dims[i] (negative dims allowed).
absl::StatusOr<Tensor> Permute(const Tensor& x, absl::Span<const int64_t> dims);
absl::StatusOr<Tensor> Transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Pieces along `dim` of the given sizes, which must add up to the dim's size.
absl::StatusOr<std::vector<Tensor>> SplitSizes(const Tensor& x, absl::Span<const int64_t> sizes,
                                               int64_t dim);
// torch.stack: equal-shaped tensors joined along a new dim.
absl::StatusOr<Tensor> Stack(absl::Span<const Tensor> tensors, int64_t dim);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_OPS_H_
