#include "graph/graph_module.h"

#include <algorithm>
#include <cstdint>
#include <cstring>  // memchr; memrchr (GNU, declared by glibc's <string.h>)
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/base/attributes.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// The first '.' in `path` at or after `from`, or npos. (absl::string_view::find is out of
// line in Debian's Abseil, and this runs per path component of every module lookup.)
size_t FindDot(absl::string_view path, size_t from = 0) {
  if (from >= path.size()) return absl::string_view::npos;
  const void* dot = std::memchr(path.data() + from, '.', path.size() - from);
  return dot == nullptr ? absl::string_view::npos
                        : static_cast<size_t>(static_cast<const char*>(dot) - path.data());
}

// Asks for the memory of the node a few places later in the list, guessing that the
// graph's arena keeps nodes side by side in list order (mostly true: nodes are created
// in order and erased slots are reused by nodes created in their place). A walk of the
// list reaches each node through the previous one's link, a chain of loads the hardware
// prefetcher cannot run ahead of; where the guess is wrong this is one useless prefetch.
// Integer arithmetic: the address may lie outside the arena's block, which a prefetch of
// a never-dereferenced address tolerates. (The matcher's backward scan does the same.)
inline void PrefetchLaterNodes(const Node* node) {
  constexpr uintptr_t kNodesAhead = 6;
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(node) + kNodesAhead * sizeof(Node);
  for (uintptr_t line = 0; line < sizeof(Node); line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + line));
  }
}

// True if `path` has an empty component ("", ".a", "a.", "a..b").
bool HasEmptyComponent(absl::string_view path) {
  if (path.empty() || path.front() == '.' || path.back() == '.') return true;
  for (size_t i = 1; i < path.size(); ++i) {
    if (path[i] == '.' && path[i - 1] == '.') return true;
  }
  return false;
}

// Splits "a.b.c" into ("a.b", "c").
std::pair<absl::string_view, absl::string_view> SplitLast(absl::string_view path) {
  const void* dot = path.empty() ? nullptr : memrchr(path.data(), '.', path.size());
  if (dot == nullptr) return {"", path};
  const size_t at = static_cast<size_t>(static_cast<const char*>(dot) - path.data());
  return {path.substr(0, at), path.substr(at + 1)};
}

// A set of symbols asked about once per call_module node of a graph (RemoveModules' check
// that no node calls a removed path): a bitmap over the ids' range when the ids are close
// together (a model's module paths are interned together, so the removed ones are), a
// range check and a bit test per query where a hash set probe costs ~25 instructions and
// inserting each removed path ~50 more; a hash set if the ids are spread too far.
class SymbolSet {
 public:
  explicit SymbolSet(absl::Span<const Symbol> symbols) {
    uint32_t min_id = UINT32_MAX, max_id = 0;
    size_t count = 0;
    for (const Symbol symbol : symbols) {
      if (symbol.empty()) continue;
      min_id = std::min(min_id, symbol.id());
      max_id = std::max(max_id, symbol.id());
      ++count;
    }
    if (count == 0) return;
    empty_ = false;
    const size_t range = size_t{max_id} - min_id + 1;
    if (range <= 64 * count + 4096) {  // at most ~8 bytes per symbol + 512
      base_ = min_id;
      range_ = static_cast<uint32_t>(range);
      bits_.assign((range + 63) / 64, 0);
      for (const Symbol symbol : symbols) {
        if (symbol.empty()) continue;
        const uint32_t bit = symbol.id() - base_;
        bits_[bit / 64] |= uint64_t{1} << (bit % 64);
      }
      return;
    }
    spread_.reserve(count);
    for (const Symbol symbol : symbols) {
      if (!symbol.empty()) spread_.insert(symbol);
    }
  }

  bool empty() const { return empty_; }
  // Inlined into the walk of the graph (out of line it was a call per call_module node).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool contains(Symbol symbol) const {
    if (!bits_.empty()) {
      const uint32_t bit = symbol.id() - base_;  // wraps below the base: out of range
      return bit < range_ && (bits_[bit / 64] >> (bit % 64) & 1) != 0;
    }
    return !spread_.empty() && SpreadContains(symbol);
  }

 private:
  ABSL_ATTRIBUTE_NOINLINE bool SpreadContains(Symbol symbol) const {
    return spread_.contains(symbol);
  }

  bool empty_ = true;
  uint32_t base_ = 0;
  uint32_t range_ = 0;
  std::vector<uint64_t> bits_;
  absl::flat_hash_set<Symbol> spread_;
};

// The schema Verify checks `module` against: its type's, or, for a type no registry knows
// that carries its own steps (a declared type whose config this process has not loaded),
// fuselage.FusedSubgraph's: any inputs and children, run by the steps kernel.
const ModuleSchema* SchemaOf(const Module& module, const ModuleSchemaRegistry& schemas) {
  if (const ModuleSchema* schema = schemas.Find(module.type())) return schema;
  if (!CarriesSteps(module)) return nullptr;
  static const Symbol kSubgraph = Symbol::Intern("fuselage.FusedSubgraph");
  return schemas.Find(kSubgraph);
}

absl::Status VerifyModuleTree(const Module& module, const std::string& path,
                              const ModuleSchemaRegistry& schemas, int depth) {
  const std::string where = path.empty() ? std::string("root module") : absl::StrCat("module '", path, "'");
  if (depth > 64) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": module tree deeper than 64"));
  }
  const ModuleSchema* schema = SchemaOf(module, schemas);
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
  RETURN_IF_ERROR(CheckModuleAgainstSchema(
      module, *schema, absl::StrCat(where, " (", module.type().name(), ")")));
  for (const auto& [name, child] : module.children()) {
    RETURN_IF_ERROR(VerifyModuleTree(*child, path.empty() ? name : absl::StrCat(path, ".", name),
                                     schemas, depth + 1));
  }
  return absl::OkStatus();
}

}  // namespace

GraphModule::GraphModule()
    : graph_(std::make_unique<Graph>()), root_(std::make_unique<Module>("GraphModule")) {
  root_->SetModel(&graph_->module_bindings());
}

Module* GraphModule::FindModule(absl::string_view path) const {
  Module* module = root_.get();
  if (path.empty()) return module;
  // Component by component, without splitting the path into a container first: this is
  // called per node by every pass.
  while (true) {
    const size_t dot = FindDot(path);
    module = module->FindChild(path.substr(0, dot));
    if (module == nullptr || dot == absl::string_view::npos) return module;
    path.remove_prefix(dot + 1);
  }
}

Symbol GraphModule::ResolveModuleType(const Node* node) const {
  if (node->op() != OpKind::kCallModule || node->target().empty()) return Symbol();
  const Module* module = FindModule(node->target());
  return module == nullptr ? Symbol() : module->type();
}

void GraphModule::ResolveModuleTypes() const {
  std::lock_guard<std::mutex> lock(resolve_mu_);
  // Read before resolving: an edit during the walk (a data race the API does not allow
  // anyway) then leaves the caches marked stale rather than wrongly current.
  const uint64_t generation = bindings().binding();
  const uint64_t tree_generation = bindings().tree();
  if (resolved_generation_.load(std::memory_order_relaxed) == generation) return;
  // Stale, so no reader reads this table now (ModuleTypeOf checks the generation first).
  module_type_of_node_.assign(graph_->node_index_bound(), Symbol());
  // If only nodes changed since the path table was filled it is current, and readers may
  // be reading it: it is read (a path missing from it is walked) but not written.
  bool fill_table = paths_generation_.load(std::memory_order_relaxed) != tree_generation;
  if (!fill_table) {
    // One walk; every called path is read from the table (or, if new, walked).
    for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
      PrefetchLaterNodes(n);
      if (n->op() != OpKind::kCallModule) continue;
      const Module* module = n->target().empty() ? nullptr : FindModule(n->target());
      module_type_of_node_[n->index()] = module == nullptr ? Symbol() : module->type();
    }
    resolved_generation_.store(generation, std::memory_order_release);
    return;
  }
  // The table is filled from the call sites of one walk of the graph's list: the list is
  // a chain of dependent loads (a cache miss per node once the graph outgrows the caches),
  // the vector is read sequentially and its nodes are independent loads.
  std::vector<CallSite> calls;
  calls.reserve(graph_->size());  // pages past the call sites are never touched
  uint32_t min_id = UINT32_MAX, max_id = 0;
  for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
    PrefetchLaterNodes(n);
    if (n->op() != OpKind::kCallModule) continue;
    const Symbol target = n->target();
    if (target.empty()) {
      // Calls nothing (Verify reports it); "" is the root's path, not this node's module.
      module_type_of_node_[n->index()] = Symbol();
      continue;
    }
    min_id = std::min(min_id, target.id());
    max_id = std::max(max_id, target.id());
    calls.push_back({n, target.id()});
  }
  module_of_path_.clear();
  place_of_path_.clear();
  const size_t range = calls.empty() ? 0 : size_t{max_id} - min_id + 1;
  fill_table = !calls.empty() && range <= 4 * calls.size() + 1024;
  if (fill_table) {
    module_of_path_.assign(range, nullptr);
    module_of_path_.shrink_to_fit();  // a smaller table than the last keeps no slack
    place_of_path_.assign(range, PlaceOfPath());
    place_of_path_.shrink_to_fit();
    paths_base_ = min_id;
    FillPathTableByWalk(calls);
  }
  // Reading each module's type is a cache miss per call site at 10^5 modules; asking for
  // the module and the node a few call sites ahead overlaps them.
  constexpr size_t kCallsAhead = 8;
  for (size_t i = 0; i < calls.size(); ++i) {
    const CallSite& call = calls[i];
    if (fill_table && i + kCallsAhead < calls.size()) {
      const CallSite& ahead = calls[i + kCallsAhead];
      __builtin_prefetch(ahead.node, /*rw=*/1);
      if (const Module* module = module_of_path_[ahead.target_id - paths_base_]) {
        __builtin_prefetch(module);
      }
    }
    const Module* module;
    if (fill_table) {
      Module*& slot = module_of_path_[call.target_id - paths_base_];
      if (slot == nullptr) slot = FindModule(call.node->target().name());
      module = slot;
    } else {
      module = FindModule(call.node->target());
    }
    module_type_of_node_[call.node->index()] = module == nullptr ? Symbol() : module->type();
  }
  if (fill_table) paths_generation_.store(tree_generation, std::memory_order_release);
  resolved_generation_.store(generation, std::memory_order_release);
}

void GraphModule::FillPathTableByWalk(const std::vector<CallSite>& calls) const {
  const size_t range = module_of_path_.size();
  // Which slots some node calls, and how many distinct ones.
  std::vector<uint8_t> called(range, 0);
  size_t distinct = 0;
  for (const CallSite& call : calls) {
    const uint32_t slot = call.target_id - paths_base_;
    if (!called[slot]) {
      called[slot] = 1;
      ++distinct;
    }
  }
  // Depth first over the tree, the path of each module built on the one of its parent,
  // until every called path is found or the walk has looked at more modules than it may (a
  // tree mostly of modules no node calls); a called module's own children are not visited
  // (FX calls leaves and fused modules, not their parts). Whatever is not found here is
  // resolved by text, as before. A module's children are looked up in groups
  // (Symbol::LookupMany): one lookup at a time waited for a cache miss in the symbol table
  // per module (most of resnet50's first match, a third of this walk at 10^5 modules).
  size_t budget = 2 * distinct + 64;
  size_t found = 0;
  constexpr size_t kGroup = 16;
  // The paths of the modules on the stack live side by side in `frame_paths`, each frame's
  // after its parent's (a stack of text: popping a frame drops its path, the last one).
  struct Frame {
    Module* module;
    size_t next_child;
    size_t path_begin;  // in frame_paths
    size_t path_size;   // 0 for the root, whose children's paths are their names
  };
  std::string frame_paths;
  std::vector<Frame> stack = {{root_.get(), 0, 0, 0}};
  std::string text;  // a group's paths under a module other than the root, side by side
  absl::string_view paths[kGroup];
  Module* modules[kGroup];
  uint32_t positions[kGroup];  // in the frame's module's children
  Symbol symbols[kGroup];
  size_t to_walk[kGroup];  // group members whose children are walked next
  while (!stack.empty() && found < distinct && budget > 0) {
    Frame& frame = stack.back();
    const auto& children = frame.module->children_;
    if (frame.next_child == children.size()) {
      frame_paths.resize(frame.path_begin);
      stack.pop_back();
      continue;
    }
    // The next group of children: their modules, and their paths' text once sized.
    size_t count = 0;
    size_t text_size = 0;
    for (; frame.next_child < children.size() && count < std::min(kGroup, budget);
         ++frame.next_child) {
      const auto& [name, child] = children[frame.next_child];
      if (child == nullptr) continue;
      modules[count] = child.get();
      positions[count] = static_cast<uint32_t>(frame.next_child);
      paths[count] = name;
      text_size += frame.path_size + 1 + name.size();
      ++count;
    }
    if (frame.path_size != 0) {  // "<frame's path>.<name>" for each
      text.resize(text_size);
      const char* prefix = frame_paths.data() + frame.path_begin;
      char* out = &text[0];
      for (size_t i = 0; i < count; ++i) {
        const absl::string_view name = paths[i];
        std::memcpy(out, prefix, frame.path_size);
        out[frame.path_size] = '.';
        std::memcpy(out + frame.path_size + 1, name.data(), name.size());
        paths[i] = absl::string_view(out, frame.path_size + 1 + name.size());
        out += paths[i].size();
      }
    }
    budget -= count;
    // A path never interned is called by no node.
    Symbol::LookupMany(absl::MakeConstSpan(paths, count), symbols);
    size_t walk_count = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint32_t slot = symbols[i].id() - paths_base_;  // wraps below the base
      if (!symbols[i].empty() && slot < range && called[slot]) {
        module_of_path_[slot] = modules[i];
        place_of_path_[slot] = {frame.module, positions[i]};
        ++found;
      } else if (!modules[i]->children_.empty()) {
        to_walk[walk_count++] = i;
      }
    }
    // Pushed last first, so they are walked in child order; `frame` is dead from here.
    for (size_t k = walk_count; k-- > 0;) {
      const absl::string_view path = paths[to_walk[k]];
      stack.push_back({modules[to_walk[k]], 0, frame_paths.size(), path.size()});
      frame_paths.append(path.data(), path.size());
    }
  }
}

absl::StatusOr<Module*> GraphModule::GetModule(Symbol path) const {
  if (Module* cached = CachedModule(path)) return cached;
  return GetModule(path.name());
}

absl::StatusOr<Module*> GraphModule::GetModule(absl::string_view path) const {
  Module* module = root_.get();
  if (path.empty()) return module;
  size_t begin = 0;  // of the component being resolved
  while (true) {
    const size_t dot = FindDot(path, begin);
    const absl::string_view part =
        path.substr(begin, dot == absl::string_view::npos ? absl::string_view::npos : dot - begin);
    Module* child = module->FindChild(part);
    if (child == nullptr) {
      const absl::string_view walked = begin == 0 ? "<root>" : path.substr(0, begin - 1);
      return absl::NotFoundError(absl::StrCat("no module '", part, "' under '", walked,
                                              "' (resolving '", path, "')"));
    }
    module = child;
    if (dot == absl::string_view::npos) return module;
    begin = dot + 1;
  }
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
  // Checked before anything is created, so a bad path leaves the tree unchanged.
  if (HasEmptyComponent(path)) {
    return absl::InvalidArgumentError(absl::StrCat("SetModule: bad path '", path, "'"));
  }
  Module* parent = root_.get();
  for (size_t dot = FindDot(path); dot != absl::string_view::npos; dot = FindDot(path)) {
    const absl::string_view part = path.substr(0, dot);
    Module* child = parent->FindChild(part);
    if (child == nullptr) {
      static const Symbol kContainer = Symbol::Intern("nn.Module");
      child = parent->SetChild(part, std::make_unique<Module>(kContainer));
    }
    parent = child;
    path.remove_prefix(dot + 1);
  }
  parent->SetChild(path, std::move(module));
  return absl::OkStatus();
}

absl::Status GraphModule::RemoveModule(absl::string_view path) {
  const Symbol target = Symbol::Lookup(path);
  // The graph counts each target's callers: the walk only names the first one.
  if (graph_->NumCallers(target) != 0) {
    for (Node* n = graph_->first(); n != nullptr; n = n->next()) {
      if (n->op() == OpKind::kCallModule && n->target() == target) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot remove module '", path, "': node '", n->name(), "' still calls it"));
      }
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
  std::vector<PathToRemove> to_remove;
  to_remove.reserve(paths.size());
  for (const std::string& path : paths) to_remove.push_back({path, Symbol::Lookup(path)});
  return RemoveModulesImpl(to_remove);
}

absl::Status GraphModule::RemoveModules(absl::Span<const Symbol> paths) {
  std::vector<PathToRemove> to_remove;
  to_remove.reserve(paths.size());
  for (const Symbol path : paths) to_remove.push_back({path.name(), path});
  return RemoveModulesImpl(to_remove);
}

absl::Status GraphModule::RemoveModulesImpl(absl::Span<const PathToRemove> paths) {
  // The children to remove grouped by parent, as positions (no copies of the names).
  struct Removal {
    Module* parent;
    int depth;
    std::vector<uint32_t> positions;
  };
  std::vector<Removal> removals;
  absl::flat_hash_map<const Module*, size_t> removal_of_parent;
  // The module of each path, in the order of `paths`.
  std::vector<const Module*> modules;
  modules.reserve(paths.size());
  size_t last_removal = 0;  // removals[last_removal]: the previous path's parent's
  // Read before the edit changes the tree generation. While current, a called path's module
  // and its place in its parent come from the path table, with no text hashed or compared.
  const bool table_current =
      paths_generation_.load(std::memory_order_acquire) == bindings().tree();
  for (const auto& [path, target] : paths) {
    Module* parent = nullptr;
    size_t position = Module::kNoChild;
    const uint32_t slot = target.id() - paths_base_;  // wraps below the base
    if (table_current && !target.empty() && slot < place_of_path_.size()) {
      const PlaceOfPath& place = place_of_path_[slot];
      const Module* module = module_of_path_[slot];
      if (module != nullptr && place.parent != nullptr &&
          place.position < place.parent->children_.size() &&
          place.parent->children_[place.position].second.get() == module) {
        parent = place.parent;
        position = place.position;
      }
    }
    if (parent == nullptr && !path.empty()) {  // not in the table, or moved since: by text
      auto [parent_path, name] = SplitLast(path);
      parent = FindModule(parent_path);
      if (parent != nullptr) position = parent->ChildPosition(name);
    }
    const Module* module =
        position == Module::kNoChild ? nullptr : parent->children_[position].second.get();
    if (module == nullptr) {
      return absl::NotFoundError(absl::StrCat("no module '", path, "'"));
    }
    modules.push_back(module);  // not read yet (see below)
    // Consecutive paths mostly share a parent (often the root): no hash for those.
    if (removals.empty() || removals[last_removal].parent != parent) {
      auto [it, inserted] = removal_of_parent.try_emplace(parent, removals.size());
      if (inserted) {
        // The parent's depth: one per '.' in the path ("a" -> the root, 0).
        const int depth = static_cast<int>(std::count(path.begin(), path.end(), '.'));
        removals.push_back({parent, depth, {}});
      }
      last_removal = it->second;
    }
    removals[last_removal].positions.push_back(static_cast<uint32_t>(position));
  }
  // No call_module node may still call a removed path: the graph counts the callers of
  // each target, so that is one read per path, not a walk of every node. Only if one is
  // called is the graph walked, to name the first caller in graph order.
  bool removed_path_called = false;
  for (const PathToRemove& path : paths) {
    if (!path.symbol.empty() && graph_->NumCallers(path.symbol) != 0) {
      removed_path_called = true;
      break;
    }
  }
  // Removed modules that have children: a node calling one of those children calls a
  // module this removes too. (The fusion pass removes leaves only, so it never pays for
  // the prefix walk below.)
  absl::flat_hash_set<absl::string_view> removed_parents;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!modules[i]->children().empty()) removed_parents.insert(paths[i].text);
  }
  const auto removed_with_a_parent = [&removed_parents](absl::string_view target) {
    for (size_t dot = target.find('.'); dot != absl::string_view::npos;
         dot = target.find('.', dot + 1)) {
      if (removed_parents.contains(target.substr(0, dot))) return true;
    }
    return false;
  };
  const Node* first_caller = nullptr;  // of a removed path, or of a path inside one
  if (removed_path_called || !removed_parents.empty()) {
    std::vector<Symbol> target_symbols;
    target_symbols.reserve(paths.size());
    for (const PathToRemove& path : paths) target_symbols.push_back(path.symbol);
    const SymbolSet targets(target_symbols);
    // Both checks, so the error names the first node in graph order that fails either.
    for (const Node* n = graph_->first(); n != nullptr; n = n->next()) {
      PrefetchLaterNodes(n);
      if (n->op() != OpKind::kCallModule) continue;
      if (targets.contains(n->target()) ||
          (!removed_parents.empty() && removed_with_a_parent(n->target().name()))) {
        first_caller = n;
        break;
      }
    }
  }
  if (first_caller != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove module '", first_caller->target().name(), "': node '",
                     first_caller->name(), "' still calls it"));
  }
  // Deepest parents first, so no parent is freed (with its subtree) before its own
  // children are edited; a parent inside a removed module is then freed with it.
  std::stable_sort(removals.begin(), removals.end(),
                   [](const Removal& a, const Removal& b) { return a.depth > b.depth; });
  for (Removal& removal : removals) {
    // In any order, repeats included (a path given twice): EraseChildrenAt marks them.
    removal.parent->EraseChildrenAt(removal.positions);
  }
  if (table_current && removed_parents.empty()) KeepPathTableAfterRemoving(paths);
  return absl::OkStatus();
}

void GraphModule::KeepPathTableAfterRemoving(absl::Span<const PathToRemove> paths) {
  std::lock_guard<std::mutex> lock(resolve_mu_);
  // Every other module keeps its path and address (EraseChildrenAt moves the owning
  // pointers, not the modules): only the removed paths' slots, if any, change.
  for (const PathToRemove& path : paths) {
    const uint32_t slot = path.symbol.id() - paths_base_;  // wraps below the base
    if (!path.symbol.empty() && slot < module_of_path_.size()) module_of_path_[slot] = nullptr;
  }
  paths_generation_.store(bindings().tree(), std::memory_order_release);
}

absl::Status GraphModule::SetTensor(absl::string_view path, Tensor tensor) {
  auto [parent_path, name] = SplitLast(path);
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("SetTensor: bad path '", path, "'"));
  ASSIGN_OR_RETURN(Module * parent, GetModule(parent_path));
  parent->SetTensor(name, std::move(tensor));
  return absl::OkStatus();
}

std::string GraphModule::UniqueModulePath(absl::string_view hint) {
  std::string candidate(hint);
  // Only the new leaf's name is made an identifier: the modules above it are existing ones,
  // whose names PyTorch allows to be any string without a dot (torchvision's regnets hold
  // "block1-0"), and a path with them rewritten would name no module.
  const size_t leaf = candidate.rfind('.');
  for (size_t i = leaf == std::string::npos ? 0 : leaf + 1; i < candidate.size(); ++i) {
    char& c = candidate[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  if (candidate.empty()) candidate = "_module";
  if (FindModule(candidate) == nullptr && FindTensor(candidate) == nullptr) return candidate;
  int64_t& next = next_path_suffix_[candidate];
  for (next = std::max<int64_t>(next, 1);; ++next) {
    std::string path = absl::StrCat(candidate, "_", next);
    if (FindModule(path) == nullptr && FindTensor(path) == nullptr) return path;
  }
}

absl::StatusOr<Node*> GraphModule::InsertConstantBefore(Node* before, absl::string_view hint,
                                                        Tensor tensor) {
  const std::string path = UniqueModulePath(hint);
  RETURN_IF_ERROR(SetTensor(path, std::move(tensor)));
  NodeSpec get_attr;
  get_attr.op = OpKind::kGetAttr;
  get_attr.target = Symbol::Intern(path);
  get_attr.name = graph_->UniqueName(path);
  return graph_->InsertBefore(before, std::move(get_attr));
}

absl::Status GraphModule::Verify(const ModuleSchemaRegistry& schemas) const {
  RETURN_IF_ERROR(graph_->Verify());
  RETURN_IF_ERROR(VerifyModuleTree(*root_, "", schemas, 0));
  // The module-type cache, if current, must agree with the tree (checked below, where each
  // call_module node's module is looked up anyway).
  const bool types_cached =
      resolved_generation_.load(std::memory_order_acquire) == bindings().binding();
  const bool paths_cached =
      paths_generation_.load(std::memory_order_acquire) == bindings().tree();
  for (const Node* n = graph_->first(); n != nullptr; n = n->next()) {
    const absl::string_view target = n->target().name();
    if (n->op() == OpKind::kCallModule) {
      const Module* module = FindModule(target);
      if (module == nullptr || target.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n->name(), "': call_module target '", target, "' is not a module"));
      }
      const Symbol cached_type = n->index() < module_type_of_node_.size()
                                     ? module_type_of_node_[n->index()]
                                     : Symbol();
      if (types_cached && cached_type != module->type()) {
        return absl::InternalError(absl::StrCat(
            "node '", n->name(), "': cached module type '", cached_type.name(),
            "' but module '", target, "' is '", module->type().name(),
            "' (stale module-type cache: an edit did not call InvalidateBindings)"));
      }
      if (paths_cached) {
        const Module* cached = CachedModule(n->target());
        if (cached != nullptr && cached != module) {
          return absl::InternalError(absl::StrCat(
              "node '", n->name(), "': the path table holds another module for '", target,
              "' than the tree (stale: a tree edit did not call InvalidateTree)"));
        }
      }
      const ModuleSchema* schema = SchemaOf(*module, schemas);
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
  copy->root_->SetModel(&copy->graph_->module_bindings());
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
