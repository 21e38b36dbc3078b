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

// `dims`: the reduced dims (negative counts from the end; empty: all of them).
absl::StatusOr<Tensor> QuantizedMean(const Tensor& qx, std::vector<int64_t> dims,
                                     bool keepdim);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_NORMALIZATION_H_
