// The module-binding generation: a process-wide counter that changes whenever the module a
// call_module node resolves to might change — a module tree is edited (a child set,
// replaced or removed, a module's type changed, a module moved) or a node calling a module
// is created or retargeted.
//
// GraphModule caches each call_module node's module type on the node (ModuleTypeOf) and
// trusts the cache only while this counter equals the value it had when the cache was
// filled. One counter for the whole process is conservative (an edit of one model
// invalidates the caches of all), but it needs no link from a Module or a Graph to the
// GraphModule that owns it, so no edit path can forget to invalidate.
#ifndef FUSELAGE_GRAPH_MODULE_BINDING_H_
#define FUSELAGE_GRAPH_MODULE_BINDING_H_

#include <atomic>
#include <cstdint>

namespace fuselage {
namespace module_binding_internal {
// Starts at 1 so that 0 can mean "never resolved".
inline std::atomic<uint64_t> generation{1};
}  // namespace module_binding_internal

inline uint64_t ModuleBindingGeneration() {
  return module_binding_internal::generation.load(std::memory_order_acquire);
}

// Called by every mutation that can change what a call_module node resolves to.
inline void InvalidateModuleBindings() {
  module_binding_internal::generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_BINDING_H_
