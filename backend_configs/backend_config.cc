#include "backend_configs/backend_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

absl::Status EntryError(const BackendPatternConfig& config, absl::string_view field,
                        absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("backend pattern config '", config.name(),
                                                 "': field '", field, "': ", message));
}

std::string OpRefKey(OpRef op) {
  return absl::StrCat(OpKindName(op.op), ":", op.target.name());
}

// A constant as the matcher compares it: numbers by value (3 and 3.0 match the same
// args, as 1 == 1.0 in Python), anything else by its text.
std::string ConstantKey(const Argument& constant) {
  if (constant.is_int()) return absl::StrCat(constant.as_int());
  if (constant.is_float()) {
    const double value = constant.as_float();
    if (std::trunc(value) == value && std::fabs(value) < 9.0e15) {
      return absl::StrCat(static_cast<int64_t>(value));
    }
    return absl::StrFormat("%.17g", value);
  }
  return constant.ToString();
}

// A predicate's check: a relation's other position named by its path, not by the capture
// name written (`@c.shape` and `@conv.shape` on the same position are one check), and a
// constant right-hand side by value.
std::string PredicateKey(const Pattern& pattern, const PositionPredicate& predicate) {
  if (predicate.op == PredicateOp::kTrue) return predicate.text;
  const std::string head =
      absl::StrCat(predicate.subject, " ", static_cast<int>(predicate.op), " ");
  if (predicate.other_position >= 0) {
    return absl::StrCat(head, "@<", pattern.PathOf(predicate.other_position), ">.",
                        predicate.other_subject);
  }
  if (!predicate.other_subject.empty()) return absl::StrCat(head, predicate.other_subject);
  return absl::StrCat(head, "=", ConstantKey(predicate.constant));
}

// The key of position `i` and its pattern args. Everything that decides what the position
// matches is in it: the op alternatives, commutativity, kwarg allowances, predicates (as
// a set: all must hold), `?`, a constant leaf, and a later `$x` (as the path of the
// position it must equal; capture names themselves are spelling).
std::string PositionKey(const Pattern& pattern, int i) {
  const PatternPosition& position = pattern.position(i);
  if (position.same_as >= 0) return absl::StrCat("$<", pattern.PathOf(position.same_as), ">");
  if (position.constant.has_value()) return absl::StrCat("=", ConstantKey(*position.constant));
  if (position.match_all) return "*";
  std::vector<std::string> alternatives;
  for (OpRef op : position.alternatives) alternatives.push_back(OpRefKey(op));
  std::sort(alternatives.begin(), alternatives.end());
  std::vector<std::string> kwargs;
  for (const AllowedKwarg& kw : position.allowed_kwargs) {
    kwargs.push_back(absl::StrCat(kw.key.name(), kw.value ? "=" + kw.value->ToString() : ""));
  }
  std::sort(kwargs.begin(), kwargs.end());
  std::vector<std::string> predicates;
  for (const PositionPredicate& predicate : position.predicates) {
    predicates.push_back(PredicateKey(pattern, predicate));
  }
  std::sort(predicates.begin(), predicates.end());
  predicates.erase(std::unique(predicates.begin(), predicates.end()), predicates.end());
  std::string key = absl::StrCat("[", absl::StrJoin(alternatives, "|"), "]",
                                 position.commutative ? "~" : "");
  if (!kwargs.empty()) absl::StrAppend(&key, "{", absl::StrJoin(kwargs, ","), "}");
  if (!predicates.empty()) absl::StrAppend(&key, "[", absl::StrJoin(predicates, ","), "]");
  if (position.optional) absl::StrAppend(&key, "?");
  if (!position.args.empty()) {
    std::vector<std::string> args;
    for (int arg : position.args) args.push_back(PositionKey(pattern, arg));
    absl::StrAppend(&key, "(", absl::StrJoin(args, ","), ")");
  }
  return key;
}

// "position '0.0'", or "the outermost op" for the empty path.
std::string PositionLabel(const Pattern& pattern, int i) {
  const std::string path = pattern.PathOf(i);
  return path.empty() ? "the outermost op" : absl::StrCat("position '", path, "'");
}

// The module types and functions a pattern names must be known: a typo would otherwise
// give a pattern that silently never matches.
absl::Status ValidatePatternTargets(const BackendPatternConfig& config,
                                    const ModuleSchemaRegistry& modules,
                                    const FunctionRegistry& functions) {
  const Pattern& pattern = config.pattern();
  for (int i = 0; i < pattern.size(); ++i) {
    const PatternPosition& position = pattern.position(i);
    for (OpRef op : position.alternatives) {
      if (op.op == OpKind::kCallModule && modules.Find(op.target) == nullptr) {
        return EntryError(config, "pattern",
                          absl::StrCat(PositionLabel(pattern, i), " ('",
                                       position.spelling, "') names module type '",
                                       op.target.name(), "', which is not registered"));
      }
      if (op.op == OpKind::kCallFunction && !functions.Contains(op.target)) {
        return EntryError(config, "pattern",
                          absl::StrCat(PositionLabel(pattern, i), " ('",
                                       position.spelling, "') names function '",
                                       op.target.name(), "', which is not a known function"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateModuleField(const BackendPatternConfig& config, absl::string_view field,
                                 Symbol type, const ModuleSchemaRegistry& modules) {
  if (type.empty() || modules.Find(type) != nullptr) return absl::OkStatus();
  return EntryError(config, field,
                    absl::StrCat("module type '", type.name(), "' is not registered"));
}

// The fused node takes the root's args followed by the extra inputs, so the fused module's
// forward must accept that many inputs. The root's input count is known when the pattern
// lists its args, or when it is a module (from its schema); a functional root with
// unchecked args, or C++ getters, leave it open.
absl::Status ValidateFusedArity(const BackendPatternConfig& config,
                                const ModuleSchemaRegistry& modules) {
  const FusionRule& rule = config.rule;
  if (rule.fused_module_type.empty() || rule.root_node_getter || rule.extra_inputs_getter) {
    return absl::OkStatus();
  }
  const ModuleSchema* fused = modules.Find(rule.fused_module_type);
  if (fused == nullptr) return absl::OkStatus();  // Reported by ValidateModuleField.
  const Pattern& pattern = rule.pattern;
  const int root = rule.root_position.value_or(pattern.DefaultRootPosition());
  const PatternPosition& root_position = pattern.position(root);
  int root_min = 0;
  int root_max = 0;
  if (!root_position.args.empty()) {
    root_min = root_max = static_cast<int>(root_position.args.size());
  } else {
    bool known = !root_position.alternatives.empty();
    root_min = ModuleSchema::kAnyNumber;
    for (OpRef op : root_position.alternatives) {
      const ModuleSchema* schema =
          op.op == OpKind::kCallModule ? modules.Find(op.target) : nullptr;
      if (schema == nullptr || schema->max_inputs == ModuleSchema::kAnyNumber) {
        known = false;
        break;
      }
      root_min = root_min == ModuleSchema::kAnyNumber ? schema->min_inputs
                                                      : std::min(root_min, schema->min_inputs);
      root_max = std::max(root_max, schema->max_inputs);
    }
    if (!known) return absl::OkStatus();
  }
  const int extras = static_cast<int>(
      rule.extra_input_positions.value_or(pattern.DefaultExtraInputPositions()).size());
  const bool too_many =
      fused->max_inputs != ModuleSchema::kAnyNumber && root_min + extras > fused->max_inputs;
  const bool too_few = root_max + extras < fused->min_inputs;
  if (too_many || too_few) {
    const std::string fused_range =
        fused->max_inputs == ModuleSchema::kAnyNumber
            ? absl::StrCat("at least ", fused->min_inputs)
            : (fused->min_inputs == fused->max_inputs
                   ? absl::StrCat(fused->min_inputs)
                   : absl::StrCat(fused->min_inputs, " to ", fused->max_inputs));
    const std::string root_range = root_min == root_max
                                       ? absl::StrCat(root_min)
                                       : absl::StrCat(root_min, " to ", root_max);
    return EntryError(config, "fused_module",
                      absl::StrCat("'", rule.fused_module_type.name(), "' takes ", fused_range,
                                   " inputs, but the fused node gets the root's ", root_range,
                                   " (root '", root_position.spelling, "' at position '",
                                   pattern.PathOf(root), "') plus ", extras,
                                   " extra input(s)"));
  }
  return absl::OkStatus();
}

// The reference quantized module replaces the root module, weights and attributes as
// they are, so it must be that module's reference form: nn.Conv2d -> nnqr.Conv2d. (A
// config saying nnqr.Conv3d for nn.Conv2d made convert write a Conv3d with 2-d weights.)
// Checked for the built-in namespaces; a user's own types pair as their schemas allow.
absl::Status ValidateReferenceModule(const BackendPatternConfig& config) {
  if (config.root_module.empty() || config.reference_quantized_module.empty()) {
    return absl::OkStatus();
  }
  const absl::string_view root = config.root_module.name();
  const absl::string_view reference = config.reference_quantized_module.name();
  if (!absl::StartsWith(root, "nn.") || !absl::StartsWith(reference, "nnqr.")) {
    return absl::OkStatus();
  }
  if (root.substr(3) == reference.substr(5)) return absl::OkStatus();
  return EntryError(config, "reference_quantized_module",
                    absl::StrCat("'", reference, "' is not the reference form of root_module '",
                                 root, "'; expected 'nnqr.", root.substr(3), "'"));
}

// The children the fuser gives the fused module (FusionRule::ChildTypesFromPattern) must
// be those its type holds (ModuleSchema::children): a part with no place in the type
// would be silently dropped by its kernel, or break Verify after fusion.
absl::Status ValidateFusedChildren(const BackendPatternConfig& config,
                                   const ModuleSchemaRegistry& modules) {
  const FusionRule& rule = config.rule;
  const ModuleSchema* fused =
      rule.fused_module_type.empty() ? nullptr : modules.Find(rule.fused_module_type);
  if (fused == nullptr || fused->children.empty()) return absl::OkStatus();
  const std::optional<std::vector<std::vector<Symbol>>> children = rule.ChildTypesFromPattern();
  if (!children.has_value()) return absl::OkStatus();
  bool fits = children->size() == fused->children.size();
  for (size_t i = 0; fits && i < children->size(); ++i) {
    const std::vector<std::string>& allowed = fused->children[i];
    for (Symbol type : (*children)[i]) {
      if (std::find(allowed.begin(), allowed.end(), type.name()) == allowed.end()) fits = false;
    }
  }
  if (fits) return absl::OkStatus();
  std::vector<std::string> got, expected;
  for (const std::vector<Symbol>& types : *children) {
    std::vector<std::string> names;
    for (Symbol type : types) names.emplace_back(type.name());
    got.push_back(absl::StrJoin(names, " or "));
  }
  for (const std::vector<std::string>& types : fused->children) {
    expected.push_back(absl::StrJoin(types, " or "));
  }
  return EntryError(config, "fuser",
                    absl::StrCat(FuserKindName(rule.fuser_kind), " of ",
                                 rule.pattern.ToString(), " gives '",
                                 rule.fused_module_type.name(), "' the children (",
                                 absl::StrJoin(got, ", "), "), but it holds (",
                                 absl::StrJoin(expected, ", "),
                                 "); choose the fuser and fused module that fit the pattern"));
}

// A rule fusing into a declared type writes the type's steps on each module it makes
// (FusionRule::composite_steps), so the fused model runs without the config.
void CarryDeclaredSteps(BackendPatternConfig& config, const ModuleSchemaRegistry& modules) {
  FusionRule& rule = config.rule;
  const ModuleSchema* fused =
      rule.fused_module_type.empty() ? nullptr : modules.Find(rule.fused_module_type);
  if (fused == nullptr || fused->composition == nullptr) return;
  // Aliases of the schema's own: every rule fusing into the type shares one copy.
  rule.composite_steps =
      std::shared_ptr<const Argument>(fused->composition, &fused->composition->carried_steps);
  rule.composite_outputs =
      std::shared_ptr<const Argument>(fused->composition, &fused->composition->carried_outputs);
}

}  // namespace

std::string PatternKey(const Pattern& pattern) {
  if (pattern.size() == 0) return "";
  std::string key = PositionKey(pattern, 0);
  // Declared outputs (pattern.h `-> $name`) make another pattern: the same tree with an
  // inner node also read outside matches where the plain one does not.
  for (size_t i = 1; i < pattern.output_positions().size(); ++i) {
    absl::StrAppend(&key, i == 1 ? "->" : ",", pattern.PathOf(pattern.output_positions()[i]));
  }
  return key;
}

absl::Status ValidateBackendPatternConfig(const BackendPatternConfig& config,
                                          const ModuleSchemaRegistry& modules,
                                          const FunctionRegistry& functions) {
  if (config.name().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend pattern config with pattern ", config.pattern().ToString(),
                     ": field 'name': must not be empty"));
  }
  if (config.pattern().size() == 0) return EntryError(config, "pattern", "must not be empty");
  RETURN_IF_ERROR(ValidatePatternTargets(config, modules, functions));
  RETURN_IF_ERROR(ValidateModuleField(config, "root_module", config.root_module, modules));
  RETURN_IF_ERROR(ValidateModuleField(config, "reference_quantized_module",
                                      config.reference_quantized_module, modules));
  RETURN_IF_ERROR(ValidateReferenceModule(config));
  for (size_t i = 0; i < config.dtype_configs.size(); ++i) {
    const absl::Status status =
        config.dtype_configs[i].Validate(absl::StrCat("dtype_configs[", i, "]"));
    if (!status.ok()) return EntryError(config, "dtype_configs", status.message());
  }
  for (const std::optional<int>& index : {config.weight_arg_index, config.bias_arg_index}) {
    if (index.has_value() && *index < 0) {
      return EntryError(config, "input_type_to_index",
                        absl::StrCat(*index, " is negative; expected an arg index"));
    }
  }
  if (config.fixed_output_qparams.has_value() && !(config.fixed_output_qparams->scale > 0)) {
    return EntryError(config, "fixed_output_qparams",
                      absl::StrCat("scale ", config.fixed_output_qparams->scale,
                                   "; expected a positive scale"));
  }
  if (!config.fuses) return absl::OkStatus();
  // The rule's own checks: getter positions inside the pattern and of the right kind, a
  // fuser and fused type that fit together.
  if (const absl::Status status = config.rule.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("backend pattern config '", config.name(),
                                                   "': ", status.message()));
  }
  RETURN_IF_ERROR(
      ValidateModuleField(config, "fused_module", config.rule.fused_module_type, modules));
  RETURN_IF_ERROR(ValidateFusedArity(config, modules));
  return ValidateFusedChildren(config, modules);
}

absl::Status BackendConfig::Add(BackendPatternConfig config,
                                const ModuleSchemaRegistry& modules,
                                const FunctionRegistry& functions) {
  return Insert(std::move(config), /*replace=*/false, modules, functions);
}

absl::Status BackendConfig::SetOrReplace(BackendPatternConfig config,
                                         const ModuleSchemaRegistry& modules,
                                         const FunctionRegistry& functions) {
  return Insert(std::move(config), /*replace=*/true, modules, functions);
}

absl::Status BackendConfig::Insert(BackendPatternConfig config, bool replace,
                                   const ModuleSchemaRegistry& modules,
                                   const FunctionRegistry& functions) {
  RETURN_IF_ERROR(ValidateBackendPatternConfig(config, modules, functions));
  CarryDeclaredSteps(config, modules);
  // Validation refused children that do not fit; known ones fit.
  config.rule.children_checked_at_load = config.rule.ChildTypesFromPattern().has_value();
  std::string key = PatternKey(config.pattern());
  auto same_pattern = index_by_pattern_key_.find(key);
  auto same_name = index_by_name_.find(config.name());
  if (same_pattern != index_by_pattern_key_.end()) {
    const BackendPatternConfig& existing = configs_[same_pattern->second];
    if (!replace) {
      return EntryError(config, "pattern",
                        absl::StrCat(config.pattern().ToString(), " duplicates the pattern of '",
                                     existing.name(), "' in backend config '", name_, "'"));
    }
    if (same_name != index_by_name_.end() && same_name->second != same_pattern->second) {
      return EntryError(config, "name",
                        absl::StrCat("is already used by another entry of backend config '",
                                     name_, "'"));
    }
    const size_t index = same_pattern->second;
    index_by_name_.erase(existing.name());
    index_by_name_[config.name()] = index;
    configs_[index] = std::move(config);
    return absl::OkStatus();
  }
  if (same_name != index_by_name_.end()) {
    return EntryError(config, "name",
                      absl::StrCat("is already used by another entry of backend config '",
                                   name_, "'"));
  }
  index_by_pattern_key_.emplace(std::move(key), configs_.size());
  index_by_name_.emplace(config.name(), configs_.size());
  configs_.push_back(std::move(config));
  return absl::OkStatus();
}

const BackendPatternConfig* BackendConfig::Find(absl::string_view name) const {
  auto it = index_by_name_.find(std::string(name));
  return it == index_by_name_.end() ? nullptr : &configs_[it->second];
}

const BackendPatternConfig* BackendConfig::FindByPattern(const Pattern& pattern) const {
  auto it = index_by_pattern_key_.find(PatternKey(pattern));
  return it == index_by_pattern_key_.end() ? nullptr : &configs_[it->second];
}

std::vector<const BackendPatternConfig*> BackendConfig::FindForOp(OpRef op) const {
  std::vector<const BackendPatternConfig*> found;
  for (const BackendPatternConfig& config : configs_) {
    if (config.pattern().size() == 1 && config.pattern().outermost().Matches(op)) {
      found.push_back(&config);
    }
  }
  return found;
}

std::vector<const BackendPatternConfig*> BackendConfig::FindFusionsProducing(
    Symbol fused_type) const {
  std::vector<const BackendPatternConfig*> found;
  for (const BackendPatternConfig& config : configs_) {
    if (config.fuses && !fused_type.empty() && config.rule.fused_module_type == fused_type) {
      found.push_back(&config);
    }
  }
  return found;
}

std::vector<const FusionRule*> BackendConfig::FusionRules() const {
  std::vector<const FusionRule*> rules;
  for (const BackendPatternConfig& config : configs_) {
    if (config.fuses) rules.push_back(&config.rule);
  }
  return rules;
}

absl::StatusOr<PatternMatcher> BuildFusionMatcher(const BackendConfig& config) {
  std::vector<FusionRule> rules;
  for (const FusionRule* rule : config.FusionRules()) rules.push_back(*rule);
  return PatternMatcher::Create(std::move(rules));
}

}  // namespace fuselage
