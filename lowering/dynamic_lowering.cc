#include "lowering/dynamic_lowering.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "lowering/lowering_rule.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {
namespace {

// A weight value as PyTorch's fp16 prepack stores it: rounded to float16, saturating.
float RoundToFloat16(float value) { return quantized::RoundToFloat16(value, /*saturate=*/true); }

// nnqd.Linear(dtype=torch.float16) from an nnqr.Linear whose weight_dtype is float16: the
// weight rounded to float16 (kept as float32: the model holds no float16 tensors) and
// the float bias.
absl::StatusOr<std::unique_ptr<Module>> BuildFloat16DynamicLinear(const Module& reference) {
  const Tensor* weight = reference.FindTensor("weight");
  if (weight == nullptr || weight->dtype() != DType::kFloat32 || weight->dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        reference.type().name(), ": expected a float32 tensor 'weight' [out, in]"));
  }
  const Tensor* bias = reference.FindTensor("bias");
  if (bias != nullptr && bias->dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(reference.type().name(), ": tensor 'bias' must be float32"));
  }
  std::vector<float> values(weight->data<float>(), weight->data<float>() + weight->numel());
  for (float& v : values) v = RoundToFloat16(v);
  Module::TensorList tensors;
  tensors.emplace_back("weight", Tensor::FromFloats(weight->shape(), values));
  if (bias != nullptr) tensors.emplace_back("bias", *bias);
  Module::AttributeList attributes;
  for (const auto& [name, value] : reference.attributes()) {
    if (name != "weight_qscheme" && name != "weight_dtype") attributes.emplace_back(name, value);
  }
  attributes.emplace_back("dtype", Argument::Dtype(DType::kFloat16));
  return std::make_unique<Module>(Symbol::Intern("nnqd.Linear"), std::move(tensors),
                                  std::move(attributes));
}

// nnq.Embedding / nnq.EmbeddingBag from nnqr.Embedding / nnqr.EmbeddingBag whose weight
// is quantized per row with float zero points: tensors weight (uint8 [rows, dim]: the
// quantized values), weight_scale and weight_zero_point (float32 [rows]); the reference's
// other attributes, and dtype quint8.
absl::StatusOr<std::unique_ptr<Module>> BuildQuantizedEmbedding(const Module& reference,
                                                                Symbol native_type) {
  const std::string where = absl::StrCat(reference.type().name(), " (lowering to ",
                                         native_type.name(), ")");
  const Tensor* weight = reference.FindTensor("weight");
  const Tensor* scale = reference.FindTensor("weight_scale");
  const Tensor* zero_point = reference.FindTensor("weight_zero_point");
  const Argument* qscheme = reference.FindAttribute("weight_qscheme");
  if (qscheme == nullptr || !qscheme->is_string() ||
      qscheme->as_string() != "torch.per_channel_affine_float_qparams") {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": weight_qscheme must be 'torch.per_channel_affine_float_qparams'"));
  }
  if (weight == nullptr || weight->dtype() != DType::kFloat32 || weight->dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a float32 tensor 'weight' [num_embeddings, dim]"));
  }
  const int64_t rows = weight->shape()[0], dim = weight->shape()[1];
  if (scale == nullptr || zero_point == nullptr || scale->dtype() != DType::kFloat32 ||
      zero_point->dtype() != DType::kFloat32 || scale->numel() != rows ||
      zero_point->numel() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": weight_scale and weight_zero_point must be float32 with one entry per row (",
        rows, ")"));
  }
  ASSIGN_OR_RETURN(Tensor q, Tensor::Uninitialized(DType::kUInt8, weight->shape()));
  uint8_t* dst = q.mutable_data<uint8_t>();
  const float* w = weight->data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    // PyTorch's quantize_val_float_qparams: lrintf(w * (1 / scale) + zero_point), clamped.
    const float s = scale->data<float>()[r];
    const float inv_scale = s == 0.0f ? 1.0f : 1.0f / s;
    const float zp = zero_point->data<float>()[r];
    for (int64_t j = 0; j < dim; ++j) {
      const long v = std::lrintf(w[r * dim + j] * inv_scale + zp);
      dst[r * dim + j] = static_cast<uint8_t>(std::min(255L, std::max(0L, v)));
    }
  }
  Module::TensorList tensors;
  tensors.emplace_back("weight", std::move(q));
  tensors.emplace_back("weight_scale", *scale);
  tensors.emplace_back("weight_zero_point", *zero_point);
  Module::AttributeList attributes;
  for (const auto& [name, value] : reference.attributes()) {
    if (name != "weight_qscheme" && name != "weight_dtype") attributes.emplace_back(name, value);
  }
  attributes.emplace_back("dtype", Argument::Dtype(DType::kQUInt8));
  return std::make_unique<Module>(native_type, std::move(tensors), std::move(attributes));
}

// nnqd.LSTM / nnqd.GRU from nnqr.LSTM / nnqr.GRU: each weight W (weight_ih_l0, ...)
// quantized by its own fields W_scale, W_zero_point, W_axis, W_qscheme, W_dtype (as
// BuildNativeWeightedModule quantizes a reference Linear's weight; float16: rounded to
// float16 and kept float32); the float biases; the module's other attributes, and dtype.
absl::StatusOr<std::unique_ptr<Module>> BuildDynamicRecurrent(const Module& reference,
                                                              bool float16) {
  const std::string native_type =
      absl::StrCat("nnqd.", reference.type().name().substr(std::string("nnqr.").size()));
  auto is_weight = [&](absl::string_view name) {
    return absl::StartsWith(name, "weight_") &&
           reference.FindAttribute(absl::StrCat(name, "_dtype")) != nullptr;
  };
  Module::TensorList tensors;
  for (const auto& [name, tensor] : reference.tensors()) {
    if (absl::StartsWith(name, "bias_")) {
      tensors.emplace_back(name, tensor);
      continue;
    }
    if (!is_weight(name)) continue;
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (tensor.dtype() != DType::kFloat32 || tensor.dim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          reference.type().name(), ": ", where, " must be a float32 matrix; got ",
          DTypeName(tensor.dtype()), " ", tensor.ShapeString()));
    }
    if (float16) {
      std::vector<float> values(tensor.data<float>(), tensor.data<float>() + tensor.numel());
      for (float& v : values) v = RoundToFloat16(v);
      tensors.emplace_back(name, Tensor::FromFloats(tensor.shape(), values));
      continue;
    }
    Module::TensorList one;
    one.emplace_back("weight", tensor);
    for (const char* field : {"_scale", "_zero_point", "_axis"}) {
      if (const Tensor* t = reference.FindTensor(absl::StrCat(name, field))) {
        one.emplace_back(absl::StrCat("weight", field), *t);
      }
    }
    Module::AttributeList attributes;
    for (const char* field : {"_qscheme", "_dtype"}) {
      if (const Argument* a = reference.FindAttribute(absl::StrCat(name, field))) {
        attributes.emplace_back(absl::StrCat("weight", field), *a);
      }
    }
    const Module single(Symbol::Intern("nnqr.Linear"), std::move(one), std::move(attributes));
    auto native = BuildNativeWeightedModule("nnqd.Linear", single, OutputQParams{});
    if (!native.ok()) {
      return absl::Status(native.status().code(),
                          absl::StrCat(reference.type().name(), ": ", where, ": ",
                                       native.status().message()));
    }
    tensors.emplace_back(name, *(*native)->FindTensor("weight"));
  }
  if (tensors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        reference.type().name(), ": no weight_* tensor with its quantization fields"));
  }
  Module::AttributeList attributes;
  for (const auto& [name, value] : reference.attributes()) {
    const bool weight_field =
        (absl::EndsWith(name, "_qscheme") || absl::EndsWith(name, "_dtype")) &&
        absl::StartsWith(name, "weight_");
    if (!weight_field && name != "dtype") attributes.emplace_back(name, value);
  }
  attributes.emplace_back("dtype", Argument::Dtype(float16 ? DType::kFloat16 : DType::kQInt8));
  return std::make_unique<Module>(Symbol::Intern(native_type), std::move(tensors),
                                  std::move(attributes));
}

struct DynamicMatch {
  Node* linear = nullptr;
  Node* dequantize = nullptr;
  Node* quantize = nullptr;
  std::unique_ptr<Module> native;
};

}  // namespace

absl::StatusOr<int> LowerDynamicLinear(GraphModule& gm) {
  const Symbol reference_type = Symbol::Intern("nnqr.Linear");
  const Symbol linear_relu = Symbol::Intern("nni.LinearReLU");
  const Symbol quantize_dynamic = Symbol::Intern("torch.quantize_per_tensor_dynamic");
  const Symbol dequantize = Symbol::Intern("dequantize");
  Graph& g = gm.graph();
  std::vector<DynamicMatch> matches;
  const Symbol lstm = Symbol::Intern("nnqr.LSTM");
  const Symbol gru = Symbol::Intern("nnqr.GRU");
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule || n->num_args() < 1 || n->has_kwargs() ||
        !n->arg(0).is_node()) {
      continue;
    }
    const Module* reference = gm.FindModule(n->target().name());
    if (reference == nullptr) continue;
    const bool recurrent = reference->type() == lstm || reference->type() == gru;
    // An LSTM / GRU may take its initial state as a second arg; a Linear one input.
    if (n->num_args() > (recurrent ? 2 : 1)) continue;
    Node* dq = n->arg(0).as_node();
    if (dq->op() != OpKind::kCallMethod || dq->target() != dequantize || dq->num_args() != 1 ||
        !dq->arg(0).is_node()) {
      continue;
    }
    Node* q = dq->arg(0).as_node();
    if (q->op() != OpKind::kCallFunction || q->target() != quantize_dynamic ||
        q->num_args() < 1 || !q->arg(0).is_node()) {
      continue;
    }
    const bool float16 = q->num_args() >= 2 && q->arg(1).is_dtype() &&
                         q->arg(1).as_dtype() == DType::kFloat16;
    if (recurrent) {
      auto native = BuildDynamicRecurrent(*reference, float16);
      if (!native.ok()) {
        return absl::Status(native.status().code(),
                            absl::StrCat("lower: node '", n->name(), "' (",
                                         kDynamicLinearRuleName, "): ",
                                         native.status().message()));
      }
      matches.push_back({n, dq, q, *std::move(native)});
      continue;
    }
    // nni.LinearReLU holds the reference Linear as child "0": nniqd.LinearReLU.
    const bool relu = reference->type() == linear_relu;
    const Module* linear = relu ? reference->FindChild("0") : reference;
    if (linear == nullptr || linear->type() != reference_type) continue;
    // The output parameters of a static module are no part of a dynamic one.
    if (relu && float16) continue;  // PyTorch has no float16 dynamic LinearReLU
    auto native = float16 ? BuildFloat16DynamicLinear(*linear)
                          : BuildNativeWeightedModule(relu ? "nniqd.LinearReLU" : "nnqd.Linear",
                                                      *linear, OutputQParams{});
    if (!native.ok()) {
      return absl::Status(native.status().code(),
                          absl::StrCat("lower: node '", n->name(), "' (", kDynamicLinearRuleName,
                                       "): ", native.status().message()));
    }
    if (!float16) {
      (*native)->RemoveAttribute("scale");
      (*native)->RemoveAttribute("zero_point");
      (*native)->SetAttribute("dtype", Argument::Dtype(DType::kQInt8));
    }
    matches.push_back({n, dq, q, *std::move(native)});
  }
  for (DynamicMatch& m : matches) {
    Node* x = m.quantize->arg(0).as_node();
    RETURN_IF_ERROR(gm.SetModule(m.linear->target().name(), std::move(m.native)));
    RETURN_IF_ERROR(g.SetArg(m.linear, 0, Argument(x)));
    if (m.dequantize->users().empty()) RETURN_IF_ERROR(g.Erase(m.dequantize));
    if (m.quantize->users().empty()) RETURN_IF_ERROR(g.Erase(m.quantize));
  }
  return static_cast<int>(matches.size());
}

absl::StatusOr<int> LowerWeightOnlyEmbeddings(GraphModule& gm) {
  const Symbol embedding = Symbol::Intern("nnqr.Embedding");
  const Symbol embedding_bag = Symbol::Intern("nnqr.EmbeddingBag");
  const Symbol native_embedding = Symbol::Intern("nnq.Embedding");
  const Symbol native_embedding_bag = Symbol::Intern("nnq.EmbeddingBag");
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> built;
  for (Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    const Module* reference = gm.FindModule(n->target().name());
    if (reference == nullptr ||
        (reference->type() != embedding && reference->type() != embedding_bag)) {
      continue;
    }
    auto native = BuildQuantizedEmbedding(
        *reference, reference->type() == embedding ? native_embedding : native_embedding_bag);
    if (!native.ok()) {
      return absl::Status(native.status().code(),
                          absl::StrCat("lower: node '", n->name(), "' (",
                                       kWeightOnlyEmbeddingRuleName, "): ",
                                       native.status().message()));
    }
    built.emplace_back(std::string(n->target().name()), *std::move(native));
  }
  for (auto& [path, module] : built) RETURN_IF_ERROR(gm.SetModule(path, std::move(module)));
  return static_cast<int>(built.size());
}

}  // namespace fuselage
