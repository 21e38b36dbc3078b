// Dynamically quantized recurrent modules: nnqd.LSTM and nnqd.GRU
// (torch.ao.nn.quantized.dynamic.LSTM / GRU, run by torch.quantized_lstm /
// torch.quantized_gru with use_dynamic=True), as PyTorch's CPU implementation runs them
// (aten/src/ATen/native/RNN.cpp, FullLayer / FullBidirectionalLayer over
// QuantizedCellParamsDynamic):
//
//   for each layer, for each direction:
//     ih = linear_dynamic(layer input [T, B, in], w_ih, b_ih)   one input scale for the
//                                                                whole sequence
//     for each step t (reversed for the reverse direction):
//       hh = linear_dynamic(h [B, H], w_hh, b_hh)                one scale per step
//       LSTM: i, f, g, o = chunks of hh + ih[t]; i, f, o sigmoid, g tanh;
//             c = f * c + i * g; h = o * tanh(c)
//       GRU:  r = sigmoid(hh_r + ih_r); z = sigmoid(hh_z + ih_z);
//             n = tanh(ih_n + hh_n * r); h = (h - n) * z + n
//   the directions' outputs concatenated along the features are the next layer's input.
//
// linear_dynamic is DynamicQuantizedLinear (runtime/quantized/dynamic_linear.h) with
// reduce_range true, as nnqd's cell parameters (version 2) pass it; a module of dtype
// torch.float16 multiplies in float32 with its weights rounded to float16
// (Float16DynamicLinear). Every float step is rounded on its own, in PyTorch's order;
// sigmoid and tanh are ATen's own (aten_math.h: Sleef's), so the outputs are PyTorch's
// bit for bit where PyTorch is built without MKL; with MKL its tanh differs in the last
// bit for about 1 % of values.
//
// Module: tensors weight_ih_l{k}[_reverse] and weight_hh_l{k}[_reverse] (qint8 [G*H, in]
// and [G*H, H], G = 4 for LSTM, 3 for GRU; float32 when dtype is float16), and, if `bias`,
// bias_ih_l{k}[_reverse] / bias_hh_l{k}[_reverse] (float32 [G*H]); attributes input_size,
// hidden_size, num_layers, bias, batch_first, bidirectional, dtype; proj_size, if present,
// must be 0. Call: (input [T, B, in] or [B, T, in] when batch_first, hx = None): LSTM's
// hx is (h0, c0), GRU's h0, each [num_layers * directions, B, H]. Result: LSTM
// (output, (h_n, c_n)), GRU (output, h_n); output [T, B, directions * H] (batch first if
// batch_first). Dropout is not applied (inference).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_RNN_H_
#define FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_RNN_H_

#include "absl/status/status.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// Registers the modules nnqd.LSTM and nnqd.GRU. AlreadyExists if one is registered.
absl::Status RegisterDynamicRnnKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_DYNAMIC_RNN_H_
