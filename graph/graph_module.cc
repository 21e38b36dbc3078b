#include "graph/graph_module.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// Splits "a.b.c" into ("a.b", "c").
std::pair<absl::string_view, absl::string_view> SplitLast(absl::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == absl::string_view::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

absl::Status VerifyModuleTree(const Module& module, const std::string& path,
                              const ModuleSchemaRegistry& schemas, int depth) {
  const std::string where = path.empty() ? std::string("root module") : absl::StrCat("module '", path, "'");
  if (depth > 64) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": module tree deeper than 64"));
  }
  const ModuleSchema* schema = schemas.Find(module.type());
  if (schema == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": unknown module type '", module.type().name(),
        "'; register its schema in ModuleSchemaRegistry"));
  }
  for (const std::string& tensor : schema->required_tensors) {
    if (module.FindTensor(tensor) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, " (", module.type().name(),
                                                     "): missing required tensor '", tensor, "'"));
    }
  }
  for (const auto& [name, child] : module.children()) {
    RETURN_IF_ERROR(VerifyModuleTree(*child, path.empty() ? name : absl::StrCat(path, ".", name),
                                     schemas, depth + 1));
  }
  return absl::OkStatus();
}

}  // namespace

GraphModule::GraphModule()
    : graph_(std::make_unique<Graph>()), root_(std::make_unique<Module>("GraphModule")) {}

Module* GraphModule::FindModule(absl::string_view path) const {
  Module* module = root_.get();
  if (path.empty()) return module;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    module = module->FindChild(part);
    if (module == nullptr) return nullptr;
  }
  return module;
}

Symbol GraphModule::ResolveModuleType(const Node* node) const {
  if (node->op() != OpKind::kCallModule || node->target().empty()) return Symbol();
  const Module* module = FindModule(node->target().name());
  return module == nullptr ? Symbol() : module->type();
}

void GraphModule::ResolveModuleTypes() const {
  absl::MutexLock lock(&resolve_mu_);
  // Read before resolving: an edit during the walk (a data race the API does not allow
  // anyway) then leaves the cache marked stale rather than wrongly current.
  const uint64_t generation = ModuleBindingGeneration();
  if (resolved_generation_.load(std::memory_order_relaxed) == generation) return;
  for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kCallModule) n->set_cached_module_type(ResolveModuleType(n));
  }
  resolved_generation_.store(generation, std::memory_order_release);
}

absl::StatusOr<Module*> GraphModule::GetModule(absl::string_view path) const {
  Module* module = root_.get();
  if (path.empty()) return module;
  std::string walked;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    Module* child = module->FindChild(part);
    if (child == nullptr) {
      return absl::NotFoundError(absl::StrCat("no module '", part, "' under '",
                                              walked.empty() ? "<root>" : walked,
                                              "' (resolving '", path, "')"));
    }
    absl::StrAppend(&walked, walked.empty() ? "" : ".", part);
    module = child;
  }
  return module;
}

const Tensor* GraphModule::FindTensor(absl::string_view path) const {
  auto [parent, name] = SplitLast(path);
  const Module* module = FindModule(parent);
  return module == nullptr ? nullptr : module->FindTensor(name);
}

absl::Status GraphModule::SetModule(absl::string_view path, std::unique_ptr<Module> module) {
  if (path.empty() || module == nullptr) {
    return absl::InvalidArgumentError("SetModule: empty path or null module");
  }
  Module* parent = root_.get();
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("SetModule: bad path '", path, "'"));
    }
    Module* child = parent->FindChild(parts[i]);
    if (child == nullptr) child = parent->SetChild(parts[i], std::make_unique<Module>("nn.Module"));
    parent = child;
  }
  if (parts.back().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("SetModule: bad path '", path, "'"));
  }
  parent->SetChild(parts.back(), std::move(module));
  return absl::OkStatus();
}

absl::Status GraphModule::RemoveModule(absl::string_view path) {
  const Symbol target = Symbol::Lookup(path);
  for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kCallModule && n->target() == target) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot remove module '", path, "': node '", n->name(), "' still calls it"));
    }
  }
  auto [parent_path, name] = SplitLast(path);
  Module* parent = FindModule(parent_path);
  if (parent == nullptr || parent->RemoveChild(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat("no module '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status GraphModule::RemoveModules(const std::vector<std::string>& paths) {
  absl::flat_hash_set<Symbol> targets;
  // Removed modules that have children: a node calling one of those children calls a
  // module this removes too. (The fusion pass removes leaves only, so it never pays for
  // the prefix walk below.)
  absl::flat_hash_set<absl::string_view> removed_parents;
  for (const std::string& path : paths) {
    const Module* module = path.empty() ? nullptr : FindModule(path);
    if (module == nullptr) {
      return absl::NotFoundError(absl::StrCat("no module '", path, "'"));
    }
    const Symbol target = Symbol::Lookup(path);
    if (!target.empty()) targets.insert(target);
    if (!module->children().empty()) removed_parents.insert(path);
  }
  const auto removed_with_a_parent = [&removed_parents](absl::string_view target) {
    for (size_t dot = target.find('.'); dot != absl::string_view::npos;
         dot = target.find('.', dot + 1)) {
      if (removed_parents.contains(target.substr(0, dot))) return true;
    }
    return false;
  };
  if (!targets.empty() || !removed_parents.empty()) {
    for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
      if (n->op() != OpKind::kCallModule) continue;
      if (targets.contains(n->target()) ||
          (!removed_parents.empty() && removed_with_a_parent(n->target().name()))) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot remove module '", n->target().name(), "': node '", n->name(),
                         "' still calls it"));
      }
    }
  }
  // Group the names by parent path; remove from the deepest parents first, so no parent
  // is freed (with its subtree) before its own children are edited.
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> by_parent;
  for (const std::string& path : paths) {
    auto [parent, name] = SplitLast(path);
    by_parent[std::string(parent)].insert(std::string(name));
  }
  std::vector<std::string> parents;
  parents.reserve(by_parent.size());
  for (const auto& entry : by_parent) parents.push_back(entry.first);
  const auto depth = [](const std::string& path) {
    return path.empty() ? 0 : 1 + std::count(path.begin(), path.end(), '.');
  };
  std::sort(parents.begin(), parents.end(), [&](const std::string& a, const std::string& b) {
    return depth(a) != depth(b) ? depth(a) > depth(b) : a < b;
  });
  for (const std::string& parent_path : parents) {
    // Absent if an enclosing path was removed already: then so are these.
    if (Module* parent = FindModule(parent_path)) parent->RemoveChildren(by_parent[parent_path]);
  }
  return absl::OkStatus();
}

absl::Status GraphModule::SetTensor(absl::string_view path, Tensor tensor) {
  auto [parent_path, name] = SplitLast(path);
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("SetTensor: bad path '", path, "'"));
  ASSIGN_OR_RETURN(Module * parent, GetModule(parent_path));
  parent->SetTensor(name, std::move(tensor));
  return absl::OkStatus();
}

std::string GraphModule::UniqueModulePath(absl::string_view hint) const {
  std::string candidate(hint);
  for (char& c : candidate) {
    if (c != '.' && !std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  if (candidate.empty()) candidate = "_module";
  if (FindModule(candidate) == nullptr && FindTensor(candidate) == nullptr) return candidate;
  int64_t& next = next_path_suffix_[candidate];
  for (next = std::max<int64_t>(next, 1);; ++next) {
    std::string path = absl::StrCat(candidate, "_", next);
    if (FindModule(path) == nullptr && FindTensor(path) == nullptr) return path;
  }
}

absl::Status GraphModule::Verify(const ModuleSchemaRegistry& schemas) const {
  RETURN_IF_ERROR(graph_->Verify());
  RETURN_IF_ERROR(VerifyModuleTree(*root_, "", schemas, 0));
  // The module-type cache, if current, must agree with the tree (checked below, where each
  // call_module node's module is looked up anyway).
  const bool types_cached =
      resolved_generation_.load(std::memory_order_acquire) == ModuleBindingGeneration();
  for (const Node* n = graph_->first(); n != nullptr; n = n->next()) {
    const absl::string_view target = n->target().name();
    if (n->op() == OpKind::kCallModule) {
      const Module* module = FindModule(target);
      if (module == nullptr || target.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n->name(), "': call_module target '", target, "' is not a module"));
      }
      if (types_cached && n->cached_module_type() != module->type()) {
        return absl::InternalError(absl::StrCat(
            "node '", n->name(), "': cached module type '", n->cached_module_type().name(),
            "' but module '", target, "' is '", module->type().name(),
            "' (stale module-type cache: an edit did not call InvalidateModuleBindings)"));
      }
      const ModuleSchema* schema = schemas.Find(module->type());
      const int num_args = static_cast<int>(n->num_args());
      if (num_args < schema->min_inputs ||
          (schema->max_inputs != ModuleSchema::kAnyNumber && num_args > schema->max_inputs)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n->name(), "': ", module->type().name(), " takes ",
            schema->min_inputs == schema->max_inputs
                ? absl::StrCat(schema->min_inputs)
                : absl::StrCat(schema->min_inputs, " to ",
                               schema->max_inputs == ModuleSchema::kAnyNumber
                                   ? std::string("any number of")
                                   : absl::StrCat(schema->max_inputs)),
            " positional args; got ", num_args));
      }
    } else if (n->op() == OpKind::kGetAttr) {
      if (FindTensor(target) == nullptr && (target.empty() || FindModule(target) == nullptr)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n->name(), "': get_attr target '", target,
            "' is neither a tensor nor a module"));
      }
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<GraphModule> GraphModule::Clone() const {
  auto copy = std::make_unique<GraphModule>();
  copy->root_ = root_->Clone();
  absl::flat_hash_map<const Node*, Node*> mapping;
  GraphBuilder builder(copy->graph_.get());
  for (const Node* n = graph_->first(); n != nullptr; n = n->next()) {
    Node* c = *builder.AddNode(n->op(), n->target(), n->name());
    mapping[n] = c;
  }
  auto map = [&](Node* n) { return mapping.at(n); };
  for (const Node* n = graph_->first(); n != nullptr; n = n->next()) {
    std::vector<Argument> args;
    for (const Argument& a : n->args()) args.push_back(a.MapNodes(map));
    Kwargs kwargs;
    for (const Kwarg& kw : n->kwargs()) kwargs.emplace_back(kw.first, kw.second.MapNodes(map));
    Node* c = mapping.at(n);
    builder.SetInputs(c, std::move(args), std::move(kwargs));
    builder.SetMeta(c, n->meta());
  }
  return copy;
}

}  // namespace fuselage
