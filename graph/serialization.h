// The model file: Save/Load of a GraphModule as a protobuf (graph/model.proto), binary or
// text form.
//
// Loading treats the file as hostile. It validates everything before building anything:
// sizes against ModelLimits, op kinds, dtypes, tensor shapes against their bytes, node
// references (a reference to an unknown name is an error; the order is then judged by
// Verify()), arg nesting depth, names. It then builds the GraphModule and runs Verify().
// Every error names the node (or module, or tensor) and the field. Nothing aborts, and the
// loader never allocates much more than the file's own size.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<GraphModule> gm, LoadModel("residual.textproto"));
//   ...                                                  // passes on *gm
//   RETURN_IF_ERROR(SaveModel(*gm, "residual.fsl"));     // binary; complete or absent
#ifndef FUSELAGE_GRAPH_SERIALIZATION_H_
#define FUSELAGE_GRAPH_SERIALIZATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "graph/model.pb.h"

namespace fuselage {

inline constexpr uint32_t kModelFormatVersion = 1;

// Documented limits on what a model file may hold; each breach is a clear error.
struct ModelLimits {
  // Protobuf parses at most 2 GiB - 1; larger limits are clamped to that.
  int64_t max_file_bytes = (int64_t{1} << 31) - 1;
  int64_t max_nodes = 50'000'000;
  int max_arg_depth = 16;             // nesting of lists/tuples in one arg
  // Nesting of child modules: the root is depth 0, a module at path "a.b" depth 2. The
  // loader accepts every depth up to this one (protobuf's recursion limit is derived from
  // it), and the fusion pass refuses a fusion that would nest deeper, so a fused model
  // always saves and loads.
  int max_module_depth = 64;
  int64_t max_string_length = 4096;   // names, targets, string args
  int max_tensor_rank = 8;
  // Node names must also be Python identifiers ([A-Za-z_][A-Za-z0-9_]*), as torch.fx's
  // are, so that printed code and a rebuilt torch.fx graph are valid Python.
};

// Text form is chosen by the path's extension: ".textproto" or ".pbtxt"; anything else is
// binary.
absl::StatusOr<std::unique_ptr<GraphModule>> LoadModel(const std::string& path,
                                                       const ModelLimits& limits = {});
// Writes atomically (WriteFileAtomically): on any error, including a full disk, `path` keeps
// its old contents and no temporary file is left.
absl::Status SaveModel(const GraphModule& gm, const std::string& path);

absl::StatusOr<std::unique_ptr<GraphModule>> ParseModel(absl::string_view bytes,
                                                        const ModelLimits& limits = {});
// As ParseModel, for a structure whose Tensor messages declare dtype, shape and
// quantization but carry no data: the tensors are `tensors`, in the order the structure
// lists them (each module's tensors, then its children, depth first), each checked
// against its declared dtype and shape. The in-process handoff from torch (python/core):
// the tensors may borrow the caller's memory (Tensor::BorrowBytes), nothing is copied.
absl::StatusOr<std::unique_ptr<GraphModule>> ParseModelWithTensors(absl::string_view structure,
                                                                   std::vector<Tensor> tensors,
                                                                   const ModelLimits& limits = {});
absl::StatusOr<std::unique_ptr<GraphModule>> ParseModelText(absl::string_view text,
                                                            const ModelLimits& limits = {});
// Deterministic: the same GraphModule always gives the same bytes.
std::string SerializeModel(const GraphModule& gm);
std::string SerializeModelText(const GraphModule& gm);

proto::Model ModelToProto(const GraphModule& gm);
absl::StatusOr<std::unique_ptr<GraphModule>> ModelFromProto(const proto::Model& model,
                                                            const ModelLimits& limits = {});
// The same, taking the tensors' bytes out of `model` (a parser's own model, which nobody
// reads afterwards) instead of copying them.
absl::StatusOr<std::unique_ptr<GraphModule>> ModelFromProto(proto::Model&& model,
                                                            const ModelLimits& limits = {});


}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_SERIALIZATION_H_
