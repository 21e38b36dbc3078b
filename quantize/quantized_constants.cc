#include "quantize/quantized_constants.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {
namespace {

struct QuantizeSymbols {
  Symbol per_tensor = Symbol::Intern("torch.quantize_per_tensor");
  Symbol per_channel = Symbol::Intern("torch.quantize_per_channel");
};

const QuantizeSymbols& Quantizes() {
  static const QuantizeSymbols* const symbols = new QuantizeSymbols();
  return *symbols;
}

// The values of a constant parameter: a number, or a get_attr of a float32 or int64
// tensor. False if it is anything else.
bool ConstantValues(const GraphModule& gm, const Argument& arg, std::vector<double>* out) {
  out->clear();
  if (arg.is_float() || arg.is_int()) {
    out->push_back(arg.as_float());
    return true;
  }
  if (!arg.is_node() || arg.as_node()->op() != OpKind::kGetAttr) return false;
  const Tensor* t = gm.FindTensor(arg.as_node()->target().name());
  if (t == nullptr || t->is_quantized()) return false;
  out->reserve(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) {
    switch (t->dtype()) {
      case DType::kFloat32: out->push_back(t->data<float>()[i]); break;
      case DType::kInt64: out->push_back(static_cast<double>(t->data<int64_t>()[i])); break;
      default: return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::optional<Tensor>> QuantizedConstant(const GraphModule& gm, const Node* q) {
  const bool per_tensor = q->target() == Quantizes().per_tensor;
  if (q->op() != OpKind::kCallFunction || (!per_tensor && q->target() != Quantizes().per_channel) ||
      !q->kwargs().empty() || q->num_args() != (per_tensor ? 4u : 5u) || !q->arg(0).is_node() ||
      q->arg(0).as_node()->op() != OpKind::kGetAttr || !q->args().back().is_dtype()) {
    return std::nullopt;
  }
  const Tensor* x = gm.FindTensor(q->arg(0).as_node()->target().name());
  if (x == nullptr || x->dtype() != DType::kFloat32 || x->is_quantized()) return std::nullopt;
  std::vector<double> scales, zero_points;
  if (!ConstantValues(gm, q->arg(1), &scales) || !ConstantValues(gm, q->arg(2), &zero_points)) {
    return std::nullopt;
  }
  const DType dtype = q->args().back().as_dtype();
  if (per_tensor) {
    if (scales.size() != 1 || zero_points.size() != 1) return std::nullopt;
    return quantized::QuantizePerTensor(*x, scales[0], static_cast<int64_t>(zero_points[0]),
                                        dtype);
  }
  if (!q->arg(3).is_int()) return std::nullopt;
  std::vector<int64_t> zeros(zero_points.begin(), zero_points.end());
  return quantized::QuantizePerChannel(*x, scales, zeros, q->arg(3).as_int(), dtype);
}

absl::StatusOr<int> FoldConstantQuantizes(GraphModule& gm) {
  Graph& graph = gm.graph();
  int folded = 0;
  for (Node* q : graph.Nodes()) {
    if (q->op() != OpKind::kCallFunction ||
        (q->target() != Quantizes().per_tensor && q->target() != Quantizes().per_channel)) {
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<Tensor> quantized, QuantizedConstant(gm, q));
    if (!quantized.has_value()) continue;
    ASSIGN_OR_RETURN(Node * constant, gm.InsertConstantBefore(q, absl::StrCat(q->name(), "_weight"),
                                                              *std::move(quantized)));
    RETURN_IF_ERROR(graph.ReplaceAllUsesWith(q, constant).status());
    RETURN_IF_ERROR(graph.Erase(q));
    ++folded;
  }
  std::vector<Node*> unused;
  for (Node* node = graph.last(); node != nullptr; node = node->prev()) {
    if (node->op() == OpKind::kGetAttr && node->num_users() == 0) unused.push_back(node);
  }
  RETURN_IF_ERROR(graph.EraseAll(unused));
  return folded;
}

}  // namespace fuselage
