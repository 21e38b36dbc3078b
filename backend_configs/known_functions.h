// FunctionRegistry: the call_function targets a backend config may name in a pattern, and
// a model may call ("torch.nn.functional.relu", "operator.add", ...), so that a typo in a
// config file ("torch.nn.functional.rleu") is an error at load time instead of a pattern
// that silently never matches, and one in a model an error of `fuselage verify`. Module types are checked against graph/'s ModuleSchemaRegistry instead.
// A user whose graphs call other functions registers them before loading a config.
#ifndef FUSELAGE_BACKEND_CONFIGS_KNOWN_FUNCTIONS_H_
#define FUSELAGE_BACKEND_CONFIGS_KNOWN_FUNCTIONS_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "graph/graph_module.h"
#include "graph/symbol.h"

namespace fuselage {

class FunctionRegistry {
 public:
  // The process-wide registry, holding every function PyTorch 1.13's and 2.x's backend
  // configs name, plus those of graph/NAMING.md.
  static FunctionRegistry& Global();

  // An empty registry (tests).
  FunctionRegistry() = default;

  // Adds a qualified name ("torch.nn.functional.gelu"). InvalidArgument if it is empty or
  // not a dotted name (a function of a module: at least one '.').
  absl::Status Register(absl::string_view qualified_name);
  bool Contains(Symbol function) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<Symbol> functions_ ABSL_GUARDED_BY(mu_);
};

// Every call_function target of `gm`, except an opaque node's (graph/node.h kOpaqueMeta:
// deliberately unknown), is in `functions`: InvalidArgument naming the first node whose
// target is not (a typo such as "opgrator.add" would load, verify and only fail
// when run). GraphModule::Verify cannot check this itself, graph/ being below this
// registry; `fuselage verify` calls it after loading.
absl::Status VerifyFunctionTargets(const GraphModule& gm,
                                   const FunctionRegistry& functions = FunctionRegistry::Global());

// Registers the functions described at FunctionRegistry::Global.
absl::Status RegisterBuiltinFunctions(FunctionRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_KNOWN_FUNCTIONS_H_
