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
#include <functional>
#include <string>
#include <utility>
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

// The most samples one calibration takes (`--samples`): samples are made one at a time
// (CalibrationSamples), so this bounds the time a calibration may take, not its memory.
inline constexpr int64_t kMaxCalibrationSamples = 1000000000;

// The samples of one calibration, made one at a time as it runs them: each sample is
// made, run and dropped as the calibration goes, so a calibration holds one sample in
// memory (a few per thread when it runs samples at once, Calibrate) however many it
// runs. Copyable; ForEach may be called any number of times and
// makes the same samples each time.
class CalibrationSamples {
 public:
  // Gets each sample in turn; an error stops the calibration and is returned.
  using Visitor = std::function<absl::Status(CalibrationSample sample)>;
  // Makes the samples in order, calling `visit` with each; returns the first error (its
  // own, or visit's).
  using Producer = std::function<absl::Status(const Visitor& visit)>;

  // `count` samples made by `produce`.
  CalibrationSamples(int64_t count, Producer produce)
      : count_(count), produce_(std::move(produce)) {}
  // Samples already in memory (tests, the demo); tensors are shared, not copied.
  CalibrationSamples(std::vector<CalibrationSample> samples);  // NOLINT: implicit on purpose

  int64_t size() const { return count_; }
  absl::Status ForEach(const Visitor& visit) const { return produce_(visit); }

 private:
  int64_t count_;
  Producer produce_;
};

struct CalibrationReport {
  int64_t samples = 0;
  // Observer modules no sample reached: a warning, as PyTorch gives one; convert then
  // refuses them (quantize/convert.h) where PyTorch would use scale 1.0, zero point 0.
  std::vector<std::string> unobserved;
  std::string ToString() const;
};

// Registers an identity kernel for every observer module type Prepare inserts, so a
// prepared graph runs. AlreadyExists if one is registered already.
absl::Status RegisterObserverKernels(KernelRegistry& registry);

// Runs `gm` once per sample, each made just before it runs (CalibrationSamples), and
// updates `prepared`'s observers. InvalidArgument if there is no sample, a sample's size
// differs from the placeholder count, or a sample's tensor has no elements (naming its
// placeholder: an observer learns no range from it); a kernel error is returned as the
// interpreter reports it (naming the node). The graph is not modified; only the observer
// modules' min_val / max_val tensors are, and only when every sample ran. `threads` (1 to
// kMaxThreads, or 0 for OpenMP's default, DefaultRunThreads) is how many threads the
// calibration may use. When every observer of the model folds ranges
// (Observer::FoldsRanges: MinMax, PerChannelMinMax, their moving averages,
// FixedQParams) and there are several threads and samples, min(threads, samples)
// samples run at once, each on a thread of its own with threads / that many OpenMP
// threads, and each sample's observed ranges are folded into the observers in sample
// order: the statistics and the errors are bit for bit those of running the samples one
// after another, and at most 2 * min(threads, samples) + 1 samples are in memory at once.
// Otherwise (a histogram observer: its update needs its running histogram) the samples
// run one at a time, each with `threads` threads. Either way the ranges recorded are the same for
// every thread count. `on_sample`, if set, is called on the calling thread after each
// sample's statistics are in, in sample order, with the samples done so far and the
// total (for progress).
using CalibrationProgress = std::function<void(int64_t done, int64_t total)>;
absl::StatusOr<CalibrationReport> Calibrate(GraphModule& gm, PreparedModel& prepared,
                                            const CalibrationSamples& samples,
                                            const KernelRegistry& kernels, int threads = 0,
                                            const CalibrationProgress& on_sample = {});

// `count` (1 to kMaxCalibrationSamples) samples of seeded pseudo-random float32 inputs,
// uniform in [-1, 1) (identical on every platform for one seed), made one at a time as
// the calibration runs them. Each placeholder's shape comes from `shapes` (keyed by
// placeholder name) or else its meta "shape" (which the Python exporter writes).
// InvalidArgument naming the placeholder if neither gives one, or if the shape has a
// negative dimension or more than Tensor::kMaxElements elements (checked here, before
// any sample is made).
absl::StatusOr<CalibrationSamples> RandomCalibrationSource(
    const GraphModule& gm, int64_t count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes = {});

// RandomCalibrationSource's samples, all made now and held in memory (for tests and
// callers that look at the samples; calibration itself should take the source).
absl::StatusOr<std::vector<CalibrationSample>> RandomCalibrationSamples(
    const GraphModule& gm, int count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes = {});

// Samples from .npy files, each sample's files read just before it runs: with k
// placeholders, files [i*k, i*k + k) are sample i. InvalidArgument if the file count is
// not a positive multiple of k; read errors name the file (and stop the calibration).
absl::StatusOr<CalibrationSamples> NpyCalibrationSamples(const GraphModule& gm,
                                                         const std::vector<std::string>& paths);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_CALIBRATE_H_
