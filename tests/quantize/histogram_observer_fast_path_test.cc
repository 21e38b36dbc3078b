// HistogramObserver's optimized Update / CalculateQParams against a straightforward
// transcription of PyTorch 2's HistogramObserver (full-size upsampled buffers, a scan of
// every bin for each candidate range, fmodf floor division). Both must agree bit for bit
// on random inputs: histogram, range, scale and zero point. observers_test checks both
// against PyTorch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "quantize/observers.h"

namespace fuselage {
namespace {

// ---- Reference: the plain algorithm, as in torch/ao/quantization/observer.py ----------

std::pair<float, float> RefMinMax(const std::vector<float>& x) {
  float lo = x[0], hi = x[0];
  for (float v : x) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {lo, hi};
}

float RefDivFloor(float a, float b) {
  if (b == 0) return a / b;
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.0f;
  return floordiv;
}

std::vector<float> RefHistc(const std::vector<float>& x, int64_t bins, double min, double max) {
  double left = min, right = max;
  if (left == right) {
    auto [lo, hi] = RefMinMax(x);
    left = lo;
    right = hi;
  }
  if (left == right) {
    left -= 1;
    right += 1;
  }
  const float left_f = static_cast<float>(left), right_f = static_cast<float>(right);
  std::vector<float> hist(static_cast<size_t>(bins), 0.0f);
  for (float elt : x) {
    if (!(elt >= left_f && elt <= right_f)) continue;
    int64_t pos =
        static_cast<int64_t>((elt - left_f) * static_cast<float>(bins) / (right_f - left_f));
    if (pos == bins) pos -= 1;
    hist[static_cast<size_t>(pos)] += 1.0f;
  }
  return hist;
}

// torch.linspace as PyTorch 2's CPU kernel computes it (one fused multiply-add per element,
// the second half stepped back from `end`).
std::vector<float> RefLinspace(float start, float end, int64_t steps) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  std::vector<float> out;
  for (int64_t i = 0; i < steps; ++i) {
    out.push_back(i < steps / 2 ? std::fma(step, static_cast<float>(i), start)
                                : std::fma(-step, static_cast<float>(steps - i - 1), end));
  }
  return out;
}

struct RefHistogram {
  int64_t bins;
  int64_t upsample_rate;
  double dst_nbins;  // 2^(8 * dtype size)
  float min_val = std::numeric_limits<float>::infinity();
  float max_val = -std::numeric_limits<float>::infinity();
  std::vector<float> histogram;

  // forward(): histc of the batch over the combined range, plus the old histogram
  // (_combine_histograms / _upscale_histogram when the range grew).
  void Update(const std::vector<float>& x) {
    const auto [x_min, x_max] = RefMinMax(x);
    if (std::isinf(min_val)) {
      min_val = x_min;
      max_val = x_max;
      histogram = RefHistc(x, bins, x_min, x_max);
      return;
    }
    const float new_min = std::min(min_val, x_min), new_max = std::max(max_val, x_max);
    std::vector<float> combined = RefHistc(x, bins, new_min, new_max);
    std::vector<float> old_in_new(static_cast<size_t>(bins), 0.0f);
    if (new_min == min_val && new_max == max_val) {
      old_in_new = histogram;
    } else if (min_val == max_val) {
      float mass = 0;
      for (float h : histogram) mass += h;
      old_in_new = RefHistc({min_val}, bins, new_min, new_max);
      for (float& h : old_in_new) h *= mass;
    } else {
      const int64_t parts = bins * upsample_rate;
      std::vector<float> upsampled;
      for (float h : histogram) {
        for (int64_t r = 0; r < upsample_rate; ++r) {
          upsampled.push_back(h / static_cast<float>(upsample_rate));
        }
      }
      const float bin_size = (max_val - min_val) / static_cast<float>(parts);
      const std::vector<float> starts = RefLinspace(min_val, max_val, parts + 1);
      const std::vector<float> edges = RefLinspace(new_min, new_max, bins + 1);
      for (int64_t i = 0; i < parts; ++i) {
        const float midpoint = starts[static_cast<size_t>(i)] + 0.5f * bin_size;
        // bucketize(right=True) - 1: the last edge <= midpoint.
        int64_t bucket = std::upper_bound(edges.begin(), edges.end(), midpoint) - edges.begin() - 1;
        bucket = std::clamp<int64_t>(bucket, 0, bins - 1);
        old_in_new[static_cast<size_t>(bucket)] += upsampled[static_cast<size_t>(i)];
      }
    }
    for (size_t i = 0; i < combined.size(); ++i) combined[i] += old_in_new[i];
    histogram = std::move(combined);
    min_val = new_min;
    max_val = new_max;
  }

  double QuantizationError(int64_t next_start_bin, int64_t next_end_bin) const {
    const double bin_width_d =
        (static_cast<double>(max_val) - static_cast<double>(min_val)) / static_cast<double>(bins);
    const double dst_bin_width_d =
        bin_width_d * static_cast<double>(next_end_bin - next_start_bin + 1) / dst_nbins;
    if (dst_bin_width_d == 0.0) return 0.0;
    const float bin_width = static_cast<float>(bin_width_d);
    const float dst_bin_width = static_cast<float>(dst_bin_width_d);
    const float half_dst = static_cast<float>(dst_bin_width_d / 2);
    const float neg_half_dst = static_cast<float>(-dst_bin_width_d / 2);
    const float max_dst_bin = static_cast<float>(dst_nbins - 1);
    auto norm_of = [](float begin, float end, float density) {
      return density * ((end * end * end - begin * begin * begin) / 3.0f);
    };
    std::vector<float> norms(static_cast<size_t>(bins));
    for (int64_t i = 0; i < bins; ++i) {
      const float src_begin = static_cast<float>(i - next_start_bin) * bin_width;
      const float src_end = src_begin + bin_width;
      const float dst_of_begin =
          std::clamp(RefDivFloor(src_begin, dst_bin_width), 0.0f, max_dst_bin);
      const float dst_of_begin_center = (dst_of_begin + 0.5f) * dst_bin_width;
      const float dst_of_end = std::clamp(RefDivFloor(src_end, dst_bin_width), 0.0f, max_dst_bin);
      const float density = histogram[static_cast<size_t>(i)] / bin_width;
      float norm = 0.0f;
      norm += norm_of(src_begin - dst_of_begin_center, half_dst, density);
      norm += (dst_of_end - dst_of_begin - 1.0f) * norm_of(neg_half_dst, half_dst, density);
      const float dst_of_end_center = dst_of_end * dst_bin_width + half_dst;
      norm += norm_of(neg_half_dst, src_end - dst_of_end_center, density);
      norms[static_cast<size_t>(i)] = norm;
    }
    return TorchFloat32Sum(norms);  // norm.sum()
  }

  std::pair<float, float> NonLinearParamSearch() const {
    const float bin_width = (max_val - min_val) / static_cast<float>(bins);
    const double total = TorchFloat32Sum(histogram);  // torch.sum(self.histogram)
    std::vector<float> csum(histogram.size());
    double running = 0;
    for (size_t i = 0; i < histogram.size(); ++i) {
      running += histogram[i];
      csum[i] = static_cast<float>(running);
    }
    double alpha = 0.0, beta = 1.0;
    int64_t start_bin = 0, end_bin = bins - 1;
    double norm_min = std::numeric_limits<double>::infinity();
    while (alpha < beta) {
      const double next_alpha = alpha + 1e-5;
      const double next_beta = beta - 1e-5;
      const float alpha_mass = static_cast<float>(next_alpha * total);
      const float beta_mass = static_cast<float>(next_beta * total);
      int64_t l = start_bin, r = end_bin;
      while (l < end_bin && csum[static_cast<size_t>(l)] < alpha_mass) ++l;
      while (r > start_bin && csum[static_cast<size_t>(r)] > beta_mass) --r;
      int64_t next_start_bin = start_bin, next_end_bin = end_bin;
      if ((l - start_bin) > (end_bin - r)) {
        next_start_bin = l;
        alpha = next_alpha;
      } else {
        next_end_bin = r;
        beta = next_beta;
      }
      if (next_start_bin == start_bin && next_end_bin == end_bin) continue;
      const double norm = QuantizationError(next_start_bin, next_end_bin);
      if (norm > norm_min) break;
      norm_min = norm;
      start_bin = next_start_bin;
      end_bin = next_end_bin;
    }
    return {min_val + bin_width * static_cast<float>(start_bin),
            min_val + bin_width * static_cast<float>(end_bin + 1)};
  }
};

// ---- Random cases ---------------------------------------------------------------------

struct Case {
  int64_t bins;
  int64_t upsample_rate;
  DType dtype;
  ObserverQScheme qscheme;
};

// A batch around `base_scale` whose distribution and scale vary with the draw, so
// updates grow the range by small and large factors, shift it, or leave it unchanged,
// and histograms are dense, sparse, or concentrated in a few bins.
std::vector<float> RandomBatch(float base_scale, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 5);
  std::uniform_int_distribution<int> size_pick(1, 700);
  std::uniform_real_distribution<float> scale_pick(-0.8f, 0.8f);
  const int kind = pick(rng);
  const int n = size_pick(rng);
  const float scale = base_scale * std::pow(10.0f, scale_pick(rng));
  const float shift = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng) * scale;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    switch (kind) {
      case 0: v = normal(rng) * scale; break;
      case 1: v = uniform(rng) * scale + shift; break;
      case 2: v = std::max(0.0f, normal(rng)) * scale; break;       // ReLU output
      case 3: v = std::round(normal(rng) * 3.0f) * scale; break;    // few distinct values
      case 4: v = std::exp(normal(rng) * 2.0f) * scale; break;      // heavy tail
      default: v = normal(rng) * 0.01f + 0.5f; break;               // narrow, no 0
    }
  }
  return x;
}

TEST(HistogramObserverFastPath, BitIdenticalToReferenceOnRandomInputs) {
  const std::vector<Case> cases = {
      {2048, 16, DType::kQUInt8, ObserverQScheme::kPerTensorAffine},  // qnnpack default
      {2048, 128, DType::kQInt8, ObserverQScheme::kPerTensorSymmetric},
      {256, 3, DType::kQUInt8, ObserverQScheme::kPerTensorAffine},
      {100, 7, DType::kQInt8, ObserverQScheme::kPerTensorAffine},
      {37, 1, DType::kQUInt8, ObserverQScheme::kPerTensorSymmetric},
  };
  std::mt19937 rng(20261129);
  int compared = 0;
  int updates_compared = 0;
  int errors_compared = 0;
  for (const Case& c : cases) {
    for (int trial = 0; trial < 24; ++trial) {
      ObserverSpec spec;
      spec.kind = ObserverKind::kHistogram;
      spec.dtype = c.dtype;
      spec.qscheme = c.qscheme;
      spec.bins = c.bins;
      spec.upsample_rate = c.upsample_rate;
      auto observer = MakeObserver(spec);
      ASSERT_TRUE(observer.ok()) << observer.status();
      RefHistogram ref;
      ref.bins = c.bins;
      ref.upsample_rate = c.upsample_rate;
      ref.dst_nbins = 256.0;  // 8-bit dtypes
      const int updates = 1 + trial % 5;
      // Magnitudes from 1e-3 to 1e4 across trials.
      const float base_scale = std::pow(10.0f, static_cast<float>(trial % 8) - 3.0f);
      for (int u = 0; u < updates; ++u) {
        const std::vector<float> batch = RandomBatch(base_scale, rng);
        const absl::Status status = (*observer)->Update(
            Tensor::FromFloats({static_cast<int64_t>(batch.size())}, batch));
        ASSERT_TRUE(status.ok()) << status;
        ++updates_compared;
        ref.Update(batch);
        const auto* fast = static_cast<const HistogramObserver*>(observer->get());
        ASSERT_EQ(fast->min_val()[0], ref.min_val) << "case bins=" << c.bins << " trial " << trial;
        ASSERT_EQ(fast->max_val()[0], ref.max_val) << "case bins=" << c.bins << " trial " << trial;
        ASSERT_EQ(fast->histogram(), ref.histogram)
            << "case bins=" << c.bins << " trial " << trial << " update " << u;
      }
      const auto* fast = static_cast<const HistogramObserver*>(observer->get());
      // The error of every range the search can visit shape: both ends moved inward by
      // random amounts, including the full histogram and single-bin ranges.
      if (!ref.histogram.empty() && !std::isinf(ref.min_val)) {
        std::uniform_int_distribution<int64_t> bin_pick(0, c.bins - 1);
        for (int k = 0; k < 200; ++k) {
          int64_t start = bin_pick(rng), end = bin_pick(rng);
          if (k == 0) start = 0, end = c.bins - 1;
          if (start > end) std::swap(start, end);
          ASSERT_EQ(fast->QuantizationError(start, end), ref.QuantizationError(start, end))
              << "case bins=" << c.bins << " trial " << trial << " range [" << start << ", "
              << end << "]";
          ++errors_compared;
        }
      }
      const auto [ref_min, ref_max] = ref.NonLinearParamSearch();
      const auto [fast_min, fast_max] = fast->SearchedRange();
      ASSERT_EQ(fast_min, ref_min) << "case bins=" << c.bins << " trial " << trial;
      ASSERT_EQ(fast_max, ref_max) << "case bins=" << c.bins << " trial " << trial;
      auto fast_qparams = (*observer)->CalculateQParams();
      ASSERT_TRUE(fast_qparams.ok()) << fast_qparams.status();
      // The reference range through the (unoptimized) min/max formula of a MinMaxObserver
      // with the same dtype and scheme.
      ObserverSpec minmax_spec = spec;
      minmax_spec.kind = ObserverKind::kMinMax;
      auto minmax = MakeObserver(minmax_spec);
      ASSERT_TRUE(minmax.ok()) << minmax.status();
      ASSERT_TRUE((*minmax)->Update(Tensor::FromFloats({2}, {ref_min, ref_max})).ok());
      auto ref_qparams = (*minmax)->CalculateQParams();
      ASSERT_TRUE(ref_qparams.ok());
      EXPECT_EQ(fast_qparams->scales, ref_qparams->scales)
          << "case bins=" << c.bins << " trial " << trial;
      EXPECT_EQ(fast_qparams->zero_points, ref_qparams->zero_points)
          << "case bins=" << c.bins << " trial " << trial;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 5 * 24);
  EXPECT_GT(updates_compared, 250);
  EXPECT_GT(errors_compared, 20000);
}

}  // namespace
}  // namespace fuselage
