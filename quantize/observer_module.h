// Observer modules: an observer as the module tree holds it, so that a prepared (and
// calibrated) model can be saved, loaded and converted in another process.
//
// The module's type is the observer's class name (graph/NAMING.md); its spec is kept as
// attributes under PyTorch's names — dtype, qscheme, quant_min, quant_max (the effective
// range), reduce_range, eps, ch_axis, has_customized_qrange, and averaging_constant /
// bins / upsample_rate for the kinds that have them — and its statistics as the tensors
// min_val and max_val (per-channel: shape [C]) plus, once calibrated, histogram
// (HistogramObserver). A PyTorch observer exported by the Python bridge has the same
// names, so its spec reads back too.
#ifndef FUSELAGE_QUANTIZE_OBSERVER_MODULE_H_
#define FUSELAGE_QUANTIZE_OBSERVER_MODULE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "graph/module.h"
#include "quantize/observers.h"
#include "quantize/qconfig.h"

namespace fuselage {

// The module of an observer of `spec` that has seen nothing yet (min_val +inf, max_val
// -inf). InvalidArgument if the spec's quant range is invalid.
absl::StatusOr<std::unique_ptr<Module>> MakeObserverModule(const ObserverSpec& spec);

// Writes `observer`'s statistics into `module`'s min_val / max_val (and histogram).
void StoreObserverState(const Observer& observer, Module& module);

// The spec `module` describes. InvalidArgument naming the attribute if one is missing or
// of the wrong kind, the type is not an observer class, or quant_min / quant_max are not
// the range dtype and reduce_range give while has_customized_qrange is false. A
// customized range comes back as the effective range with reduce_range false, which
// computes the same parameters.
absl::StatusOr<ObserverSpec> ObserverSpecFromModule(const Module& module);

// The observer `module` describes, with the statistics of its tensors. InvalidArgument
// naming the tensor if min_val / max_val are missing, not float32 or of sizes that do not
// fit (Observer::SetState).
absl::StatusOr<std::unique_ptr<Observer>> ObserverFromModule(const Module& module);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_OBSERVER_MODULE_H_
