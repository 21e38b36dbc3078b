// fuselage's ONNX front end, its one ONNX reader: a float ONNX model file read into
// fuselage's GraphModule. The CLI reads `.onnx` paths with it (`fuselage run model.onnx`,
// `fuselage quantize model.onnx` need no PyTorch), and fuselage.from_onnx turns its model
// into a torch GraphModule (python/fuselage/onnx/_import.py, through the extension). The
// module types, functions, names and node meta are those the former Python importer wrote
// (tests/onnx/testdata pins them), i.e. what fuselage.export writes for such a GraphModule.
//
// Each ONNX node becomes what torchvision's own models use for it:
//
//   Conv                 nn.Conv1d / 2d / 3d (the initializers as its parameters); an
//                          asymmetric pad first as torch.nn.functional.pad
//   BatchNormalization   nn.BatchNorm1d / 2d / 3d (inference: its running statistics)
//   Gemm, MatMul by a    nn.Linear
//     constant matrix
//   Relu, Clip           nn.ReLU, nn.ReLU6 (Clip 0..6), nn.Hardtanh, torch.clamp
//   HardSwish            nn.Hardswish; HardSigmoid (alpha 1/6, beta 1/2) nn.Hardsigmoid
//   MaxPool, AveragePool nn.MaxPool2d, nn.AvgPool2d (and 1d / 3d); GlobalAveragePool
//                          nn.AdaptiveAvgPool2d(1)
//   Add, Sub, Mul, Div   operator.add, ... (a one-element constant as a Python number)
//   Sigmoid, Tanh        torch.sigmoid, torch.tanh; Softmax torch.softmax
//   Flatten, Reshape     torch.flatten / torch.reshape (a constant target shape)
//   Concat, Transpose    torch.cat, torch.permute; ReduceMean torch.mean
//   Identity, Dropout    nothing (the input passes on); Constant a constant
//   Pad (constant)       torch.nn.functional.pad; Slice (step 1) torch.narrow per axis
//   Split                torch.split and an operator.getitem per output
//   Resize               torch.nn.functional.interpolate: nearest (asymmetric, floor),
//                          linear (half_pixel, pytorch_half_pixel, align_corners)
//   Squeeze, Unsqueeze   torch.reshape to the static shape they give
//   Shape                a constant (shapes are static)
//
// Shape arithmetic is folded as the graph is read (onnx/onnx_fold.h): a node whose inputs
// are all constants -- Gather, Cast, Range, ConstantOfShape, Equal, Where, ... (ops read
// only on constants) and Add, Concat, Slice, Unsqueeze, ... of constants -- becomes the
// constant it computes, as torch.onnx writes a model traced at one input shape.
//
// Initializers a module does not take become buffers of the root (get_attr). Shapes are
// static: the graph inputs' shapes are fixed and every value's shape is inferred as the
// graph is read (node meta `shape` and `dtype`, as fuselage.export writes them); node meta
// `onnx` / `onnx_node` keep each node's ONNX op and node name.
//
// Bad input — a malformed or truncated file, an op or domain fuselage does not read, an
// opset outside [kOnnxMinOpset, kOnnxMaxOpset], external data missing or outside the
// model's folder, an attribute value the
// mapping cannot express, a hostile shape (a tensor larger than 2^28 elements is an error,
// never an allocation) — is an error status naming the node (or initializer, or graph
// input) and what was expected. Nothing aborts.
#ifndef FUSELAGE_ONNX_ONNX_READER_H_
#define FUSELAGE_ONNX_ONNX_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "graph/model.pb.h"
#include "onnx/onnx_subset.pb.h"

namespace fuselage {

// The default domain's opsets the reader reads.
inline constexpr int kOnnxMinOpset = 13;
inline constexpr int kOnnxMaxOpset = 18;

// True for a path ending in ".onnx": the CLI reads such a file with LoadOnnxModel.
bool IsOnnxPath(absl::string_view path);

// The fuselage model (graph/model.proto) of a parsed ONNX model: what fuselage.from_onnx
// and fuselage.export write for it. Every tensor's bytes are copied in.
absl::StatusOr<proto::Model> OnnxToModelProto(const onnx_subset::ModelProto& onnx);
// The same, taking out of `onnx` (given away) the bytes of each float initializer one node
// reads, instead of copying them; `onnx` is left valid but without those bytes.
absl::StatusOr<proto::Model> OnnxToModelProto(onnx_subset::ModelProto&& onnx);

// The GraphModule of an ONNX model's bytes (`shown` names it in errors), loaded and verified
// as a model file is (graph/serialization.h's ModelFromProto). Initializers whose data is
// external (onnx's save_as_external_data) are read from `folder` (a file there, which must
// exist and hold the bytes the tensor's shape needs); with no folder they are an error.
absl::StatusOr<std::unique_ptr<GraphModule>> ParseOnnxModel(absl::string_view bytes,
                                                            absl::string_view shown = "model",
                                                            const std::string& folder = "");

// The GraphModule of the ONNX file at `path`, its external data read from its folder.
absl::StatusOr<std::unique_ptr<GraphModule>> LoadOnnxModel(const std::string& path);

}  // namespace fuselage

#endif  // FUSELAGE_ONNX_ONNX_READER_H_
