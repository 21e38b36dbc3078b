// Observers: record statistics of the float tensors that flow through a point of the
// graph during calibration, and compute the scale and zero point to quantize it with.
//
// Each class reproduces its namesake in PyTorch's torch/ao/quantization/observer.py
// exactly: the same running statistics (in float32, as PyTorch's buffers are), the same
// quant_min / quant_max (calculate_qmin_qmax), the same eps, and _calculate_qparams for
// affine and symmetric schemes. HistogramObserver is PyTorch 2's (2.14): histc over the
// exact observed range, an old histogram moved into a wider range by upsampling it
// `upsample_rate` times and binning the midpoints, infinite values dropped, and
// _non_linear_param_search. (PyTorch 1.13 truncated the range to integers and combined
// histograms differently: on 1.13 a histogram fed more than one batch differs slightly.)
//
// Contract: Update() fails (InvalidArgument, observer unchanged) on a tensor that is not
// float32 or, for per-channel observers, whose rank does not have the channel axis or
// whose channel count differs from earlier updates. An empty tensor is ignored, as in
// PyTorch. CalculateQParams() before any update returns PyTorch's default (scale 1.0,
// zero point 0, one entry).
#ifndef FUSELAGE_QUANTIZE_OBSERVERS_H_
#define FUSELAGE_QUANTIZE_OBSERVERS_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "quantize/qconfig.h"

namespace fuselage {

// Scales and zero points: one entry for per-tensor schemes, one per channel otherwise.
struct ObserverQParams {
  std::vector<float> scales;
  std::vector<int64_t> zero_points;
  // As a quantized tensor's parameters (per-tensor or per-channel affine on `axis`).
  QuantParams ToQuantParams(bool per_channel, int64_t axis) const;
};

// The one scale and zero point of a per-tensor observer, without ObserverQParams' two
// heap-allocated vectors: convert asks for them once per observer node and per weight.
struct PerTensorQParams {
  float scale = 1.0f;
  int64_t zero_point = 0;
};

// What one update of a range observer (the MinMax and PerChannelMinMax families, their
// moving averages and FixedQParams included) takes from its tensor: that tensor's own
// minimum and maximum, one entry per tensor or per channel, computed from the tensor
// alone. For those observers Update(x) is FoldRange(RangeOf(x)), literally (Update calls
// the two): RangeOf reads no running statistic, so it may run on any thread while other
// updates happen, and FoldRange is the only step that depends on the updates before it.
// Calibration uses the split to run several samples at once and still fold their ranges
// in sample order (quantize/calibrate.h), with the bits a one-sample-at-a-time run gives.
struct ObservedRange {
  std::vector<float> min_val, max_val;  // both empty: the tensor had no element
  Shape shape;                          // the tensor's (for FoldRange's errors)
  int64_t axis = 0;                     // per channel: the channel axis, made non-negative
};

class Observer {
 public:
  virtual ~Observer() = default;
  const ObserverSpec& spec() const { return spec_; }
  int64_t quant_min() const { return quant_min_; }
  int64_t quant_max() const { return quant_max_; }

  virtual absl::Status Update(const Tensor& x) = 0;
  // Whether Update(x) is FoldRange(RangeOf(x)) (ObservedRange): true for the range
  // observers, false for the histogram observer, whose update needs the whole tensor.
  virtual bool FoldsRanges() const { return false; }
  // Update's first half: the checks that depend on `x` alone and its range. Const and
  // thread-safe. Unimplemented unless FoldsRanges().
  virtual absl::StatusOr<ObservedRange> RangeOf(const Tensor& x) const;
  // Update's second half: `range` (RangeOf of a tensor) folded into the running
  // statistics, with Update's errors that depend on them (a channel count that differs from
  // earlier updates; observer unchanged then). Unimplemented unless FoldsRanges().
  virtual absl::Status FoldRange(const ObservedRange& range);
  virtual absl::StatusOr<ObserverQParams> CalculateQParams() const = 0;
  // CalculateQParams()' single entry, for the per-tensor observers (MinMax,
  // MovingAverageMinMax, Histogram): the same values and the same errors, computed by the
  // same code, without a vector. Unimplemented for per-channel observers.
  virtual absl::StatusOr<PerTensorQParams> CalculatePerTensorQParams() const = 0;
  // Forgets every update: the observer is again as MakeObserver built it, so one observer
  // can observe many tensors in turn (convert's weight observers).
  virtual void Reset() = 0;
  // A copy, statistics included: an observer of a spec already built once, without
  // validating the spec again (prepare clones one fresh observer per observer module).
  virtual std::unique_ptr<Observer> Clone() const = 0;
  // The running min / max (per channel: one per channel; empty before any update of a
  // per-channel observer). For the histogram observer, the histogram's range.
  virtual std::vector<float> min_val() const = 0;
  virtual std::vector<float> max_val() const = 0;
  // Puts back statistics saved from min_val() / max_val() (and, for the histogram
  // observer, histogram()), e.g. read from a prepared model file. InvalidArgument
  // (observer unchanged) if the sizes do not fit this observer: one entry each for
  // per-tensor observers, equal sizes for per-channel ones, `bins` histogram entries (or
  // none, before any update) for the histogram observer. Other observers take no
  // histogram.
  virtual absl::Status SetState(const std::vector<float>& min_val,
                                const std::vector<float>& max_val,
                                const std::vector<float>& histogram) = 0;

 protected:
  Observer(ObserverSpec spec, int64_t quant_min, int64_t quant_max)
      : spec_(std::move(spec)), quant_min_(quant_min), quant_max_(quant_max) {}
  // PyTorch's UniformQuantizationObserverBase._calculate_qparams.
  absl::StatusOr<ObserverQParams> CalculateQParamsFromMinMax(
      const std::vector<float>& min_val, const std::vector<float>& max_val) const;
  // The same for a single (per-tensor) range.
  absl::StatusOr<PerTensorQParams> PerTensorQParamsFromMinMax(float min_val,
                                                              float max_val) const;

 private:
  // CalculateQParamsFromMinMax's checks of entry `i` ([min_val, max_val]): "min <= max"
  // (run over every entry first), then a finite range.
  absl::Status CheckRangeOrdered(size_t i, float min_val, float max_val) const;
  absl::Status CheckRangeFinite(size_t i, float min_val, float max_val) const;
  // The scale a checked range gives must be one a quantized tensor may carry
  // (QuantParams::kMaxScale): a range near float's limits gives an infinite or huge scale.
  absl::Status CheckScale(size_t i, float min_val, float max_val, float scale) const;
  // The parameters of one checked range (the loop body of _calculate_qparams).
  PerTensorQParams QParamsOfRange(float min_val, float max_val) const;

  ObserverSpec spec_;
  int64_t quant_min_;
  int64_t quant_max_;
};

// MinMaxObserver and MovingAverageMinMaxObserver (per-tensor).
class MinMaxObserver : public Observer {
 public:
  absl::Status Update(const Tensor& x) override;
  bool FoldsRanges() const override { return true; }
  absl::StatusOr<ObservedRange> RangeOf(const Tensor& x) const override;
  absl::Status FoldRange(const ObservedRange& range) override;
  absl::StatusOr<ObserverQParams> CalculateQParams() const override;
  absl::StatusOr<PerTensorQParams> CalculatePerTensorQParams() const override;
  void Reset() override;
  std::unique_ptr<Observer> Clone() const override;
  std::vector<float> min_val() const override { return {min_val_}; }
  std::vector<float> max_val() const override { return {max_val_}; }
  absl::Status SetState(const std::vector<float>& min_val, const std::vector<float>& max_val,
                        const std::vector<float>& histogram) override;

 protected:
  friend absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec&);
  using Observer::Observer;
  float min_val_ = std::numeric_limits<float>::infinity();
  float max_val_ = -std::numeric_limits<float>::infinity();
};

// FixedQParamsObserver: the output parameters of an op whose range is known by definition
// (sigmoid: [0, 1) -> scale 1/256, zero point 0 on quint8; tanh: scale 2/256, zero point
// 128), whatever the data. It still records the range it saw, as MinMaxObserver does, so
// that convert can tell an observer calibration reached from one it never did; PyTorch's
// records nothing.
class FixedQParamsObserver : public MinMaxObserver {
 public:
  absl::StatusOr<ObserverQParams> CalculateQParams() const override;
  absl::StatusOr<PerTensorQParams> CalculatePerTensorQParams() const override;
  std::unique_ptr<Observer> Clone() const override;

 private:
  friend absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec&);
  using MinMaxObserver::MinMaxObserver;
};

// PerChannelMinMaxObserver and MovingAveragePerChannelMinMaxObserver.
class PerChannelMinMaxObserver : public Observer {
 public:
  absl::Status Update(const Tensor& x) override;
  bool FoldsRanges() const override { return true; }
  absl::StatusOr<ObservedRange> RangeOf(const Tensor& x) const override;
  absl::Status FoldRange(const ObservedRange& range) override;
  absl::StatusOr<ObserverQParams> CalculateQParams() const override;
  absl::StatusOr<PerTensorQParams> CalculatePerTensorQParams() const override;
  void Reset() override;
  std::unique_ptr<Observer> Clone() const override;
  std::vector<float> min_val() const override { return min_val_; }
  std::vector<float> max_val() const override { return max_val_; }
  absl::Status SetState(const std::vector<float>& min_val, const std::vector<float>& max_val,
                        const std::vector<float>& histogram) override;

 private:
  friend absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec&);
  using Observer::Observer;
  std::vector<float> min_val_;
  std::vector<float> max_val_;
};

class HistogramObserver : public Observer {
 public:
  absl::Status Update(const Tensor& x) override;
  absl::StatusOr<ObserverQParams> CalculateQParams() const override;
  absl::StatusOr<PerTensorQParams> CalculatePerTensorQParams() const override;
  void Reset() override;
  std::unique_ptr<Observer> Clone() const override;
  std::vector<float> min_val() const override { return {min_val_}; }
  std::vector<float> max_val() const override { return {max_val_}; }
  absl::Status SetState(const std::vector<float>& min_val, const std::vector<float>& max_val,
                        const std::vector<float>& histogram) override;
  // The `bins` counts; empty before the first update (PyTorch's buffer is then zeros:
  // allocating them for every observer Prepare inserts would cost bins * 4 bytes each,
  // and the first update replaces them anyway).
  const std::vector<float>& histogram() const { return histogram_; }
  // PyTorch's _compute_quantization_error of quantizing the histogram's bins
  // [start_bin, end_bin] to the dtype's levels (what the range search minimizes).
  double QuantizationError(int64_t start_bin, int64_t end_bin) const;
  // The range _non_linear_param_search picks (CalculateQParams' min / max).
  std::pair<float, float> SearchedRange() const { return NonLinearParamSearch(); }

 private:
  friend absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec&);
  using Observer::Observer;
  // PyTorch's _compute_quantization_error and _non_linear_param_search, with the same
  // float32 / double arithmetic in the same order (bit-identical results) but without
  // PyTorch's redundant work: empty bins skipped, range scans resumed, fmodf avoided
  // where the floor division is unambiguous, per-range constants and per-bin densities
  // computed once. `nonzero_bins` lists the non-empty bins, `nonzero_densities` their
  // densities (NonzeroBins).
  double QuantizationError(int64_t next_start_bin, int64_t next_end_bin,
                           const std::vector<int64_t>& nonzero_bins,
                           const std::vector<float>& nonzero_densities) const;
  // The bin width _compute_quantization_error divides the counts by (float32).
  float ErrorBinWidth() const;
  // Appends the index of every non-empty bin to `bins` and its density (count /
  // ErrorBinWidth(), in float32 as _compute_quantization_error divides) to `densities`.
  void NonzeroBins(std::vector<int64_t>* bins, std::vector<float>* densities) const;
  std::pair<float, float> NonLinearParamSearch() const;
  // PyTorch 2's _combine_histograms without the update: this histogram moved to the wider
  // range [new_min, new_max].
  std::vector<float> HistogramInRange(float new_min, float new_max) const;
  float min_val_ = std::numeric_limits<float>::infinity();
  float max_val_ = -std::numeric_limits<float>::infinity();
  std::vector<float> histogram_;
};

// What torch.sum gives for a 1-D float32 tensor on the CPU, to the bit: PyTorch's cascade
// sum (aten/src/ATen/native/cpu/SumKernel.cpp) over 8-float vectors, four interleaved
// rows of them, partial sums carried up four levels, then the tail and the lanes added
// in order. HistogramObserver's range search compares bin masses with torch.sum of the
// histogram; the correctly rounded sum differs from it in the last bit often enough to
// move the searched range (densenet121's first dense block: scale 0.2452 where PyTorch
// has 0.2468). Checked against PyTorch 1.13 and 2.14, AVX2 and AVX-512 builds alike.
float TorchFloat32Sum(const float* values, int64_t n);
inline float TorchFloat32Sum(const std::vector<float>& values) {
  return TorchFloat32Sum(values.data(), static_cast<int64_t>(values.size()));
}

// Builds the observer `spec` describes, after spec.Validate(). Placeholder, noop and
// reuse-input specs get Unimplemented: they compute nothing here (prepare handles them by
// their spec). A dynamic placeholder (is_dynamic: the input of a dynamically quantized op)
// gets a MinMaxObserver whose range nothing reads: its parameters are chosen at run time;
// so does a float16 cast (ObserverSpec::IsFloat16Cast), which has no parameters.
absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec& spec);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_OBSERVERS_H_
