#include "runtime/interpreter.h"

#include <omp.h>

#include <algorithm>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/layout.h"

namespace fuselage {
namespace {

std::string NodePrefix(const Node& node) {
  return absl::StrCat("node '", node.name(), "' (", OpKindName(node.op()), " ",
                      node.target().name(), "): ");
}

absl::Status Prefixed(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(NodePrefix(node), status.message()));
}

// Values of the nodes run so far, each dropped once its last user has run.
class ValueStore {
 public:
  explicit ValueStore(const Graph& graph) {
    // A node's last user is the latest node (in order) reading it.
    int64_t index = 0;
    for (const Node* n = graph.first(); n != nullptr; n = n->next()) index_[n] = index++;
    for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
      int64_t last = -1;
      for (const Node* user : n->users()) last = std::max(last, index_.at(user));
      last_use_[n] = last;
    }
  }

  void Set(const Node* node, Value value) { values_[node] = std::move(value); }

  // Replaces the channels-last values among `node`'s inputs with their row-major form,
  // for a kernel that reads only row-major tensors: each value is moved once, however
  // many such kernels read it.
  void MakeInputsRowMajor(const Node& node) {
    for (const Node* input : node.InputNodes()) {
      auto it = values_.find(input);
      if (it != values_.end() && HasChannelsLast({it->second})) it->second = ToRowMajor(it->second);
    }
  }

  // Called after `node` ran: frees the inputs it was the last user of.
  void ReleaseInputsOf(const Node* node) {
    const int64_t at = index_.at(node);
    for (const Node* input : node->InputNodes()) {
      if (last_use_.at(input) == at) values_.erase(input);
    }
    // A value nobody reads is not kept either (an observer has already seen it).
    if (last_use_.at(node) < 0) values_.erase(node);
  }

  absl::StatusOr<Value> Evaluate(const Argument& arg) const {
    switch (arg.kind()) {
      case Argument::Kind::kNone: return Value::None();
      case Argument::Kind::kBool: return Value::Bool(arg.as_bool());
      case Argument::Kind::kInt: return Value::Int(arg.as_int());
      case Argument::Kind::kFloat: return Value::Float(arg.as_float());
      case Argument::Kind::kString: return Value::String(arg.as_string());
      case Argument::Kind::kDType: return Value::Dtype(arg.as_dtype());
      case Argument::Kind::kNode: {
        auto it = values_.find(arg.as_node());
        if (it == values_.end()) {
          // Only reachable through a graph that breaks Verify()'s order invariant.
          return absl::FailedPreconditionError(absl::StrCat(
              "input '", arg.as_node()->name(), "' has no value (graph order broken?)"));
        }
        return it->second;
      }
      case Argument::Kind::kList: {
        std::vector<Value> items;
        items.reserve(arg.items().size());
        for (const Argument& item : arg.items()) {
          ASSIGN_OR_RETURN(Value v, Evaluate(item));
          items.push_back(std::move(v));
        }
        return arg.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      case Argument::Kind::kEllipsis: return Value::Ellipsis();
      case Argument::Kind::kTorchObject:  // only an opaque aten call takes one
        return absl::UnimplementedError(absl::StrCat(
            "an argument ", arg.ToString(), "; fuselage's kernels take no torch device, "
            "layout or memory format"));
      case Argument::Kind::kSlice: {
        // A part that is a node (`x[:n]`) must have computed None or an int.
        std::optional<int64_t> parts[3];
        static constexpr const char* kParts[] = {"start", "stop", "step"};
        for (int i = 0; i < 3; ++i) {
          ASSIGN_OR_RETURN(Value v, Evaluate(arg.items()[i]));
          if (v.is_int()) {
            parts[i] = v.as_int();
          } else if (!v.is_none()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "slice ", kParts[i], ": expected None or an int; got ", v.KindName(), " ",
                v.ToString()));
          }
        }
        return Value::Slice({parts[0], parts[1], parts[2]});
      }
    }
    return absl::InternalError("unknown argument kind");
  }

 private:
  absl::flat_hash_map<const Node*, int64_t> index_;
  absl::flat_hash_map<const Node*, int64_t> last_use_;
  absl::flat_hash_map<const Node*, Value> values_;
};

absl::StatusOr<Value> RunGetAttr(const GraphModule& gm, const Node& node) {
  const absl::string_view path = node.target().name();
  if (const Tensor* tensor = gm.FindTensor(path)) return Value(*tensor);
  if (!path.empty() && gm.FindModule(path) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "get_attr target '", path, "' is a module; the interpreter only reads tensors"));
  }
  return absl::InvalidArgumentError(absl::StrCat("get_attr target '", path, "' not found"));
}

absl::StatusOr<std::vector<Value>> EvaluateArgs(const Node& node, const ValueStore& store) {
  std::vector<Value> args;
  args.reserve(node.num_args());
  for (const Argument& a : node.args()) {
    ASSIGN_OR_RETURN(Value v, store.Evaluate(a));
    args.push_back(std::move(v));
  }
  return args;
}

absl::StatusOr<Value> RunCall(const GraphModule& gm, const Node& node,
                              const KernelRegistry& kernels, ValueStore& store,
                              QuantizedEngine engine, bool keep_channels_last,
                              const InnerValueObserver* inner_observer) {
  ASSIGN_OR_RETURN(std::vector<Value> args, EvaluateArgs(node, store));
  ValueKwargs kwargs;
  for (const Kwarg& kw : node.kwargs()) {
    ASSIGN_OR_RETURN(Value v, store.Evaluate(kw.second));
    // Channels-last overloads take that layout in positional args only.
    kwargs.emplace_back(kw.first, ToRowMajor(v));
  }
  const KernelContext ctx{node, gm, kernels, engine, inner_observer};
  const Module* module = nullptr;
  if (node.op() == OpKind::kCallModule) {
    module = gm.FindModule(node.target().name());
    if (module == nullptr || node.target().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("call_module target '", node.target().name(), "' is not a module"));
    }
  }
  if (keep_channels_last) {
    if (module != nullptr) {
      if (const ModuleKernel* k = kernels.SelectChannelsLastModule(module->type(), args)) {
        return (*k)(ctx, *module, args, kwargs);
      }
    } else if (const FunctionKernel* k =
                   kernels.SelectChannelsLastFunction(node.op(), node.target(), args)) {
      return (*k)(ctx, args, kwargs);
    }
  }
  if (HasChannelsLast(args)) {
    store.MakeInputsRowMajor(node);
    ASSIGN_OR_RETURN(args, EvaluateArgs(node, store));
  }
  if (module != nullptr) {
    const ModuleKernel* kernel = kernels.SelectModule(*module, args);
    if (kernel == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "no kernel registered for module type '", module->type().name(), "'"));
    }
    return (*kernel)(ctx, *module, args, kwargs);
  }
  const FunctionKernel* kernel = kernels.SelectFunction(node.op(), node.target(), args);
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no kernel registered for ",
                                                 OpKindName(node.op()), " '",
                                                 node.target().name(), "'"));
  }
  return (*kernel)(ctx, args, kwargs);
}

// Sets OpenMP's thread count (the nthreads ICV of the calling thread, which oneDNN reads
// through omp_get_max_threads() when it creates and runs a primitive) for one scope, and
// restores the previous count when the scope ends. `threads` 0 leaves it as it is.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : previous_(omp_get_max_threads()) {
    if (threads > 0) {
      omp_set_num_threads(threads);
      set_ = true;
    }
  }
  ~ScopedOmpThreads() {
    if (set_) omp_set_num_threads(previous_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int previous_;
  bool set_ = false;
};

// An opaque node's function lives only on the Python side (graph/node.h kOpaqueMeta):
// refused before any node runs, so a run never stops half-way through the graph there.
absl::Status RefuseOpaqueNodes(const Graph& graph) {
  for (const Node* node = graph.first(); node != nullptr; node = node->next()) {
    if (!node->opaque()) continue;
    return Prefixed(*node, absl::FailedPreconditionError(
                               "an opaque node (meta 'opaque'): a function the engine does "
                               "not know, kept from the PyTorch model it was exported from; "
                               "run the model in PyTorch (fuselage.to_torch gives it back "
                               "with the function in the process that exported it)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrefixedWithNode(const Node& node, const absl::Status& status) {
  return Prefixed(node, status);
}

int DefaultRunThreads() { return std::max(1, omp_get_max_threads()); }

absl::StatusOr<Value> RunStructured(const GraphModule& gm, std::vector<Value> inputs,
                                    const KernelRegistry& kernels, const RunOptions& options) {
  const Graph& graph = gm.graph();
  if (graph.output() == nullptr) {
    return absl::InvalidArgumentError("graph has no output node");
  }
  const std::vector<Node*> placeholders = graph.Placeholders();
  if (placeholders.size() != inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("graph takes ", placeholders.size(),
                                                   " inputs; got ", inputs.size()));
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("threads is ", options.threads,
                                                   "; expected 1 to ", kMaxThreads,
                                                   " (or 0 for OpenMP's default)"));
  }
  RETURN_IF_ERROR(RefuseOpaqueNodes(graph));
  ASSIGN_OR_RETURN(const QuantizedEngine engine, ResolveEngine(gm, options.engine));
  const ScopedOmpThreads threads(options.threads);
  ValueStore store(graph);
  size_t next_input = 0;
  for (const Node* node = graph.first(); node != nullptr; node = node->next()) {
    if (node->op() == OpKind::kOutput) {
      if (node->num_args() != 1) {
        return Prefixed(*node, absl::InvalidArgumentError(absl::StrCat(
                                   "output takes 1 arg; got ", node->num_args())));
      }
      absl::StatusOr<Value> result = store.Evaluate(node->arg(0));
      if (!result.ok()) return Prefixed(*node, result.status());
      return ToRowMajor(*result);
    }
    absl::StatusOr<Value> value;
    switch (node->op()) {
      case OpKind::kPlaceholder:
        value = std::move(inputs[next_input++]);
        break;
      case OpKind::kGetAttr:
        value = RunGetAttr(gm, *node);
        break;
      default:
        // A kernel's allocation that fails despite the size limits (Tensor::kMaxElements)
        // is this node's error, not the process's end: callers (the CLI, calibration, the
        // Python bridge) get a Status naming the node.
        try {
          value = RunCall(gm, *node, kernels, store, engine, options.keep_channels_last,
                          options.inner_observer ? &options.inner_observer : nullptr);
        } catch (const std::bad_alloc&) {
          value = absl::ResourceExhaustedError("out of memory running its kernel");
        }
        break;
    }
    if (!value.ok()) return Prefixed(*node, value.status());
    if (options.observer) {
      const absl::Status observed = options.observer(*node, ToRowMajor(*value));
      if (!observed.ok()) return Prefixed(*node, observed);
    }
    store.Set(node, *std::move(value));
    store.ReleaseInputsOf(node);
  }
  return absl::InternalError("graph output node not reached");
}

absl::StatusOr<std::vector<Value>> Run(const GraphModule& gm, std::vector<Value> inputs,
                                       const KernelRegistry& kernels, const RunOptions& options) {
  ASSIGN_OR_RETURN(Value result, RunStructured(gm, std::move(inputs), kernels, options));
  std::vector<Value> flat;
  FlattenValue(result, &flat);
  return flat;
}

}  // namespace fuselage
