#include "lowering/float16_lowering.h"

#include <cstddef>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// `x.to(torch.float16)` of a node, without keyword args.
bool IsFloat16Cast(const Node* n) {
  static const Symbol to = Symbol::Intern("to");
  return n->op() == OpKind::kCallMethod && n->target() == to && n->num_args() == 2 &&
         n->arg(0).is_node() && n->arg(1).is_dtype() &&
         n->arg(1).as_dtype() == DType::kFloat16 && !n->has_kwargs();
}

// `c.dequantize()` of a float16 cast `c`: returns c, else nullptr.
Node* DequantizedCast(const Argument& arg) {
  static const Symbol dequantize = Symbol::Intern("dequantize");
  if (!arg.is_node()) return nullptr;
  const Node* dq = arg.as_node();
  if (dq->op() != OpKind::kCallMethod || dq->target() != dequantize || dq->num_args() != 1 ||
      !dq->arg(0).is_node() || !IsFloat16Cast(dq->arg(0).as_node())) {
    return nullptr;
  }
  return dq->arg(0).as_node();
}

// A rule PyTorch's special_pattern_replacement applies to float16 too.
bool LowersFloat16(const LoweringRule& rule) {
  return rule.action == LoweringRule::Action::kPassThrough &&
         rule.requantizing_quantize_dropped && !rule.fixed_output_qparams.has_value();
}

struct Match {
  Node* op = nullptr;
  Node* cast_after = nullptr;
  // (arg index, item index or -1, the cast the op reads instead of its dequantize).
  absl::InlinedVector<std::tuple<size_t, int, Node*>, 2> inputs;
};

// The match whose cast after the op is `cast`, if its op lowers so.
std::optional<Match> MatchAt(const GraphModule& gm, const LoweringRuleRegistry& registry,
                             Node* cast) {
  Node* op = cast->arg(0).as_node();
  if (op->num_users() != 1) return std::nullopt;
  Symbol key = op->target();
  if (op->op() == OpKind::kCallModule) {
    const Module* m = gm.FindModule(op->target().name());
    if (m == nullptr) return std::nullopt;
    key = m->type();
  } else if (op->op() != OpKind::kCallFunction && op->op() != OpKind::kCallMethod) {
    return std::nullopt;
  }
  for (const LoweringRule* rule : registry.RulesFor(op->op(), key)) {
    if (!LowersFloat16(*rule)) continue;
    Match match{op, cast, {}};
    bool all_cast = !rule->dequantized_args.empty();
    for (int index : rule->dequantized_args) {
      const size_t arg = static_cast<size_t>(index);
      if (arg >= op->num_args()) {
        all_cast = false;
        break;
      }
      const Argument& a = op->arg(arg);
      if (rule->list_of_dequantized) {
        if (!a.is_list() || a.items().empty()) all_cast = false;
        for (size_t i = 0; all_cast && i < a.items().size(); ++i) {
          Node* c = DequantizedCast(a.items()[i]);
          if (c == nullptr) all_cast = false;
          match.inputs.emplace_back(arg, static_cast<int>(i), c);
        }
      } else if (Node* c = DequantizedCast(a); c != nullptr) {
        match.inputs.emplace_back(arg, -1, c);
      } else {
        all_cast = false;
      }
      if (!all_cast) break;
    }
    if (all_cast) return match;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Float16Lowering> LowerFloat16PassThrough(GraphModule& gm,
                                                        const LoweringRuleRegistry& registry) {
  Graph& g = gm.graph();
  std::vector<Match> matches;
  Float16Lowering result;
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    if (!IsFloat16Cast(n)) continue;
    if (std::optional<Match> m = MatchAt(gm, registry, n); m.has_value()) {
      matches.push_back(*std::move(m));
    } else {
      ++result.casts_kept;
    }
  }
  for (const Match& m : matches) {
    std::vector<Node*> dequantizes;
    for (const auto& [arg, item, cast] : m.inputs) {
      const Argument& old = m.op->arg(arg);
      if (item < 0) {
        dequantizes.push_back(old.as_node());
        RETURN_IF_ERROR(g.SetArg(m.op, arg, Argument(cast)));
        continue;
      }
      std::vector<Argument> items(old.items().begin(), old.items().end());
      dequantizes.push_back(items[static_cast<size_t>(item)].as_node());
      items[static_cast<size_t>(item)] = Argument(cast);
      const bool tuple = old.is_tuple();
      RETURN_IF_ERROR(g.SetArg(m.op, arg,
                               tuple ? Argument::Tuple(std::move(items))
                                     : Argument::List(std::move(items))));
    }
    ASSIGN_OR_RETURN(int rewired, g.ReplaceAllUsesWith(m.cast_after, m.op));
    (void)rewired;
    RETURN_IF_ERROR(g.Erase(m.cast_after));
    for (Node* dq : dequantizes) {
      if (dq->num_users() == 0) RETURN_IF_ERROR(g.Erase(dq));
    }
  }
  result.lowered = static_cast<int>(matches.size());
  return result;
}

}  // namespace fuselage
