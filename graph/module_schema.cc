#include "graph/module_schema.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/module.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// ---- Field checks of the built-in module types ------------------------------------------
// What the kernels (runtime/) and PyTorch itself refuse, checked when a model is verified,
// so that `verify` and `run` agree. Absent attributes take PyTorch's defaults and are not
// checked; present ones must have the right type and range.

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

std::string IntsText(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// Attribute `name` as `size` ints (an int broadcast, as PyTorch's _pair), each >= `min`;
// nullopt if absent.
absl::StatusOr<std::optional<std::vector<int64_t>>> IntsAtLeast(const Module& m,
                                                                absl::string_view name,
                                                                size_t size, int64_t min) {
  if (m.FindAttribute(name) == nullptr) return std::optional<std::vector<int64_t>>();
  absl::StatusOr<std::vector<int64_t>> values = m.GetInts(name, size);
  if (!values.ok()) {
    return FieldError(absl::StrCat("attribute '", name, "'"),
                      absl::StrCat("is ", m.FindAttribute(name)->ToString(),
                                   "; expected an int or a list of ", size, " ints"));
  }
  for (int64_t v : *values) {
    if (v < min) {
      return FieldError(absl::StrCat("attribute '", name, "'"),
                        absl::StrCat("is ", IntsText(*values), "; expected every entry >= ",
                                     min));
    }
  }
  return std::optional<std::vector<int64_t>>(*std::move(values));
}

// Attribute `name` as one int >= `min`; nullopt if absent.
absl::StatusOr<std::optional<int64_t>> IntAtLeast(const Module& m, absl::string_view name,
                                                  int64_t min) {
  const Argument* a = m.FindAttribute(name);
  if (a == nullptr) return std::optional<int64_t>();
  if (!a->is_int() || a->as_int() < min) {
    return FieldError(absl::StrCat("attribute '", name, "'"),
                      absl::StrCat("is ", a->ToString(), "; expected an int >= ", min));
  }
  return std::optional<int64_t>(a->as_int());
}

// An optional int attribute that must equal `expected` (a tensor's dimension).
absl::Status AgreesWith(const std::optional<int64_t>& attribute, absl::string_view name,
                        int64_t expected, absl::string_view what) {
  if (!attribute.has_value() || *attribute == expected) return absl::OkStatus();
  return FieldError(absl::StrCat("attribute '", name, "'"),
                    absl::StrCat("is ", *attribute, " but ", what, " ", expected));
}

// A bias, if present: rank 1 with `channels` entries.
absl::Status CheckBias(const Module& m, int64_t channels, absl::string_view channels_source) {
  const Tensor* bias = m.FindTensor("bias");
  if (bias == nullptr || (bias->dim() == 1 && bias->shape()[0] == channels)) {
    return absl::OkStatus();
  }
  return FieldError("tensor 'bias'", absl::StrCat("has shape ", bias->ShapeString(),
                                                  "; expected [", channels, "] (",
                                                  channels_source, ")"));
}

// Conv{1,2,3}d and ConvTranspose{1,2,3}d in every form (float, reference, quantized,
// fused quantized): weight [out, in / groups, *kernel], transposed [in, out / groups,
// *kernel]; PyTorch's _ConvNd checks.
absl::Status CheckConv(const Module& m, int spatial_dims, bool transposed) {
  const size_t n = static_cast<size_t>(spatial_dims);
  ASSIGN_OR_RETURN(auto kernel_size, IntsAtLeast(m, "kernel_size", n, 1));
  ASSIGN_OR_RETURN(auto stride, IntsAtLeast(m, "stride", n, 1));
  ASSIGN_OR_RETURN(auto dilation, IntsAtLeast(m, "dilation", n, 1));
  const Argument* padding = m.FindAttribute("padding");
  if (padding != nullptr && padding->is_string()) {
    if (padding->as_string() != "valid" && padding->as_string() != "same") {
      return FieldError("attribute 'padding'", absl::StrCat("is ", padding->ToString(),
                                                            "; expected ints, 'valid' or 'same'"));
    }
  } else {
    ASSIGN_OR_RETURN(auto ignored, IntsAtLeast(m, "padding", n, 0));
    (void)ignored;
  }
  if (transposed) {
    ASSIGN_OR_RETURN(auto output_padding, IntsAtLeast(m, "output_padding", n, 0));
    if (output_padding.has_value()) {
      for (size_t i = 0; i < n; ++i) {
        const int64_t s = stride.has_value() ? (*stride)[i] : 1;
        const int64_t d = dilation.has_value() ? (*dilation)[i] : 1;
        if ((*output_padding)[i] >= std::max(s, d)) {
          return FieldError("attribute 'output_padding'",
                            absl::StrCat("is ", IntsText(*output_padding),
                                         "; expected each entry smaller than its stride or "
                                         "dilation"));
        }
      }
    }
  }
  ASSIGN_OR_RETURN(auto groups_attribute, IntAtLeast(m, "groups", 1));
  const int64_t groups = groups_attribute.value_or(1);
  ASSIGN_OR_RETURN(auto in_channels, IntAtLeast(m, "in_channels", 1));
  ASSIGN_OR_RETURN(auto out_channels, IntAtLeast(m, "out_channels", 1));
  for (const auto& [name, channels] :
       {std::pair<const char*, std::optional<int64_t>>{"in_channels", in_channels},
        {"out_channels", out_channels}}) {
    if (channels.has_value() && *channels % groups != 0) {
      return FieldError(absl::StrCat("attribute '", name, "'"),
                        absl::StrCat("is ", *channels, "; expected a multiple of groups (",
                                     groups, ")"));
    }
  }
  const Tensor* weight = m.FindTensor("weight");
  if (weight == nullptr) return absl::OkStatus();  // required_tensors says if it must be
  const int64_t rank = 2 + spatial_dims;
  if (weight->dim() != rank) {
    return FieldError("tensor 'weight'", absl::StrCat("has shape ", weight->ShapeString(),
                                                      "; expected rank ", rank));
  }
  const std::vector<int64_t> shape(weight->shape().begin(), weight->shape().end());
  for (int64_t d : shape) {
    if (d < 1) {
      return FieldError("tensor 'weight'", absl::StrCat("has shape ", weight->ShapeString(),
                                                        "; expected every dim >= 1"));
    }
  }
  if (shape[0] % groups != 0) {
    return FieldError("tensor 'weight'",
                      absl::StrCat("has shape ", weight->ShapeString(), "; dim 0 (",
                                   transposed ? "in" : "out",
                                   " channels) must be a multiple of groups (", groups, ")"));
  }
  // Weight dims 0 and 1 are (out, in / groups), transposed (in, out / groups).
  const int64_t weight_in = transposed ? shape[0] : shape[1] * groups;
  const int64_t weight_out = transposed ? shape[1] * groups : shape[0];
  const std::string shape_text = absl::StrCat("weight ", weight->ShapeString(), " with groups ",
                                              groups, " gives");
  RETURN_IF_ERROR(AgreesWith(in_channels, "in_channels", weight_in,
                             absl::StrCat(shape_text, " in channels")));
  RETURN_IF_ERROR(AgreesWith(out_channels, "out_channels", weight_out,
                             absl::StrCat(shape_text, " out channels")));
  if (kernel_size.has_value()) {
    const std::vector<int64_t> weight_kernel(shape.begin() + 2, shape.end());
    if (weight_kernel != *kernel_size) {
      return FieldError("attribute 'kernel_size'",
                        absl::StrCat("is ", IntsText(*kernel_size), " but weight ",
                                     weight->ShapeString(), " has kernel ",
                                     IntsText(weight_kernel)));
    }
  }
  return CheckBias(m, weight_out, absl::StrCat("out channels of weight ", weight->ShapeString()));
}

// Linear in every form: weight [out_features, in_features], bias [out_features].
absl::Status CheckLinear(const Module& m) {
  ASSIGN_OR_RETURN(auto in_features, IntAtLeast(m, "in_features", 0));
  ASSIGN_OR_RETURN(auto out_features, IntAtLeast(m, "out_features", 0));
  const Tensor* weight = m.FindTensor("weight");
  if (weight == nullptr) return absl::OkStatus();
  if (weight->dim() != 2) {
    return FieldError("tensor 'weight'", absl::StrCat("has shape ", weight->ShapeString(),
                                                      "; expected [out_features, in_features]"));
  }
  RETURN_IF_ERROR(AgreesWith(in_features, "in_features", weight->shape()[1],
                             absl::StrCat("weight ", weight->ShapeString(), " has in features")));
  RETURN_IF_ERROR(AgreesWith(out_features, "out_features", weight->shape()[0],
                             absl::StrCat("weight ", weight->ShapeString(), " has out features")));
  return CheckBias(m, weight->shape()[0],
                   absl::StrCat("out features of weight ", weight->ShapeString()));
}

// BatchNorm{1,2,3}d: num_features >= 1; its per-channel tensors all of that length; eps
// a number >= 0.
absl::Status CheckBatchNorm(const Module& m) {
  ASSIGN_OR_RETURN(auto num_features, IntAtLeast(m, "num_features", 1));
  if (const Argument* eps = m.FindAttribute("eps"); eps != nullptr) {
    if (!(eps->is_float() || eps->is_int()) || !(eps->as_float() >= 0)) {
      return FieldError("attribute 'eps'",
                        absl::StrCat("is ", eps->ToString(), "; expected a number >= 0"));
    }
  }
  std::optional<int64_t> channels = num_features;
  std::string source = "num_features";
  for (const char* name : {"running_mean", "running_var", "weight", "bias"}) {
    const Tensor* t = m.FindTensor(name);
    if (t == nullptr) continue;
    if (t->dim() != 1 || (channels.has_value() && t->shape()[0] != *channels)) {
      return FieldError(
          absl::StrCat("tensor '", name, "'"),
          absl::StrCat("has shape ", t->ShapeString(), "; expected ",
                       channels.has_value() ? absl::StrCat("[", *channels, "] (", source, ")")
                                            : std::string("rank 1")));
    }
    if (!channels.has_value()) {
      channels = t->shape()[0];
      source = absl::StrCat("tensor '", name, "'");
    }
  }
  return absl::OkStatus();
}

// nn.GroupNorm: num_groups >= 1 dividing num_channels; weight / bias [num_channels].
absl::Status CheckGroupNorm(const Module& m) {
  ASSIGN_OR_RETURN(auto groups, IntAtLeast(m, "num_groups", 1));
  ASSIGN_OR_RETURN(auto channels, IntAtLeast(m, "num_channels", 1));
  if (groups.has_value() && channels.has_value() && *channels % *groups != 0) {
    return FieldError("attribute 'num_channels'",
                      absl::StrCat("is ", *channels, "; expected a multiple of num_groups (",
                                   *groups, ")"));
  }
  if (channels.has_value()) {
    for (const char* name : {"weight", "bias"}) {
      const Tensor* t = m.FindTensor(name);
      if (t != nullptr && (t->dim() != 1 || t->shape()[0] != *channels)) {
        return FieldError(absl::StrCat("tensor '", name, "'"),
                          absl::StrCat("has shape ", t->ShapeString(), "; expected [", *channels,
                                       "] (num_channels)"));
      }
    }
  }
  return absl::OkStatus();
}

// The field check of a built-in type, by its name: convs, linears and batch norms in
// float, reference (nnqr), quantized (nnq) and fused quantized (nniq) form. Fused float
// modules (nni) hold their parts as children, checked by the children's own schemas.
ModuleFieldCheck BuiltinFieldCheck(absl::string_view type) {
  const size_t dot = type.find('.');
  if (dot == absl::string_view::npos) return nullptr;
  const absl::string_view space = type.substr(0, dot);
  const absl::string_view name = type.substr(dot + 1);
  if (space != "nn" && space != "nnqr" && space != "nnq" && space != "nniq") return nullptr;
  for (int d = 1; d <= 3; ++d) {
    const std::string nd = absl::StrCat(d, "d");
    if (name == "Conv" + nd || (space == "nniq" && name == "ConvReLU" + nd) ||
        (space == "nniq" && d == 2 && (name == "ConvAdd2d" || name == "ConvAddReLU2d"))) {
      return [d](const Module& m) { return CheckConv(m, d, /*transposed=*/false); };
    }
    if (name == "ConvTranspose" + nd) {
      return [d](const Module& m) { return CheckConv(m, d, /*transposed=*/true); };
    }
    if (name == "BatchNorm" + nd || (space == "nniq" && name == "BNReLU" + nd)) {
      return CheckBatchNorm;
    }
  }
  if (name == "Linear" || (space == "nniq" && name == "LinearReLU")) return CheckLinear;
  if (space == "nn" && name == "GroupNorm") return CheckGroupNorm;
  return nullptr;
}

// The children of a built-in fused float module (torch.ao.nn.intrinsic), by its name; a
// weighted part may also be its reference form (convert_to_reference makes it one).
std::vector<std::vector<std::string>> BuiltinChildren(absl::string_view type) {
  using Children = std::vector<std::vector<std::string>>;
  const std::vector<std::string> relu = {"nn.ReLU"};
  for (int d = 1; d <= 3; ++d) {
    const std::string nd = absl::StrCat(d, "d");
    const std::vector<std::string> conv = {"nn.Conv" + nd, "nnqr.Conv" + nd};
    const std::vector<std::string> bn = {"nn.BatchNorm" + nd};
    if (type == "nni.ConvReLU" + nd) return Children{conv, relu};
    if (type == "nni.ConvBn" + nd) return Children{conv, bn};
    if (type == "nni.ConvBnReLU" + nd) return Children{conv, bn, relu};
    if (type == "nni.BNReLU" + nd) return Children{bn, relu};
    if (d == 2 && type == "nni.ConvAdd2d") return Children{conv};
    // fuselage's own (PyTorch has no conv-relu6 / conv-hardswish module): a conv and one
    // activation, for pattern entries with activation alternatives (issue 21).
    if (d == 2 && type == "nni.ConvAct2d") {
      return Children{conv, {"nn.ReLU", "nn.ReLU6", "nn.Hardswish"}};
    }
    if (d == 2 && type == "nni.ConvAddReLU2d") return Children{conv, relu};
    // Their quantization-aware-training forms keep the batch norm, which trains
    // (fuselage.fusers with is_qat; fuselage.nn.qat folds it when converted).
    if (d == 2 && type == "nni.ConvBnAdd2d") return Children{conv, bn};
    if (d == 2 && type == "nni.ConvBnAddReLU2d") return Children{conv, bn, relu};
  }
  const std::vector<std::string> linear = {"nn.Linear", "nnqr.Linear"};
  if (type == "nni.LinearReLU") return Children{linear, relu};
  if (type == "nni.LinearBn1d") return Children{linear, {"nn.BatchNorm1d"}};
  return {};
}

}  // namespace

namespace {

std::string ChildrenText(const ModuleSchema& schema) {
  std::vector<std::string> parts;
  for (const auto& allowed : schema.children) parts.push_back(absl::StrJoin(allowed, " | "));
  return absl::StrJoin(parts, ", ");
}

absl::Status CheckFusedChildren(const Module& module, const ModuleSchema& schema,
                                absl::string_view where) {
  if (schema.children.empty()) return absl::OkStatus();
  const auto& children = module.children();
  if (children.size() != schema.children.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": has ", children.size(), " children; a ", schema.type, " holds ",
        schema.children.size(), " (", ChildrenText(schema), ")"));
  }
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& [name, child] = children[i];
    const std::vector<std::string>& allowed = schema.children[i];
    if (name != absl::StrCat(i)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": child ", i, " is named '", name,
                                                     "'; expected '", i, "'"));
    }
    if (std::find(allowed.begin(), allowed.end(), child->type().name()) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": child '", name, "' is a ", child->type().name(), "; expected ",
          absl::StrJoin(allowed, " or ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool CarriesSteps(const Module& module) {
  return module.FindAttribute(kStepsAttribute) != nullptr &&
         module.FindAttribute(kOutputsAttribute) != nullptr;
}

std::vector<int> ObservedStepsOf(const Module& module) {
  std::vector<int> steps;
  if (!CarriesSteps(module)) return steps;
  for (const auto& [name, value] : module.attributes()) {
    const absl::string_view text = name;
    constexpr absl::string_view kPrefix = "step_", kSuffix = "_observer";
    if (!absl::StartsWith(text, kPrefix) || !absl::EndsWith(text, kSuffix)) continue;
    int step = 0;
    if (absl::SimpleAtoi(text.substr(kPrefix.size(), text.size() - kPrefix.size() - kSuffix.size()),
                         &step) &&
        step >= 0) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Argument CompositionSteps(const ModuleComposition& composition) {
  const auto tagged = [](const char* tag, int index) {
    return Argument::Tuple({Argument::String(tag), Argument::Int(index)});
  };
  std::vector<Argument> steps;
  steps.reserve(composition.steps.size());
  for (const ModuleComposition::Step& step : composition.steps) {
    std::vector<Argument> refs;
    for (const ModuleComposition::Value& v : step.inputs) {
      refs.push_back(tagged(v.source == ModuleComposition::Value::Source::kArg ? "input" : "step",
                            v.index));
    }
    const bool child = step.child >= 0;
    steps.push_back(Argument::Tuple(
        {Argument::String(child ? "call_module" : "call_function"),
         Argument::String(child ? std::to_string(step.child) : step.function),
         Argument::List(std::move(refs)), Argument::List({})}));
  }
  return Argument::List(std::move(steps));
}

Argument CompositionOutputs(const ModuleComposition& composition) {
  return Argument::List({Argument::Int(static_cast<int64_t>(composition.steps.size()) - 1)});
}

namespace {

// A module of a declared type carries the steps of its declaration: one that differs
// (a model fused under another declaration of the same name) would run something other
// than what the loaded config declares.
absl::Status CheckStepsAgainstDeclaration(const Module& module, const ModuleSchema& schema,
                                          absl::string_view where) {
  const Argument* steps = module.FindAttribute(kStepsAttribute);
  const Argument* outputs = module.FindAttribute(kOutputsAttribute);
  const std::string declared =
      schema.declared_in.empty() ? std::string() : absl::StrCat(" in '", schema.declared_in, "'");
  if (steps == nullptr || outputs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a module of a declared type carries its steps (attributes \"steps\" and "
        "\"outputs\"), written at fusion; this one has none: fuse the model again"));
  }
  if (!(*steps == schema.composition->carried_steps) ||
      !(*outputs == schema.composition->carried_outputs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": its steps differ from the declaration of '", schema.type, "'", declared,
        ": the model was fused under another declaration of this type"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModuleAgainstSchema(const Module& module, const ModuleSchema& schema,
                                      absl::string_view where) {
  if (schema.composition != nullptr) {
    RETURN_IF_ERROR(CheckStepsAgainstDeclaration(module, schema, where));
  }
  // A fused module's kernel runs the parts it knows (ConvAddReLU2d: child "0" and its own
  // relu), so any other part would be skipped silently: a batch norm as a second child
  // would simply not run.
  RETURN_IF_ERROR(CheckFusedChildren(module, schema, where));
  if (!schema.check) return absl::OkStatus();
  const absl::Status status = schema.check(module);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", status.message()));
}

ModuleSchemaRegistry& ModuleSchemaRegistry::Global() {
  static ModuleSchemaRegistry* registry = [] {
    auto* r = new ModuleSchemaRegistry();
    FUSELAGE_CHECK(RegisterBuiltinModuleSchemas(*r).ok());
    return r;
  }();
  return *registry;
}

absl::Status ModuleSchemaRegistry::Register(ModuleSchema schema) {
  if (schema.type.empty()) return absl::InvalidArgumentError("module schema: empty type");
  if (schema.min_inputs < 0 ||
      (schema.max_inputs != ModuleSchema::kAnyNumber && schema.max_inputs < schema.min_inputs)) {
    return absl::InvalidArgumentError(absl::StrCat("module schema '", schema.type,
                                                   "': bad input count range [",
                                                   schema.min_inputs, ", ", schema.max_inputs, "]"));
  }
  const Symbol type = Symbol::Intern(schema.type);
  absl::MutexLock lock(&mu_);
  auto it = schemas_.find(type);
  if (it != schemas_.end()) {
    const ModuleSchema& old = *it->second;
    const bool same_composition =
        old.composition == nullptr || schema.composition == nullptr
            ? old.composition == schema.composition
            : *old.composition == *schema.composition;
    if (old.min_inputs == schema.min_inputs && old.max_inputs == schema.max_inputs &&
        old.required_tensors == schema.required_tensors && old.children == schema.children &&
        same_composition) {
      return absl::OkStatus();
    }
    auto origin = [](const ModuleSchema& s) {
      return s.declared_in.empty() ? std::string("built in")
                                   : absl::StrCat("declared in '", s.declared_in, "'");
    };
    return absl::AlreadyExistsError(absl::StrCat(
        "module type '", schema.type, "' is already registered differently (", origin(old),
        "; this one ", origin(schema), ")"));
  }
  schemas_.emplace(type, std::make_unique<ModuleSchema>(std::move(schema)));
  return absl::OkStatus();
}

const ModuleSchema* ModuleSchemaRegistry::Find(Symbol type) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = schemas_.find(type);
    if (it != schemas_.end()) return it->second.get();
  }
  return parent_ == nullptr ? nullptr : parent_->Find(type);
}

absl::Status RegisterBuiltinModuleSchemas(ModuleSchemaRegistry& registry) {
  constexpr int kAny = ModuleSchema::kAnyNumber;
  const std::vector<std::string> kWeight = {"weight"};
  const std::vector<std::string> kNone;
  auto add = [&](std::string type, int min_in, int max_in,
                 const std::vector<std::string>& tensors) {
    ModuleSchema schema;
    schema.type = type;
    schema.min_inputs = min_in;
    schema.max_inputs = max_in;
    schema.required_tensors = tensors;
    schema.children = BuiltinChildren(type);
    schema.check = BuiltinFieldCheck(type);
    return registry.Register(std::move(schema));
  };
  // Containers and the root; fuselage.FusedSubgraph is a multi-output pattern's fused
  // module (patterns/fusion_rule.h), any number of inputs and children.
  for (const char* t : {"GraphModule", "nn.Module", "nn.Sequential", "nn.ModuleList",
                        "nn.ModuleDict", "fuselage.FusedSubgraph"}) {
    RETURN_IF_ERROR(add(t, 0, kAny, kNone));
  }
  // Float modules with weights, and their intrinsic fused forms (one input).
  for (const char* t :
       {"nn.Conv1d", "nn.Conv2d", "nn.Conv3d", "nn.ConvTranspose1d", "nn.ConvTranspose2d",
        "nn.ConvTranspose3d", "nn.Linear", "nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d",
        "nnqr.Conv1d", "nnqr.Conv2d", "nnqr.Conv3d", "nnqr.Linear",
        "nnqr.ConvTranspose1d", "nnqr.ConvTranspose2d", "nnqr.ConvTranspose3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  // Fused float modules of torch.ao.nn.intrinsic hold their parts as children "0", "1",
  // ... (NAMING.md) and no tensors of their own, so they require none.
  for (const char* t :
       {"nni.ConvReLU1d", "nni.ConvReLU2d", "nni.ConvReLU3d", "nni.LinearReLU", "nni.ConvBn1d",
        "nni.ConvBn2d", "nni.ConvBn3d", "nni.ConvBnReLU1d", "nni.ConvBnReLU2d",
        "nni.ConvBnReLU3d", "nni.LinearBn1d", "nni.BNReLU2d", "nni.BNReLU3d",
        "nni.ConvAct2d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  // Two inputs: the fused conv-add(-relu) modules take the residual as a second input.
  for (const char* t :
       {"nni.ConvAdd2d", "nni.ConvAddReLU2d", "nni.ConvBnAdd2d", "nni.ConvBnAddReLU2d"}) {
    RETURN_IF_ERROR(add(t, 2, 2, kNone));
  }
  // Quantized (native) modules keep packed parameters as tensors too.
  for (const char* t : {"nnq.Conv1d", "nnq.Conv2d", "nnq.Conv3d", "nnq.Linear", "nnqd.Linear",
                        "nniqd.LinearReLU",
                        "nnq.ConvTranspose1d", "nnq.ConvTranspose2d", "nnq.ConvTranspose3d",
                        "nniq.ConvReLU1d", "nniq.ConvReLU2d", "nniq.ConvReLU3d",
                        "nniq.LinearReLU", "nnq.BatchNorm2d", "nnq.BatchNorm3d",
                        "nniq.BNReLU2d", "nniq.BNReLU3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  for (const char* t : {"nniq.ConvAdd2d", "nniq.ConvAddReLU2d"}) {
    RETURN_IF_ERROR(add(t, 2, 2, kWeight));
  }
  // Parameter-free single-input modules.
  for (const char* t :
       {"nn.ReLU", "nn.ReLU6", "nn.Hardtanh", "nn.Hardswish", "nn.Hardsigmoid", "nn.Sigmoid",
        "nn.Tanh", "nn.SiLU", "nn.GELU", "nn.LeakyReLU", "nn.ELU", "nn.Softmax",
        "nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nn.AvgPool1d", "nn.AvgPool2d",
        "nn.AvgPool3d", "nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
        "nn.Flatten", "nn.Identity", "nn.Dropout", "nn.Dropout2d", "nnq.ReLU6",
        "nnq.Hardswish", "nnq.Quantize", "nnq.DeQuantize", "nnq.Sigmoid", "nnq.LeakyReLU",
        "nnq.ELU", "nnq.Dropout", "torch.ao.quantization.QuantStub",
        "torch.ao.quantization.DeQuantStub",
        // Observers and fake-quantize modules (quantize/ inserts them).
        "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
        "MovingAveragePerChannelMinMaxObserver", "HistogramObserver", "PlaceholderObserver",
        "FixedQParamsObserver", "FakeQuantize", "FixedQParamsFakeQuantize",
        "FusedMovingAvgObsFakeQuantize", "ReuseInputObserver", "NoopObserver",
        // Quantized modules without weights that PyTorch's convert_fx can emit.
        "nnq.MaxPool2d", "nnq.Softmax", "nnq.LayerNorm", "nnq.GroupNorm",
        "nnq.InstanceNorm1d", "nnq.InstanceNorm2d", "nnq.InstanceNorm3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  // The remaining module types PyTorch's backend configs name (norms, PReLU, embeddings,
  // recurrent cells and their reference forms), so configs naming them validate.
  for (const char* t : {"nn.LayerNorm", "nn.InstanceNorm1d", "nn.InstanceNorm2d",
                        "nn.InstanceNorm3d", "nn.GroupNorm"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  // Float modules the runtime runs for torchvision's newer models (resampling heads,
  // classifiers with log-softmax, adaptive max pooling), and the pixel shuffles PyTorch 2's
  // backend configs name.
  for (const char* t : {"nn.LogSoftmax", "nn.Upsample", "nn.UpsamplingNearest2d",
                        "nn.UpsamplingBilinear2d", "nn.AdaptiveMaxPool2d", "nn.PixelShuffle",
                        "nn.PixelUnshuffle"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  for (const char* t : {"nn.PReLU", "nn.Embedding", "nnqr.Embedding", "nnq.PReLU",
                        "nnq.Embedding"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  // EmbeddingBag(input, offsets=None, per_sample_weights=None).
  for (const char* t : {"nn.EmbeddingBag", "nnqr.EmbeddingBag", "nnq.EmbeddingBag"}) {
    RETURN_IF_ERROR(add(t, 1, 3, kWeight));
  }
  // Cells take (input, hx=None); LSTM takes (input, (h0, c0)=None).
  for (const char* t : {"nn.GRUCell", "nn.LSTMCell", "nn.RNNCell", "nnqr.GRUCell",
                        "nnqr.LSTMCell", "nnqr.RNNCell"}) {
    RETURN_IF_ERROR(add(t, 1, 2, {"weight_ih", "weight_hh"}));
  }
  for (const char* t : {"nn.LSTM", "nnqr.LSTM", "nn.GRU", "nnqr.GRU", "nnqd.LSTM",
                        "nnqd.GRU"}) {
    RETURN_IF_ERROR(add(t, 1, 2, {"weight_ih_l0", "weight_hh_l0"}));
  }
  // Functional wrappers of quantized add / mul / cat take several inputs.
  for (const char* t : {"nnq.FloatFunctional", "nnq.FXFloatFunctional", "nnq.QFunctional"}) {
    RETURN_IF_ERROR(add(t, 0, kAny, kNone));
  }
  return absl::OkStatus();
}

namespace {

// The namespace of a dotted type name ("nn.Conv2d" -> "nn"); "" if it has no dot.
absl::string_view NamespaceOf(absl::string_view type_name) {
  const size_t dot = type_name.find('.');
  return dot == absl::string_view::npos ? absl::string_view() : type_name.substr(0, dot);
}

}  // namespace

bool InBuiltinNamespace(absl::string_view type_name) {
  const absl::string_view space = NamespaceOf(type_name);
  for (absl::string_view builtin : {"nn", "nni", "nnq", "nniq", "nnqr", "torch", "operator",
                                    "builtins", "math", "F"}) {
    if (space == builtin) return true;
  }
  return false;
}

bool IsQuantizedModuleType(absl::string_view type_name) {
  const absl::string_view space = NamespaceOf(type_name);
  return space == "nnq" || space == "nniq" || space == "nnqr";
}

}  // namespace fuselage
