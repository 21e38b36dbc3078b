// What the graph knows of each module type: how many positional inputs its forward takes,
// which tensors it must carry, which children a fused module holds, and what its
// attributes and tensors must satisfy (stride >= 1, a weight whose shape agrees with the
// channels, ...). Verify() checks every module and every call_module against this (all but
// the children, which backend configs are checked against), and a
// model file naming an unregistered type is rejected, unless its module carries its own
// steps (CarriesSteps). A user adds a module type by registering its schema here (and, if
// it must run, a kernel in runtime/), or, with no C++, by declaring it in a backend config
// (fused_module_type, backend_configs/declared_types.h), which registers a schema with a
// ModuleComposition; fusion writes it on each module as steps (CompositionSteps).
#ifndef FUSELAGE_GRAPH_MODULE_SCHEMA_H_
#define FUSELAGE_GRAPH_MODULE_SCHEMA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "graph/argument.h"
#include "graph/symbol.h"

namespace fuselage {

class Module;

// Checks one module's attributes and tensors (types, ranges, shapes against each other).
// Returns an InvalidArgument naming the field and the expectation; the caller prefixes
// which module it is.
using ModuleFieldCheck = std::function<absl::Status(const Module& module)>;

// How a module type declared as data runs (a backend config's fused_module_type,
// backend_configs/declared_types.h): steps in order, each a child module or a float
// function, reading forward()'s args and earlier steps; the last step's value is the
// output. Fusion writes it on each module of the type as steps (CompositionSteps), which
// runtime/fused_subgraph.h runs. Example (relu(conv(x) + residual), children "0" = conv, "1" = relu):
//   {{child 0, inputs {arg 0}}, {function "operator.add", inputs {step 0, arg 1}},
//    {child 1, inputs {step 1}}}
struct ModuleComposition {
  struct Value {
    enum class Source : uint8_t { kArg, kStep };
    Source source = Source::kArg;
    int index = 0;  // forward() arg index, or an earlier step's index
    friend bool operator==(const Value& a, const Value& b) {
      return a.source == b.source && a.index == b.index;
    }
  };
  struct Step {
    int child = -1;        // >= 0: run child "<child>" through its kernel
    std::string function;  // else: a call_function target ("operator.add", "torch.relu")
    std::vector<Value> inputs;
    friend bool operator==(const Step& a, const Step& b) {
      return a.child == b.child && a.function == b.function && a.inputs == b.inputs;
    }
  };
  std::vector<Step> steps;
  // Intermediate steps whose value prepare observes (with the activation qconfig, as the
  // output): prepare records the observer's path on the fused module
  // (ObservedStepAttribute), the composite kernel feeds it the step's value during
  // calibration, and convert replaces it by the step's scale and zero point
  // (ObservedStepScaleAttribute / ObservedStepZeroPointAttribute), which a lowering
  // rule's `qparams_of { step: k }` reads.
  std::vector<int> observed_steps;
  // The steps and outputs as a module carries them (CompositionSteps / CompositionOutputs
  // below), made once by whoever completes the composition (ReadDeclarations): fusion
  // writes these on every module of the type, and Verify compares a module's with them.
  Argument carried_steps;
  Argument carried_outputs;
  friend bool operator==(const ModuleComposition& a, const ModuleComposition& b) {
    return a.steps == b.steps && a.observed_steps == b.observed_steps;
  }
};

// A module that carries its own steps runs anywhere, with no schema or config: the attributes
// "steps" and "outputs" (patterns/fusion_rule.h gives their format) that one kernel,
// runtime/fused_subgraph.h, replays. Modules of fuselage.FusedSubgraph (a multi-output
// match) and of every declared type carry them: a declared type's are its composition's
// (CompositionSteps), written at fusion, so a model file holding it needs no config to run,
// and Verify checks them against the declaration where the config is loaded.
inline constexpr char kStepsAttribute[] = "steps";
inline constexpr char kOutputsAttribute[] = "outputs";
bool CarriesSteps(const Module& module);

// `composition` in the step format of kStepsAttribute: a child step is
// ("call_module", "<child>", [refs], []), a function step ("call_function", target, [refs],
// []), an arg ("input", i), an earlier step ("step", j).
Argument CompositionSteps(const ModuleComposition& composition);
// kOutputsAttribute of a composition: its last step.
Argument CompositionOutputs(const ModuleComposition& composition);

// On a module of a declared type: the path of the observer of its step `step` (string),
// after prepare; then, after convert, that step's quantization parameters.
inline std::string ObservedStepAttribute(int step) {
  return "step_" + std::to_string(step) + "_observer";
}
// The steps whose observer prepare recorded on `module` (its ObservedStepAttribute
// attributes), in step order: what calibration feeds and convert replaces, read from the
// model itself so that neither needs the declaring config.
std::vector<int> ObservedStepsOf(const Module& module);
inline std::string ObservedStepScaleAttribute(int step) {
  return "step_" + std::to_string(step) + "_scale";
}
inline std::string ObservedStepZeroPointAttribute(int step) {
  return "step_" + std::to_string(step) + "_zero_point";
}

struct ModuleSchema {
  ModuleSchema() = default;
  // The trailing fields may be left out: {"user.Scale", 1, 1} or {"nn.Conv2d", 1, 1, {"weight"}}.
  ModuleSchema(std::string type, int min_inputs, int max_inputs,
               std::vector<std::string> required_tensors = {},
               std::vector<std::vector<std::string>> children = {}, ModuleFieldCheck check = {},
               std::shared_ptr<const ModuleComposition> composition = nullptr,
               std::string declared_in = "")
      : type(std::move(type)),
        min_inputs(min_inputs),
        max_inputs(max_inputs),
        required_tensors(std::move(required_tensors)),
        children(std::move(children)),
        check(std::move(check)),
        composition(std::move(composition)),
        declared_in(std::move(declared_in)) {}

  std::string type;            // "nn.Conv2d"
  int min_inputs = 1;          // positional args of forward()
  int max_inputs = 1;          // kAnyNumber for variadic
  std::vector<std::string> required_tensors;  // e.g. {"weight"}
  // A fused module's children "0", "1", ... in order, each one of the listed types
  // (nni.ConvReLU2d: {{"nn.Conv2d", "nnqr.Conv2d"}, {"nn.ReLU"}}: a reference conv after
  // convert). Empty: children are not constrained. Backend configs check their fusions
  // against it (backend_configs/backend_config.h), and Verify checks every module of a
  // tree against it: count, names and types.
  std::vector<std::vector<std::string>> children;
  // Empty: no check beyond the above.
  ModuleFieldCheck check;
  // Set only for a type declared as data (a backend config's fused_module_type): how it
  // runs, and the config that declared it first (its source name, for errors). Built-in
  // types have kernels of their own and no composition.
  std::shared_ptr<const ModuleComposition> composition;
  std::string declared_in;

  static constexpr int kAnyNumber = -1;
};

// Checks `module`'s children against `schema.children`, then against `schema`'s `check`
// (GraphModule::Verify checks the required
// tensors itself, then calls this for every module of the tree). Errors start with `where`
// ("module 'layer1.0.conv' (nn.Conv2d)").
absl::Status CheckModuleAgainstSchema(const Module& module, const ModuleSchema& schema,
                                      absl::string_view where);

class ModuleSchemaRegistry {
 public:
  // The process-wide registry, holding every module type fuselage itself defines.
  static ModuleSchemaRegistry& Global();

  // An empty registry (tests); Global() starts from RegisterBuiltinModuleSchemas.
  ModuleSchemaRegistry() = default;
  // A registry over `parent` (which must outlive it): Find looks here first, then in
  // `parent`; Register adds here only. What a backend config declares lives in one over
  // Global() (backend_configs/declared_types.h), scoped to that config.
  explicit ModuleSchemaRegistry(const ModuleSchemaRegistry* parent) : parent_(parent) {}

  // AlreadyExists if the type is registered with a different schema (inputs, tensors,
  // children, composition; `check` cannot be compared: the first one registered stays;
  // the message names both `declared_in`s where set); InvalidArgument on an empty type or
  // min > max. Registering the same schema again is OK. Thread-safe.
  absl::Status Register(ModuleSchema schema);
  // nullptr if unknown. The pointer stays valid for the registry's life.
  const ModuleSchema* Find(Symbol type) const;

 private:
  const ModuleSchemaRegistry* parent_ = nullptr;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Symbol, std::unique_ptr<ModuleSchema>> schemas_ ABSL_GUARDED_BY(mu_);
};

// Registers the module types of torch.nn, torch.ao.nn.intrinsic (fused float modules,
// including ConvAdd2d / ConvAddReLU2d), quantized, reference and observer modules.
absl::Status RegisterBuiltinModuleSchemas(ModuleSchemaRegistry& registry);

// True if `type_name`'s namespace (its text before the first '.') is one fuselage or
// PyTorch defines: the module namespaces nn, nni, nnq, nniq, nnqr, torch, or the function
// namespaces operator, builtins, math, F. The one list of them: a backend config may not
// declare a type there (backend_configs/declared_types.h), and an unknown type there is
// not one a config could have declared.
//   InBuiltinNamespace("nn.Conv2d") == true; InBuiltinNamespace("user.ConvAdd2d") == false
bool InBuiltinNamespace(absl::string_view type_name);

// True for a quantized module type: nnq (native quantized), nniq (native quantized fused)
// or nnqr (reference quantized), e.g. "nnq.Conv2d"; false for float ones ("nn.Conv2d").
bool IsQuantizedModuleType(absl::string_view type_name);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_SCHEMA_H_
