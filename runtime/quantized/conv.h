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

// As QuantizedConv2d, plus `qextra`: a per-tensor quantized tensor of the conv output's
// shape (any qparams of its own).
absl::StatusOr<Tensor> QuantizedConvAdd2d(const Tensor& qx, const Tensor& qextra,
                                          const Tensor& qweight, const Tensor* bias,
                                          const Conv2dParams& params, double output_scale,
                                          int64_t output_zero_point, bool relu);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_CONV_H_
