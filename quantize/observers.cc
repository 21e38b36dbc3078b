#include "quantize/observers.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "graph/parallel_for.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Python's floor division of ints.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

absl::Status CheckFloat(const ObserverSpec& spec, const Tensor& x) {
  if (x.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec.kind), ": observed tensor has dtype ", DTypeName(x.dtype()),
        "; expected torch.float32"));
  }
  return absl::OkStatus();
}

// The first of `init`, p[0], ..., p[n - 1] that equals `value` (== treats -0 and +0 as
// equal), or `value` if none does.
float FirstEqual(float init, const float* p, int64_t n, float value) {
  if (init == value) return init;
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] == value) return p[i];
  }
  return value;
}

// Extends `lo` / `hi` by p[0..n) with exactly the result of the sequential loop
//   for (i) { lo = std::min(lo, p[i]); hi = std::max(hi, p[i]); }
// (NaN-free data assumed, as calibration data and weights are) but 8 elements at a time
// in SSE lanes: the sequential loop is one dependency chain per element and was half of
// converting resnet50 (its per-channel weight observers). _mm_min_ps(x, lane) is
// `x < lane ? x : lane`, std::min(lane, x) per lane. Min and max do not depend on the
// order of the elements, except which of -0 and +0 comes out when the extreme is zero:
// the sequential loop keeps the first one it meets, so that case is resolved by
// FirstEqual.
void AccumulateMinMax(const float* p, int64_t n, float& lo, float& hi) {
  float new_lo = lo, new_hi = hi;
  int64_t i = 0;
#ifdef __SSE2__
  if (n >= 8) {
    __m128 lo0 = _mm_set1_ps(lo), lo1 = lo0, hi0 = _mm_set1_ps(hi), hi1 = hi0;
    for (; i + 8 <= n; i += 8) {
      const __m128 a = _mm_loadu_ps(p + i), b = _mm_loadu_ps(p + i + 4);
      lo0 = _mm_min_ps(a, lo0);
      lo1 = _mm_min_ps(b, lo1);
      hi0 = _mm_max_ps(a, hi0);
      hi1 = _mm_max_ps(b, hi1);
    }
    alignas(16) float lanes_lo[8], lanes_hi[8];
    _mm_store_ps(lanes_lo, lo0);
    _mm_store_ps(lanes_lo + 4, lo1);
    _mm_store_ps(lanes_hi, hi0);
    _mm_store_ps(lanes_hi + 4, hi1);
    for (int k = 0; k < 8; ++k) {
      new_lo = std::min(new_lo, lanes_lo[k]);
      new_hi = std::max(new_hi, lanes_hi[k]);
    }
  }
#endif
  for (; i < n; ++i) {
    new_lo = std::min(new_lo, p[i]);
    new_hi = std::max(new_hi, p[i]);
  }
  if (new_lo == 0.0f) new_lo = FirstEqual(lo, p, n, 0.0f);
  if (new_hi == 0.0f) new_hi = FirstEqual(hi, p, n, 0.0f);
  lo = new_lo;
  hi = new_hi;
}

// torch.aminmax over all elements (NaN-free data assumed, as calibration data is), in
// chunks on OpenMP's threads. Combining the chunks' extremes in chunk order with
// std::min / std::max keeps the earlier of two equal ones, so a zero extreme has the sign
// of the first zero the sequential loop meets, however the elements were cut.
std::pair<float, float> AMinMax(const Tensor& x) {
  const float* data = x.data<float>();
  const int64_t n = x.numel();
  const int chunks = ParallelChunkCount(n);
  std::vector<std::pair<float, float>> partial(static_cast<size_t>(chunks));
  ParallelForChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    float lo = data[begin], hi = data[begin];
    AccumulateMinMax(data + begin + 1, end - begin - 1, lo, hi);
    partial[static_cast<size_t>(chunk)] = {lo, hi};
  });
  float lo = partial[0].first, hi = partial[0].second;
  for (const auto& [chunk_lo, chunk_hi] : partial) {
    lo = std::min(lo, chunk_lo);
    hi = std::max(hi, chunk_hi);
  }
  return {lo, hi};
}

// std::fmod(a, b), exact as it is, without libm's bit-by-bit fmodf where |a / b| < 2^16
// (the quotients of the histogram search): there n = trunc(a / b) has at most 17 bits,
// so n * b and a - n * b are exact in double; a quotient rounded across an integer is
// corrected by one step of b, and the remainder (which fmod's always is) is a float.
float Fmod(float a, float b) {
  const double ad = a, bd = b;
  if (!std::isfinite(bd) || !(std::fabs(ad) < 65536.0 * std::fabs(bd))) {
    return std::fmod(a, b);  // also every NaN, infinity and zero divisor
  }
  double r = ad - std::trunc(ad / bd) * bd;
  const double step = std::signbit(a) ? -std::fabs(bd) : std::fabs(bd);  // toward a's sign
  if (r != 0 && std::signbit(r) != std::signbit(a)) r += step;
  if (std::fabs(r) >= std::fabs(bd)) r -= step;
  return r == 0 ? std::copysign(0.0f, a) : static_cast<float>(r);
}

// ATen's div_floor_floating (Python's float floor division), in float32.
float DivFloor(float a, float b) {
  if (b == 0) return a / b;
  const float mod = Fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.0f;
  return floordiv;
}

// std::nearbyint(q) for |q| < 2^16 (not NaN): the SSE conversion rounds in the current
// rounding mode as nearbyintf does and is exact in that range, without nearbyintf's libm
// call (two per bin and candidate range in the histogram search below). The sign of a zero
// result may differ; FastDivFloor only subtracts it from q, where that does not matter.
inline float NearbyIntSmall(float q) {
#ifdef __SSE2__
  return static_cast<float>(_mm_cvtss_si32(_mm_set_ss(q)));
#else
  return std::nearbyint(q);
#endif
}

// DivFloor(a, b) without fmodf when the float32 quotient is far from an integer.
// There the result is floor(a / b) exactly: |a / b| < 2^16 puts the rounded quotient
// within 2^-8 of the true one, so both have the same floor, and DivFloor's two rounded
// steps stay within 2^-6 of that integer, which its final rounding restores. Quotients
// near an integer (or huge, or not finite) take DivFloor itself.
inline float FastDivFloor(float a, float b) {
  const float q = a / b;
  if (std::fabs(q) < 65536.0f && std::fabs(q - NearbyIntSmall(q)) > 0.03125f) {
    return std::floor(q);
  }
  return DivFloor(a, b);
}

#ifdef __SSE2__
// FastDivFloor(a, b) per lane (b: one divisor in every lane): the lanes that take its fast
// path (|q| < 2^16 and q more than 1/32 from an integer, tested as FastDivFloor tests it)
// get std::floor(a / b), exact in that range (truncation, minus one where that rounded
// up; never a negative zero there); the others DivFloor, one by one.
inline __m128 FastDivFloor4(__m128 a, __m128 b, float divisor) {
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 q = _mm_div_ps(a, b);
  const __m128 nearest = _mm_cvtepi32_ps(_mm_cvtps_epi32(q));  // NearbyIntSmall per lane
  const __m128 distance = _mm_andnot_ps(sign, _mm_sub_ps(q, nearest));
  const __m128 fast = _mm_and_ps(_mm_cmplt_ps(_mm_andnot_ps(sign, q), _mm_set1_ps(65536.0f)),
                                 _mm_cmpgt_ps(distance, _mm_set1_ps(0.03125f)));
  const __m128 truncated = _mm_cvtepi32_ps(_mm_cvttps_epi32(q));
  const __m128 floor =
      _mm_sub_ps(truncated, _mm_and_ps(_mm_cmpgt_ps(truncated, q), _mm_set1_ps(1.0f)));
  const int fast_lanes = _mm_movemask_ps(fast);
  if (fast_lanes == 0xF) return floor;
  alignas(16) float result[4];
  alignas(16) float dividends[4];
  _mm_store_ps(result, floor);
  _mm_store_ps(dividends, a);
  for (int j = 0; j < 4; ++j) {
    if ((fast_lanes & (1 << j)) == 0) result[j] = DivFloor(dividends[j], divisor);
  }
  return _mm_load_ps(result);
}

// std::clamp(v, lo, hi) per lane: lo where v < lo, else hi where hi < v, else v.
inline __m128 Clamp4(__m128 v, __m128 lo, __m128 hi) {
  const __m128 below = _mm_cmplt_ps(v, lo);
  v = _mm_or_ps(_mm_and_ps(below, lo), _mm_andnot_ps(below, v));
  const __m128 above = _mm_cmplt_ps(hi, v);
  return _mm_or_ps(_mm_and_ps(above, hi), _mm_andnot_ps(above, v));
}
#endif

// torch.histc's bin of `elt` in [left, right] (PyTorch's CPU formula).
int64_t HistcBin(float elt, float left, float right, int64_t bins) {
  // PyTorch's float32 formula (multiply first), bit for bit. With a range wider than
  // FLT_MAX / bins the product overflows to inf, which PyTorch converts to an integer
  // (undefined behaviour; found by pass_pipeline_fuzz): there the bin is computed in
  // double, where nothing overflows, and clamped to the last bin.
  const float pos_f = (elt - left) * static_cast<float>(bins) / (right - left);
  const double pos_d =
      std::isfinite(pos_f)
          ? pos_f
          : (static_cast<double>(elt) - left) * static_cast<double>(bins) /
                (static_cast<double>(right) - left);
  const int64_t pos = pos_d < static_cast<double>(bins) ? static_cast<int64_t>(pos_d) : bins;
  return pos == bins ? bins - 1 : pos;
}

// Adds to `counts` (kCountLanes rows of bins + 1 counters, the last of each row for the
// elements outside [left, right]) the bin of each of p[0..n). Element i goes to row
// i % kCountLanes: a run of elements in one bin (the zeros after a ReLU) then increments
// kCountLanes counters in turn instead of waiting on one.
constexpr int kCountLanes = 4;

void CountHistcBins(const float* p, int64_t n, float left, float right, int64_t bins,
                    uint32_t* counts) {
  const int64_t row = bins + 1;
  int64_t i = 0;
#ifdef __SSE2__
  const __m128 left4 = _mm_set1_ps(left), right4 = _mm_set1_ps(right);
  const __m128 bins4 = _mm_set1_ps(static_cast<float>(bins));
  const __m128 width4 = _mm_set1_ps(right - left);
  const __m128 last4 = _mm_set1_ps(static_cast<float>(bins - 1));
  const __m128 infinity4 = _mm_set1_ps(kInf);
  const __m128i outside4 = _mm_set1_epi32(static_cast<int32_t>(bins));
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(p + i);
    const __m128 inside = _mm_and_ps(_mm_cmpge_ps(v, left4), _mm_cmple_ps(v, right4));
    const __m128 pos = _mm_div_ps(_mm_mul_ps(_mm_sub_ps(v, left4), bins4), width4);
    // An overflowed position (see HistcBin) takes the scalar formula for these four.
    if (_mm_movemask_ps(_mm_andnot_ps(_mm_cmplt_ps(pos, infinity4), inside)) != 0) {
      for (int j = 0; j < 4; ++j) {
        const float elt = p[i + j];
        const bool in = elt >= left && elt <= right;
        ++counts[j * row + (in ? HistcBin(elt, left, right, bins) : bins)];
      }
      continue;
    }
    // pos >= 0 inside; min(pos, bins - 1) truncated is HistcBin's bin.
    const __m128i bin = _mm_cvttps_epi32(_mm_min_ps(pos, last4));
    const __m128i mask = _mm_castps_si128(inside);
    alignas(16) int32_t slot[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(slot),
                    _mm_or_si128(_mm_and_si128(mask, bin), _mm_andnot_si128(mask, outside4)));
    ++counts[slot[0]];
    ++counts[row + slot[1]];
    ++counts[2 * row + slot[2]];
    ++counts[3 * row + slot[3]];
  }
#endif
  for (; i < n; ++i) {
    const float elt = p[i];
    const bool in = elt >= left && elt <= right;
    ++counts[(i % kCountLanes) * row + (in ? HistcBin(elt, left, right, bins) : bins)];
  }
}

// torch.histc(x, bins, min, max) on CPU: bin edges from linspace in
// float32, elements outside [min, max] ignored, the last bin closed on the right, bins
// found by linear interpolation in float32. PyTorch adds 1.0f per element to float32
// counts, exact below 2^24 elements: there the bins are counted in integers, in chunks on
// OpenMP's threads, and converted once. A larger tensor is counted as PyTorch counts.
std::vector<float> Histc(const Tensor& x, int64_t bins, double min, double max) {
  double left = min, right = max;
  if (left == right && x.numel() > 0) {
    auto [lo, hi] = AMinMax(x);
    left = lo;
    right = hi;
  }
  if (left == right) {
    left -= 1;
    right += 1;
  }
  const float left_f = static_cast<float>(left);
  const float right_f = static_cast<float>(right);
  std::vector<float> hist(static_cast<size_t>(bins), 0.0f);
  const float* data = x.data<float>();
  const int64_t n = x.numel();
  if (n >= (int64_t{1} << 24)) {
    for (int64_t i = 0; i < n; ++i) {
      const float elt = data[i];
      if (!(elt >= left_f && elt <= right_f)) continue;
      hist[static_cast<size_t>(HistcBin(elt, left_f, right_f, bins))] += 1.0f;
    }
    return hist;
  }
  const int64_t row = bins + 1;
  const int chunks = ParallelChunkCount(n);
  std::vector<uint32_t> counts(static_cast<size_t>(chunks * kCountLanes * row), 0);
  ParallelForChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    CountHistcBins(data + begin, end - begin, left_f, right_f, bins,
                   counts.data() + static_cast<size_t>(chunk * kCountLanes * row));
  });
  for (int64_t b = 0; b < bins; ++b) {
    uint32_t total = 0;
    for (int64_t r = 0; r < chunks * kCountLanes; ++r) {
      total += counts[static_cast<size_t>(r * row + b)];
    }
    hist[static_cast<size_t>(b)] = static_cast<float>(total);
  }
  return hist;
}

// SetState's checks: one min and max entry per tensor (or equal counts per channel), and
// either no histogram or `histogram_bins` entries (0: the observer has no histogram).
absl::Status CheckStateSizes(const ObserverSpec& spec, const std::vector<float>& min_val,
                             const std::vector<float>& max_val,
                             const std::vector<float>& histogram, bool per_channel,
                             int64_t histogram_bins) {
  const bool sizes_fit = per_channel ? min_val.size() == max_val.size()
                                     : min_val.size() == 1 && max_val.size() == 1;
  if (!sizes_fit) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec.kind), ": state has ", min_val.size(), " min_val and ",
        max_val.size(), " max_val entries; expected ",
        per_channel ? "as many of each (one per channel)" : "one of each"));
  }
  if (!histogram.empty() && static_cast<int64_t>(histogram.size()) != histogram_bins) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec.kind), ": state has a histogram of ", histogram.size(),
        " bins; expected ",
        histogram_bins == 0 ? std::string("none") : absl::StrCat(histogram_bins)));
  }
  return absl::OkStatus();
}

// Element i of torch.linspace(start, end, steps) in float32, as PyTorch 2's CPU kernel
// computes it: the first half stepped from `start`, the second back from `end`, each in
// one fused multiply-add (checked against torch 2.14 on random ranges).
float LinspaceAt(float start, float end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  return i < steps / 2 ? std::fma(step, static_cast<float>(i), start)
                       : std::fma(-step, static_cast<float>(steps - i - 1), end);
}

std::vector<float> Linspace(float start, float end, int64_t steps) {
  std::vector<float> out(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    out[static_cast<size_t>(i)] = LinspaceAt(start, end, steps, i);
  }
  return out;
}

}  // namespace

QuantParams ObserverQParams::ToQuantParams(bool per_channel, int64_t axis) const {
  std::vector<double> s(scales.begin(), scales.end());
  if (per_channel) return QuantParams::PerChannel(std::move(s), zero_points, axis);
  return QuantParams::PerTensor(s.empty() ? 1.0 : s[0],
                                zero_points.empty() ? 0 : zero_points[0]);
}

absl::Status Observer::CheckRangeOrdered(size_t i, float min_val, float max_val) const {
  if (min_val <= max_val) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(ObserverKindName(spec_.kind), ": min ",
                                                    min_val, " is not <= max ", max_val,
                                                    " (entry ", i, ")"));
}

absl::Status Observer::CheckRangeFinite(size_t i, float min_val, float max_val) const {
  // PyTorch computes NaN parameters from an infinite range; converting them to an int64
  // zero point is undefined behaviour (found by pass_pipeline_fuzz), so it is an error.
  if (std::isfinite(min_val) && std::isfinite(max_val)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ObserverKindName(spec_.kind), ": observed range [", min_val, ", ", max_val,
      "] (entry ", i, ") is not finite; expected finite values"));
}

absl::Status Observer::CheckScale(size_t i, float min_val, float max_val, float scale) const {
  if (scale <= QuantParams::kMaxScale) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ObserverKindName(spec_.kind), ": observed range [", min_val, ", ", max_val, "] (entry ", i,
      ") gives scale ", scale, "; expected at most ", QuantParams::kMaxScale));
}

PerTensorQParams Observer::QParamsOfRange(float min_val, float max_val) const {
  const int64_t qmin = quant_min_, qmax = quant_max_;
  const float eps = static_cast<float>(spec_.eps);
  const float min_neg = std::min(min_val, 0.0f);
  float max_pos = std::max(max_val, 0.0f);
  float scale;
  int64_t zero_point = 0;
  if (IsSymmetric(spec_.qscheme)) {
    max_pos = std::max(-min_neg, max_pos);
    scale = max_pos / static_cast<float>(static_cast<double>(qmax - qmin) / 2);
    scale = std::max(scale, eps);
    if (spec_.dtype == DType::kQUInt8) {
      zero_point = spec_.quant_min.has_value() ? FloorDiv(qmin + qmax, 2) : 128;
    }
  } else {
    scale = (max_pos - min_neg) / static_cast<float>(qmax - qmin);
    scale = std::max(scale, eps);
    // torch.round rounds half to even, as nearbyint in the default rounding mode.
    zero_point = qmin - static_cast<int64_t>(std::nearbyint(min_neg / scale));
    zero_point = std::clamp(zero_point, qmin, qmax);
  }
  return {scale, zero_point};
}

absl::StatusOr<ObserverQParams> Observer::CalculateQParamsFromMinMax(
    const std::vector<float>& min_val, const std::vector<float>& max_val) const {
  // check_min_max_valid: not observed yet -> PyTorch's defaults.
  if (min_val.empty() || max_val.empty() ||
      (min_val.size() == 1 && !IsPerChannel(spec_.qscheme) && min_val[0] == kInf &&
       max_val[0] == -kInf)) {
    return ObserverQParams{{1.0f}, {0}};
  }
  if (min_val.size() != max_val.size()) {
    return absl::InternalError(absl::StrCat(ObserverKindName(spec_.kind), ": min_val has ",
                                            min_val.size(), " entries but max_val has ",
                                            max_val.size()));
  }
  for (size_t i = 0; i < min_val.size(); ++i) {
    RETURN_IF_ERROR(CheckRangeOrdered(i, min_val[i], max_val[i]));
  }
  for (size_t i = 0; i < min_val.size(); ++i) {
    RETURN_IF_ERROR(CheckRangeFinite(i, min_val[i], max_val[i]));
  }
  if (spec_.qscheme == ObserverQScheme::kPerChannelAffineFloatQParams) {
    return absl::UnimplementedError(absl::StrCat(
        ObserverKindName(spec_.kind),
        ": torch.per_channel_affine_float_qparams (float zero points)"));
  }
  ObserverQParams out;
  out.scales.resize(min_val.size());
  out.zero_points.resize(min_val.size());
  for (size_t i = 0; i < min_val.size(); ++i) {
    const PerTensorQParams q = QParamsOfRange(min_val[i], max_val[i]);
    RETURN_IF_ERROR(CheckScale(i, min_val[i], max_val[i], q.scale));
    out.scales[i] = q.scale;
    out.zero_points[i] = q.zero_point;
  }
  return out;
}

absl::StatusOr<PerTensorQParams> Observer::PerTensorQParamsFromMinMax(float min_val,
                                                                      float max_val) const {
  // CalculateQParamsFromMinMax({min_val}, {max_val}), step for step.
  if (!IsPerChannel(spec_.qscheme) && min_val == kInf && max_val == -kInf) {
    return PerTensorQParams{1.0f, 0};
  }
  RETURN_IF_ERROR(CheckRangeOrdered(0, min_val, max_val));
  RETURN_IF_ERROR(CheckRangeFinite(0, min_val, max_val));
  if (spec_.qscheme == ObserverQScheme::kPerChannelAffineFloatQParams) {
    return absl::UnimplementedError(absl::StrCat(
        ObserverKindName(spec_.kind),
        ": torch.per_channel_affine_float_qparams (float zero points)"));
  }
  const PerTensorQParams q = QParamsOfRange(min_val, max_val);
  RETURN_IF_ERROR(CheckScale(0, min_val, max_val, q.scale));
  return q;
}

absl::StatusOr<ObservedRange> Observer::RangeOf(const Tensor&) const {
  return absl::UnimplementedError(absl::StrCat(
      ObserverKindName(spec_.kind), ": its update is not a range fold (FoldsRanges)"));
}

absl::Status Observer::FoldRange(const ObservedRange&) {
  return absl::UnimplementedError(absl::StrCat(
      ObserverKindName(spec_.kind), ": its update is not a range fold (FoldsRanges)"));
}

// ---- MinMax / MovingAverageMinMax ---------------------------------------------------

absl::Status MinMaxObserver::Update(const Tensor& x) {
  ASSIGN_OR_RETURN(const ObservedRange range, RangeOf(x));
  return FoldRange(range);
}

absl::StatusOr<ObservedRange> MinMaxObserver::RangeOf(const Tensor& x) const {
  RETURN_IF_ERROR(CheckFloat(spec(), x));
  ObservedRange range;
  range.shape = x.shape();
  if (x.numel() == 0) return range;
  const auto [cur_min, cur_max] = AMinMax(x);
  range.min_val = {cur_min};
  range.max_val = {cur_max};
  return range;
}

absl::Status MinMaxObserver::FoldRange(const ObservedRange& range) {
  if (range.min_val.empty()) return absl::OkStatus();
  if (range.min_val.size() != 1 || range.max_val.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": a per-tensor observer folds one range; got ",
        range.min_val.size(), " minima and ", range.max_val.size(), " maxima"));
  }
  const float cur_min = range.min_val[0], cur_max = range.max_val[0];
  if (spec().kind == ObserverKind::kMovingAverageMinMax &&
      !(min_val_ == kInf && max_val_ == -kInf)) {
    const float c = static_cast<float>(spec().averaging_constant);
    min_val_ = min_val_ + c * (cur_min - min_val_);
    max_val_ = max_val_ + c * (cur_max - max_val_);
    return absl::OkStatus();
  }
  if (spec().kind == ObserverKind::kMovingAverageMinMax) {
    min_val_ = cur_min;
    max_val_ = cur_max;
    return absl::OkStatus();
  }
  min_val_ = std::min(cur_min, min_val_);
  max_val_ = std::max(cur_max, max_val_);
  return absl::OkStatus();
}

absl::Status MinMaxObserver::SetState(const std::vector<float>& min_val,
                                      const std::vector<float>& max_val,
                                      const std::vector<float>& histogram) {
  RETURN_IF_ERROR(CheckStateSizes(spec(), min_val, max_val, histogram, /*per_channel=*/false,
                                  /*histogram_bins=*/0));
  min_val_ = min_val[0];
  max_val_ = max_val[0];
  return absl::OkStatus();
}

absl::StatusOr<ObserverQParams> MinMaxObserver::CalculateQParams() const {
  return CalculateQParamsFromMinMax({min_val_}, {max_val_});
}

absl::StatusOr<PerTensorQParams> MinMaxObserver::CalculatePerTensorQParams() const {
  return PerTensorQParamsFromMinMax(min_val_, max_val_);
}

std::unique_ptr<Observer> MinMaxObserver::Clone() const {
  return std::unique_ptr<Observer>(new MinMaxObserver(*this));
}

void MinMaxObserver::Reset() {
  min_val_ = kInf;
  max_val_ = -kInf;
}

// ---- FixedQParams -------------------------------------------------------------------

absl::StatusOr<ObserverQParams> FixedQParamsObserver::CalculateQParams() const {
  ASSIGN_OR_RETURN(PerTensorQParams q, CalculatePerTensorQParams());
  return ObserverQParams{{q.scale}, {q.zero_point}};
}

absl::StatusOr<PerTensorQParams> FixedQParamsObserver::CalculatePerTensorQParams() const {
  // PyTorch keeps the scale in a float32 buffer.
  return PerTensorQParams{static_cast<float>(spec().fixed_scale), spec().fixed_zero_point};
}

std::unique_ptr<Observer> FixedQParamsObserver::Clone() const {
  return std::unique_ptr<Observer>(new FixedQParamsObserver(*this));
}

// ---- PerChannelMinMax / MovingAveragePerChannelMinMax ------------------------------

absl::Status PerChannelMinMaxObserver::Update(const Tensor& x) {
  ASSIGN_OR_RETURN(const ObservedRange range, RangeOf(x));
  return FoldRange(range);
}

absl::StatusOr<ObservedRange> PerChannelMinMaxObserver::RangeOf(const Tensor& x) const {
  RETURN_IF_ERROR(CheckFloat(spec(), x));
  ObservedRange range;
  range.shape = x.shape();
  if (x.numel() == 0) return range;
  const int64_t rank = x.dim();
  int64_t axis = spec().ch_axis;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": ch_axis ", spec().ch_axis,
        " is out of range for a tensor of shape ", x.ShapeString()));
  }
  range.axis = axis;
  const int64_t channels = x.shape()[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  std::vector<float>& cur_min = range.min_val;
  std::vector<float>& cur_max = range.max_val;
  cur_min.assign(static_cast<size_t>(channels), kInf);
  cur_max.assign(static_cast<size_t>(channels), -kInf);
  const float* data = x.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* row = data + (o * channels + c) * inner;
      AccumulateMinMax(row, inner, cur_min[static_cast<size_t>(c)],
                       cur_max[static_cast<size_t>(c)]);
    }
  }
  return range;
}

absl::Status PerChannelMinMaxObserver::FoldRange(const ObservedRange& range) {
  if (range.min_val.empty()) return absl::OkStatus();
  const std::vector<float>& cur_min = range.min_val;
  const std::vector<float>& cur_max = range.max_val;
  if (cur_max.size() != cur_min.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": a range of ", cur_min.size(), " minima and ",
        cur_max.size(), " maxima"));
  }
  if (!min_val_.empty() && min_val_.size() != cur_min.size()) {
    std::ostringstream shape;
    shape << range.shape;
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": tensor of shape ", shape.str(), " has ",
        cur_min.size(), " channels on axis ", range.axis, "; earlier updates had ",
        min_val_.size()));
  }
  if (min_val_.empty()) {
    min_val_ = cur_min;
    max_val_ = cur_max;
    return absl::OkStatus();
  }
  const bool moving = spec().kind == ObserverKind::kMovingAveragePerChannelMinMax;
  const float c = static_cast<float>(spec().averaging_constant);
  for (size_t i = 0; i < min_val_.size(); ++i) {
    if (moving) {
      min_val_[i] = min_val_[i] + c * (cur_min[i] - min_val_[i]);
      max_val_[i] = max_val_[i] + c * (cur_max[i] - max_val_[i]);
    } else {
      min_val_[i] = std::min(cur_min[i], min_val_[i]);
      max_val_[i] = std::max(cur_max[i], max_val_[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status PerChannelMinMaxObserver::SetState(const std::vector<float>& min_val,
                                                const std::vector<float>& max_val,
                                                const std::vector<float>& histogram) {
  RETURN_IF_ERROR(CheckStateSizes(spec(), min_val, max_val, histogram, /*per_channel=*/true,
                                  /*histogram_bins=*/0));
  min_val_ = min_val;
  max_val_ = max_val;
  return absl::OkStatus();
}

absl::StatusOr<ObserverQParams> PerChannelMinMaxObserver::CalculateQParams() const {
  return CalculateQParamsFromMinMax(min_val_, max_val_);
}

absl::StatusOr<PerTensorQParams> PerChannelMinMaxObserver::CalculatePerTensorQParams() const {
  return absl::UnimplementedError(absl::StrCat(
      ObserverKindName(spec().kind), ": a per-channel observer has one scale per channel"));
}

std::unique_ptr<Observer> PerChannelMinMaxObserver::Clone() const {
  return std::unique_ptr<Observer>(new PerChannelMinMaxObserver(*this));
}

void PerChannelMinMaxObserver::Reset() {
  min_val_.clear();
  max_val_.clear();
}

// ---- Histogram ----------------------------------------------------------------------

absl::Status HistogramObserver::Update(const Tensor& x_orig) {
  RETURN_IF_ERROR(CheckFloat(spec(), x_orig));
  if (x_orig.numel() == 0) return absl::OkStatus();
  const int64_t bins = spec().bins;
  auto [x_min, x_max] = AMinMax(x_orig);
  // PyTorch 2 drops infinite values (they would make the range infinite; quantization
  // clamps them anyway) and observes the rest.
  Tensor finite;
  const Tensor* x = &x_orig;
  if (x_min == -kInf || x_max == kInf) {
    std::vector<float> kept;
    const float* data = x_orig.data<float>();
    for (int64_t i = 0; i < x_orig.numel(); ++i) {
      if (std::fabs(data[i]) != kInf) kept.push_back(data[i]);
    }
    if (kept.empty()) return absl::OkStatus();
    finite = Tensor::FromFloats({static_cast<int64_t>(kept.size())}, kept);
    x = &finite;
    std::tie(x_min, x_max) = AMinMax(finite);
  }
  const bool uninitialized = min_val_ == kInf || max_val_ == -kInf;
  const float new_min = uninitialized ? x_min : std::min(min_val_, x_min);
  const float new_max = uninitialized ? x_max : std::max(max_val_, x_max);
  // PyTorch's histc refuses a non-finite range (NaN data); a range too wide for float32
  // would turn the bin arithmetic's inf into an integer (found by pass_pipeline_fuzz).
  // Checked before anything changes.
  if (!std::isfinite(x_min) || !std::isfinite(x_max) || !std::isfinite(new_max - new_min)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": observed range [", x_min, ", ", x_max, "]",
        uninitialized ? "" : absl::StrCat(" with the histogram's [", min_val_, ", ",
                                          max_val_, "]"),
        " is not finite or too wide for float32; expected finite values"));
  }
  std::vector<float> update = Histc(*x, bins, new_min, new_max);
  if (uninitialized) {
    histogram_ = std::move(update);
  } else if (new_min == min_val_ && new_max == max_val_) {
    for (size_t i = 0; i < update.size(); ++i) update[i] += histogram_[i];
    histogram_ = std::move(update);
  } else {
    const std::vector<float> moved = HistogramInRange(new_min, new_max);
    for (size_t i = 0; i < update.size(); ++i) update[i] += moved[i];
    histogram_ = std::move(update);
  }
  min_val_ = new_min;
  max_val_ = new_max;
  return absl::OkStatus();
}

std::vector<float> HistogramObserver::HistogramInRange(float new_min, float new_max) const {
  const int64_t bins = spec().bins;
  std::vector<float> moved(static_cast<size_t>(bins), 0.0f);
  if (min_val_ == max_val_) {
    // A histogram of one value: all its mass goes to that value's bin.
    double mass = 0;
    for (float h : histogram_) mass += h;
    moved[static_cast<size_t>(HistcBin(min_val_, new_min, new_max, bins))] =
        static_cast<float>(mass);
    return moved;
  }
  // _upscale_histogram: each bin splits into `rate` equal parts at the midpoints of its
  // sub-bins, and each part lands in the new bin whose edges hold its midpoint.
  const int64_t rate = spec().upsample_rate;
  const int64_t parts = bins * rate;
  const float part_width = (max_val_ - min_val_) / static_cast<float>(parts);
  const float half_part = 0.5f * part_width;
  const std::vector<float> edges = Linspace(new_min, new_max, bins + 1);
  for (int64_t j = 0; j < bins; ++j) {
    const float h = histogram_[static_cast<size_t>(j)];
    if (h == 0.0f) continue;  // adding +0 changes no count
    const float part = h / static_cast<float>(rate);
    for (int64_t i = j * rate; i < (j + 1) * rate; ++i) {
      const float midpoint = LinspaceAt(min_val_, max_val_, parts + 1, i) + half_part;
      int64_t bin = std::upper_bound(edges.begin(), edges.end(), midpoint) - edges.begin() - 1;
      bin = std::clamp<int64_t>(bin, 0, bins - 1);
      moved[static_cast<size_t>(bin)] += part;
    }
  }
  return moved;
}

float HistogramObserver::ErrorBinWidth() const {
  const double bin_width_d = (static_cast<double>(max_val_) - static_cast<double>(min_val_)) /
                             static_cast<double>(spec().bins);
  return static_cast<float>(bin_width_d);
}

void HistogramObserver::NonzeroBins(std::vector<int64_t>* bins,
                                    std::vector<float>* densities) const {
  const float bin_width = ErrorBinWidth();
  for (size_t i = 0; i < histogram_.size(); ++i) {
    if (histogram_[i] == 0.0f) continue;
    bins->push_back(static_cast<int64_t>(i));
    densities->push_back(histogram_[i] / bin_width);
  }
}

namespace {

// torch.sum's vector: 8 float lanes (Vectorized<float> of its sum kernel).
constexpr int kSumLanes = 8;
using SumLanes = std::array<float, kSumLanes>;

void AddLanes(SumLanes& acc, const SumLanes& v) {
  for (int lane = 0; lane < kSumLanes; ++lane) acc[lane] += v[lane];
}

SumLanes LoadLanes(const float* at) {
  SumLanes v;
  std::copy_n(at, kSumLanes, v.begin());
  return v;
}

int64_t TorchCeilLog2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x - 1); v != 0; v >>= 1) ++bits;
  return bits;
}

// multi_row_sum: `rows` rows of kIlp vectors each (row i's vector k at
// values + (i * kIlp + k) * kSumLanes), summed per k through four levels of accumulators
// that carry up every 2^level_power rows.
constexpr int kIlp = 4;
std::array<SumLanes, kIlp> MultiRowSum(const float* values, int64_t rows) {
  constexpr int kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, TorchCeilLog2(rows) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  std::array<std::array<SumLanes, kIlp>, kLevels> acc{};
  auto add_row = [&](int64_t i) {
    for (int k = 0; k < kIlp; ++k) AddLanes(acc[0][k], LoadLanes(values + (i * kIlp + k) * kSumLanes));
  };
  int64_t i = 0;
  while (i + level_step <= rows) {
    for (int64_t j = 0; j < level_step; ++j, ++i) add_row(i);
    for (int level = 1; level < kLevels; ++level) {
      for (int k = 0; k < kIlp; ++k) {
        AddLanes(acc[level][k], acc[level - 1][k]);
        acc[level - 1][k].fill(0.0f);
      }
      if ((i & (level_mask << (level * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i) add_row(i);
  for (int level = 1; level < kLevels; ++level) {
    for (int k = 0; k < kIlp; ++k) AddLanes(acc[0][k], acc[level][k]);
  }
  return acc[0];
}

}  // namespace

float TorchFloat32Sum(const float* values, int64_t n) {
  // row_sum over the whole vectors, kIlp interleaved, the leftover vectors into the first.
  const int64_t vectors = n / kSumLanes;
  const int64_t rows = vectors / kIlp;
  std::array<SumLanes, kIlp> partial = MultiRowSum(values, rows);
  for (int64_t v = rows * kIlp; v < vectors; ++v) {
    AddLanes(partial[0], LoadLanes(values + v * kSumLanes));
  }
  for (int k = 1; k < kIlp; ++k) AddLanes(partial[0], partial[k]);
  // The elements past the last whole vector, then the lanes, into one float.
  float sum = 0.0f;
  for (int64_t i = vectors * kSumLanes; i < n; ++i) sum += values[i];
  for (float lane : partial[0]) sum += lane;
  return sum;
}

double HistogramObserver::QuantizationError(int64_t next_start_bin, int64_t next_end_bin,
                                            const std::vector<int64_t>& nonzero_bins,
                                            const std::vector<float>& nonzero_densities) const {
  const int64_t bins = spec().bins;
  const double dst_nbins = std::ldexp(1.0, static_cast<int>(8 * DTypeSize(spec().dtype)));
  const double bin_width_d =
      (static_cast<double>(max_val_) - static_cast<double>(min_val_)) / static_cast<double>(bins);
  const double dst_bin_width_d =
      bin_width_d * static_cast<double>(next_end_bin - next_start_bin + 1) / dst_nbins;
  if (dst_bin_width_d == 0.0) return 0.0;
  // Tensor arithmetic with Python-float scalars happens in float32.
  const float bin_width = static_cast<float>(bin_width_d);
  const float dst_bin_width = static_cast<float>(dst_bin_width_d);
  const float half_dst = static_cast<float>(dst_bin_width_d / 2);
  const float neg_half_dst = static_cast<float>(-dst_bin_width_d / 2);
  const float max_dst_bin = static_cast<float>(dst_nbins - 1);
  auto norm_of = [](float begin, float end, float density) {
    return density * ((end * end * end - begin * begin * begin) / 3.0f);
  };
  // norm_of(neg_half_dst, half_dst, density) is density times this, the same for every
  // bin of this range: computed once, with the same float operations.
  const float full_dst_bin_norm =
      (half_dst * half_dst * half_dst - neg_half_dst * neg_half_dst * neg_half_dst) / 3.0f;
  // An empty bin has density 0 and adds a zero norm, which leaves `sum` unchanged, as
  // long as no cube overflows to infinity (0 * inf would be NaN): every cubed value is
  // below about 2.1 * bins * bin_width, so below 1e12 the empty bins can be skipped.
  const bool skip_empty_bins =
      bin_width > 0.0f && dst_bin_width > 0.0f &&
      3.0 * static_cast<double>(bins) * static_cast<double>(bin_width) < 1e12;
  std::vector<int64_t> all_bins;
  if (!skip_empty_bins) {
    all_bins.resize(static_cast<size_t>(bins));
    for (int64_t i = 0; i < bins; ++i) all_bins[static_cast<size_t>(i)] = i;
  }
  const std::vector<int64_t>& visited = skip_empty_bins ? nonzero_bins : all_bins;
  // The norm of visited bin k.
  auto bin_norm = [&](size_t k) {
    const int64_t i = visited[k];
    const float src_begin = static_cast<float>(i - next_start_bin) * bin_width;
    const float src_end = src_begin + bin_width;
    const float dst_of_begin =
        std::clamp(FastDivFloor(src_begin, dst_bin_width), 0.0f, max_dst_bin);
    const float dst_of_begin_center = (dst_of_begin + 0.5f) * dst_bin_width;
    const float dst_of_end = std::clamp(FastDivFloor(src_end, dst_bin_width), 0.0f, max_dst_bin);
    // The non-empty bins' densities are the search's (computed once per histogram with
    // this bin_width); an empty bin's is computed here.
    const float density = skip_empty_bins ? nonzero_densities[k]
                                          : histogram_[static_cast<size_t>(i)] / bin_width;
    float norm = 0.0f;
    norm += norm_of(src_begin - dst_of_begin_center, half_dst, density);
    norm += (dst_of_end - dst_of_begin - 1.0f) * (density * full_dst_bin_norm);
    const float dst_of_end_center = dst_of_end * dst_bin_width + half_dst;
    norm += norm_of(neg_half_dst, src_end - dst_of_end_center, density);
    return norm;
  };
  // PyTorch's per-bin norms (an empty bin's is 0, which adds nothing), summed as
  // torch.sum sums them.
  std::vector<float> norms_by_bin(static_cast<size_t>(bins), 0.0f);
  size_t k = 0;
#ifdef __SSE2__
  // Four non-empty bins at a time: bin_norm's float operations, in the same order, in SSE
  // lanes (the six divisions per bin cost what one does).
  if (skip_empty_bins) {
    const __m128 v_bin_width = _mm_set1_ps(bin_width);
    const __m128 v_dst_bin_width = _mm_set1_ps(dst_bin_width);
    const __m128 v_half_dst = _mm_set1_ps(half_dst);
    const __m128 v_neg_half_dst = _mm_set1_ps(neg_half_dst);
    const __m128 v_max_dst_bin = _mm_set1_ps(max_dst_bin);
    const __m128 v_full_dst_bin_norm = _mm_set1_ps(full_dst_bin_norm);
    const __m128 zero = _mm_setzero_ps(), half = _mm_set1_ps(0.5f), one = _mm_set1_ps(1.0f);
    const __m128 three = _mm_set1_ps(3.0f);
    auto norm_of4 = [three](__m128 begin, __m128 end, __m128 density) {
      const __m128 end3 = _mm_mul_ps(_mm_mul_ps(end, end), end);
      const __m128 begin3 = _mm_mul_ps(_mm_mul_ps(begin, begin), begin);
      return _mm_mul_ps(density, _mm_div_ps(_mm_sub_ps(end3, begin3), three));
    };
    for (; k + 4 <= visited.size(); k += 4) {
      alignas(16) float begins[4];
      for (size_t j = 0; j < 4; ++j) {
        begins[j] = static_cast<float>(visited[k + j] - next_start_bin) * bin_width;
      }
      const __m128 src_begin = _mm_load_ps(begins);
      const __m128 src_end = _mm_add_ps(src_begin, v_bin_width);
      const __m128 dst_of_begin = Clamp4(
          FastDivFloor4(src_begin, v_dst_bin_width, dst_bin_width), zero, v_max_dst_bin);
      const __m128 dst_of_end = Clamp4(FastDivFloor4(src_end, v_dst_bin_width, dst_bin_width),
                                       zero, v_max_dst_bin);
      const __m128 density = _mm_loadu_ps(&nonzero_densities[k]);
      const __m128 dst_of_begin_center =
          _mm_mul_ps(_mm_add_ps(dst_of_begin, half), v_dst_bin_width);
      __m128 norm = _mm_add_ps(
          zero, norm_of4(_mm_sub_ps(src_begin, dst_of_begin_center), v_half_dst, density));
      norm = _mm_add_ps(norm, _mm_mul_ps(_mm_sub_ps(_mm_sub_ps(dst_of_end, dst_of_begin), one),
                                         _mm_mul_ps(density, v_full_dst_bin_norm)));
      const __m128 dst_of_end_center =
          _mm_add_ps(_mm_mul_ps(dst_of_end, v_dst_bin_width), v_half_dst);
      norm = _mm_add_ps(
          norm, norm_of4(v_neg_half_dst, _mm_sub_ps(src_end, dst_of_end_center), density));
      alignas(16) float norms[4];
      _mm_store_ps(norms, norm);
      for (size_t j = 0; j < 4; ++j) norms_by_bin[static_cast<size_t>(visited[k + j])] = norms[j];
    }
  }
#endif
  for (; k < visited.size(); ++k) norms_by_bin[static_cast<size_t>(visited[k])] = bin_norm(k);
  return TorchFloat32Sum(norms_by_bin);
}

double HistogramObserver::QuantizationError(int64_t start_bin, int64_t end_bin) const {
  std::vector<int64_t> nonzero_bins;
  std::vector<float> nonzero_densities;
  NonzeroBins(&nonzero_bins, &nonzero_densities);
  return QuantizationError(start_bin, end_bin, nonzero_bins, nonzero_densities);
}

std::pair<float, float> HistogramObserver::NonLinearParamSearch() const {
  const int64_t bins = spec().bins;
  const float bin_width = (max_val_ - min_val_) / static_cast<float>(bins);
  const double total = TorchFloat32Sum(histogram_);
  // torch.cumsum on CPU accumulates float32 in double and stores float32.
  std::vector<float> csum(histogram_.size());
  double running = 0;
  for (size_t i = 0; i < histogram_.size(); ++i) {
    running += histogram_[i];
    csum[i] = static_cast<float>(running);
  }
  std::vector<int64_t> nonzero_bins;
  std::vector<float> nonzero_densities;
  NonzeroBins(&nonzero_bins, &nonzero_densities);
  constexpr double kStepSize = 1e-5;
  double alpha = 0.0, beta = 1.0;
  int64_t start_bin = 0, end_bin = bins - 1;
  double norm_min = std::numeric_limits<double>::infinity();
  // PyTorch scans from start_bin (end_bin) on every step. alpha_mass only grows and
  // beta_mass only shrinks, so the bins a scan passed still pass on later steps: bins
  // [start_bin, left_passed) had csum < alpha_mass and (right_passed, end_bin] had
  // csum > beta_mass, and each scan resumes there.
  int64_t left_passed = start_bin, right_passed = end_bin;
  while (alpha < beta) {
    const double next_alpha = alpha + kStepSize;
    const double next_beta = beta - kStepSize;
    // Comparing a float32 tensor with a Python float compares in float32.
    const float alpha_mass = static_cast<float>(next_alpha * total);
    const float beta_mass = static_cast<float>(next_beta * total);
    int64_t l = std::min(std::max(left_passed, start_bin), end_bin);
    int64_t r = std::max(std::min(right_passed, end_bin), start_bin);
    while (l < end_bin && csum[static_cast<size_t>(l)] < alpha_mass) ++l;
    while (r > start_bin && csum[static_cast<size_t>(r)] > beta_mass) --r;
    left_passed = l;
    right_passed = r;
    int64_t next_start_bin = start_bin, next_end_bin = end_bin;
    if ((l - start_bin) > (end_bin - r)) {
      next_start_bin = l;
      alpha = next_alpha;
    } else {
      next_end_bin = r;
      beta = next_beta;
    }
    if (next_start_bin == start_bin && next_end_bin == end_bin) continue;
    const double norm =
        QuantizationError(next_start_bin, next_end_bin, nonzero_bins, nonzero_densities);
    if (norm > norm_min) break;
    norm_min = norm;
    start_bin = next_start_bin;
    end_bin = next_end_bin;
  }
  return {min_val_ + bin_width * static_cast<float>(start_bin),
          min_val_ + bin_width * static_cast<float>(end_bin + 1)};
}

absl::Status HistogramObserver::SetState(const std::vector<float>& min_val,
                                         const std::vector<float>& max_val,
                                         const std::vector<float>& histogram) {
  RETURN_IF_ERROR(CheckStateSizes(spec(), min_val, max_val, histogram, /*per_channel=*/false,
                                  spec().bins));
  const bool uninitialized = min_val[0] == kInf && max_val[0] == -kInf;
  if (!uninitialized && histogram.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ObserverKindName(spec().kind), ": range [", min_val[0], ", ", max_val[0],
        "] was observed but no histogram is given; expected ", spec().bins, " bins"));
  }
  min_val_ = min_val[0];
  max_val_ = max_val[0];
  histogram_ = histogram;
  return absl::OkStatus();
}

absl::StatusOr<ObserverQParams> HistogramObserver::CalculateQParams() const {
  if (min_val_ == kInf && max_val_ == -kInf) return ObserverQParams{{1.0f}, {0}};
  const auto [new_min, new_max] = NonLinearParamSearch();
  return CalculateQParamsFromMinMax({new_min}, {new_max});
}

absl::StatusOr<PerTensorQParams> HistogramObserver::CalculatePerTensorQParams() const {
  if (min_val_ == kInf && max_val_ == -kInf) return PerTensorQParams{1.0f, 0};
  const auto [new_min, new_max] = NonLinearParamSearch();
  return PerTensorQParamsFromMinMax(new_min, new_max);
}

std::unique_ptr<Observer> HistogramObserver::Clone() const {
  return std::unique_ptr<Observer>(new HistogramObserver(*this));
}

void HistogramObserver::Reset() {
  min_val_ = kInf;
  max_val_ = -kInf;
  histogram_.clear();
}

absl::StatusOr<std::unique_ptr<Observer>> MakeObserver(const ObserverSpec& spec) {
  RETURN_IF_ERROR(spec.Validate());
  switch (spec.kind) {
    case ObserverKind::kMinMax:
    case ObserverKind::kMovingAverageMinMax:
    case ObserverKind::kPerChannelMinMax:
    case ObserverKind::kMovingAveragePerChannelMinMax:
    case ObserverKind::kHistogram:
    case ObserverKind::kFixedQParams:
      break;
    case ObserverKind::kPlaceholder:
      if (spec.is_dynamic || spec.IsFloat16Cast()) break;
      [[fallthrough]];
    default:
      return absl::UnimplementedError(absl::StrCat(
          ObserverKindName(spec.kind), " computes no statistics; it has no Observer class"));
  }
  ASSIGN_OR_RETURN(const auto range, spec.QuantRange());
  std::unique_ptr<Observer> observer;
  switch (spec.kind) {
    case ObserverKind::kMinMax:
    case ObserverKind::kMovingAverageMinMax:
    // Dynamic or a float16 cast: its range is recorded, never used.
    case ObserverKind::kPlaceholder:
      observer.reset(new MinMaxObserver(spec, range.first, range.second));
      break;
    case ObserverKind::kPerChannelMinMax:
    case ObserverKind::kMovingAveragePerChannelMinMax:
      observer.reset(new PerChannelMinMaxObserver(spec, range.first, range.second));
      break;
    case ObserverKind::kFixedQParams:
      observer.reset(new FixedQParamsObserver(spec, range.first, range.second));
      break;
    default:
      // The histogram stays empty until the first update, which replaces it.
      observer.reset(new HistogramObserver(spec, range.first, range.second));
      break;
  }
  return observer;
}

}  // namespace fuselage
