// ModuleBindingGenerations: one model's counters that change whenever what a call_module
// node of that model resolves to might change. Each Graph owns one (so each GraphModule
// has its own); there is no process-wide counter, so an edit of one model never makes
// another model's caches stale.
//
// - The module-tree generation changes when the model's module tree is edited (a child
//   set, replaced or removed, a module's type changed, a module moved) — only a module
//   that is part of the model's tree (its root or a descendant of it) counts: building a
//   module on its own, e.g. a fused module before it is installed, edits no model. What a
//   module *path* resolves to depends on this one alone.
// - The module-binding generation changes with every module-tree edit and also when a
//   node calling a module is created or retargeted. What a *node* resolves to depends on
//   this one.
//
// GraphModule caches each call_module node's module type (ModuleTypeOf) and trusts it
// only while the binding generation equals the value it had when the cache was filled; it
// caches the module of each called path (FindModule(Symbol), ModuleOf) and trusts that
// while the tree generation is unchanged. A Module in a model's tree points at that
// model's generations (Module::model_), so no edit path needs the GraphModule.
//
// Edits happen on one thread at a time per model (graph/graph_module.h's threading
// contract); the counters are atomics so that readers of the model on other threads may
// compare them without a lock.
#ifndef FUSELAGE_GRAPH_MODULE_BINDING_H_
#define FUSELAGE_GRAPH_MODULE_BINDING_H_

#include <atomic>
#include <cstdint>

namespace fuselage {

class ModuleBindingGenerations {
 public:
  ModuleBindingGenerations() = default;
  ModuleBindingGenerations(const ModuleBindingGenerations&) = delete;
  ModuleBindingGenerations& operator=(const ModuleBindingGenerations&) = delete;

  // Both start at 1 so that 0 can mean "never resolved".
  uint64_t binding() const { return binding_.load(std::memory_order_acquire); }
  uint64_t tree() const { return tree_.load(std::memory_order_acquire); }

  // Called by every mutation that can change what a call_module node resolves to without
  // editing the module tree (a node calling a module created or retargeted).
  void InvalidateBindings() { binding_.fetch_add(1, std::memory_order_acq_rel); }

  // Called by every edit of the module tree (which also changes what nodes resolve to).
  void InvalidateTree() {
    tree_.fetch_add(1, std::memory_order_acq_rel);
    InvalidateBindings();
  }

 private:
  std::atomic<uint64_t> binding_{1};
  std::atomic<uint64_t> tree_{1};
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_BINDING_H_
