#include "quantize/convert.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "quantize/observers.h"

namespace fuselage {
namespace {

// The quantize node one observer node becomes.
struct ObserverReplacement {
  Node* observer = nullptr;
  double scale = 1.0;
  int64_t zero_point = 0;
  DType dtype = DType::kQUInt8;
};

absl::StatusOr<ObserverReplacement> PlanObserverReplacement(Node* n, const Observer& observer) {
  const ObserverSpec& spec = observer.spec();
  // Built only on the error paths: this runs once per observer node.
  auto where = [n] {
    return absl::StrCat("convert: observer node '", n->name(), "' (", n->target().name(), ")");
  };
  if (IsPerChannel(spec.qscheme)) {
    return absl::UnimplementedError(
        absl::StrCat(where(), ": per-channel activation quantization is not supported"));
  }
  if (!IsQuantized(spec.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": dtype ", DTypeName(spec.dtype),
                                                   " is not a quantized dtype"));
  }
  ASSIGN_OR_RETURN(ObserverQParams qparams, observer.CalculateQParams());
  if (qparams.scales.size() != 1 || qparams.zero_points.size() != 1) {
    return absl::InternalError(absl::StrCat(where(), ": expected one scale and zero point"));
  }
  return ObserverReplacement{n, qparams.scales[0], qparams.zero_points[0], spec.dtype};
}

// The targets of the nodes an observer becomes, interned once per pass.
struct ReplacementTargets {
  Symbol quantize = Symbol::Intern("torch.quantize_per_tensor");
  Symbol dequantize = Symbol::Intern("dequantize");
};

absl::Status ReplaceObserver(Graph& g, const ReplacementTargets& targets,
                             const ObserverReplacement& r) {
  Node* input = r.observer->arg(0).as_node();
  NodeSpec quantize;
  quantize.op = OpKind::kCallFunction;
  quantize.target = targets.quantize;
  quantize.args = {input, Argument::Float(r.scale), Argument::Int(r.zero_point),
                   Argument::Dtype(r.dtype)};
  ASSIGN_OR_RETURN(Node * q, g.InsertAfter(r.observer, std::move(quantize)));
  NodeSpec dequantize;
  dequantize.op = OpKind::kCallMethod;
  dequantize.target = targets.dequantize;
  dequantize.args = {q};
  ASSIGN_OR_RETURN(Node * dq, g.InsertAfter(q, std::move(dequantize)));
  RETURN_IF_ERROR(g.ReplaceAllUsesWith(r.observer, dq).status());
  return g.Erase(r.observer);
}

// A copy of `m` whose child `name` is `child` (Clone() then SetChild() would deep-copy the
// child only to drop it).
std::unique_ptr<Module> CloneWithChild(const Module& m, absl::string_view name,
                                       std::unique_ptr<Module> child) {
  auto copy = std::make_unique<Module>(m.type());
  for (const auto& [tensor_name, tensor] : m.tensors()) copy->SetTensor(tensor_name, tensor);
  for (const auto& [attribute, value] : m.attributes()) copy->SetAttribute(attribute, value);
  for (const auto& [child_name, original] : m.children()) {
    copy->SetChild(child_name, child_name == name ? std::move(child) : original->Clone());
  }
  return copy;
}

std::pair<std::string, std::string> SplitModulePath(absl::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == absl::string_view::npos) return {"", std::string(path)};
  return {std::string(path.substr(0, dot)), std::string(path.substr(dot + 1))};
}

}  // namespace

std::string ConvertReport::ToString() const {
  return absl::StrCat(kConvertPassName, ": ", observers_replaced,
                      " observers replaced by quantize/dequantize, ", reference_modules,
                      " reference modules\n");
}

absl::StatusOr<std::unique_ptr<Module>> MakeReferenceModule(const Module& float_module,
                                                            Symbol reference_type,
                                                            const ObserverSpec& weight_observer) {
  // Built only on the error paths: this runs once per weighted module.
  auto where = [&] {
    return absl::StrCat("convert: ", float_module.type().name(), " → ", reference_type.name());
  };
  const Tensor* weight = float_module.FindTensor("weight");
  if (weight == nullptr || weight->dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": the module has no float32 tensor 'weight'"));
  }
  auto observer_or = MakeObserver(weight_observer);
  if (!observer_or.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": weight observer ",
                                                   weight_observer.ToString(), ": ",
                                                   observer_or.status().message()));
  }
  Observer& observer = **observer_or;
  absl::Status updated = observer.Update(*weight);
  if (!updated.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": observing the weight: ", updated.message()));
  }
  ASSIGN_OR_RETURN(ObserverQParams qparams, observer.CalculateQParams());
  const bool per_channel = IsPerChannel(weight_observer.qscheme);
  auto ref = float_module.Clone();
  ref->set_type(reference_type);
  std::vector<int64_t> shape;
  if (per_channel) shape = {static_cast<int64_t>(qparams.scales.size())};
  ref->SetTensor("weight_scale", Tensor::FromFloats(shape, qparams.scales));
  ref->SetTensor("weight_zero_point", Tensor::FromInt64s(shape, qparams.zero_points));
  ref->SetTensor("weight_axis", Tensor::FromInt64s({}, {weight_observer.ch_axis}));
  // PyTorch's reference modules record symmetric schemes as affine (get_qparam_dict).
  ref->SetAttribute("weight_qscheme", Argument::String(per_channel ? "torch.per_channel_affine"
                                                                   : "torch.per_tensor_affine"));
  ref->SetAttribute("weight_dtype", Argument::Dtype(weight_observer.dtype));
  return ref;
}

absl::StatusOr<ConvertReport> ConvertToReference(GraphModule& gm,
                                                 const PreparedModel& prepared) {
  Graph& g = gm.graph();
  // 1. Everything computed, nothing touched.
  std::vector<ObserverReplacement> replacements;
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    auto it = prepared.observers.find(n->target().name());
    if (it == prepared.observers.end()) continue;
    ASSIGN_OR_RETURN(ObserverReplacement r, PlanObserverReplacement(n, *it->second));
    replacements.push_back(r);
  }
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> reference_modules;
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    auto it = prepared.quantized_ops.find(n->name());
    if (it == prepared.quantized_ops.end() || it->second.root_module.empty()) continue;
    const QuantizedOpPlan& plan = it->second;
    const std::string path(n->target().name());
    const Module* m = n->op() == OpKind::kCallModule ? gm.FindModule(path) : nullptr;
    if (m == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "' was prepared as a weighted module call; it now "
          "calls no module"));
    }
    const bool fused = m->type() != plan.root_module;
    const Module* weighted = fused ? m->FindChild("0") : m;
    if (weighted == nullptr || weighted->type() != plan.root_module) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "': module '", path, "' (", m->type().name(),
          ") has no ", plan.root_module.name(), " as itself or child \"0\""));
    }
    auto ref_or = MakeReferenceModule(*weighted, plan.reference_module, plan.weight_observer);
    if (!ref_or.ok()) {
      return absl::Status(ref_or.status().code(),
                          absl::StrCat("node '", n->name(), "': ", ref_or.status().message()));
    }
    std::unique_ptr<Module> replacement = std::move(*ref_or);
    if (fused) replacement = CloneWithChild(*m, "0", std::move(replacement));
    reference_modules.emplace_back(path, std::move(replacement));
  }

  // 2. Mutation; it cannot fail on a graph the checks above passed.
  ConvertReport report;
  const ReplacementTargets targets;
  for (const ObserverReplacement& r : replacements) {
    absl::Status st = ReplaceObserver(g, targets, r);
    if (!st.ok()) return absl::InternalError(absl::StrCat("convert: ", st.message()));
    ++report.observers_replaced;
  }
  for (auto& [path, module] : reference_modules) {
    RETURN_IF_ERROR(gm.SetModule(path, std::move(module)));
    ++report.reference_modules;
  }
  // The observer modules go with their container, in one step (removing thousands of
  // children one by one would be quadratic), and so do the plan modules of a prepared
  // model read from a file (quantize/prepared_model.h).
  if (!prepared.observer_container.empty()) {
    const Module* container = gm.FindModule(prepared.observer_container);
    bool only_observers = container != nullptr;
    if (container != nullptr) {
      std::string path = absl::StrCat(prepared.observer_container, ".");
      const size_t prefix = path.size();
      for (const auto& [name, child] : container->children()) {
        path.resize(prefix);
        path += name;
        const bool plan_module = absl::StartsWith(name, kWeightPlanModulePrefix) &&
                                 IsObserverModuleType(child->type());
        only_observers = only_observers && (plan_module || prepared.observers.contains(path));
      }
    }
    if (only_observers) {
      auto [parent_path, name] = SplitModulePath(prepared.observer_container);
      Module* parent = gm.FindModule(parent_path);
      if (parent != nullptr) parent->RemoveChild(name);
    }
  }
  return report;
}

}  // namespace fuselage
