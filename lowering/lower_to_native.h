// LowerToNative: the pass "lower-to-native" that turns a reference quantized graph (the
// output of ConvertToReference, PyTorch's convert_to_reference_fx) into native quantized
// ops, as PyTorch 1.13's _lower_to_native_backend does, driven by a LoweringRuleRegistry.
//
//   x_q = quantize_per_tensor(x, s0, z0, quint8)        x_q = quantize_per_tensor(x, ...)
//   a = x_q.dequantize()                                y_q = conv_add_relu(x_q, x_q)
//   b = x_q.dequantize()                        ⇒       out = y_q.dequantize()
//   y = conv_add_relu(a, b)       (nni.ConvAddReLU2d,
//   y_q = quantize_per_tensor(y, s1, z1, quint8)         now an nniq.ConvAddReLU2d)
//   out = y_q.dequantize()
//
// Steps, in order:
//  0. Dynamic quantization's, weight-only embeddings' and float16 casts' patterns, which
//     end in no quantize (dynamic_lowering.h, float16_lowering.h).
//  1. Tuple lowering: `operator.getitem(t, i)` where `t` builds a tuple or list
//     (`builtins.tuple` / `builtins.list` / `tuple` of an inline list) is replaced by the
//     i-th item, so patterns are seen through tuple packing and unpacking.
//  1b. `getattr(x.dequantize(), "shape")` reads x's shape instead (PyTorch's
//     _lower_getattr_tensor_metadta_op), so no dequantize stays only for a shape.
//  2. Every `quantize_per_tensor(r, scale, zp, dtype)` whose input `r` (optionally a relu
//     around `r`) is a reference op with dequantized inputs is matched against the rules
//     for `r`, in registration order. The first rule that applies rewrites the pattern:
//     the dequantized args are replaced by the quantized tensors, `r` becomes the native
//     op with the quantize's scale and zero point, and the quantize node goes. A
//     composition rule (a declared rule of several native ops) instead puts one native
//     node per step before `r`, the last one taking the quantize's users, and `r` goes.
//  3. `x_q.dequantize() → quantize_per_tensor(·, s, z, dt)` where x_q is known to be
//     quantized with exactly (s, z, dt) is removed: users read x_q.
//  3b. `quantize_per_tensor(get_attr w, s, z, qint8)` read only by native functions (a
//     functional conv / linear's weight) becomes `get_attr w_quantized`, a quantized
//     tensor made now: PyTorch's fold_weight, without its backend-specific packing.
//  4. Dead nodes (dequantize nodes nobody reads, unused get_attr of output qparams, and
//     any node the output did not depend on before the pass) go, as with
//     Graph::EliminateDeadCode.
// Cost: linear in the graph; the graph is walked once (steps 1 and 2 together, step 3
// and 4 visit only the quantize nodes and the nodes that lost users).
//  Each native node gets meta "output_qparams" = (scale, zero_point, dtype).
//
// Contract: the pass never fails on a well-formed graph whose patterns do not apply: a
// reference pattern that no rule lowers stays exactly as it is and is listed in the
// report with the reason. Every check of a rewrite (module types, child "0", single
// users, quantization parameters, building the native module) is done before the graph
// is touched. Errors (Internal) mean a bug in fuselage, not bad input.
//
// Where fuselage deliberately differs from PyTorch 1.13's _lower_to_native_backend.py:
//  - Two-input fused modules (nni.ConvAdd2d, nni.ConvAddReLU2d) lower to modules that
//    take BOTH inputs quantized; PyTorch 1.13 has no such lowering at all (its later
//    versions keep a dequantize on the second input).
//  - A reference pattern left unlowered is reported with its reason; PyTorch skips it
//    silently.
//  - The rules are a public registry (lowering_rule.h), not module-private dicts; a
//    user's own fused module lowers by registering a rule.
//  - Output quantization parameters become inline float / int args and module
//    attributes; PyTorch passes get_attr nodes.
//  - Functional conv / linear keep the quantized weight (quantized once, step 3b) as an
//    arg of torch.ops.quantized.conv2d / linear (with output_scale / output_zero_point
//    kwargs) instead of a backend-specific packed-params attribute; the runtime packs.
//  - A fixed-qparams op (sigmoid, tanh, hardsigmoid) and nn.Dropout drop their quantize,
//    as PyTorch does; the others of PyTorch's special patterns become their nnq module
//    with the quantize's parameters.
//  - A relu between a reference module and its quantize is never silently dropped
//    (PyTorch's module path loses it); only function rules with a relu variant absorb it.
//  - A pass-through op (pool, flatten, interpolate, cat, ...) drops its quantize whatever
//    its scale and zero point (not another dtype, which stays a reference pattern and is
//    reported), as PyTorch 1.13's special_pattern_replacement does: the op's output
//    keeps its (first) input's parameters, and torch.cat requantizes its later inputs
//    into the first one's (ATen's quantized cat). PyTorch drops such a requantization
//    silently; here each one is listed in the report (quantizes_dropped_after_pass_through),
//    and rules registered with NativeLoweringOptions::drop_requantizing_quantizes false
//    keep such a pattern instead (ONNX Runtime's pools requantize to their own output).
//    The pass-through ops PyTorch does not lower (x.flatten(), torch.reshape, torch.relu,
//    nn.Flatten) drop only a quantize with their input's parameters; a requantizing one
//    keeps the pattern float, as in PyTorch, and is reported.
//  - Binary ops need both operands dequantized; the scalar form (add_scalar) is reported
//    as not lowered.
//
//   LoweringRuleRegistry rules;
//   RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));  // and a user's own: rules.Register
//   ASSIGN_OR_RETURN(LoweringReport report, LowerToNative(gm, rules));
//   std::cout << report.ToString();                       // what lowered, and what did not
#ifndef FUSELAGE_LOWERING_LOWER_TO_NATIVE_H_
#define FUSELAGE_LOWERING_LOWER_TO_NATIVE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "lowering/lowering_rule.h"

namespace fuselage {

struct LoweringReport {
  struct Unlowered {
    std::string node;    // the reference op's node name
    std::string target;  // its target or module type
    std::string reason;
  };
  // Rule name → how many patterns it lowered.
  std::map<std::string, int> lowered_per_rule;
  std::vector<Unlowered> unlowered;
  // A pass-through op lowered although its quantize had other parameters than its input
  // (a cat's shared observer took over a pool's, a dropout observed on its own): the
  // quantize went and the op's output keeps `kept`, its input's parameters, instead of
  // `dropped`, the quantize's, as in PyTorch 1.13.
  struct DroppedQuantize {
    std::string node;    // the pass-through op's node name
    std::string target;  // its target or module type
    OutputQParams kept;
    OutputQParams dropped;
  };
  std::vector<DroppedQuantize> quantizes_dropped_after_pass_through;
  int tuple_accesses_removed = 0;
  // `getattr(x.dequantize(), "shape")` nodes made to read x (step 1b).
  int shape_reads_of_dequantize_moved = 0;
  int dequantize_quantize_pairs_removed = 0;
  // quantize_per_tensor nodes of get_attr float weights read only by native functions
  // (F.conv2d / F.linear lowered), replaced by a get_attr of the weight quantized once.
  int constants_quantized = 0;
  // The float tensors those read (weights, per-channel scales and zero points) that no
  // node reads any more, removed from the module tree.
  int folded_tensors_removed = 0;
  int dead_nodes_removed = 0;
  // x.to(torch.float16) casts (float16 static quantization) left as convert made them:
  // PyTorch lowers none but those after its special patterns (float16_lowering.h).
  int float16_casts_kept = 0;

  int total_lowered() const;
  // Human-readable summary, one line per rule and per unlowered pattern.
  std::string ToString() const;
};

// Runs the pass on `gm`. See the file comment.
//
// An op prepare marked with kQConfigNoneMeta (its qconfig was None): PyTorch's
// should_skip_lowering leaves such a binary op (add, mul, matmul) or weighted functional
// (F.linear, F.conv2d) in reference form even when its neighbours' observers put
// dequantize before it and quantize after it; so does this pass for every
// kNativeFunction rule with two dequantized args, a weight arg or a number (x + 3), and
// for an add it would absorb into the op before it. The other rules (pass-through ops, PyTorch's special
// patterns) lower whatever the qconfig, as PyTorch's do.
absl::StatusOr<LoweringReport> LowerToNative(GraphModule& gm,
                                             const LoweringRuleRegistry& registry);

// The quantization parameters a node's output is known to carry: a
// quantize_per_tensor with constant (or 0-d get_attr) scale / zero point, or a node with
// meta "output_qparams". nullopt if unknown.
std::optional<OutputQParams> KnownOutputQParams(const GraphModule& gm, const Node* node);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_LOWER_TO_NATIVE_H_
