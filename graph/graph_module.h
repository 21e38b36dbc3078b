// GraphModule: the model every pass works on, what torch.fx.GraphModule is without its
// generated Python code — a Graph (graph/graph.h: the nodes, in topological order, with
// their use-lists) plus the module tree its call_module and get_attr nodes name by dotted
// path. Loading a model file gives one (graph/serialization.h), every pass takes one
// (fuse, prepare, calibrate, convert, lower), and saving, printing and drawing read one.
//
//   GraphModule gm;
//   RETURN_IF_ERROR(gm.SetModule("layer1.0.conv", std::make_unique<Module>("nn.Conv2d")));
//   ...                                     // (conv's tensors and attributes: module.h)
//   ASSIGN_OR_RETURN(Node* x, gm.graph().AddPlaceholder("x"));
//   ASSIGN_OR_RETURN(Node* c, gm.graph().AddCallModule("layer1.0.conv", {x}));
//   RETURN_IF_ERROR(gm.graph().SetOutput(c).status());
//   RETURN_IF_ERROR(gm.Verify());           // the graph's invariants and the module tree
//   Module* conv = gm.ModuleOf(c);          // the nn.Conv2d at "layer1.0.conv"
//
// What it owns and guarantees:
//  - The graph and the root module (type "GraphModule"). SetModule creates plain
//    "nn.Module" parents as needed, as FX's add_submodule does; a path is "" (the root) or
//    dotted child names. Modules and tensors are data (graph/module.h); a module's type
//    must be registered (graph/module_schema.h) for Verify to accept it.
//  - Verify() = Graph::Verify (order, use-lists, names, arity) plus: every call_module
//    target resolves to a registered module type whose input count fits the node, every
//    get_attr resolves to a tensor or a module, every module has its required tensors and
//    children. It names the first broken rule; passes run it after every change in tests.
//  - Lookups by path are cheap: FindModule(Symbol) and ModuleTypeOf(node) are O(1) after
//    ResolveModuleTypes() while the tree is not edited (module_binding.h says which edits
//    make the caches stale); a stale cache is never wrong, only slower.
//  - Removing a module that a call_module node still calls is refused
//    (FailedPrecondition), so no node is left dangling; RemoveModules removes many at once
//    in one scan, all or nothing.
//  - Not copyable: Clone() is a deep copy whose tensors share data copy-on-write.
//
// Threading contract (issue #22; tests/graph/threading_test runs it under ThreadSanitizer):
//  - Different models may be used on different threads at once, each in any way (load,
//    fuse, prepare, calibrate, convert, lower, save): models share no mutable state. Each
//    model keeps its own caches and generations (graph/module_binding.h); what is
//    process-wide is thread-safe: interned symbols (graph/symbol.h), the schema and
//    function registries, shared tensor buffers and node meta blocks (atomic counts).
//  - One model may be read by several threads at once: every const method of GraphModule,
//    Graph, Node and Module (FindModule, ModuleOf, ModuleTypeOf, ResolveModuleTypes,
//    FindTensor, Verify, Clone, walking nodes and users), and the passes that take a const
//    GraphModule& (PatternMatcher::FindMatches / Explain, the printer, Save). The caches
//    the readers fill (ResolveModuleTypes) are filled under a lock, into tables no reader
//    reads until they are published.
//  - An edit of a model (any non-const method, e.g. Graph::SetArgs, UniqueName,
//    SetModule, a pass that takes a GraphModule&, an edit of a Module of its tree) must
//    not run at the same time as anything else on that model: the caller orders edits and
//    reads of one model (one thread at a time, or a lock or join between them).
#ifndef FUSELAGE_GRAPH_GRAPH_MODULE_H_
#define FUSELAGE_GRAPH_GRAPH_MODULE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/graph.h"
#include "graph/module.h"
#include "graph/module_binding.h"
#include "graph/module_schema.h"
#include "graph/tensor.h"

namespace fuselage {

class GraphModule {
 public:
  GraphModule();
  GraphModule(const GraphModule&) = delete;
  GraphModule& operator=(const GraphModule&) = delete;

  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }
  Module& root() { return *root_; }
  const Module& root() const { return *root_; }

  // The submodule at dotted `path` ("layer1.0.conv1"; "" is the root), or nullptr.
  Module* FindModule(absl::string_view path) const;
  // The same, or NotFound naming the first missing path component.
  absl::StatusOr<Module*> GetModule(absl::string_view path) const;

  // The same for an interned path (a call_module node's target). O(1) — one integer-keyed
  // hash probe, no hashing or comparing of text — for every path some call_module node
  // called at the last ResolveModuleTypes(), while the module tree has not been edited
  // since (graph/module_binding.h: creating or retargeting nodes does not matter here,
  // editing a module outside the tree does not either). Otherwise, or for a path no node
  // called, it resolves the text as FindModule(absl::string_view) does.
  Module* FindModule(Symbol path) const {
    Module* cached = CachedModule(path);
    return cached != nullptr ? cached : FindModule(path.name());
  }
  absl::StatusOr<Module*> GetModule(Symbol path) const;
  // The module a call_module node calls (of this graph or another: it is resolved in this
  // module tree), or nullptr for another op or a target that does not resolve. Costs what
  // FindModule(node->target()) does.
  Module* ModuleOf(const Node* node) const {
    if (node->op() != OpKind::kCallModule || node->target().empty()) return nullptr;
    return FindModule(node->target());
  }
  // The tensor at dotted `path` ("layer1.0.conv1.weight", "_tensor_constant0"), or nullptr.
  const Tensor* FindTensor(absl::string_view path) const;

  // The type of the module `node` calls: for a call_module node of this graph whose target
  // resolves, that module's type; otherwise the empty symbol.
  // O(1) while the types are cached: ResolveModuleTypes() stores each call_module node's
  // module type in a table indexed by Node::index(), and the cache stays current until a module tree is edited or
  // a call_module node is created or retargeted (graph/module_binding.h). When it is not
  // current this resolves the path (FindModule) and does not refill the cache, so a scan
  // never costs more than resolving each node once.
  Symbol ModuleTypeOf(const Node* node) const {
    if (node->op() != OpKind::kCallModule) return Symbol();
    if (node->graph() == graph_.get() &&
        resolved_generation_.load(std::memory_order_acquire) == bindings().binding()) {
      // Every call_module node of the graph existed when the table was filled (creating
      // one makes it stale), so its index is in range; checked anyway, it costs nothing.
      const uint32_t index = node->index();
      if (index < module_type_of_node_.size()) return module_type_of_node_[index];
    }
    return ResolveModuleType(node);
  }
  // Fills the cache ModuleTypeOf reads (one FindModule per call_module node) if it is not
  // current, and the path -> module table FindModule(Symbol) reads if the module tree was
  // edited since it was filled (the table costs ~17-34 bytes per distinct called path,
  // allocated only here). Readers of an unchanged GraphModule may call it concurrently
  // (it locks, and writes only tables no reader reads while they are stale).
  void ResolveModuleTypes() const;

  // This model's module-binding generations (graph/module_binding.h), e.g. for a test
  // that checks which edits make its caches stale.
  const ModuleBindingGenerations& module_bindings() const { return graph_->module_bindings(); }

  // Installs `module` at `path`, creating plain "nn.Module" parents as needed (as FX's
  // add_submodule does) and replacing any module already there.
  absl::Status SetModule(absl::string_view path, std::unique_ptr<Module> module);
  // Removes the module at `path`; FailedPrecondition if a call_module node still uses it.
  absl::Status RemoveModule(absl::string_view path);
  // Removes the modules at all of `paths` at once: NotFound if one does not exist,
  // FailedPrecondition if a call_module node uses one; either way nothing is removed.
  // One scan of the graph and one pass over each parent's children, where calling
  // RemoveModule k times costs k scans of the graph and of the parent (what made removing
  // the modules a fusion pass frees quadratic). A path inside another removed path is
  // removed with it.
  absl::Status RemoveModules(const std::vector<std::string>& paths);
  // The same for interned paths (e.g. the targets of the call_module nodes a pass erased):
  // no text to hash per path but its last component's, no string to build.
  absl::Status RemoveModules(absl::Span<const Symbol> paths);
  // Installs a tensor at `path` (its parent module must exist).
  absl::Status SetTensor(absl::string_view path, Tensor tensor);
  // A module path not yet taken, from `hint` (its last component made an identifier; the
  // modules above it kept as named). Not const: it advances the per-hint suffix counter
  // that keeps naming many modules linear.
  std::string UniqueModulePath(absl::string_view hint);
  // Installs `tensor` at UniqueModulePath(hint) and inserts a get_attr node of it, named
  // after the path, before `before`: how a pass adds a constant it computed (a folded
  // weight, a quantized one, per-channel parameters). Returns the get_attr node.
  absl::StatusOr<Node*> InsertConstantBefore(Node* before, absl::string_view hint,
                                             Tensor tensor);

  // Graph::Verify plus: every call_module target resolves to a module of a registered
  // type whose input count fits the node's args, every get_attr resolves to a tensor or
  // module, and every module in the tree has a registered type and its required tensors.
  absl::Status Verify(const ModuleSchemaRegistry& schemas = ModuleSchemaRegistry::Global()) const;

  // A deep copy (graph, modules, tensor data shared copy-on-write).
  std::unique_ptr<GraphModule> Clone() const;

 private:
  // A call_module node with a non-empty target, and the target's id: what filling the
  // table reads, gathered in one walk of the graph.
  struct CallSite {
    Node* node;
    uint32_t target_id;
  };
  // Fills module_of_path_ (sized, all nullptr, paths_base_ set) with the modules of the
  // paths call_module nodes call, by one walk of the module tree that interns nothing
  // (Symbol::Lookup of each path built from its parent's): resolving ~160 paths of a
  // freshly parsed resnet50 one by one from the root was most of the CLI's first match.
  // Leaves nullptr for paths it did not reach. `calls`: every call site of the graph.
  // Under resolve_mu_.
  void FillPathTableByWalk(const std::vector<CallSite>& calls) const;
  // The type of the module `node` calls, from the module tree (no cache).
  Symbol ResolveModuleType(const Node* node) const;
  // The module at `path` from the path table if it is current and holds one, else nullptr.
  Module* CachedModule(Symbol path) const {
    if (paths_generation_.load(std::memory_order_acquire) != bindings().tree()) {
      return nullptr;
    }
    const uint32_t slot = path.id() - paths_base_;  // wraps below the base: out of range
    return slot < module_of_path_.size() ? module_of_path_[slot] : nullptr;
  }
  // A path to remove: its text and its symbol (empty if the text was never interned, so
  // no node can call it).
  struct PathToRemove {
    absl::string_view text;
    Symbol symbol;
  };
  absl::Status RemoveModulesImpl(absl::Span<const PathToRemove> paths);
  // After removing leaf modules at `paths` from a tree whose path table was current: the
  // table stays current (no path but the removed ones resolves differently), with the
  // removed paths' slots emptied, so the next ResolveModuleTypes does not refill it (the
  // fusion pass removes every folded batch norm; prepare then resolved every path anew).
  void KeepPathTableAfterRemoving(absl::Span<const PathToRemove> paths);

  const ModuleBindingGenerations& bindings() const { return graph_->module_bindings(); }

  // Declared first: the modules of root_'s tree point at graph_'s generations, so graph_
  // is destroyed after them.
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Module> root_;
  // The module-binding generation at which every call_module node's cached type was last
  // resolved; 0: never. Written under resolve_mu_, read without it.
  mutable std::atomic<uint64_t> resolved_generation_{0};
  // A std::mutex (pthread), which ThreadSanitizer sees: Debian's Abseil is not
  // instrumented, so an absl::Mutex's ordering would be invisible to it.
  mutable std::mutex resolve_mu_;
  // The module type of each call_module node (its symbol; empty if its target does not
  // resolve), indexed by Node::index(), as ResolveModuleTypes() last filled it. Written
  // under resolve_mu_ only while stale (readers do not read it then), read without it.
  mutable std::vector<Symbol> module_type_of_node_;
  // The module of every path a call_module node called at the last ResolveModuleTypes()
  // that found the tree edited, indexed by the path's symbol id minus paths_base_ (the
  // smallest such id); nullptr for ids no node called (or that name no module). Symbol ids
  // are dense and a model's paths are interned together, so this is ~8 bytes per called
  // path; if the ids are spread too far (more than 4 slots per called path + 1024) there
  // is no table and FindModule(Symbol) walks. Written under resolve_mu_ only while stale
  // (readers do not read it then), read without it.
  mutable std::vector<Module*> module_of_path_;
  // Where the walk that filled module_of_path_ found each module: its parent and its
  // position among the parent's children (parent nullptr: not found by the walk). Apart
  // from module_of_path_, which every lookup reads, as only RemoveModules reads it: it
  // removes a path by (parent, position) without hashing and comparing the text. Positions
  // go stale when a removal moves siblings, so a reader checks that the position still
  // holds the module (parents stay valid while the table is current: removing or replacing
  // a module with children is a tree edit).
  struct PlaceOfPath {
    Module* parent = nullptr;
    uint32_t position = 0;
  };
  mutable std::vector<PlaceOfPath> place_of_path_;
  mutable uint32_t paths_base_ = 0;
  // The module-tree generation at which module_of_path_ was filled; 0: never.
  mutable std::atomic<uint64_t> paths_generation_{0};
  // Next suffix to try per hint, so naming many modules from one hint stays linear.
  absl::flat_hash_map<std::string, int64_t> next_path_suffix_;
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_GRAPH_MODULE_H_
