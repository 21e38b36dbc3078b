// Constant folding for the ONNX reader (onnx/onnx_reader.h): an ONNX node whose inputs are
// all constants is evaluated while the graph is read, so the shape arithmetic torch.onnx
// writes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range, Cast, ...) becomes the
// constants a model traced at one input shape has. What the ONNX reference implementation
// (onnx.reference) gives for the same node is what these give, element type included.
//
// The shape helpers (SqueezeShape, UnsqueezeShape, SliceRange) are shared with the reader's
// tensor forms of the same ops, so a Squeeze of a tensor and of a constant agree.
//
// Bad input -- an axis out of range, shapes that do not broadcast, an integer division by
// zero, a cast of a value the target type cannot hold, a result larger than kMaxElements
// -- is an InvalidArgument status starting with `where` (the node). Nothing aborts.
#ifndef FUSELAGE_ONNX_ONNX_FOLD_H_
#define FUSELAGE_ONNX_ONNX_FOLD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_subset.pb.h"

namespace fuselage {

// A constant of an ONNX graph: float32, int64 (ONNX's INT32 read as int64) or bool.
struct OnnxConstant {
  enum class Type { kFloat, kInt64, kBool };
  Type type = Type::kFloat;
  std::vector<int64_t> shape;
  std::vector<float> floats;  // kFloat: the elements, row-major
  std::vector<int64_t> ints;  // kInt64: the elements; kBool: 0 or 1 each

  int64_t size() const;
};

// `shape` as errors write it: "[1, 3, 8, 8]".
std::string ShapeText(const std::vector<int64_t>& shape);

// The element count of a tensor of `shape` (1 for a scalar): the product of its dimensions,
// which the caller has bounded (kMaxFoldElements, the reader's kMaxElements).
int64_t ElementCount(const std::vector<int64_t>& shape);

// The most elements a folded constant may have (the reader's limit on every tensor).
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 28;
// The elements of constants a model's folds may make beyond its initializers' (the reader's
// budget): shape arithmetic makes few; a small file that would make many is hostile.
inline constexpr int64_t kFoldBudget = int64_t{1} << 24;
// The highest rank of a folded constant (the reader's limit on every tensor).
inline constexpr size_t kMaxFoldRank = 8;

// The value of the ONNX tensor `t`: FLOAT, INT64, INT32 (read as int64) or BOOL, from its
// raw_data or its typed field, checked against its dims (rank <= kMaxFoldRank, at most
// kMaxFoldElements elements, as much data as they need). With `raw_floats`, a FLOAT tensor
// held in raw_data is not copied: *raw_floats views t.raw_data() and `floats` stays empty
// (a model's weights are most of its file). Another data type is an Unimplemented status,
// external data a FailedPrecondition one (the reader reads it in first, from the model's
// folder); anything else bad InvalidArgument. `where` (the tensor) starts every error.
//
//   ASSIGN_OR_RETURN(OnnxConstant c, ReadOnnxTensor(attribute.t(), "node 'fill' value"));
absl::StatusOr<OnnxConstant> ReadOnnxTensor(const onnx_subset::TensorProto& t,
                                            absl::string_view where,
                                            absl::string_view* raw_floats = nullptr);

// True for the ops the reader reads only on constants (shape arithmetic): Gather, Cast,
// ConstantOfShape, Range, Equal, Where, ... (fuselage.from_onnx's former _FOLD_ONLY).
bool IsFoldOnlyOp(absl::string_view op_type);
// The fold-only ops, sorted.
const std::vector<std::string>& FoldOnlyOps();

// The outputs of `node` on constant `inputs` (one per node input; null for an absent
// optional one), each of at most `max_elements` (and kMaxFoldElements) elements: more is
// an error before anything is allocated. Reads the fold-only ops and Add, Sub, Mul, Div,
// MatMul, Concat, Transpose, Slice, Squeeze, Unsqueeze, Identity on constants; any other op
// is Unimplemented. `where` (the node) starts every error.
absl::StatusOr<std::vector<OnnxConstant>> FoldOnnxNode(
    const onnx_subset::NodeProto& node, const std::vector<const OnnxConstant*>& inputs,
    absl::string_view where, int64_t max_elements = kMaxFoldElements);

// The shape Squeeze gives an input of `shape`: `axes` removed (each of size 1), or every
// axis of size 1 if `axes` is empty.
absl::StatusOr<std::vector<int64_t>> SqueezeShape(const std::vector<int64_t>& shape,
                                                  const std::vector<int64_t>& axes,
                                                  absl::string_view where);
// The shape Unsqueeze gives an input of `shape`: a 1 inserted at each of `axes` (axes of
// the output).
absl::StatusOr<std::vector<int64_t>> UnsqueezeShape(const std::vector<int64_t>& shape,
                                                    const std::vector<int64_t>& axes,
                                                    absl::string_view where);

// numpy's broadcast of two shapes (ONNX's multidirectional broadcasting); an error
// starting with `where` if they do not broadcast.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b,
                                                     absl::string_view where);

// The shape Transpose by `perm` gives an input of `shape`; an error starting with `where`
// if `perm` is not a permutation of its axes.
absl::StatusOr<std::vector<int64_t>> TransposedShape(const std::vector<int64_t>& shape,
                                                     const std::vector<int64_t>& perm,
                                                     absl::string_view where);

// Python's slice(start, end, step).indices(dim), which is ONNX Slice's clamping: the first
// index, the end (exclusive) and the step, for a step != 0.
struct SliceRange {
  int64_t begin, end, step;
  int64_t count() const;  // how many indices the slice takes
};
SliceRange SliceIndices(int64_t start, int64_t end, int64_t step, int64_t dim);

}  // namespace fuselage

#endif  // FUSELAGE_ONNX_ONNX_FOLD_H_
