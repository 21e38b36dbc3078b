// The interpreter: runs a GraphModule on input Values, node by node in graph order, and
// is the project's judge of numerics ("fused equals unfused", "lowered equals reference").
//
//  - placeholder nodes take `inputs` in order; a count mismatch is InvalidArgument.
//  - get_attr yields the tensor at the target path; a module there is InvalidArgument.
//  - call_module dispatches on the module's type, call_function / call_method on
//    (op, target), through the given KernelRegistry. No kernel: Unimplemented naming the
//    node and the target. Every kernel error comes back prefixed with
//    "node '<name>' (<op> <target>): ". A kernel whose allocation fails (std::bad_alloc)
//    is ResourceExhausted, "... out of memory running its kernel".
//  - A graph holding an opaque node (graph/node.h kOpaqueMeta) is FailedPrecondition
//    naming it, before any node runs.
//  - A node's value is freed after its last user has run, so peak memory follows the
//    live set, not the whole graph.
//  - The graph is only read; Run may be called concurrently on one GraphModule.
//  - RunOptions::threads sets how many threads oneDNN's kernels use for this call only
//    (see there); the result is the same for every thread count.
#ifndef FUSELAGE_RUNTIME_INTERPRETER_H_
#define FUSELAGE_RUNTIME_INTERPRETER_H_

#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/node.h"
#include "runtime/kernel_registry.h"
#include "runtime/quantized_engine.h"
#include "runtime/value.h"

namespace fuselage {

// Called after each node (placeholders and get_attr included, output excluded) with the
// node's value, e.g. by calibration to feed observers. A non-OK status stops the run and
// is returned, prefixed with the node's name.
using NodeObserver = std::function<absl::Status(const Node& node, const Value& value)>;

// The most threads one run may be given (RunOptions::threads, the CLI's --threads): far
// above the core count of any machine fuselage runs on, low enough to refuse a typo.
inline constexpr int kMaxThreads = 1024;

struct RunOptions {
  NodeObserver observer;  // optional
  // Optional: fed the values kernels compute inside modules for an observer there (a
  // declared type's observed step, KernelContext::inner_observer).
  InnerValueObserver inner_observer;
  // How many threads the kernels may use (oneDNN parallelizes with OpenMP): 1 to
  // kMaxThreads, or 0 for OpenMP's default (OMP_NUM_THREADS if set, else every core).
  // OpenMP's thread count belongs to the calling thread: it is set on the thread that
  // calls Run for the run's duration and restored afterwards, so a Run on another thread
  // and the caller's own later OpenMP work are unaffected. Outside that range:
  // InvalidArgument, before any node runs.
  int threads = 0;
  // Whose requantization arithmetic the quantized kernels compute (quantized_engine.h).
  // Absent: the engine recorded in the model (a model quantized with the qnnpack config
  // runs QNNPACK's), else onednn's; given, it overrides the record (ResolveEngine).
  std::optional<QuantizedEngine> engine;
  // Whether quantized kernels registered for it hand 4-D int8 activations to each other
  // channels-last (runtime/layout.h), as PyTorch's quantized convs do, sparing the
  // transposes around every int8 convolution. Results are identical either way (the
  // observer and the outputs always get row-major tensors); false is for comparing.
  bool keep_channels_last = true;
};

// `status` with the prefix a run puts on an error at `node` ("node '<name>' (<op>
// <target>): "), for a caller that reports something about a node after the run.
absl::Status PrefixedWithNode(const Node& node, const absl::Status& status);

// The thread count RunOptions::threads 0 stands for on the calling thread: OpenMP's
// default there (OMP_NUM_THREADS if set, else every core), at least 1.
int DefaultRunThreads();

// Runs `gm` and returns the value of the output node's argument with its structure kept
// (a single Value, or a tuple / list of Values, nested as the graph returns them).
// A graph without an output node is InvalidArgument.
absl::StatusOr<Value> RunStructured(const GraphModule& gm, std::vector<Value> inputs,
                                    const KernelRegistry& kernels,
                                    const RunOptions& options = {});

// The same, flattened: the leaves of the output (every non-list value, depth first, in
// output-arg order). `return (a, (b, c))` gives {a, b, c}; `return x` gives {x}.
absl::StatusOr<std::vector<Value>> Run(const GraphModule& gm, std::vector<Value> inputs,
                                       const KernelRegistry& kernels,
                                       const RunOptions& options = {});

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_INTERPRETER_H_
