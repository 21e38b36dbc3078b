#include "lowering/lowering_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "lowering/declared_lowering.h"
#include "lowering/prelu_lowering.h"
#include "runtime/quantized/elementwise.h"

namespace fuselage {
namespace {

// A few values per weighted module (one per output channel, or just one per tensor): a
// per-tensor module's scale, zero point and their conversions stay inline, where a
// std::vector each was four heap blocks per lowered module.
using SmallDoubles = absl::InlinedVector<double, 4>;
using SmallInts = absl::InlinedVector<int64_t, 4>;

// The NotFound error of Module::GetTensor(name).
absl::Status NoTensor(const Module& module, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(module.type().name(), " module has no tensor '", name, "'"));
}

// The values of a small float32 / int64 / int32 tensor `t` (tensor `name` of `module`,
// nullptr if it has none), as doubles, into `values`.
absl::Status TensorValues(const Module& module, const Tensor* t, absl::string_view name,
                          SmallDoubles* values) {
  if (t == nullptr) return NoTensor(module, name);
  values->resize(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < values->size(); ++i) {
    switch (t->dtype()) {
      case DType::kFloat32: (*values)[i] = t->data<float>()[i]; break;
      case DType::kInt64: (*values)[i] = static_cast<double>(t->data<int64_t>()[i]); break;
      case DType::kInt32: (*values)[i] = t->data<int32_t>()[i]; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            module.type().name(), " tensor '", name, "' has dtype ", DTypeName(t->dtype()),
            "; expected torch.float32, torch.int64 or torch.int32"));
    }
  }
  return absl::OkStatus();
}

// std::nearbyint(x) as an integer, under the current rounding mode (half to even by
// default). On x86 it is one cvtss2si, which rounds in that same mode, for every |x| <
// 2^30; larger values and NaN take the libm path, so the result is identical for every
// input. (The libm call per weight was a fifth of the whole pass's instructions.)
inline int64_t NearbyIntToInt64(float x) {
#if defined(__SSE2__)
  if (std::fabs(x) < 0x1p30f) return _mm_cvtss_si32(_mm_set_ss(x));
#endif
  // Converting NaN or a value past int64 is undefined behaviour (UBSan finding of
  // pass_pipeline_fuzz): NaN gives 0 (so the weight becomes its zero point, as
  // runtime/quantized's QuantizeValue does) and huge values saturate, so they clamp to
  // qmin / qmax.
  if (std::isnan(x)) return 0;
  if (!(std::fabs(x) < 0x1p61f)) return x > 0 ? (int64_t{1} << 61) : -(int64_t{1} << 61);
  return static_cast<int64_t>(std::nearbyint(x));
}

// PyTorch's quantize_val for a run of `count` values of one channel:
// zero_point + nearbyint(value * (1.0f / float(scale))), clamped to [qmin, qmax].
template <typename Q>
void QuantizeRunScalar(const float* src, int64_t count, float inv_scale, int64_t zero_point,
                       int64_t qmin, int64_t qmax, Q* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t q = zero_point + NearbyIntToInt64(src[i] * inv_scale);
    dst[i] = static_cast<Q>(std::min(std::max(q, qmin), qmax));
  }
}

// Four values with SSE2: x = src * inv_scale (already multiplied), rounded by cvtps2dq
// (like NearbyIntToInt64 for |x| < 2^30), plus the zero point in int32.
#if defined(__SSE2__)
inline __m128i RoundAddZeroPoint(__m128 x, __m128i zp4) {
  return _mm_add_epi32(_mm_cvtps_epi32(x), zp4);
}
// Whether all four of x are finite and below 2^30 in magnitude (NaN compares false).
inline __m128 InRange(__m128 x, __m128 abs_mask, __m128 limit) {
  return _mm_cmplt_ps(_mm_and_ps(x, abs_mask), limit);
}
#endif

// The same as QuantizeRunScalar, sixteen values at a time with SSE2 where that is exact:
// cvtps2dq rounds like NearbyIntToInt64 for |x| < 2^30, the zero point is added in int32
// (it fits: |zp| < 2^16 is required), and the two saturating packs (int32 → int16 →
// int8 / uint8) clamp to exactly [-128, 127] / [0, 255], which must be [qmin, qmax]. A
// group of sixteen with any |x| >= 2^30 or NaN, and the tail, go through the scalar
// loop, which gives the same value for every element the vector path would take.
// Sixteen at a time so the packs end in one 16-byte store; the loop is kept out of its
// caller so its constants stay in registers (inlined into the module builder, the
// four-wide loop reloaded them and spilled every iteration).
template <typename Q>
__attribute__((noinline)) void QuantizeRun(const float* src, int64_t count, float inv_scale,
                                           int64_t zero_point, int64_t qmin, int64_t qmax,
                                           Q* dst) {
  int64_t i = 0;
#if defined(__SSE2__)
  if (zero_point > -(int64_t{1} << 16) && zero_point < (int64_t{1} << 16) &&
      qmin == std::numeric_limits<Q>::min() && qmax == std::numeric_limits<Q>::max()) {
    const __m128 scale4 = _mm_set1_ps(inv_scale);
    const __m128 limit = _mm_set1_ps(0x1p30f);
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    const __m128i zp4 = _mm_set1_epi32(static_cast<int32_t>(zero_point));
    for (; i + 16 <= count; i += 16) {
      const __m128 x0 = _mm_mul_ps(_mm_loadu_ps(src + i), scale4);
      const __m128 x1 = _mm_mul_ps(_mm_loadu_ps(src + i + 4), scale4);
      const __m128 x2 = _mm_mul_ps(_mm_loadu_ps(src + i + 8), scale4);
      const __m128 x3 = _mm_mul_ps(_mm_loadu_ps(src + i + 12), scale4);
      const __m128 ok = _mm_and_ps(
          _mm_and_ps(InRange(x0, abs_mask, limit), InRange(x1, abs_mask, limit)),
          _mm_and_ps(InRange(x2, abs_mask, limit), InRange(x3, abs_mask, limit)));
      if (_mm_movemask_ps(ok) != 0xf) {
        QuantizeRunScalar(src + i, 16, inv_scale, zero_point, qmin, qmax, dst + i);
        continue;
      }
      const __m128i q01 =
          _mm_packs_epi32(RoundAddZeroPoint(x0, zp4), RoundAddZeroPoint(x1, zp4));
      const __m128i q23 =
          _mm_packs_epi32(RoundAddZeroPoint(x2, zp4), RoundAddZeroPoint(x3, zp4));
      const __m128i q8 = std::is_signed<Q>::value ? _mm_packs_epi16(q01, q23)
                                                  : _mm_packus_epi16(q01, q23);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), q8);
    }
  }
#endif
  QuantizeRunScalar(src + i, count - i, inv_scale, zero_point, qmin, qmax, dst + i);
}

// Quantizes `weight` (float32, viewed as [outer, channels, inner] around the channel
// axis; channels = 1 for per-tensor) into `dst`, one run per (outer, channel) pair.
template <typename Q>
void QuantizeWeight(const float* src, int64_t outer, int64_t channels, int64_t inner,
                    absl::Span<const double> scales, absl::Span<const int64_t> zero_points,
                    int64_t qmin, int64_t qmax, Q* dst) {
  absl::InlinedVector<float, 4> inv_scales(scales.size());
  for (size_t c = 0; c < scales.size(); ++c) inv_scales[c] = 1.0f / static_cast<float>(scales[c]);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const size_t ci = static_cast<size_t>(c);
      QuantizeRun(src, inner, inv_scales[ci], zero_points[ci], qmin, qmax, dst);
      src += inner;
      dst += inner;
    }
  }
}

}  // namespace

namespace {

// The tensors and attributes of a reference weighted module that the builder reads, found
// in one scan of each list: a FindTensor / FindAttribute per name scanned them eight
// times per module, and the weight quantization attributes come last (convert appends
// them after the conv's own). The first entry of a name wins, as with FindTensor; absent
// ones are nullptr.
struct ReferenceFields {
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;
  const Tensor* weight_scale = nullptr;
  const Tensor* weight_zero_point = nullptr;
  const Tensor* weight_axis = nullptr;
  const Argument* weight_qscheme = nullptr;
  const Argument* weight_dtype = nullptr;

  explicit ReferenceFields(const Module& module) {
    for (const auto& [stored_name, tensor] : module.tensors()) {
      const absl::string_view name = stored_name;  // compares lengths first
      const Tensor** slot = name == "weight"              ? &weight
                            : name == "bias"              ? &bias
                            : name == "weight_scale"      ? &weight_scale
                            : name == "weight_zero_point" ? &weight_zero_point
                            : name == "weight_axis"       ? &weight_axis
                                                          : nullptr;
      if (slot != nullptr && *slot == nullptr) *slot = &tensor;
    }
    for (const auto& [stored_name, value] : module.attributes()) {
      const absl::string_view name = stored_name;
      const Argument** slot = name == "weight_qscheme" ? &weight_qscheme
                              : name == "weight_dtype" ? &weight_dtype
                                                       : nullptr;
      if (slot != nullptr && *slot == nullptr) *slot = &value;
    }
  }
};

// The native module's tensors: the quantized weight, then the float bias if there is
// one.
Module::TensorList NativeTensors(Tensor qweight, const Tensor* bias) {
  Module::TensorList tensors;
  tensors.reserve(bias != nullptr ? 2 : 1);
  tensors.emplace_back("weight", std::move(qweight));
  if (bias != nullptr) tensors.emplace_back("bias", *bias);
  return tensors;
}

// The native module's attributes, in one pass over the reference's: its attributes in
// their order without weight_qscheme and weight_dtype, with scale and zero_point set to
// the output's (in place if the reference has them, else appended in that order) -- what
// removing the two and then SetAttribute-ing the two would leave, without a scan of the
// list per field. Names stay distinct, as Module's list constructor requires: the
// reference's are.
Module::AttributeList NativeAttributes(const Module& reference, const OutputQParams& output) {
  const Module::AttributeList& from = reference.attributes();
  Module::AttributeList attributes;
  attributes.reserve(from.size() + 2);
  bool has_scale = false, has_zero_point = false;
  for (const auto& [stored_name, value] : from) {
    const absl::string_view name = stored_name;  // compares lengths first
    if (name == "weight_qscheme" || name == "weight_dtype") continue;
    if (name == "scale") {
      attributes.emplace_back(stored_name, Argument::Float(output.scale));
      has_scale = true;
    } else if (name == "zero_point") {
      attributes.emplace_back(stored_name, Argument::Int(output.zero_point));
      has_zero_point = true;
    } else {
      attributes.emplace_back(stored_name, value);
    }
  }
  if (!has_scale) attributes.emplace_back("scale", Argument::Float(output.scale));
  if (!has_zero_point) attributes.emplace_back("zero_point", Argument::Int(output.zero_point));
  return attributes;
}

// BuildNativeWeightedModule with the native type already interned (the built-in rules
// call this once per weighted module of the model).
absl::StatusOr<std::unique_ptr<Module>> BuildNativeWeightedModuleOfType(
    Symbol native_type, const Module& reference, const OutputQParams& output) {
  // A fused module holds the reference weighted module as child "0".
  const Module* ref = &reference;
  ReferenceFields fields(*ref);
  if (fields.weight == nullptr) {
    if (const Module* inner = ref->FindChild("0")) {
      ref = inner;
      fields = ReferenceFields(*ref);
    }
  }
  // Built only for an error message: the pass calls this once per weighted module.
  auto where = [&] {
    return absl::StrCat(ref->type().name(), " (lowering to ", native_type.name(), ")");
  };
  if (!(output.scale > 0) || !std::isfinite(output.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": output scale ", output.scale, " must be positive and finite"));
  }
  const Tensor* const weight = fields.weight;
  if (weight == nullptr) return NoTensor(*ref, "weight");
  if (weight->dtype() != DType::kFloat32 || weight->dim() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": tensor 'weight' is ", DTypeName(weight->dtype()), " ",
        weight->ShapeString(), "; expected a float32 tensor of rank >= 1"));
  }
  SmallDoubles scales, zero_points_d;
  RETURN_IF_ERROR(TensorValues(*ref, fields.weight_scale, "weight_scale", &scales));
  RETURN_IF_ERROR(
      TensorValues(*ref, fields.weight_zero_point, "weight_zero_point", &zero_points_d));
  const Argument* qscheme_attr = fields.weight_qscheme;
  if (qscheme_attr == nullptr || !qscheme_attr->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": attribute 'weight_qscheme' must be a string such as "
                 "'torch.per_channel_affine'"));
  }
  const absl::string_view qscheme = qscheme_attr->as_string();
  const bool per_channel =
      qscheme == "torch.per_channel_affine" || qscheme == "torch.per_channel_symmetric";
  if (!per_channel && qscheme != "torch.per_tensor_affine" &&
      qscheme != "torch.per_tensor_symmetric") {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": weight_qscheme '", qscheme,
        "' is not supported; expected torch.per_tensor_affine/symmetric or "
        "torch.per_channel_affine/symmetric"));
  }
  DType weight_dtype = DType::kQInt8;
  if (const Argument* d = fields.weight_dtype) {
    if (!d->is_dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": attribute 'weight_dtype' must be a dtype, got ", d->ToString()));
    }
    weight_dtype = d->as_dtype();
  }
  if (weight_dtype != DType::kQInt8 && weight_dtype != DType::kQUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": weight_dtype ", DTypeName(weight_dtype),
        "; expected torch.qint8 or torch.quint8"));
  }
  int64_t axis = 0;
  const int64_t count = per_channel ? 0 : 1;
  if (per_channel) {
    SmallDoubles axis_values;
    RETURN_IF_ERROR(TensorValues(*ref, fields.weight_axis, "weight_axis", &axis_values));
    if (axis_values.size() != 1 || axis_values[0] < 0 || axis_values[0] >= weight->dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": weight_axis must hold one axis in [0, ", weight->dim(), ")"));
    }
    axis = static_cast<int64_t>(axis_values[0]);
    // A native conv / linear holds one scale per output channel (axis 0 of its weight);
    // PyTorch's from_reference fails on any other axis (a linear's ch_axis=-1 is its
    // input features). Transposed convs are left to their own checks.
    if (axis != 0 && !absl::StrContains(native_type.name(), "ConvTranspose")) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": the weight is quantized per channel along axis ", axis,
          "; a native quantized module needs its output channels, axis 0 (the weight "
          "observer's ch_axis)"));
    }
  }
  const size_t expected =
      per_channel ? static_cast<size_t>(weight->shape()[static_cast<size_t>(axis)])
                  : static_cast<size_t>(count);
  if (scales.size() != expected || zero_points_d.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": weight_scale has ", scales.size(), " and weight_zero_point ",
        zero_points_d.size(), " entries; expected ", expected, " for ", qscheme,
        " on weight ", weight->ShapeString()));
  }
  SmallInts zero_points;
  zero_points.reserve(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!(scales[i] > 0) || !std::isfinite(scales[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": weight_scale[", i, "] is ", scales[i], "; expected positive and finite"));
    }
    zero_points.push_back(static_cast<int64_t>(zero_points_d[i]));
  }

  // Quantize the weight: per channel, the weight is [outer, channels, inner] around the
  // axis; per tensor, one channel of numel values.
  const int64_t qmin = DTypeMin(weight_dtype), qmax = DTypeMax(weight_dtype);
  int64_t outer = 1, channels = 1, inner = weight->numel();
  if (per_channel) {
    inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= weight->shape()[static_cast<size_t>(d)];
    channels = weight->shape()[static_cast<size_t>(axis)];
    for (int64_t d = axis + 1; d < weight->dim(); ++d) {
      inner *= weight->shape()[static_cast<size_t>(d)];
    }
  }
  QuantParams qparams =
      per_channel
          ? QuantParams::PerChannel(std::vector<double>(scales.begin(), scales.end()),
                                    std::vector<int64_t>(zero_points.begin(), zero_points.end()),
                                    axis)
          : QuantParams::PerTensor(scales[0], zero_points[0]);
  // Quantized straight into the tensor's own block (one allocation; no zero fill, no
  // copy of a staging buffer): QuantizeWeight writes every element.
  ASSIGN_OR_RETURN(Tensor qweight,
                   Tensor::Uninitialized(weight_dtype, weight->shape(), std::move(qparams)));
  if (weight_dtype == DType::kQInt8) {
    QuantizeWeight(weight->data<float>(), outer, channels, inner, scales, zero_points, qmin,
                   qmax, qweight.mutable_data<int8_t>());
  } else {
    QuantizeWeight(weight->data<float>(), outer, channels, inner, scales, zero_points, qmin,
                   qmax, qweight.mutable_data<uint8_t>());
  }

  const Tensor* bias = fields.bias;
  if (bias != nullptr && bias->dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": tensor 'bias' has dtype ", DTypeName(bias->dtype()),
        "; expected torch.float32"));
  }
  return std::make_unique<Module>(native_type,
                                  NativeTensors(std::move(qweight), bias),
                                  NativeAttributes(*ref, output));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> BuildNativeWeightedModule(
    absl::string_view native_type, const Module& reference, const OutputQParams& output) {
  return BuildNativeWeightedModuleOfType(Symbol::Intern(native_type), reference, output);
}

absl::StatusOr<std::unique_ptr<Module>> BuildNativeModuleWithOutputQParams(
    absl::string_view native_type, const Module& reference, const OutputQParams& output) {
  // A fused module (nni.BNReLU2d) holds the float module as child "0"; the relu is the
  // native module's own behaviour.
  const Module* from = &reference;
  if (from->tensors().empty() && from->attributes().empty()) {
    if (const Module* inner = from->FindChild("0")) from = inner;
  }
  if (!(output.scale > 0) || !std::isfinite(output.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        reference.type().name(), " (lowering to ", native_type, "): output scale ",
        output.scale, " must be positive and finite"));
  }
  Module::TensorList tensors(from->tensors().begin(), from->tensors().end());
  Module::AttributeList attributes;
  attributes.reserve(from->attributes().size() + 2);
  for (const auto& [name, value] : from->attributes()) {
    if (name != "scale" && name != "zero_point") attributes.emplace_back(name, value);
  }
  attributes.emplace_back("scale", Argument::Float(output.scale));
  attributes.emplace_back("zero_point", Argument::Int(output.zero_point));
  return std::make_unique<Module>(Symbol::Intern(native_type), std::move(tensors),
                                  std::move(attributes));
}

absl::Status LoweringRuleRegistry::Register(LoweringRule rule) {
  const std::string where = absl::StrCat("lowering rule '", rule.name, "'");
  if (rule.name.empty()) return absl::InvalidArgumentError("lowering rule: empty name");
  if (rule.reference_target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": empty reference_target"));
  }
  if (rule.reference_op != OpKind::kCallModule && rule.reference_op != OpKind::kCallFunction &&
      rule.reference_op != OpKind::kCallMethod) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": reference_op is ", OpKindName(rule.reference_op),
        "; expected call_module, call_function or call_method"));
  }
  if (rule.dequantized_args.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dequantized_args is empty; a reference pattern has at least "
                            "one dequantized input"));
  }
  for (int i : rule.dequantized_args) {
    if (i < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": dequantized_args has negative index ", i));
    }
  }
  if (rule.list_of_dequantized && rule.dequantized_args.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": list_of_dequantized needs exactly one dequantized_args index (the list)"));
  }
  if (rule.action == LoweringRule::Action::kNativeModule &&
      rule.reference_op != OpKind::kCallModule) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a native-module rule needs reference_op call_module"));
  }
  if (rule.action == LoweringRule::Action::kNativeComposition &&
      (rule.reference_op != OpKind::kCallModule || rule.composition.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a composition rule needs reference_op call_module and at least one step"));
  }
  if (rule.action != LoweringRule::Action::kPassThrough && rule.native_target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": empty native_target"));
  }
  if (rule.scalar_arg >= 0 &&
      (rule.action != LoweringRule::Action::kNativeFunction || rule.list_of_dequantized ||
       std::find(rule.dequantized_args.begin(), rule.dequantized_args.end(), rule.scalar_arg) !=
           rule.dequantized_args.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": scalar_arg ", rule.scalar_arg,
        " needs a native-function rule and must not be one of dequantized_args"));
  }
  if (rule.own_output_qparams &&
      (rule.scalar_arg < 0 || rule.dequantized_args.size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": own_output_qparams needs a scalar_arg and exactly one dequantized arg"));
  }
  if (FindByName(rule.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(where, " is already registered"));
  }
  if (!rule.native_relu_target.empty()) {
    const bool module_rule = rule.action == LoweringRule::Action::kNativeModule;
    if (!module_rule && rule.action != LoweringRule::Action::kNativeFunction) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": native_relu_target needs a native-function or native-module rule"));
    }
    if (module_rule && (rule.build_module || rule.build_relu_module)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": a native-module rule with its own build_module absorbs no relu "
                 "(native_relu_target must be empty)"));
    }
  }
  if (rule.action == LoweringRule::Action::kNativeModule && !rule.build_module) {
    auto weighted_builder = [](absl::string_view type) -> NativeModuleBuilder {
      return [native = Symbol::Intern(type)](const Module& reference,
                                             const OutputQParams& output) {
        return BuildNativeWeightedModuleOfType(native, reference, output);
      };
    };
    rule.build_module = weighted_builder(rule.native_target);
    if (!rule.native_relu_target.empty()) {
      rule.build_relu_module = weighted_builder(rule.native_relu_target);
    }
  }
  rules_.push_back(std::make_unique<LoweringRule>(std::move(rule)));
  const LoweringRule* added = rules_.back().get();
  by_op_[{added->reference_op, Symbol::Intern(added->reference_target)}].push_back(added);
  return absl::OkStatus();
}

absl::Span<const LoweringRule* const> LoweringRuleRegistry::RulesFor(
    OpKind op, Symbol target_or_type) const {
  auto it = by_op_.find(std::make_pair(op, target_or_type));
  if (it == by_op_.end()) return {};
  return it->second;
}

const LoweringRule* LoweringRuleRegistry::FindByName(absl::string_view name) const {
  for (const auto& rule : rules_) {
    if (rule->name == name) return rule.get();
  }
  return nullptr;
}

namespace {

LoweringRule ModuleRule(std::string name, std::string reference, std::string inner,
                        std::string native, std::vector<int> dequantized = {0},
                        std::string native_relu = "") {
  LoweringRule r;
  r.native_relu_target = std::move(native_relu);
  r.name = std::move(name);
  r.action = LoweringRule::Action::kNativeModule;
  r.reference_op = OpKind::kCallModule;
  r.reference_target = std::move(reference);
  r.inner_type = std::move(inner);
  r.native_target = std::move(native);
  r.dequantized_args = std::move(dequantized);
  return r;
}

LoweringRule FunctionRule(std::string name, std::string reference, std::string native,
                          std::string native_relu, LoweringRule::OutputQParamsStyle style) {
  LoweringRule r;
  r.name = std::move(name);
  r.action = LoweringRule::Action::kNativeFunction;
  r.reference_op = OpKind::kCallFunction;
  r.reference_target = std::move(reference);
  r.native_target = std::move(native);
  r.native_relu_target = std::move(native_relu);
  r.dequantized_args = {0, 1};
  r.output_qparams_style = style;
  return r;
}

// The pass-through ops fuselage lowers that PyTorch 1.13's special_pattern_replacement
// does not (its is_copy_node / is_general_tensor_shape_node / is_other_node lists lack
// them): only a quantize with the input's parameters goes after them.
bool BeyondPyTorchsSpecialPatterns(OpKind op, absl::string_view target) {
  switch (op) {
    case OpKind::kCallModule:
      return target == "nn.Flatten";
    case OpKind::kCallFunction:
      return target == "torch.reshape" || target == "torch.relu";
    case OpKind::kCallMethod:
      return target == "flatten";
    default:
      return false;
  }
}

LoweringRule PassThrough(std::string name, OpKind op, std::string reference,
                         const NativeLoweringOptions& options) {
  LoweringRule r;
  r.name = std::move(name);
  r.action = LoweringRule::Action::kPassThrough;
  r.reference_op = op;
  r.requantizing_quantize_dropped =
      options.drop_requantizing_quantizes && !BeyondPyTorchsSpecialPatterns(op, reference);
  r.reference_target = std::move(reference);
  return r;
}

}  // namespace

absl::Status RegisterNativeLoweringRules(LoweringRuleRegistry& registry,
                                         const NativeLoweringOptions& options) {
  // One dequantized input: reference weighted modules and their fused forms.
  for (const char* d : {"1d", "2d", "3d"}) {
    // A relu after a reference conv / linear joins it (nniq.ConvReLU / LinearReLU) where
    // prepare observed the unfused pair as one op (after Conv / Linear -> BatchNorm ->
    // ReLU, whose batch norm fusion leaves the relu). PyTorch lowers the pair to the plain
    // module and drops the relu, relying on the output's zero point being its qmin.
    RETURN_IF_ERROR(registry.Register(ModuleRule(
        absl::StrCat("conv", d), absl::StrCat("nnqr.Conv", d), "", absl::StrCat("nnq.Conv", d),
        {0}, absl::StrCat("nniq.ConvReLU", d))));
    RETURN_IF_ERROR(registry.Register(
        ModuleRule(absl::StrCat("conv-relu", d), absl::StrCat("nni.ConvReLU", d),
                   absl::StrCat("nnqr.Conv", d), absl::StrCat("nniq.ConvReLU", d))));
  }
  RETURN_IF_ERROR(registry.Register(
      ModuleRule("linear", "nnqr.Linear", "", "nnq.Linear", {0}, "nniq.LinearReLU")));
  RETURN_IF_ERROR(registry.Register(
      ModuleRule("linear-relu", "nni.LinearReLU", "nnqr.Linear", "nniq.LinearReLU")));
  // Two dequantized inputs: both stay quantized.
  RETURN_IF_ERROR(registry.Register(ModuleRule("conv-add2d", "nni.ConvAdd2d", "nnqr.Conv2d",
                                               "nniq.ConvAdd2d", {0, 1})));
  RETURN_IF_ERROR(registry.Register(ModuleRule("conv-add-relu2d", "nni.ConvAddReLU2d",
                                               "nnqr.Conv2d", "nniq.ConvAddReLU2d", {0, 1})));
  // Functionals: dequantized input and weight.
  constexpr auto kKwargs = LoweringRule::OutputQParamsStyle::kKwargs;
  auto weighted_function = [&](std::string name, std::string reference, std::string native) {
    LoweringRule r = FunctionRule(std::move(name), std::move(reference), native,
                                  native + "_relu", kKwargs);
    r.weight_arg = 1;
    return r;
  };
  for (const char* d : {"1d", "2d", "3d"}) {
    LoweringRule r = weighted_function(absl::StrCat("functional-conv", d),
                                       absl::StrCat("torch.nn.functional.conv", d),
                                       absl::StrCat("torch.ops.quantized.conv", d));
    if (absl::string_view(d) == "2d") {
      // A residual add (+ relu) after F.conv2d joins it, both inputs quantized: the PT2E
      // reference of X86InductorQuantizer's conv-add, observed as one op.
      r.native_add_target = "torch.ops.quantized.conv2d_add";
      r.native_add_relu_target = "torch.ops.quantized.conv2d_add_relu";
    }
    RETURN_IF_ERROR(registry.Register(std::move(r)));
  }
  RETURN_IF_ERROR(registry.Register(weighted_function(
      "functional-linear", "torch.nn.functional.linear", "torch.ops.quantized.linear")));
  // Binary ops on two dequantized tensors: (qa, qb, scale, zero_point).
  constexpr auto kAppend = LoweringRule::OutputQParamsStyle::kAppendArgs;
  for (const char* f : {"operator.add", "torch.add"}) {
    RETURN_IF_ERROR(registry.Register(FunctionRule(absl::StrCat("add:", f), f,
                                                   "torch.ops.quantized.add",
                                                   "torch.ops.quantized.add_relu", kAppend)));
  }
  for (const char* f : {"operator.mul", "torch.mul"}) {
    RETURN_IF_ERROR(registry.Register(FunctionRule(absl::StrCat("mul:", f), f,
                                                   "torch.ops.quantized.mul",
                                                   "torch.ops.quantized.mul_relu", kAppend)));
  }
  // The same with a number on either side: ATen's add.Scalar / Scalar2 and mul.Scalar /
  // Scalar2 make their own output parameters (PyTorch passes no scale / zero point when
  // one input is not dequantized, and drops the quantize).
  auto scalar_rule = [&](const char* op, const char* f, int scalar_arg, auto own_qparams) {
    LoweringRule r = FunctionRule(
        absl::StrCat(op, "-scalar", scalar_arg == 0 ? "-first:" : ":", f), f,
        absl::StrCat("torch.ops.quantized.", op), absl::StrCat("torch.ops.quantized.", op, "_relu"),
        kAppend);
    r.dequantized_args = {scalar_arg == 0 ? 1 : 0};
    r.scalar_arg = scalar_arg;
    r.own_output_qparams = [own_qparams](const OutputQParams& in,
                                         double number) -> absl::StatusOr<OutputQParams> {
      ASSIGN_OR_RETURN(const quantized::ScalarOpQParams out,
                       own_qparams(in.scale, in.zero_point, in.dtype, number));
      return OutputQParams{out.scale, out.zero_point, in.dtype};
    };
    return registry.Register(std::move(r));
  };
  for (int scalar_arg : {1, 0}) {
    for (const char* f : {"operator.add", "torch.add"}) {
      RETURN_IF_ERROR(scalar_rule("add", f, scalar_arg, quantized::AddScalarOutputQParams));
    }
    for (const char* f : {"operator.mul", "torch.mul"}) {
      RETURN_IF_ERROR(scalar_rule("mul", f, scalar_arg, quantized::MulScalarOutputQParams));
    }
  }
  RETURN_IF_ERROR(registry.Register(FunctionRule("matmul:torch.matmul", "torch.matmul",
                                                 "torch.ops.quantized.matmul", "", kAppend)));
  // Ops that run on quantized tensors as they are: PyTorch 1.13's copy nodes and general
  // tensor shape nodes (_lower_to_native_backend.py's is_copy_node /
  // is_general_tensor_shape_node), which share their input's observer.
  for (const char* m :
       {"nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nn.AvgPool1d", "nn.AvgPool2d",
        "nn.AvgPool3d", "nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
        "nn.Flatten", "nn.ReLU", "nn.Identity",
        // Clamp-like: PyTorch's copy nodes; they share their input's qparams.
        "nn.ReLU6", "nn.Hardtanh"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:", m),
                                                  OpKind::kCallModule, m, options)));
  }
  for (const char* f :
       {"torch.flatten", "torch.reshape", "torch.relu", "torch.nn.functional.relu",
        "torch.nn.functional.max_pool1d", "torch.nn.functional.max_pool2d",
        "torch.nn.functional.max_pool3d", "torch.nn.functional.avg_pool1d",
        "torch.nn.functional.avg_pool2d", "torch.nn.functional.avg_pool3d",
        "torch.nn.functional.adaptive_avg_pool1d", "torch.nn.functional.adaptive_avg_pool2d",
        "torch.nn.functional.adaptive_avg_pool3d", "torch.nn.functional.interpolate",
        "torch.nn.functional.relu6", "torch.nn.functional.hardtanh",
        "torch.nn.functional.hardtanh_", "torch.clamp", "torch.mean", "torch.transpose",
        "torch.squeeze", "torch.unsqueeze", "torch.repeat_interleave", "operator.floordiv"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:", f),
                                                  OpKind::kCallFunction, f, options)));
  }
  for (const char* m :
       {"flatten", "reshape", "view", "relu", "relu_", "contiguous", "clamp", "mean",
        "detach", "detach_", "permute", "repeat", "repeat_interleave", "resize_", "squeeze",
        "squeeze_", "transpose", "unsqueeze", "unsqueeze_"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:.", m),
                                                  OpKind::kCallMethod, m, options)));
  }
  for (const char* f : {"torch.cat", "torch.stack"}) {
    LoweringRule list =
        PassThrough(absl::StrCat("pass-through:", f), OpKind::kCallFunction, f, options);
    list.list_of_dequantized = true;
    // The quantized cat kernel requantizes later inputs into the first's, as ATen's does;
    // there is no quantized stack kernel that would.
    list.list_items_requantized_to_first = absl::string_view(f) == "torch.cat";
    RETURN_IF_ERROR(registry.Register(std::move(list)));
  }
  // Fixed-qparams ops (is_fixed_qparams_node): the quantized op makes its own fixed output
  // parameters, which prepare's FixedQParamsObserver gave the quantize after it.
  // PyTorch 1.13's default_fixed_qparams_range_0to1 / _neg1to1 observers.
  const OutputQParams zero_to_one{1.0 / 256.0, 0, DType::kQUInt8};
  const OutputQParams minus_one_to_one{2.0 / 256.0, 128, DType::kQUInt8};
  auto fixed = [&](OpKind op, const char* target, const OutputQParams& qparams) {
    LoweringRule r = PassThrough(absl::StrCat("fixed-qparams:", op == OpKind::kCallMethod ? "." : "",
                                              target),
                                 op, target, options);
    r.fixed_output_qparams = qparams;
    return registry.Register(std::move(r));
  };
  RETURN_IF_ERROR(fixed(OpKind::kCallModule, "nn.Sigmoid", zero_to_one));
  RETURN_IF_ERROR(fixed(OpKind::kCallModule, "nn.Hardsigmoid", zero_to_one));
  RETURN_IF_ERROR(fixed(OpKind::kCallModule, "nn.Tanh", minus_one_to_one));
  for (const char* f : {"torch.sigmoid", "torch.nn.functional.hardsigmoid",
                        "torch.nn.functional.sigmoid"}) {
    RETURN_IF_ERROR(fixed(OpKind::kCallFunction, f, zero_to_one));
  }
  RETURN_IF_ERROR(fixed(OpKind::kCallFunction, "torch.tanh", minus_one_to_one));
  for (const char* m : {"sigmoid", "sigmoid_", "hardsigmoid", "hardsigmoid_"}) {
    RETURN_IF_ERROR(fixed(OpKind::kCallMethod, m, zero_to_one));
  }
  for (const char* m : {"tanh", "tanh_"}) {
    RETURN_IF_ERROR(fixed(OpKind::kCallMethod, m, minus_one_to_one));
  }
  // SPECIAL_PATTERN_LOWER_MODULE_MAP: weightless modules built by from_reference(mod,
  // scale, zero_point).
  const std::pair<const char*, const char*> special_modules[] = {
      {"nn.BatchNorm2d", "nnq.BatchNorm2d"},     {"nn.BatchNorm3d", "nnq.BatchNorm3d"},
      {"nni.BNReLU2d", "nniq.BNReLU2d"},         {"nni.BNReLU3d", "nniq.BNReLU3d"},
      {"nn.ELU", "nnq.ELU"},                     {"nn.LeakyReLU", "nnq.LeakyReLU"},
      {"nn.Hardswish", "nnq.Hardswish"},         {"nn.InstanceNorm1d", "nnq.InstanceNorm1d"},
      {"nn.InstanceNorm2d", "nnq.InstanceNorm2d"}, {"nn.InstanceNorm3d", "nnq.InstanceNorm3d"},
      {"nn.LayerNorm", "nnq.LayerNorm"},         {"nn.Softmax", "nnq.Softmax"},
  };
  for (const auto& [reference, native] : special_modules) {
    LoweringRule r = ModuleRule(absl::StrCat("special:", reference), reference, "", native);
    r.build_module = [native = std::string(native)](const Module& ref,
                                                    const OutputQParams& output) {
      return BuildNativeModuleWithOutputQParams(native, ref, output);
    };
    RETURN_IF_ERROR(registry.Register(std::move(r)));
  }
  LoweringRule dropout = ModuleRule("special:nn.Dropout", "nn.Dropout", "", "nnq.Dropout");
  dropout.output_keeps_input_qparams = true;
  dropout.build_module = [](const Module& ref, const OutputQParams&) {
    return std::make_unique<Module>(Symbol::Intern("nnq.Dropout"), Module::TensorList{},
                                    Module::AttributeList(ref.attributes().begin(),
                                                          ref.attributes().end()));
  };
  RETURN_IF_ERROR(registry.Register(std::move(dropout)));
  for (const char* d : {"1d", "2d"}) {
    RETURN_IF_ERROR(registry.Register(
        ModuleRule(absl::StrCat("conv-transpose", d), absl::StrCat("nnqr.ConvTranspose", d),
                   "", absl::StrCat("nnq.ConvTranspose", d))));
  }
  // The default functionals (get_quantized_operator), with output_scale /
  // output_zero_point kwargs; their quantized forms take no `inplace`.
  const std::pair<const char*, std::vector<std::string>> default_functions[] = {
      {"elu", {"inplace"}},
      {"hardswish", {"inplace"}},
      {"instance_norm", {"running_mean", "running_var", "use_input_stats", "momentum"}},
      {"layer_norm", {}},
      {"leaky_relu", {}},
      {"dropout", {"inplace"}},
  };
  for (const auto& [name, drop] : default_functions) {
    LoweringRule r = FunctionRule(absl::StrCat("functional-", name),
                                  absl::StrCat("torch.nn.functional.", name),
                                  absl::StrCat("torch.ops.quantized.", name), "", kKwargs);
    r.dequantized_args = {0};
    r.kwargs_to_drop = drop;
    RETURN_IF_ERROR(registry.Register(std::move(r)));
  }
  // STATIC_LOWER_MODULE_MAP's nn.PReLU -> nnq.PReLU (lowering/prelu_lowering.h).
  RETURN_IF_ERROR(registry.Register(PReluLoweringRule()));
  return absl::OkStatus();
}

}  // namespace fuselage
