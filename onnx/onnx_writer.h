// fuselage's ONNX writer: a GraphModule written as ONNX for ONNX Runtime, with no
// PyTorch. fuselage.to_onnx runs it through the extension; the CLI's export-onnx and
// `-o x.onnx` of any command that writes a model run it directly:
//
//   a float model           plain ONNX (Conv, BatchNormalization, Gemm, Relu, Add, ...)
//   a quantized one         QDQ: each quantized op as DequantizeLinear -> float op ->
//     (reference or           QuantizeLinear with the scale and zero point its result has;
//     lowered)                weights int8 per output channel (axis 0, opset 13+), biases
//                             int32 with scale input_scale * weight_scale; activations
//                             uint8 or int8 as the model's quantized tensors are; every
//                             graph output dequantized with its own parameters; a fused
//                             conv-add(-relu) with both inputs quantized
//
// ONNX Runtime (graph optimization EXTENDED or above) fuses that into QLinearConv,
// QLinearAdd, QLinearMul, QGemm, QLinearGlobalAveragePool, ... The opset is 17, the IR
// version 8 (what every ONNX Runtime since 1.11 reads).
//
// The writer runs the model once (runtime/interpreter.h) on the example inputs it is
// given, else on zeros of the shapes the placeholders' node meta `shape` records: that
// run gives each value's shape, dtype and quantization parameters (a max pool keeps its
// input's), and the Python values shape arithmetic makes, which the ONNX graph holds as
// constants.
//
// Bad input — a placeholder without a recorded shape, an op with no ONNX mapping here, a
// value whose quantization ONNX QDQ cannot express — is an error naming the node and what
// was expected; nothing is written then.
#ifndef FUSELAGE_ONNX_ONNX_WRITER_H_
#define FUSELAGE_ONNX_ONNX_WRITER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"
#include "onnx/onnx_subset.pb.h"

namespace fuselage {

// The opset and IR version the writer declares (per-axis DequantizeLinear needs opset 13;
// IR 8 is what every ONNX Runtime since 1.11 reads).
inline constexpr int kOnnxWriterOpset = 17;
inline constexpr int kOnnxWriterIrVersion = 8;

struct OnnxWriterOptions {
  // The record run's inputs, one per placeholder: the ONNX graph inputs take their shapes
  // and dtypes (fuselage.to_onnx's example_inputs). Empty: zeros of the shapes (and
  // dtypes) the placeholders' node meta records.
  std::vector<Tensor> inputs;
};

// The ONNX model of `gm` (read only; the record run works on the model as it is).
absl::StatusOr<onnx_subset::ModelProto> GraphModuleToOnnx(const GraphModule& gm,
                                                          const OnnxWriterOptions& options = {});

// Writes GraphModuleToOnnx(gm, options) to `path`, whole or not at all (a temporary file
// renamed over it, graph/file_io.h): a failure leaves an existing file as it was.
absl::Status SaveOnnxModel(const GraphModule& gm, const std::string& path,
                           const OnnxWriterOptions& options = {});

// The bytes SaveOnnxModel writes (a serialized ModelProto).
absl::StatusOr<std::string> OnnxModelBytes(const GraphModule& gm,
                                           const OnnxWriterOptions& options = {});

}  // namespace fuselage

#endif  // FUSELAGE_ONNX_ONNX_WRITER_H_
