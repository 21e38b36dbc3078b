// The module-binding generations: process-wide counters that change whenever what a
// call_module node resolves to might change.
//
// - The module-tree generation changes when a module tree is edited (a child set,
//   replaced or removed, a module's type changed, a module moved) — only a module that is
//   part of a tree (a GraphModule's root or some module's child) counts: building a
//   module on its own, e.g. a fused module before it is installed, edits no GraphModule.
//   What a module *path* resolves to depends on this one alone.
// - The module-binding generation changes with every module-tree edit and also when a
//   node calling a module is created or retargeted. What a *node* resolves to depends on
//   this one.
//
// GraphModule caches each call_module node's module type on the node (ModuleTypeOf) and
// trusts it only while the binding generation equals the value it had when the cache was
// filled; it caches the module of each called path (FindModule(Symbol), ModuleOf) and
// trusts that while the tree generation is unchanged. One counter pair for the whole
// process is conservative (an edit of one model invalidates the caches of all), but it
// needs no link from a Module or a Graph to the GraphModule that owns it, so no edit path
// can forget to invalidate.
#ifndef FUSELAGE_GRAPH_MODULE_BINDING_H_
#define FUSELAGE_GRAPH_MODULE_BINDING_H_

#include <atomic>
#include <cstdint>

namespace fuselage {
namespace module_binding_internal {
// Both start at 1 so that 0 can mean "never resolved".
inline std::atomic<uint64_t> generation{1};
inline std::atomic<uint64_t> tree_generation{1};
}  // namespace module_binding_internal

inline uint64_t ModuleBindingGeneration() {
  return module_binding_internal::generation.load(std::memory_order_acquire);
}

inline uint64_t ModuleTreeGeneration() {
  return module_binding_internal::tree_generation.load(std::memory_order_acquire);
}

// Called by every mutation that can change what a call_module node resolves to without
// editing a module tree (a node calling a module created or retargeted).
inline void InvalidateModuleBindings() {
  module_binding_internal::generation.fetch_add(1, std::memory_order_acq_rel);
}

// Called by every edit of a module tree (which also changes what nodes resolve to).
inline void InvalidateModuleTree() {
  module_binding_internal::tree_generation.fetch_add(1, std::memory_order_acq_rel);
  InvalidateModuleBindings();
}

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_BINDING_H_
