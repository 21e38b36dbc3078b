// Dynamic quantization's kernels: the input is float and quantized at run time with
// parameters chosen from its own range; the output is float.
//
//   DynamicQuantizedLinear = torch.ops.quantized.linear_dynamic(x, packed, reduce_range)
//     (nnqd.Linear, torch.ao.nn.quantized.dynamic.Linear): [x_min, x_max] of the whole
//     input (widened to hold 0) gives scale and zero point by PyTorch's
//     ChooseQuantizationParams into [0, 255] (halved to [0, 127] by reduce_range; QNNPACK
//     ignores reduce_range, as PyTorch's engine does); x is quantized to quint8, the exact
//     int32 accumulators acc[r, n] = sum_k (qx - x_zp) * (w - w_zp[n]) come from oneDNN's
//     int8 matmul of qx and w (no zero point; the weight packed into oneDNN's layout once
//     and the primitive kept per shape, onednn.h) less x_zp * sum_k w[n, k] (kept per
//     weight) and w_zp[n] * sum_k (qx - x_zp), and y[r, n] = float(acc) * (x_scale *
//     w_scale[n]) + bias[n] in float.
//     The input is quantized as the engine does it: fbgemm / x86 / onednn round
//     x * (1 / scale) + zero_point once (a fused multiply-add); QNNPACK rounds
//     x * (1 / scale) and then adds the zero point (quantize_val).
//   QuantizePerTensorDynamic = torch.quantize_per_tensor_dynamic(x, dtype, reduce_range)
//     (the reference form convert makes): the same parameters for quint8 ([0, 255]) or
//     qint8 ([-128, 127]), then torch.quantize_per_tensor.
// Input: float32 [..., in_features]; weight: qint8 [out_features, in_features], per tensor
// or per channel along axis 0; bias: float32 [out_features] or absent.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_LINEAR_H_
#define FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_LINEAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/dtype.h"
#include "graph/tensor.h"
#include "runtime/kernel_registry.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace quantized {

// PyTorch's quant_utils::ChooseQuantizationParams(min, max, qmin, qmax,
// preserve_sparsity=false, force_scale_power_of_two=false, reduce_range).
struct DynamicQParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t qmin = 0;
  int32_t qmax = 255;
};
DynamicQParams ChooseDynamicQParams(float min, float max, int32_t qmin, int32_t qmax,
                                    bool reduce_range);

absl::StatusOr<Tensor> DynamicQuantizedLinear(const Tensor& x, const Tensor& qweight,
                                              const Tensor* bias, bool reduce_range,
                                              QuantizedEngine engine);

// torch.ops.quantized.linear_dynamic_fp16 (nnqd.Linear(dtype=torch.float16)): x @ w^T + b
// in float32, with `weight` already rounded to float16 (lowering rounds it).
absl::StatusOr<Tensor> Float16DynamicLinear(const Tensor& x, const Tensor& weight,
                                            const Tensor* bias);

absl::StatusOr<Tensor> QuantizePerTensorDynamic(const Tensor& x, DType dtype,
                                                bool reduce_range, QuantizedEngine engine);

}  // namespace quantized

// Registers the modules nnqd.Linear and nniqd.LinearReLU (its output through relu)
// (reduce_range true, as nnqd.Linear's forward passes
// it; attribute dtype torch.float16: Float16DynamicLinear), the function
// torch.quantize_per_tensor_dynamic(input, dtype, reduce_range), and a lowered dynamic
// F.linear, torch.ops.quantized.linear_dynamic[_relu](input, weight, bias, reduce_range),
// its weight a quantized qint8 tensor (PyTorch's takes it prepacked).
// AlreadyExists if one of them is already registered.
absl::Status RegisterDynamicQuantizedKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_LINEAR_H_
