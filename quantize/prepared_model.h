// A prepared model in a file: what ConvertToReference needs beyond the graph, recorded
// in the module tree so that prepare, calibrate and convert can run in separate
// processes (`fuselage prepare`, `calibrate`, `convert`), as a PyTorch prepared
// GraphModule carries its observers and qconfigs.
//
// In memory, Prepare returns a PreparedModel beside the graph: the Observer objects
// (keyed by module path) and the plan of each quantized op (keyed by node name). In the
// model file:
//  - each observer is its module (quantize/observer_module.h): spec as attributes,
//    statistics as tensors (min_val, max_val and, once calibrated, histogram);
//  - each weighted op's plan is one more module in the observer container,
//    `<container>.weight_post_process_<k>`, of its weight observer's class with that
//    observer's spec, plus string attributes `node` (the op node's name), `root_module`
//    (nn.Conv2d) and `reference_module` (nnqr.Conv2d). No node calls it; convert removes
//    it with the container, as PyTorch's convert uses and drops the qconfig.
// A model prepared in memory, stored, saved, loaded and read back converts to the same
// reference model as the in-memory flow (tests/quantize/prepared_model_test.cc).
#ifndef FUSELAGE_QUANTIZE_PREPARED_MODEL_H_
#define FUSELAGE_QUANTIZE_PREPARED_MODEL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "quantize/prepare.h"

namespace fuselage {

// Writes `prepared` into `gm`: every observer's current statistics into its module, and
// one plan module per weighted quantized op (replacing those of an earlier call). Call it
// after Prepare, and again after Calibrate, before saving. InvalidArgument naming the
// module if an observer module or a quantized op's node is missing; `gm` is then
// unchanged.
absl::Status StorePreparedModel(const PreparedModel& prepared, GraphModule& gm);

// The PreparedModel of a prepared graph read back from its modules: an Observer (with its
// statistics) for every module a call_module node calls whose type is an observer class,
// the container holding them, and the weighted ops' plans. The plans carry no
// dtype_config (null: convert does not use it) and the report only counts the observer nodes
// and modules. FailedPrecondition if no node calls an observer (not a prepared model);
// InvalidArgument naming the module if an observer or plan module is malformed.
absl::StatusOr<PreparedModel> PreparedModelFromGraph(const GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_PREPARED_MODEL_H_
