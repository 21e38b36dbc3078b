// Calibration: runs a prepared graph (quantize/prepare.h) through the interpreter over
// sample inputs so that every observer records the range of the values it watches, as
// PyTorch users do by calling the prepared model on a few batches.
//
// The observer nodes are identities at run time (RegisterObserverKernels); the statistics
// are gathered by the interpreter's per-node callback into the Observer objects of the
// PreparedModel, keyed by the observer module each node calls (so a module shared by two
// nodes — an op sharing its input's observer — sees both values, as in PyTorch). After the
// run, each observer module's `min_val` / `max_val` tensors are set from its Observer.
#ifndef FUSELAGE_QUANTIZE_CALIBRATE_H_
#define FUSELAGE_QUANTIZE_CALIBRATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"
#include "quantize/prepare.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// One sample: a tensor per placeholder, in placeholder order.
using CalibrationSample = std::vector<Tensor>;

struct CalibrationReport {
  int samples = 0;
  // Observer modules no sample reached (their parameters stay PyTorch's defaults,
  // scale 1.0 / zero point 0): worth a warning, as PyTorch gives one.
  std::vector<std::string> unobserved;
  std::string ToString() const;
};

// Registers an identity kernel for every observer module type Prepare inserts, so a
// prepared graph runs. AlreadyExists if one is registered already.
absl::Status RegisterObserverKernels(KernelRegistry& registry);

// Runs `gm` once per sample and updates `prepared`'s observers. InvalidArgument if there
// is no sample or a sample's size differs from the placeholder count; a kernel error is
// returned as the interpreter reports it (naming the node). The graph is not modified;
// only the observer modules' min_val / max_val tensors are.
absl::StatusOr<CalibrationReport> Calibrate(GraphModule& gm, PreparedModel& prepared,
                                            const std::vector<CalibrationSample>& samples,
                                            const KernelRegistry& kernels);

// `count` samples of seeded pseudo-random float32 inputs, uniform in [-1, 1) (identical
// on every platform for one seed). Each placeholder's shape comes from `shapes` (keyed
// by placeholder name) or else its meta "shape" (which the Python exporter writes);
// InvalidArgument naming the placeholder if neither gives one.
absl::StatusOr<std::vector<CalibrationSample>> RandomCalibrationSamples(
    const GraphModule& gm, int count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes = {});

// Samples from .npy files: with k placeholders, files [i*k, i*k + k) are sample i.
// InvalidArgument if the file count is not a positive multiple of k; read errors name
// the file.
absl::StatusOr<std::vector<CalibrationSample>> NpyCalibrationSamples(
    const GraphModule& gm, const std::vector<std::string>& paths);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_CALIBRATE_H_
