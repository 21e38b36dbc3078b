// The float kernels: torch.nn float modules, the fused float modules of
// torch.ao.nn.intrinsic (nni.*, run through their children "0", "1", ...), and the float
// functions and methods FX graphs call. Tensors are float32, NCHW, as PyTorch lays them
// out. Numerics agree with PyTorch 1.13 within 1e-5 relative (tests/runtime goldens).
//
// Module kernels: nn.Conv1d / 2d / 3d, nn.ConvTranspose1d / 2d / 3d (float_conv_nd.h),
// nn.Linear, nn.BatchNorm1d / 2d / 3d (eval), nn.ReLU, nn.ReLU6,
// nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Sigmoid, nn.MaxPool2d, nn.AvgPool2d,
// nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity, nn.Dropout (eval: identity),
// nni.ConvReLU{1,2,3}d, nni.ConvBn{1,2,3}d, nni.ConvBnReLU{1,2,3}d, nni.BNReLU{2,3}d,
// nni.LinearReLU,
// nni.LinearBn1d (sequential over children), nni.ConvAdd2d / nni.ConvAddReLU2d
// ((x, extra) -> [relu](conv(x) + extra), conv = child "0").
// call_function: operator.add / mul / getitem, torch.add / mul / cat / flatten / reshape
// / relu / mean / sigmoid, torch.nn.functional.relu / relu6 / hardtanh / hardswish /
// hardsigmoid / conv2d / linear / max_pool2d / avg_pool2d / adaptive_avg_pool2d /
// dropout (training=False only).
// call_method: add, mul, relu, sigmoid, view, reshape, flatten, mean, size, contiguous.
//
// add / mul take tensors or numbers on either side (two ints give an int, as in Python,
// for shape arithmetic on size()). The shape-only kernels (flatten, view, reshape, size,
// contiguous, getitem, nn.Identity, nn.Dropout, nn.Flatten) accept any dtype, quantized
// included, keeping bytes and qparams; cat does too when all inputs share their qparams.
// Every other kernel wants float32 and says so otherwise (a quantized tensor reaching,
// say, nn.ReLU runs the quantized overload that runtime/quantized registers).
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
