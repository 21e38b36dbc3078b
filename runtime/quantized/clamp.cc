#include "runtime/quantized/clamp.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/kernel_args.h"
#include "runtime/quantized/elementwise.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/value.h"

namespace fuselage {
namespace quantized {

absl::StatusOr<Tensor> QuantizedClamp(const Tensor& qx, std::optional<double> min_val,
                                      std::optional<double> max_val) {
  constexpr absl::string_view kOp = "quantized clamp";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  if (!min_val.has_value() && !max_val.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": min and max are both None; expected at least one bound"));
  }
  const float inv_scale = InverseScale(qx.qparams().scales[0]);
  const int64_t zero_point = qx.qparams().zero_points[0];
  std::vector<int32_t> q = IntValues(qx);
  // PyTorch applies the lower bound, then the upper one.
  if (min_val.has_value()) {
    const int32_t lo = QuantizeValue(static_cast<float>(*min_val), inv_scale, zero_point,
                                     qx.dtype());
    for (int32_t& v : q) v = std::max(v, lo);
  }
  if (max_val.has_value()) {
    const int32_t hi = QuantizeValue(static_cast<float>(*max_val), inv_scale, zero_point,
                                     qx.dtype());
    for (int32_t& v : q) v = std::min(v, hi);
  }
  return FromIntValues(qx.dtype(), qx.shape(), qx.qparams(), q);
}

}  // namespace quantized

namespace {

// A bound given positionally at `index` or by `name`: a number, None or absent.
absl::StatusOr<std::optional<double>> OptionalBound(const ArgReader& r, size_t index,
                                                    absl::string_view name) {
  const Value* v = r.Find(index, name);
  if (v == nullptr || v->is_none()) return std::optional<double>();
  if (!v->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantized clamp: '", name,
        "' must be a number or None (tensor bounds have no quantized kernel)"));
  }
  return std::optional<double>(v->as_float());
}

// clamp(input, min=None, max=None), as torch.clamp and Tensor.clamp take it.
absl::StatusOr<Value> ClampFn(const KernelContext&, absl::Span<const Value> args,
                              const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(std::optional<double> lo, OptionalBound(r, 1, "min"));
  ASSIGN_OR_RETURN(std::optional<double> hi, OptionalBound(r, 2, "max"));
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedClamp(*x, lo, hi));
  return Value(std::move(y));
}

// F.hardtanh_(input, min_val=-1.0, max_val=1.0): F.hardtanh's result (the interpreter's
// values are not aliased, so in place is the same as out of place).
absl::StatusOr<Value> HardtanhInPlaceFn(const KernelContext&, absl::Span<const Value> args,
                                        const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(double lo, r.OptionalFloat(1, "min_val", -1.0));
  ASSIGN_OR_RETURN(double hi, r.OptionalFloat(2, "max_val", 1.0));
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedHardtanh(*x, lo, hi));
  return Value(std::move(y));
}

}  // namespace

absl::Status RegisterQuantizedClampKernels(KernelRegistry& registry) {
  RETURN_IF_ERROR(registry.RegisterQuantizedFunctionOverload(
      OpKind::kCallFunction, Symbol::Intern("torch.clamp"), ClampFn));
  RETURN_IF_ERROR(registry.RegisterQuantizedFunctionOverload(
      OpKind::kCallMethod, Symbol::Intern("clamp"), ClampFn));
  RETURN_IF_ERROR(registry.RegisterQuantizedFunctionOverload(
      OpKind::kCallFunction, Symbol::Intern("torch.nn.functional.hardtanh_"),
      HardtanhInPlaceFn));
  return absl::OkStatus();
}

}  // namespace fuselage
