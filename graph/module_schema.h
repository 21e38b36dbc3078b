// What the graph knows of each module type: how many positional inputs its forward takes
// and which tensors it must carry. Verify() checks every call_module against this, and a
// model file naming an unregistered type is rejected. A user adds a module type by
// registering its schema here (and, if it must run, a kernel in runtime/).
#ifndef FUSELAGE_GRAPH_MODULE_SCHEMA_H_
#define FUSELAGE_GRAPH_MODULE_SCHEMA_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "graph/symbol.h"

namespace fuselage {

struct ModuleSchema {
  std::string type;            // "nn.Conv2d"
  int min_inputs = 1;          // positional args of forward()
  int max_inputs = 1;          // kAnyNumber for variadic
  std::vector<std::string> required_tensors;  // e.g. {"weight"}

  static constexpr int kAnyNumber = -1;
};

class ModuleSchemaRegistry {
 public:
  // The process-wide registry, holding every module type fuselage itself defines.
  static ModuleSchemaRegistry& Global();

  // An empty registry (tests); Global() starts from RegisterBuiltinModuleSchemas.
  ModuleSchemaRegistry() = default;

  // AlreadyExists if the type is registered with a different schema; InvalidArgument on
  // an empty type or min > max.
  absl::Status Register(ModuleSchema schema);
  // nullptr if unknown. The pointer stays valid for the registry's life.
  const ModuleSchema* Find(Symbol type) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Symbol, std::unique_ptr<ModuleSchema>> schemas_ ABSL_GUARDED_BY(mu_);
};

// Registers the module types of torch.nn, torch.ao.nn.intrinsic (fused float modules,
// including ConvAdd2d / ConvAddReLU2d), quantized, reference and observer modules.
absl::Status RegisterBuiltinModuleSchemas(ModuleSchemaRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_SCHEMA_H_
