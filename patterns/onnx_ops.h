// The ONNX ops fuselage.from_onnx reads and the FX forms each becomes in fuselage's graphs.
//
// onnx/onnx_reader.h reads an ONNX model into fuselage's one internal form
// (docs/architecture.md, "Front ends"): Conv is an nn.Conv1d / Conv2d / Conv3d module, Relu
// an nn.ReLU, Clip(0, 6) an nn.ReLU6, Add operator.add, and so on. The pattern language
// resolves a leaf `onnx.OpType` through this table to every form the op takes, so a config
// pattern written over ONNX ops matches the graph from_onnx made (and the same ops traced
// from PyTorch):
//
//   FxFormsOfOnnxOp("Clip")   // {"ReLU6", "ReLU", "Hardtanh", "torch.clamp"}: pattern leaves
//   FxFormsOfOnnxOp("Einsum") // nullopt: not an op fuselage reads
//
// Kept by hand beside onnx/onnx_reader.cc (its per-op readers); tests/patterns/
// pattern_test.cc checks the leaves resolve, tests/python/test_onnx_patterns.py fuses over
// them on a model from_onnx read.
#ifndef FUSELAGE_PATTERNS_ONNX_OPS_H_
#define FUSELAGE_PATTERNS_ONNX_OPS_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fuselage {

struct OnnxOp {
  absl::string_view op_type;  // "Conv": the ONNX op type (default domain)
  // The pattern leaves of the forms from_onnx gives it ("Conv1d", "Conv2d", "Conv3d").
  absl::Span<const absl::string_view> leaves;
};

// Every ONNX op with a form a pattern can match, in a fixed order.
absl::Span<const OnnxOp> OnnxOps();

// The pattern leaves of `op_type`'s forms, or nullopt for an op fuselage does not read (or
// reads as nothing a pattern can match: Identity, Shape arithmetic).
std::optional<absl::Span<const absl::string_view>> FxFormsOfOnnxOp(absl::string_view op_type);

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_ONNX_OPS_H_
