// Normalization and reduction on quantized tensors, as PyTorch 1.13's CPU kernels compute
// them (aten/src/ATen/native/quantized/cpu/qbatch_norm.cpp, ReduceOps.cpp,
// kernels/QuantizedOpKernels.cpp):
//
//   QuantizedBatchNorm   nnq.BatchNorm2d / 3d, nniq.BNReLU2d / 3d (quantized::batch_norm
//                        [_relu]). compute_fused_params folds the statistics per channel c,
//                        in float with double-precision scale ratios:
//                          inv_sigma = float(1.0 / sqrt(var[c] + float(eps)))
//                          alpha[c]  = float(inv_sigma * weight[c] * (in_scale / out_scale))
//                          beta[c]   = float((bias[c] - mean[c] * inv_sigma * weight[c]) / out_scale)
//                        and q_batch_norm_kernel computes, for every element,
//                          out = clamp(out_zp + nearbyint(fma(alpha[c], q - in_zp, beta[c])))
//                        (relu: at least out_zp). PyTorch's scalar remainder for fewer
//                        than 8 channels rounds alpha * (q - zp) + beta without the fma.
//   QuantizedMean        torch.mean / Tensor.mean over dims on a quantized tensor, in the
//                        input's qparams (mean_out_quantized_cpu). Innermost dims (a suffix
//                        of the shape): qmean_inner_dim's nearbyint(float(sum of the
//                        integers) / n). Other dims: the dequantized values summed in float,
//                        divided by n and quantized again (dequantize, at::sum().div_(),
//                        quantize_per_tensor).
//   QuantizedLayerNorm   quantized::layer_norm (nnq.LayerNorm, F.layer_norm lowered),
//   QuantizedGroupNorm   quantized::group_norm (nnq.GroupNorm),
//   QuantizedInstanceNorm quantized::instance_norm (nnq.InstanceNorm1d / 2d / 3d: group
//                        norm with one group per channel), all quantized_normalize_kernel:
//                        per row of n stored values q (a layer, or a group of channels),
//                          mean = float(sum q) / n,  var = max(float(sum q^2) / n - mean^2, 0)
//                          inv  = float(scale_x / sqrt(double(var * scale_x * scale_x) + eps))
//                        and per element, in float,
//                          layer norm: v = ((q - zp) - (mean - zp)) * inv * gamma + beta
//                          group norm: v = ((q - zp) - (mean - zp)) * (inv * gamma[c]) + beta[c]
//                        quantized with the output qparams.
//
// Example:
//   ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedBatchNorm(qx, &w, &b, mean, var, 1e-5,
//                                                            0.05, 64, /*relu=*/false));
#ifndef FUSELAGE_RUNTIME_QUANTIZED_NORMALIZATION_H_
#define FUSELAGE_RUNTIME_QUANTIZED_NORMALIZATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// `qx`: per-tensor quantized [N, C, ...] (rank >= 3); weight / bias: null or float32 [C];
// running_mean / running_var: float32 [C].
absl::StatusOr<Tensor> QuantizedBatchNorm(const Tensor& qx, const Tensor* weight,
                                          const Tensor* bias, const Tensor& running_mean,
                                          const Tensor& running_var, double eps,
                                          double output_scale, int64_t output_zero_point,
                                          bool relu);

// `qx`: per-tensor quantized; `normalized_shape`: the trailing dims normalized over;
// weight / bias: null or float32 of normalized_shape's element count.
absl::StatusOr<Tensor> QuantizedLayerNorm(const Tensor& qx,
                                          const std::vector<int64_t>& normalized_shape,
                                          const Tensor* weight, const Tensor* bias, double eps,
                                          double output_scale, int64_t output_zero_point);
// `qx`: per-tensor quantized [N, C, ...]; C divisible by `groups`; weight / bias: null or
// float32 [C].
absl::StatusOr<Tensor> QuantizedGroupNorm(const Tensor& qx, int64_t groups, const Tensor* weight,
                                          const Tensor* bias, double eps, double output_scale,
                                          int64_t output_zero_point);
absl::StatusOr<Tensor> QuantizedInstanceNorm(const Tensor& qx, const Tensor* weight,
                                             const Tensor* bias, double eps,
                                             double output_scale, int64_t output_zero_point);

// `dims`: the reduced dims (negative counts from the end; empty: all of them).
// `channels_last` (a 4-D input laid out as PyTorch's quantized convs write it): PyTorch
// never takes the inner-dim path then, only the general one.
absl::StatusOr<Tensor> QuantizedMean(const Tensor& qx, std::vector<int64_t> dims,
                                     bool keepdim, bool channels_last = false);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_NORMALIZATION_H_
