// Fused module types and lowering rules declared as data in a backend config file
// (backend_config.proto: fused_module_type, lowering_rule; issue 21 item 4), so that a
// user's own fused op goes from pattern to fused module to native quantized op without a
// line of C++:
//
//   fused_module_type {                  # relu(conv(x) + residual), bn folded at fusion
//     name: "user.ConvBnAddReLU2d"
//     child: "nn.Conv2d"  child: "nn.ReLU"
//     num_inputs: 2
//     step { child: 0 input { arg: 0 } }
//     step { op: "add" input { step: 0 } input { arg: 1 } }
//     step { child: 1 input { step: 1 } }
//     observe_output: true
//   }
//   lowering_rule {
//     name: "user-conv-bn-add-relu2d"  reference_module: "user.ConvBnAddReLU2d"
//     quantized_arg: 0  quantized_arg: 1
//     native_step { op: "nniq.ConvAddReLU2d" from_child: 0 }
//   }
//
// What a declaration gives the BackendConfig the file loads into (config_loader.h;
// BackendConfig::declarations()):
//  - the type's ModuleSchema, in the config's own registry over the built-in types
//    (BackendConfig::module_schemas()): its inputs, its children
//    (each child type, and for a weighted nn.X also nnqr.X, the reference form convert
//    makes of child "0"), and its ModuleComposition. A pattern entry fusing into the type
//    writes the composition's steps on every module it makes (graph/module_schema.h
//    CompositionSteps, FusionRule::composite_steps), and those run by the one steps
//    kernel (runtime/fused_subgraph.h) that fuselage.FusedSubgraph runs by;
//  - observation: prepare (quantize/prepare.h) treats the type as any fused module, from
//    the file's pattern entry for it (`pattern: "user.ConvBnAddReLU2d"` with root_module,
//    reference_quantized_module and dtype_config): every tensor input and the output get
//    an observer. A declaration asking for fewer is refused (not silently widened).
//    Each `observed_step: k` (an intermediate step) gets one more observer, no node's:
//    its path is the module's attribute step_<k>_observer, the steps kernel feeds
//    it step k's value during calibration, and convert records step_<k>_scale /
//    step_<k>_zero_point, which a lowering rule's `qparams_of { step: k }` reads;
//  - a lowering rule, which RegisterNativeLoweringRules (lowering/lowering_rule.h) adds
//    to a registry it fills for that config: the reference module
//    with the listed args dequantized becomes the native module, built from the reference
//    child "0" as the built-in two-input rules do, reading those args quantized; a rule of
//    several native_steps (`composition`) becomes one native node per step.
//
// Scope: the config object that declares them, nothing process-wide: two configs may
// declare the same name differently, each fusing, preparing and lowering by its own. A
// name in a built-in namespace (nn, nni, nnq, nniq, nnqr, torch, ...) or of a built-in
// type is refused, as is a name declared twice in one file.
//
// Model files carry each declared module's steps, so a fused, prepared or reference model
// holding a declared type loads, runs and converts anywhere, with no config; prepare and
// lowering with a config check each declared module's steps against its declaration
// (GraphModule::Verify(config.module_schemas())) and refuse a module fused under another.
#ifndef FUSELAGE_BACKEND_CONFIGS_DECLARED_TYPES_H_
#define FUSELAGE_BACKEND_CONFIGS_DECLARED_TYPES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.pb.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"

namespace fuselage {

// A declared lowering rule, checked: `reference_module` (a declared type) whose child "0"
// is `inner_type` (the reference form, "nnqr.Conv2d") becomes `native_module` with
// `quantized_args` read quantized.
struct DeclaredLoweringRule {
  std::string name;
  std::string reference_module;
  std::string inner_type;
  std::vector<int> quantized_args;
  std::string native_module;
  // A rule of several native_steps (then native_module is empty): each step a native
  // module built from a child, or a quantized function, in order.
  struct Step {
    std::string native;       // "nnq.Conv2d", or "torch.ops.quantized.add_relu"
    bool is_function = false;
    int from_child = -1;      // a module step: the child whose weights it takes
    std::string child_type;   // that child's reference form ("nnqr.Conv2d")
    // Each input: (true, j) step j's value, (false, i) the quantized arg i.
    std::vector<std::pair<bool, int>> inputs;
    // Every step but the last: the declared type's observed step whose parameters it
    // takes (convert records them on the module), or else the arg whose it borrows.
    int qparams_of_step = -1;
    int qparams_of_arg = -1;
    friend bool operator==(const Step& a, const Step& b) {
      return a.native == b.native && a.is_function == b.is_function &&
             a.from_child == b.from_child && a.child_type == b.child_type &&
             a.inputs == b.inputs && a.qparams_of_arg == b.qparams_of_arg &&
             a.qparams_of_step == b.qparams_of_step;
    }
  };
  std::vector<Step> composition;
  std::string declared_in;  // the config's source name; not part of the comparison
  friend bool operator==(const DeclaredLoweringRule& a, const DeclaredLoweringRule& b) {
    return a.name == b.name && a.reference_module == b.reference_module &&
           a.inner_type == b.inner_type && a.quantized_args == b.quantized_args &&
           a.native_module == b.native_module && a.composition == b.composition;
  }
};

// What one backend config file declares, scoped to the BackendConfig made from it: its
// types' schemas in a registry over the built-in ones (`schemas.Find` finds both), and its
// lowering rules, checked.
struct Declarations {
  explicit Declarations(const ModuleSchemaRegistry& builtins) : schemas(&builtins) {}
  ModuleSchemaRegistry schemas;
  std::vector<DeclaredLoweringRule> lowering_rules;
};

// Checks every fused_module_type and lowering_rule of `file` against `modules` (the
// built-in types, usually ModuleSchemaRegistry::Global(), which must outlive the result)
// and returns them; nullptr for a file with neither. InvalidArgument / Unimplemented
// "<source>: fused_module_type[i] 'name': field 'step[2].op': ..." naming the entry and
// field. Nothing process-wide changes: two configs may declare the same name differently.
absl::StatusOr<std::shared_ptr<const Declarations>> ReadDeclarations(
    const config::BackendConfigFile& file, absl::string_view source,
    const ModuleSchemaRegistry& modules);

// Checks every module of `gm` of a type `declarations` declares against its declaration
// (CheckModuleAgainstSchema: its steps, written at fusion, and its children): a module
// fused under another declaration of the same name is InvalidArgument naming the module
// path, the type and the config. OK when `declarations` is null. Prepare and lowering call
// it with their config's declarations.
absl::Status CheckDeclaredModules(const GraphModule& gm, const Declarations* declarations);

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_DECLARED_TYPES_H_
