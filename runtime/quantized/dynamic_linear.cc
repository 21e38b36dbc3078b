#include "runtime/quantized/dynamic_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/kernel_args.h"
#include "runtime/onednn/onednn.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/quantize.h"
#include "runtime/quantized/weight_utils.h"
#include "runtime/value.h"

namespace fuselage {
namespace quantized {
namespace {

using dt = dnnl::memory::data_type;

// The range of a float tensor (0, 0 when empty); NaN elements are skipped.
std::pair<float, float> MinMax(const Tensor& x) {
  float lo, hi;
  MinMaxFloats(x.data<float>(), x.numel(), &lo, &hi);
  if (lo > hi) return {0.0f, 0.0f};
  return {lo, hi};
}

// colsum[n] = sum_k w[n, k] of int8 weights [N, K], kept per weight tensor under the rules
// of onednn.h's "Weight reuse": only for a tensor that owns its bytes (an entry holds a
// reference to its buffer, so the address is not reused, and a write detaches the writer);
// borrowed bytes are summed on every call. Process-wide, thread-safe, bounded.
class WeightColumnSums {
 public:
  static WeightColumnSums& Get() {
    static WeightColumnSums* const cache = new WeightColumnSums();
    return *cache;
  }

  std::shared_ptr<const std::vector<int32_t>> Find(const Tensor& w, int64_t n, int64_t k) {
    const void* data = w.raw_data();
    if (!w.borrows_bytes()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(data);
      if (it != entries_.end() && it->second.n == n && it->second.k == k) {
        return it->second.sums;
      }
    }
    auto sums = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(n), 0);
    const int8_t* values = static_cast<const int8_t*>(data);
    for (int64_t i = 0; i < n; ++i) {
      int32_t total = 0;
      for (int64_t j = 0; j < k; ++j) total += values[i * k + j];
      (*sums)[i] = total;
    }
    if (w.borrows_bytes()) return sums;
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_[data] = Entry{w, n, k, sums};
    return sums;
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  struct Entry {
    Tensor owner;  // keeps the buffer (and so its address) alive
    int64_t n = 0, k = 0;
    std::shared_ptr<const std::vector<int32_t>> sums;
  };
  std::mutex mu_;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace

DynamicQParams ChooseDynamicQParams(float min, float max, int32_t qmin, int32_t qmax,
                                    bool reduce_range) {
  if (reduce_range) {
    qmin /= 2;
    qmax /= 2;
  }
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  double scale = (static_cast<double>(max) - min) / (qmax - qmin);
  if (static_cast<float>(scale) == 0.0f || std::isinf(1.0f / static_cast<float>(scale))) {
    scale = 0.1;
  }
  // PyTorch's SMALL_SCALE_THRESHOLD: a smaller scale is raised to it, the range widened.
  constexpr float kSmallScale = 6.1e-5f;
  if (scale < kSmallScale) {
    const float original = static_cast<float>(scale);
    scale = kSmallScale;
    if (min == 0.0f) {
      max = kSmallScale * static_cast<float>(qmax - qmin);
    } else if (max == 0.0f) {
      min = -kSmallScale * static_cast<float>(qmax - qmin);
    } else {
      const float amplifier = kSmallScale / original;
      min *= amplifier;
      max *= amplifier;
    }
  }
  const double from_min = qmin - min / scale;
  const double from_max = qmax - max / scale;
  const double from_min_error = std::abs(qmin) - std::abs(min / scale);
  const double from_max_error = std::abs(qmax) - std::abs(max / scale);
  const double initial = from_min_error < from_max_error ? from_min : from_max;
  int32_t zero_point;
  if (initial < qmin) {
    zero_point = qmin;
  } else if (initial > qmax) {
    zero_point = qmax;
  } else {
    zero_point = static_cast<int32_t>(std::nearbyint(initial));
  }
  return DynamicQParams{static_cast<float>(scale), zero_point, qmin, qmax};
}

absl::StatusOr<Tensor> DynamicQuantizedLinear(const Tensor& x, const Tensor& qweight,
                                              const Tensor* bias, bool reduce_range,
                                              QuantizedEngine engine) {
  constexpr absl::string_view op = "quantized linear_dynamic";
  RETURN_IF_ERROR(ExpectFloat32(x, op, "input"));
  if (x.dim() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": input is 0-d; expected shape [..., in_features]"));
  }
  RETURN_IF_ERROR(ExpectQInt8Weight(qweight, op, 2));
  const int64_t out_features = qweight.shape()[0], in_features = qweight.shape()[1];
  if (x.shape().back() != in_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has shape ", x.ShapeString(), " and weight ", qweight.ShapeString(),
        "; expected the input's last dimension to be in_features = ", in_features));
  }
  RETURN_IF_ERROR(ExpectBias(bias, out_features, op));
  RETURN_IF_ERROR(ExpectAccumulatorFits(in_features, op));
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  absl::Status fits = CheckedNumel({rows, out_features}).status();
  if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));

  // The input's parameters and values, as the engine quantizes it.
  const bool qnnpack = engine == QuantizedEngine::kQnnpack;
  const auto [lo, hi] = MinMax(x);
  const DynamicQParams q = ChooseDynamicQParams(lo, hi, 0, 255, reduce_range && !qnnpack);
  std::vector<uint8_t> qx(static_cast<size_t>(x.numel()));
  QuantizeFloatsDynamic(x.data<float>(), x.numel(), 1.0f / q.scale, q.zero_point, q.qmin,
                        q.qmax, /*fused=*/!qnnpack, qx.data());

  const std::vector<double> w_scales = PerOutputChannel(qweight.qparams().scales, out_features);
  std::vector<float> multiplier(static_cast<size_t>(out_features));
  for (int64_t n = 0; n < out_features; ++n) {
    multiplier[n] = q.scale * static_cast<float>(w_scales[n]);
  }
  std::vector<int64_t> shape = x.shape();
  shape.back() = out_features;
  ASSIGN_OR_RETURN(Tensor y, Tensor::Uninitialized(DType::kFloat32, std::move(shape)));
  if (y.numel() == 0) return y;

  // S[r, n] = sum_k qx[r, k] * w[n, k], from oneDNN's int8 matmul with no zero point (its
  // fastest kernels: a run-time source zero point costs it a slower path) on the weight
  // packed once. The exact accumulator sum_k (qx - x_zp) * (w - w_zp[n]) is
  //   S[r, n] - x_zp * colsum[n] - w_zp[n] * sum_k (qx[r, k] - x_zp),
  // colsum[n] = sum_k w[n, k] kept per weight as the packed weight is.
  std::vector<int32_t> acc(static_cast<size_t>(rows * out_features), 0);
  if (in_features > 0) {
    RETURN_IF_ERROR(onednn::MatMul(op, rows, in_features, out_features, dt::u8, dt::s8,
                                   dt::s32, qx.data(), qweight.raw_data(), nullptr, acc.data(),
                                   /*src_zero_point=*/0, /*int8_output=*/nullptr, &qweight));
  }
  const std::shared_ptr<const std::vector<int32_t>> column_sums =
      WeightColumnSums::Get().Find(qweight, out_features, in_features);
  std::vector<int32_t> offsets(static_cast<size_t>(out_features));
  for (int64_t n = 0; n < out_features; ++n) {
    offsets[n] = static_cast<int32_t>(static_cast<uint32_t>(q.zero_point) *
                                      static_cast<uint32_t>((*column_sums)[n]));
  }
  // PyTorch's weight observers give w_zp = 0; other zero points are taken off here.
  const std::vector<int64_t> w_zero_points = PerOutputChannelZeroPoints(qweight, out_features);
  if (std::any_of(w_zero_points.begin(), w_zero_points.end(), [](int64_t z) { return z != 0; })) {
    for (int64_t r = 0; r < rows; ++r) {
      int32_t row_sum = 0;
      for (int64_t k = 0; k < in_features; ++k) {
        row_sum += static_cast<int32_t>(qx[static_cast<size_t>(r * in_features + k)]) -
                   q.zero_point;
      }
      for (int64_t n = 0; n < out_features; ++n) {
        int32_t& a = acc[static_cast<size_t>(r * out_features + n)];
        a = static_cast<int32_t>(static_cast<uint32_t>(a) -
                                 static_cast<uint32_t>(w_zero_points[n]) *
                                     static_cast<uint32_t>(row_sum));
      }
    }
  }
  DynamicLinearOutput(acc.data(), rows, out_features, offsets.data(), multiplier.data(),
                      bias != nullptr ? bias->data<float>() : nullptr, y.mutable_data<float>());
  return y;
}

absl::StatusOr<Tensor> Float16DynamicLinear(const Tensor& x, const Tensor& weight,
                                            const Tensor* bias) {
  constexpr absl::string_view op = "quantized linear_dynamic_fp16";
  RETURN_IF_ERROR(ExpectFloat32(x, op, "input"));
  RETURN_IF_ERROR(ExpectFloat32(weight, op, "weight"));
  if (x.dim() < 1 || weight.dim() != 2 || x.shape().back() != weight.shape()[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has shape ", x.ShapeString(), " and weight ", weight.ShapeString(),
        "; expected weight [out_features, in_features] and input [..., in_features]"));
  }
  const int64_t out_features = weight.shape()[0], in_features = weight.shape()[1];
  RETURN_IF_ERROR(ExpectBias(bias, out_features, op));
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  absl::Status fits = CheckedNumel({rows, out_features}).status();
  if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  std::vector<int64_t> shape = x.shape();
  shape.back() = out_features;
  ASSIGN_OR_RETURN(Tensor y, Tensor::Uninitialized(DType::kFloat32, std::move(shape)));
  float* dst = y.mutable_data<float>();
  if (rows > 0 && out_features > 0 && in_features > 0) {
    RETURN_IF_ERROR(onednn::MatMul(op, rows, in_features, out_features, dt::f32, dt::f32,
                                   dt::f32, x.raw_data(), weight.raw_data(),
                                   bias != nullptr ? bias->data<float>() : nullptr, dst));
  } else {
    const float* b = bias != nullptr ? bias->data<float>() : nullptr;
    for (int64_t i = 0; i < rows * out_features; ++i) dst[i] = b ? b[i % out_features] : 0.0f;
  }
  return y;
}

absl::StatusOr<Tensor> QuantizePerTensorDynamic(const Tensor& x, DType dtype,
                                                bool reduce_range, QuantizedEngine engine) {
  constexpr absl::string_view op = "torch.quantize_per_tensor_dynamic";
  RETURN_IF_ERROR(ExpectFloat32(x, op, "input"));
  if (dtype != DType::kQUInt8 && dtype != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dtype ", DTypeName(dtype),
                                                   "; expected torch.quint8 or torch.qint8"));
  }
  const auto [lo, hi] = MinMax(x);
  const bool quint8 = dtype == DType::kQUInt8;
  const DynamicQParams q = ChooseDynamicQParams(
      lo, hi, quint8 ? 0 : -128, quint8 ? 255 : 127,
      reduce_range && engine != QuantizedEngine::kQnnpack);
  return QuantizePerTensor(x, q.scale, q.zero_point, dtype);
}

}  // namespace quantized

namespace {

absl::StatusOr<Value> DynamicLinearModule(const KernelContext& ctx, const Module& m,
                                          absl::Span<const Value> args, const ValueKwargs&,
                                          bool relu) {
  if (args.size() != 1 || !args[0].is_tensor()) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(), " takes 1 Tensor input; got ",
                                                   args.size(), " args"));
  }
  ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
  if (const Argument* dtype = m.FindAttribute("dtype");
      dtype != nullptr && dtype->is_dtype() && dtype->as_dtype() == DType::kFloat16) {
    ASSIGN_OR_RETURN(Tensor y, quantized::Float16DynamicLinear(args[0].as_tensor(), *weight,
                                                               m.FindTensor("bias")));
    return Value(std::move(y));
  }
  ASSIGN_OR_RETURN(Tensor y, quantized::DynamicQuantizedLinear(args[0].as_tensor(), *weight,
                                                               m.FindTensor("bias"),
                                                               /*reduce_range=*/true, ctx.engine));
  if (relu) {
    float* data = y.mutable_data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) data[i] = std::max(data[i], 0.0f);
  }
  return Value(std::move(y));
}

absl::StatusOr<Value> QuantizePerTensorDynamicFn(const KernelContext& ctx,
                                                 absl::Span<const Value> args,
                                                 const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
  ASSIGN_OR_RETURN(Value dtype, r.Required(1, "dtype"));
  if (!dtype.is_dtype()) {
    return absl::InvalidArgumentError(
        "torch.quantize_per_tensor_dynamic: arg 'dtype' must be a dtype");
  }
  ASSIGN_OR_RETURN(bool reduce_range, r.OptionalBool(2, "reduce_range", false));
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizePerTensorDynamic(*x, dtype.as_dtype(),
                                                                 reduce_range, ctx.engine));
  return Value(std::move(y));
}

// torch.ops.quantized.linear_dynamic[_relu] in fuselage's form (x, weight, bias,
// reduce_range): a lowered dynamic F.linear, its weight quantized (qint8, per tensor or per
// output channel) where PyTorch's takes it prepacked (fuselage._packed packs it for torch).
FunctionKernel DynamicLinearFn(bool relu) {
  return [relu](const KernelContext& ctx, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
    ASSIGN_OR_RETURN(const Tensor* weight, r.GetTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    ASSIGN_OR_RETURN(bool reduce_range, r.OptionalBool(3, "reduce_range", true));
    ASSIGN_OR_RETURN(Tensor y, quantized::DynamicQuantizedLinear(*x, *weight, bias,
                                                                 reduce_range, ctx.engine));
    if (relu) {
      float* data = y.mutable_data<float>();
      for (int64_t i = 0; i < y.numel(); ++i) data[i] = std::max(data[i], 0.0f);
    }
    return Value(std::move(y));
  };
}

}  // namespace

absl::Status RegisterDynamicQuantizedKernels(KernelRegistry& registry) {
  RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallFunction,
                                            "torch.ops.quantized.linear_dynamic",
                                            DynamicLinearFn(false)));
  RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallFunction,
                                            "torch.ops.quantized.linear_relu_dynamic",
                                            DynamicLinearFn(true)));
  for (const bool relu : {false, true}) {
    RETURN_IF_ERROR(registry.RegisterModule(
        relu ? "nniqd.LinearReLU" : "nnqd.Linear",
        [relu](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
               const ValueKwargs& kwargs) { return DynamicLinearModule(ctx, m, args, kwargs, relu); }));
  }
  return registry.RegisterFunction(OpKind::kCallFunction, "torch.quantize_per_tensor_dynamic",
                                   QuantizePerTensorDynamicFn);
}

}  // namespace fuselage
