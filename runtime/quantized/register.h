// RegisterQuantizedKernels: binds the quantized kernels of runtime/quantized/ to the
// targets and module types of graph/NAMING.md, so the interpreter runs quantized graphs
// (the reference graphs of ConvertToReference and the native graphs of LowerToNative).
//
// call_function: torch.quantize_per_tensor(x, scale, zero_point, dtype) (scale and
//   zero_point as numbers or 0-d / one-element tensors), torch.quantize_per_channel(x,
//   scales, zero_points, axis, dtype), torch.dequantize(x or list of x),
//   torch.ops.quantized.add / add_relu / mul / mul_relu(qa, qb, scale, zero_point) and
//   (qa, number) / (number, qa) (ATen's .Scalar / .Scalar2: their own output parameters),
//   torch.ops.quantized.cat(tensors, dim, scale=None, zero_point=None).
// call_method: dequantize.
// Modules: nnq.Conv2d, nniq.ConvReLU2d, nniq.ConvAdd2d, nniq.ConvAddReLU2d (two inputs),
//   nnq.Linear, nniq.LinearReLU (weight qint8, bias float32, attributes scale /
//   zero_point and the conv / linear attributes); nnq.Quantize, nnq.DeQuantize, nnq.ReLU6;
//   nnqr.Conv2d and nnqr.Linear (reference: the float module's kernel on the weight
//   quantized and dequantized with weight_scale / weight_zero_point / weight_axis /
//   weight_qscheme / weight_dtype, as torch.ao.nn.quantized.reference does).
// Quantized overloads (run when the call's first tensor is quantized; the float kernels
//   run otherwise): nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.MaxPool2d, nn.AvgPool2d,
//   nn.AdaptiveAvgPool2d; torch.relu, torch.nn.functional.relu / relu6 / hardtanh /
//   max_pool2d / avg_pool2d / adaptive_avg_pool2d, torch.cat (requantizes to the first
//   input's qparams, as at::cat does); call_method relu. flatten / view / reshape need no
//   overload: the float side's shape kernels keep the bytes and qparams.
// The conv family (runtime/quantized/conv.h, on oneDNN): nnq.Conv1d / Conv3d,
//   nniq.ConvReLU1d / 3d, nnq.ConvTranspose1d / 2d / 3d (weight, bias, stride / padding /
//   dilation [/ output_padding] per spatial dim, groups, scale / zero_point);
//   torch.ops.quantized.conv1d / conv3d [_relu] as conv2d's functional form.
// Activations and normalization (runtime/quantized/activations.h, normalization.h,
//   resample.h): modules nnq.Hardswish, nnq.ELU (attributes scale / zero_point [/ alpha]),
//   nnq.LeakyReLU (scale / zero_point as attributes or 0-d buffers, negative_slope),
//   nnq.PReLU (quantized weight, scale / zero_point; runtime/quantized/prelu.h),
//   nnq.Sigmoid (output_scale / output_zero_point), nnq.Softmax (dim, scale, zero_point),
//   nnq.LayerNorm (normalized_shape),
//   nnq.GroupNorm (num_groups), nnq.InstanceNorm1d / 2d / 3d (weight, bias, eps, scale,
//   zero_point), nnq.BatchNorm2d / 3d and
//   nniq.BNReLU2d / 3d (weight, bias, running_mean, running_var; eps; scale /
//   zero_point), nnq.Dropout (identity); functions torch.ops.quantized.hardswish /
//   sigmoid (input, output_scale, output_zero_point), torch.ops.quantized.elu / leaky_relu /
//   dropout (PyTorch 1.13's schemas; dropout returns its input), torch.ops.quantized.matmul
//   (qa, qb, output_scale, output_zero_point; runtime/quantized/matmul.h),
//   torch.ops.quantized.softmax (qx, dim,
//   output_scale, output_zero_point), torch.ops.quantized.layer_norm /
//   group_norm / instance_norm (as convert_fx writes them), torch.ops.quantized.batch_norm2d /
//   3d [_relu] (qx, weight, bias, mean, var, eps, output_scale, output_zero_point).
//   Quantized overloads: nn.Sigmoid, nn.Hardsigmoid, nn.Tanh (PyTorch's fixed output
//   qparams), nn.LeakyReLU, nn.GELU, nn.AdaptiveMaxPool2d, nn.Upsample, nn.UpsamplingNearest2d,
//   nn.UpsamplingBilinear2d; torch.sigmoid, torch.tanh, torch.nn.functional.sigmoid /
//   tanh / hardsigmoid / leaky_relu / gelu / interpolate (nearest, bilinear) /
//   adaptive_max_pool2d, torch.mean; call_method sigmoid, tanh, mean.
// Layout: fuselage tensors carry no memory format, but in PyTorch's converted models the
//   activations after a quantized conv are channels-last, and PyTorch's avg_pool2d /
//   adaptive_avg_pool2d / mean round differently there (runtime/quantized/pooling.h). The
//   bindings above run those three with the channels-last arithmetic on every 4-D input;
//   an NCHW-contiguous input in PyTorch (e.g. convnext_tiny's last pool, fed by an add of
//   permuted tensors) can then differ by one step where the pooled value is a tie.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_REGISTER_H_
#define FUSELAGE_RUNTIME_QUANTIZED_REGISTER_H_

#include "absl/status/status.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// Adds every kernel and overload above. AlreadyExists if one is already registered (the
// registry may then hold some of them). The nnqr.* kernels call the registry's
// nn.Conv2d / nn.Linear kernels (RegisterFloatKernels) at run time.
absl::Status RegisterQuantizedKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_REGISTER_H_
