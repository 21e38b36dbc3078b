// The float kernels: torch.nn float modules, the fused float modules of
// torch.ao.nn.intrinsic (nni.*, run through their children "0", "1", ...), and the float
// functions and methods FX graphs call. Tensors are float32, NCHW, as PyTorch lays them
// out. Numerics agree with PyTorch 1.13 within 1e-5 relative (tests/runtime goldens).
//
// Module kernels: nn.Conv1d / 2d / 3d, nn.ConvTranspose1d / 2d / 3d (float_conv_nd.h),
// nn.Linear, nn.BatchNorm1d / 2d / 3d (eval), nn.ReLU, nn.ReLU6,
// nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Sigmoid, nn.Tanh, nn.SiLU, nn.GELU
// (approximate 'none' / 'tanh'), nn.ELU, nn.LeakyReLU, nn.PReLU, nn.Softmax,
// nn.LogSoftmax, nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d / 2d / 3d (input statistics,
// or the running ones with track_running_stats), nn.MaxPool1d / 2d, nn.AvgPool1d / 2d,
// nn.AdaptiveAvgPool1d / 2d, nn.AdaptiveMaxPool2d, nn.Upsample / nn.UpsamplingNearest2d /
// nn.UpsamplingBilinear2d, nn.PixelShuffle / nn.PixelUnshuffle, nn.Flatten, nn.Identity,
// nn.Dropout / nn.Dropout2d (eval: identity),
// nni.ConvReLU{1,2,3}d, nni.ConvBn{1,2,3}d, nni.ConvBnReLU{1,2,3}d, nni.BNReLU{2,3}d,
// nni.ConvAct2d (its schema fixes the activation), nni.LinearReLU,
// nni.LinearBn1d (sequential over children), nni.ConvAdd2d / nni.ConvAddReLU2d
// ((x, extra) -> [relu](conv(x) + extra), conv = child "0").
// call_function: operator.add / sub / mul / truediv / floordiv (ints) / matmul / getitem;
// builtins.getattr (a tensor's shape only); torch.add / sub / mul / div / cat / stack /
// flatten / reshape / narrow / squeeze / unsqueeze / permute / transpose / chunk / unbind /
// relu / sigmoid / tanh / clamp (number bounds) / softmax / log_softmax / matmul / bmm /
// mean / sum / amax; torch.functional.split; torch.nn.functional.relu / relu6 / hardtanh /
// hardtanh_ (out of place) / hardswish / hardsigmoid / sigmoid / tanh / silu / gelu / elu /
// leaky_relu / prelu / softmax / log_softmax / layer_norm / group_norm / batch_norm
// (training=False only) / instance_norm / pixel_shuffle / pixel_unshuffle / conv1d / conv2d /
// conv3d / conv_transpose1d / 2d / 3d / linear / max_pool1d / 2d / avg_pool1d / 2d /
// adaptive_avg_pool1d / 2d / adaptive_max_pool2d / interpolate (nearest, bilinear; 4-d
// inputs) / pad (constant) / dropout (training=False only);
// torchvision.ops.stochastic_depth.stochastic_depth (training=False or p=0 only: the
// identity).
// call_method: add, sub, mul, div, relu, sigmoid, tanh, clamp, softmax, log_softmax, view,
// reshape, flatten, narrow, squeeze, unsqueeze, permute, transpose, chunk, split, unbind,
// matmul, bmm, mean, sum, amax, size, dim, contiguous.
//
// add / sub / mul / div take tensors (broadcasting) or numbers on either side (two ints
// give an int for add / sub / mul, as in Python, for shape arithmetic on size()). chunk /
// split / unbind return a tuple of tensors (read by getitem). The shape-only kernels
// (flatten, view, reshape, narrow, squeeze, unsqueeze, permute, transpose, chunk, split,
// unbind, size, dim, getattr, contiguous, getitem, pixel_shuffle / pixel_unshuffle, dropout,
// stochastic_depth, nn.Identity, nn.Dropout(2d), nn.Flatten) accept
// any dtype, quantized included, keeping bytes and qparams (a per-channel axis follows
// permute / squeeze / unsqueeze; split along it splits the scales); cat does too when all
// inputs share their qparams. Every other kernel wants float32 and says so otherwise (a
// quantized tensor reaching, say, nn.ReLU runs the quantized overload that
// runtime/quantized registers).
//
// Absent module attributes take PyTorch's defaults (stride 1, padding 0, eps 1e-5, ...).
#ifndef FUSELAGE_RUNTIME_FLOAT_KERNELS_H_
#define FUSELAGE_RUNTIME_FLOAT_KERNELS_H_

#include "absl/status/status.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// Adds every float kernel above; AlreadyExists (registering none) if any of them is
// already registered.
absl::Status RegisterFloatKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_KERNELS_H_
