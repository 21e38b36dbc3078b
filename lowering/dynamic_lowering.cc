#include "lowering/dynamic_lowering.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "lowering/lowering_rule.h"

namespace fuselage {
namespace {

struct DynamicMatch {
  Node* linear = nullptr;
  Node* dequantize = nullptr;
  Node* quantize = nullptr;
  std::unique_ptr<Module> native;
};

}  // namespace

absl::StatusOr<int> LowerDynamicLinear(GraphModule& gm) {
  const Symbol reference_type = Symbol::Intern("nnqr.Linear");
  const Symbol quantize_dynamic = Symbol::Intern("torch.quantize_per_tensor_dynamic");
  const Symbol dequantize = Symbol::Intern("dequantize");
  Graph& g = gm.graph();
  std::vector<DynamicMatch> matches;
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule || n->num_args() != 1 || n->has_kwargs() ||
        !n->arg(0).is_node()) {
      continue;
    }
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
    const Module* reference = gm.FindModule(n->target().name());
    if (reference == nullptr || reference->type() != reference_type) continue;
    // The output parameters of a static module are no part of a dynamic one.
    auto native = BuildNativeWeightedModule("nnqd.Linear", *reference, OutputQParams{});
    if (!native.ok()) {
      return absl::Status(native.status().code(),
                          absl::StrCat("lower: node '", n->name(), "' (", kDynamicLinearRuleName,
                                       "): ", native.status().message()));
    }
    (*native)->RemoveAttribute("scale");
    (*native)->RemoveAttribute("zero_point");
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

}  // namespace fuselage
