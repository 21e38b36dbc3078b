// Quantized 2-d convolution over NCHW tensors, one- and two-input:
//
//   QuantizedConv2d    = torch.ops.quantized.conv2d / conv2d_relu (nnq.Conv2d,
//                        nniq.ConvReLU2d). The int32 accumulator sum((x - x_zp) *
//                        (w - w_zp)) is exact; it is requantized by OutputRequantizer
//                        exactly as PyTorch 1.13's onednn or qnnpack engine does (see
//                        output_requantizer.h; fbgemm's formula differs at ties).
//   QuantizedConvAdd2d = nniq.ConvAdd2d / nniq.ConvAddReLU2d: conv(x) + extra with two
//                        quantized inputs. PyTorch 1.13 has no native kernel for it
//                        (onednn's quantized::conv2d_add[_relu] came later), so its
//                        semantics are those of the reference pattern
//                          quantize(relu?(conv2d(dq(x), dq(w), bias) + dq(extra)))
//                        computed as: conv = acc * x_scale * w_scale + bias (in double,
//                        exact up to rounding, where PyTorch's float conv sums in some
//                        order), rounded to float, plus dq(extra) in float, relu,
//                        quantize_per_tensor(out_scale, out_zp). Results match PyTorch's
//                        float reference except possibly by one step where the sum lands
//                        within float rounding of a half.
//
// The exact int32 accumulators come from oneDNN's int8 convolution (u8 / s8 source with a
// run-time zero point, s8 weight, s32 destination; see runtime/onednn/onednn.h); the
// requantization is OutputRequantizer's, so results stay bit-identical to PyTorch's onednn
// engine independent of how oneDNN's post-ops would round.
// Activations are quint8 (PyTorch's only choice for these ops; qint8 is accepted and
// follows the same formula); the weight is qint8, per-tensor or per-channel along axis 0;
// the bias is float32 [out_channels] or absent; the output has the input's dtype.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_CONV_H_
#define FUSELAGE_RUNTIME_QUANTIZED_CONV_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace quantized {

struct Conv2dParams {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  int64_t groups = 1;
};

// Errors (InvalidArgument naming op and field): a float or per-channel input, a weight
// that is not qint8 or not [O, C / groups, kH, kW], a channel count that does not match,
// bias of the wrong dtype / size, scale <= 0, zero point out of range, non-positive
// stride / dilation / groups, negative padding, an empty output.
// `engine` chooses whose requantization arithmetic the output follows.
absl::StatusOr<Tensor> QuantizedConv2d(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const Conv2dParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu,
                                       QuantizedEngine engine = QuantizedEngine::kOnednn);

// Per-spatial-dim parameters of a quantized conv over 1, 2 or 3 spatial dims (one entry
// per dim each; output_padding: transposed conv only, empty means all 0).
struct QuantizedConvParams {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;
};

// torch.ops.quantized.conv1d / conv2d / conv3d [_relu] (nnq.Conv1d / Conv2d / Conv3d,
// nniq.ConvReLU1d / 2d / 3d): input [N, C, *S], weight [O, C / groups, *K] with as many
// spatial dims as params.stride has entries; the same accumulators and requantization as
// QuantizedConv2d (PyTorch's onednn conv1d is its conv2d over [N, C, 1, L]).
absl::StatusOr<Tensor> QuantizedConvNd(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const QuantizedConvParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu,
                                       QuantizedEngine engine = QuantizedEngine::kOnednn);

// A quantized activation and its layout: `tensor`'s shape is [N, C, *S]; its bytes are
// row-major, or [N, H, W, C] when `channels_last` (a 4-D 8-bit tensor only;
// runtime/layout.h).
struct Activation {
  Tensor tensor;
  bool channels_last = false;
};

// QuantizedConvNd over an input in either layout. With `channels_last_output`, a 4-D
// output comes channels-last wherever the convolution computes in that layout (oneDNN's
// int8 kernels on x86, on the onednn and qnnpack requantizations; the exact-accumulator
// path for non-zero weight zero points stays row-major); the result says which. The
// values are QuantizedConvNd's either way.
absl::StatusOr<Activation> QuantizedConvNdAnyLayout(
    const Activation& qx, const Tensor& qweight, const Tensor* bias,
    const QuantizedConvParams& params, double output_scale, int64_t output_zero_point,
    bool relu, QuantizedEngine engine, bool channels_last_output);

// torch.ops.quantized.conv_transpose1d / 2d / 3d (nnq.ConvTranspose1d / 2d / 3d): input
// [N, C, *S], weight [C, O / groups, *K] quantized per tensor (PyTorch 1.13 refuses
// per-channel transposed weights), output [N, O, *OS] with
// OS = (S - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1
// (output_padding < stride or dilation, as PyTorch requires). The exact accumulators come
// from oneDNN's int8 deconvolution (the input zero point corrected by a second one over
// an all-ones input); requantization is OutputRequantizer's, as PyTorch's onednn engine
// (ideep's deconvolution) does it.
absl::StatusOr<Tensor> QuantizedConvTransposeNd(const Tensor& qx, const Tensor& qweight,
                                                const Tensor* bias,
                                                const QuantizedConvParams& params,
                                                double output_scale, int64_t output_zero_point);

// As QuantizedConv2d, plus `qextra`: a per-tensor quantized tensor of the conv output's
// shape (any qparams of its own).
absl::StatusOr<Tensor> QuantizedConvAdd2d(const Tensor& qx, const Tensor& qextra,
                                          const Tensor& qweight, const Tensor* bias,
                                          const Conv2dParams& params, double output_scale,
                                          int64_t output_zero_point, bool relu);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_CONV_H_
