// BackendConfig and BackendPatternConfig: what a backend supports, pattern by pattern
// (PyTorch's torch.ao.quantization.backend_config, for fusion, quantization and lowering).
//
// A BackendPatternConfig is one entry: a FusionRule (patterns/) — the pattern, and for
// fusions the root-node / extra-inputs getters, the fuser and the fused module type — plus
// the quantization settings quantize/ and lowering/ read: observation type, dtype configs,
// root module, reference quantized module.
//
// A BackendConfig is an ordered list of entries with at most one entry per pattern (two
// spellings of one pattern, `Conv2d` and `nn.Conv2d`, are the same pattern). Every entry is
// validated when it is added, so a BackendConfig in hand is always valid:
//  - every module type in the pattern, and the fused, root and reference module types, is
//    registered in the ModuleSchemaRegistry; every call_function is in the FunctionRegistry;
//  - the reference module is the root module's reference form (nn.Conv2d -> nnqr.Conv2d);
//  - the root position and extra-input positions lie inside the pattern (root: an op
//    position; extra inputs: MatchAllNode positions);
//  - the fused module's input count fits the root's inputs plus the extra inputs, and the
//    children the fuser gives it are those its schema lists (ModuleSchema::children);
//  - the dtype configs are coherent.
// Each failure is an InvalidArgument naming the entry and the field; the config is left
// unchanged.
//
// Where PyTorch 1.13 is wrong and we do better:
//  - PyTorch silently lets a later entry override an earlier one with the same pattern (its
//    own tables do this by accident: nni.ConvReLU2d loses its root and reference module).
//    Here a duplicate is an error; SetOrReplace exists for deliberate overrides.
//  - PyTorch's default root getter picks the last element of a tuple, which for
//    (ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode)) is the MatchAllNode. FusionRule's
//    default follows arg 0 (the conv); see patterns/fusion_rule.h.
#ifndef FUSELAGE_BACKEND_CONFIGS_BACKEND_CONFIG_H_
#define FUSELAGE_BACKEND_CONFIGS_BACKEND_CONFIG_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "backend_configs/declared_types.h"
#include "backend_configs/dtype_config.h"
#include "backend_configs/known_functions.h"
#include "graph/module_schema.h"
#include "graph/symbol.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "patterns/pattern.h"

namespace fuselage {

// Output quantization parameters an op has by definition (sigmoid: [0, 1] -> scale 1/256,
// zero point 0 on quint8), PyTorch's fixed-qparams observers.
struct FixedQParams {
  double scale = 1.0;
  int64_t zero_point = 0;
};

struct BackendPatternConfig {
  // `rule.name` names the entry; `rule.pattern` is its pattern. The fusion fields of the
  // rule (fuser, fused_module_type, getters) mean something only if `fuses`.
  FusionRule rule;
  // True if the fusion pass applies `rule` (PyTorch: a fuser_method is set).
  bool fuses = false;

  ObservationType observation_type = ObservationType::kOutputUseDifferentObserverAsInput;
  std::vector<DTypeConfig> dtype_configs;
  // The float module whose weights the pattern's reference module takes (nni.ConvReLU2d ->
  // nn.Conv2d), and the reference quantized module that replaces it (nnqr.Conv2d). Empty
  // if the pattern has no weighted module.
  Symbol root_module;
  Symbol reference_quantized_module;

  // Binary ops: observation type by number of tensor (non-scalar) args; PyTorch's
  // _num_tensor_args_to_observation_type. Empty: `observation_type` always.
  std::vector<std::pair<int, ObservationType>> num_tensor_args_to_observation_type;
  // Functional weighted ops: which args are the weight and bias (F.conv2d: 1 and 2).
  std::optional<int> weight_arg_index;
  std::optional<int> bias_arg_index;
  // False for ops whose input and output are never observed (weight-only embeddings).
  bool input_output_observed = true;
  // Ops with fixed output quantization parameters (sigmoid, tanh, hardsigmoid, softmax).
  std::optional<FixedQParams> fixed_output_qparams;

  const std::string& name() const { return rule.name; }
  const Pattern& pattern() const { return rule.pattern; }
  // The fused module type; empty if the entry does not fuse, or if its fuser returns the
  // folded root module itself (conv-bn).
  Symbol fused_module() const { return fuses ? rule.fused_module_type : Symbol(); }
};

// A canonical text of a pattern's structure (resolved alternatives, args, kwarg
// allowances, predicates, optional positions, constant leaves, `$x` links and declared
// outputs), independent of spelling (leaf names, capture names, predicate order): equal
// keys match exactly the same nodes, so two entries differing only by a predicate are
// not duplicates.
std::string PatternKey(const Pattern& pattern);

// Checks one entry on its own, as described at the top of this file.
absl::Status ValidateBackendPatternConfig(
    const BackendPatternConfig& config,
    const ModuleSchemaRegistry& modules = ModuleSchemaRegistry::Global(),
    const FunctionRegistry& functions = FunctionRegistry::Global());

class BackendConfig {
 public:
  explicit BackendConfig(std::string name = "") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // The built-in config this one is, or was loaded from (a file's `base`, kept when the
  // file renames the config): what decides the engine its models run on
  // (runtime/quantized_engine.h EngineForBackend). Empty for a config built from nothing.
  const std::string& built_in_base() const { return built_in_base_; }
  void set_built_in_base(std::string name) { built_in_base_ = std::move(name); }

  // The fused module types and lowering rules the config's file declares
  // (backend_configs/declared_types.h), or nullptr. Set by the loader before the entries
  // that name them are added (with module_schemas()).
  const std::shared_ptr<const Declarations>& declarations() const { return declarations_; }
  void set_declarations(std::shared_ptr<const Declarations> declarations) {
    declarations_ = std::move(declarations);
  }
  // The module types this config knows: the built-in ones and those it declares.
  const ModuleSchemaRegistry& module_schemas() const {
    return declarations_ != nullptr ? declarations_->schemas : ModuleSchemaRegistry::Global();
  }
  // The lowering rules it declares (empty for most configs).
  absl::Span<const DeclaredLoweringRule> declared_lowering_rules() const {
    if (declarations_ == nullptr) return {};
    return declarations_->lowering_rules;
  }

  // Validates `config` and appends it. InvalidArgument (config unchanged) if it is invalid,
  // or if an entry with the same name or the same pattern exists.
  absl::Status Add(BackendPatternConfig config,
                   const ModuleSchemaRegistry& modules = ModuleSchemaRegistry::Global(),
                   const FunctionRegistry& functions = FunctionRegistry::Global());
  // Like Add, but an entry with the same pattern is replaced in place (a file extending a
  // built-in config may redefine an entry on purpose).
  absl::Status SetOrReplace(BackendPatternConfig config,
                            const ModuleSchemaRegistry& modules = ModuleSchemaRegistry::Global(),
                            const FunctionRegistry& functions = FunctionRegistry::Global());

  // All entries, in the order they were added. Pointers into it stay valid until the next
  // Add / SetOrReplace.
  const std::vector<BackendPatternConfig>& configs() const { return configs_; }
  size_t size() const { return configs_.size(); }

  // The entry named `name`, or nullptr.
  const BackendPatternConfig* Find(absl::string_view name) const;
  // The entry whose pattern equals `pattern` (by PatternKey), or nullptr.
  const BackendPatternConfig* FindByPattern(const Pattern& pattern) const;
  // The entries whose pattern is the single op `op` (for call_module, `op.target` is the
  // module type): what prepare / convert look up for a node of a float or fused module
  // ("nni.ConvReLU2d"), a function ("torch.nn.functional.linear") or a method ("relu").
  std::vector<const BackendPatternConfig*> FindForOp(OpRef op) const;
  // The fusion entries that produce modules of type `fused_type` ("nni.ConvAddReLU2d").
  std::vector<const BackendPatternConfig*> FindFusionsProducing(Symbol fused_type) const;
  // The fusion rules, in order, for the fusion pass.
  std::vector<const FusionRule*> FusionRules() const;

 private:
  absl::Status Insert(BackendPatternConfig config, bool replace,
                      const ModuleSchemaRegistry& modules, const FunctionRegistry& functions);

  std::string name_;
  std::string built_in_base_;
  std::shared_ptr<const Declarations> declarations_;
  std::vector<BackendPatternConfig> configs_;
  absl::flat_hash_map<std::string, size_t> index_by_name_;
  absl::flat_hash_map<std::string, size_t> index_by_pattern_key_;
};

// A matcher over the config's fusion rules, ready for FusePatterns (patterns/fuse.h).
absl::StatusOr<PatternMatcher> BuildFusionMatcher(const BackendConfig& config);

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_BACKEND_CONFIG_H_
