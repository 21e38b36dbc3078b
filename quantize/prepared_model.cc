#include "quantize/prepared_model.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "quantize/observer_module.h"

namespace fuselage {
namespace {

constexpr char kPlanNode[] = "node";
constexpr char kPlanRootModule[] = "root_module";
constexpr char kPlanReferenceModule[] = "reference_module";

absl::string_view ParentPath(absl::string_view path) {
  const size_t dot = path.rfind('.');
  return dot == absl::string_view::npos ? absl::string_view() : path.substr(0, dot);
}

absl::StatusOr<std::string> StringAttribute(const Module& m, absl::string_view path,
                                            absl::string_view name) {
  const Argument* a = m.FindAttribute(name);
  if (a == nullptr || !a->is_string() || a->as_string().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan module '", path, "': attribute '", name, "' is ",
        a == nullptr ? std::string("missing") : a->ToString(), "; expected a non-empty string"));
  }
  return std::string(a->as_string());
}

// The plan one `weight_post_process_<k>` module records.
absl::StatusOr<std::pair<std::string, QuantizedOpPlan>> ReadPlan(const Module& m,
                                                                 absl::string_view path) {
  ASSIGN_OR_RETURN(std::string node, StringAttribute(m, path, kPlanNode));
  ASSIGN_OR_RETURN(std::string root, StringAttribute(m, path, kPlanRootModule));
  ASSIGN_OR_RETURN(std::string reference, StringAttribute(m, path, kPlanReferenceModule));
  auto spec = ObserverSpecFromModule(m);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan module '", path, "': ", spec.status().message()));
  }
  QuantizedOpPlan plan;
  plan.root_module = Symbol::Intern(root);
  plan.reference_module = Symbol::Intern(reference);
  plan.weight_observer = std::make_shared<const ObserverSpec>(*std::move(spec));
  return std::make_pair(std::move(node), std::move(plan));
}

}  // namespace

absl::Status StorePreparedModel(const PreparedModel& prepared, GraphModule& gm) {
  // 1. Everything checked and built; nothing touched.
  std::vector<std::pair<Module*, const Observer*>> observer_modules;
  for (const auto& [path, observer] : prepared.observers) {
    Module* m = gm.FindModule(path);
    if (m == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("store prepared model: observer module '", path.name(), "' is missing"));
    }
    observer_modules.emplace_back(m, observer.get());
  }
  std::vector<std::unique_ptr<Module>> plan_modules;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    auto it = prepared.quantized_ops.find(n->name());
    if (it == prepared.quantized_ops.end() || it->second.root_module.empty()) continue;
    const QuantizedOpPlan& plan = it->second;
    if (plan.weight_observer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "store prepared model: node '", n->name(), "': its plan names the weighted module ",
          plan.root_module.name(), " but no weight observer"));
    }
    auto module = MakeObserverModule(*plan.weight_observer);
    if (!module.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("store prepared model: node '", n->name(),
                                                     "': weight observer: ",
                                                     module.status().message()));
    }
    (*module)->SetAttribute(kPlanNode, Argument::String(n->name()));
    (*module)->SetAttribute(kPlanRootModule, Argument::String(plan.root_module.name()));
    (*module)->SetAttribute(kPlanReferenceModule,
                            Argument::String(plan.reference_module.name()));
    plan_modules.push_back(std::move(*module));
  }
  size_t weighted_plans = 0;
  for (const auto& [name, plan] : prepared.quantized_ops) {
    weighted_plans += plan.root_module.empty() ? 0 : 1;
  }
  if (plan_modules.size() != weighted_plans) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store prepared model: ", weighted_plans - plan_modules.size(),
        " quantized weighted ops name nodes the graph does not have"));
  }
  if (!plan_modules.empty() && (prepared.observer_container.empty() ||
                                gm.FindModule(prepared.observer_container) == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store prepared model: the observer container '", prepared.observer_container,
        "' is missing"));
  }

  // 2. Mutation.
  for (auto& [module, observer] : observer_modules) StoreObserverState(*observer, *module);
  for (size_t k = 0; k < plan_modules.size(); ++k) {
    RETURN_IF_ERROR(gm.SetModule(
        absl::StrCat(prepared.observer_container, ".", kWeightPlanModulePrefix, k),
        std::move(plan_modules[k])));
  }
  return absl::OkStatus();
}

namespace {

// The observers of a declared type's observed steps (quantize/prepare.h): no node calls
// them; the module `m` called by `n` names each by path (ObservedStepAttribute).
absl::Status ReadObservedStepObservers(const GraphModule& gm, const Node& n, const Module& m,
                                       PreparedModel* prepared,
                                       absl::flat_hash_set<absl::string_view>* parents) {
  for (int step : ObservedStepsOf(m)) {
    const Argument* path = m.FindAttribute(ObservedStepAttribute(step));
    if (path == nullptr || !path->is_string()) continue;
    const Symbol key = Symbol::Intern(path->as_string());
    if (prepared->observers.contains(key)) continue;
    const Module* observer_module = gm.FindModule(key);
    if (observer_module == nullptr || !IsObserverModuleType(observer_module->type())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "module '", n.target().name(), "' (node '", n.name(), "'): attribute '",
          ObservedStepAttribute(step), "' names '", path->as_string(),
          "', which is not an observer module"));
    }
    auto observer = ObserverFromModule(*observer_module);
    if (!observer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("observer module '", path->as_string(),
                                                     "' (step ", step, " of '",
                                                     n.target().name(), "'): ",
                                                     observer.status().message()));
    }
    prepared->observers.emplace(key, std::move(*observer));
    parents->insert(ParentPath(key.name()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedModel> PreparedModelFromGraph(const GraphModule& gm) {
  PreparedModel prepared;
  absl::flat_hash_set<absl::string_view> parents;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    const Module* m = gm.FindModule(n->target());
    if (m == nullptr) continue;
    if (!IsObserverModuleType(m->type())) {
      RETURN_IF_ERROR(ReadObservedStepObservers(gm, *n, *m, &prepared, &parents));
      continue;
    }
    ++prepared.report.observer_nodes;
    const absl::string_view path = n->target().name();
    if (prepared.observers.contains(n->target())) continue;
    auto observer = ObserverFromModule(*m);
    if (!observer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("observer module '", path, "' (node '",
                                                     n->name(), "'): ",
                                                     observer.status().message()));
    }
    prepared.observers.emplace(n->target(), std::move(*observer));
    parents.insert(ParentPath(path));
  }
  if (prepared.observers.empty()) {
    // Only weight-only ops (embeddings) quantized: no node calls an observer, and the
    // container (a child of the root) holds only the weight plans.
    for (const auto& [name, child] : gm.root().children()) {
      if (child->type().name() != "nn.Module" || child->children().empty()) continue;
      bool only_plans = true;
      for (const auto& [plan_name, plan] : child->children()) {
        only_plans = only_plans && absl::StartsWith(plan_name, kWeightPlanModulePrefix) &&
                     IsObserverModuleType(plan->type());
      }
      if (only_plans) {
        parents.insert(name);
        break;
      }
    }
  }
  if (prepared.observers.empty() && parents.empty()) {
    return absl::FailedPreconditionError(
        "not a prepared model: no node calls an observer module (MinMaxObserver, "
        "HistogramObserver, ...); prepare it first (`fuselage prepare`)");
  }
  prepared.report.observer_modules = static_cast<int>(prepared.observers.size());
  if (parents.size() == 1 && !parents.begin()->empty()) {
    const Module* container = gm.FindModule(*parents.begin());
    if (container != nullptr && container->type().name() == "nn.Module") {
      prepared.observer_container = std::string(*parents.begin());
    }
  }
  if (prepared.observer_container.empty()) return prepared;
  const Module* container = gm.FindModule(prepared.observer_container);
  for (const auto& [name, child] : container->children()) {
    if (!absl::StartsWith(name, kWeightPlanModulePrefix)) continue;
    const std::string path = absl::StrCat(prepared.observer_container, ".", name);
    ASSIGN_OR_RETURN(auto node_and_plan, ReadPlan(*child, path));
    if (gm.graph().FindNode(node_and_plan.first) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan module '", path, "' names node '", node_and_plan.first,
          "', which the graph does not have"));
    }
    prepared.quantized_ops.insert_or_assign(std::move(node_and_plan.first),
                                            std::move(node_and_plan.second));
  }
  return prepared;
}

}  // namespace fuselage
