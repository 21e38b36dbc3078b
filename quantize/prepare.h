// Prepare: the pass "prepare" that inserts observers into a (fused) float graph where the
// backend config's dtype configs and observation types say, as PyTorch 1.13's prepare_fx
// does for post-training static quantization.
//
//   x ─► conv ─► users              x ─► obs_0 ─► conv ─► obs_1 ─► users
//
// For every node whose op has a single-op entry in the BackendConfig (a float module,
// a fused module such as nni.ConvAddReLU2d, a function or a method), with the qconfig the
// QConfigMapping gives it (QConfigResolver, quantize/qconfig.h: PyTorch's precedence,
// order entries, fused modules sharing their parts' object-type qconfig, a call's meta
// `module_path` as its scope):
//  - the first dtype config the qconfig satisfies (input / output dtype = the activation
//    observer's dtype, weight dtype = the weight observer's, the quant_min / quant_max and
//    scale bounds of the constraints) makes the op quantized;
//  - each tensor input is observed: an observer call_module node after the producer, with
//    the consumer's activation observer, shared by every quantized consumer of that
//    producer (PyTorch 1.13 reuses an existing observer of the arg too); a consumer of
//    another dtype gets its own observer, shared by the consumers of that dtype, which
//    watches the producer's output observer if it has one (an int8 conv read by a
//    float16 add: quantize → dequantize → to(float16) → dequantize, as PyTorch's);
//  - the output is observed by a new observer (OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT) or
//    by a second call of its first input's observer module, i.e. the same observer
//    instance (OUTPUT_SHARE_OBSERVER_WITH_INPUT: max pool, flatten, identity, relu, ...);
//    all users of the op then read the observer node;
//  - a module of a declared type whose composition observes intermediate steps
//    (fused_module_type's observed_step, ModuleComposition::observed_steps) gets one more
//    observer module per step, with the activation qconfig as its output: no node calls
//    it; its path is the module's string attribute step_<k>_observer (the composite
//    kernel feeds it during calibration, convert turns it into step_<k>_scale and
//    step_<k>_zero_point);
//  - the weight of a weighted module (the module itself, or child "0" of a fused module,
//    of the entry's root_module type) is observed at convert time by the qconfig's weight
//    observer, as PyTorch's convert does; the plan records that observer. The weight arg
//    of a functional weighted op (F.conv2d, F.linear: the entry's weight_arg_index) is
//    observed in the graph by the qconfig's weight observer, as prepare_fx does; its bias
//    arg is not observed; a float placeholder weight observer (layer norm) leaves it float;
//  - an op whose output shares its input's observer and whose first arg is a list
//    (torch.cat, torch.stack) has every item observed by the first item's observer
//    module, and its output too (PyTorch's _maybe_make_input_output_share_observers):
//    the other items' observer nodes call that module from then on, for every consumer;
//    observer modules no node calls any more are removed (PyTorch leaves them behind);
//  - a fixed-qparams op (sigmoid, hardsigmoid, tanh, softmax: the entry's
//    fixed_output_qparams) is quantized only if its qconfig's activation is the
//    FixedQParamsObserver with those parameters (PyTorch's prepare_fx raises otherwise;
//    here it stays float and the report says why); its output observer is that one.
//  - a non-fusing two-op entry of the config (ReLU, add) whose ops are a quantized op and
//    its only user, with a single tensor input, is quantized as one op, as PyTorch does:
//    the inner op's inputs are observed, its output is not, the outer op's output is (so
//    lowering makes quantized::add_relu, with the relu's output parameters).
//  - dynamic quantization (a dynamic dtype config, which the qconfig satisfies with a
//    dynamic PlaceholderObserver activation, PyTorch's default_dynamic_qconfig): the
//    weighted module's (or F.linear's) input is observed by that placeholder, its output
//    is not (it stays float); the weight observer is planned as for static quantization
//    (F.linear's observes its weight arg in the graph);
//  - float16 static quantization (float16_static_qconfig: static PlaceholderObservers of
//    torch.float16, ObserverSpec::IsFloat16Cast, and a dtype config of float16): observed
//    as int8 is, with those placeholders; a functional op's weight is observed by the
//    weight's and its bias by the activation's, as PyTorch's prepare_fx gives the bias
//    dtype float16 then.
//  - weight-only quantization (a float placeholder activation, or an entry whose input and
//    output are not observed, and a quantized weight: float_qparams_weight_only_qconfig on
//    nn.Embedding / nn.EmbeddingBag): nothing is observed in the graph, as in PyTorch; the
//    weight observer is planned, and the observer container holds the plan.
// Observer modules are installed at `observers.activation_post_process_<n>` (children of
// one plain nn.Module container, so that convert removes them all at once; PyTorch puts
// them at the root), the nodes calling them are named `activation_post_process_<n>` as in
// PyTorch; the module type is the observer's class name and its spec is kept as
// attributes (graph/NAMING.md).
//
// Where fuselage differs from PyTorch 1.13:
//  - An op whose qconfig satisfies none of its pattern's dtype configs stays float AND is
//    listed in the report with the reason (PyTorch skips it silently). So is an op whose
//    qconfig is None, and every op form fuselage does not quantize yet (weight-only
//    configs other than float_qparams_weight_only_qconfig's on nn.Embedding /
//    nn.EmbeddingBag; dynamic configs other than on nn.Linear / nni.LinearReLU /
//    nn.LSTM / nn.GRU / F.linear; a computed functional weight with a per-channel weight
//    observer).
//  - The pass is linear in the number of nodes: decisions are one walk with per-op
//    lookups cached, observers are found through a producer → observer map, and module
//    paths come from a counter (PyTorch 1.13's prepare rescans users and names).
//  - The engine the model is meant to run on is recorded in its root module
//    (runtime/quantized_engine.h RecordEngine: EngineForBackend of the config's
//    built_in_base, else its name; graph/NAMING.md), so a model prepared with the qnnpack
//    config, or a config file extending it, runs QNNPACK's arithmetic by default.
//
// Contract: everything that can fail (an invalid qconfig, a weighted module without a
// float weight where the config says it has one) is checked before the graph is touched;
// a failing Prepare returns the error naming the node and leaves the GraphModule as it was.
#ifndef FUSELAGE_QUANTIZE_PREPARE_H_
#define FUSELAGE_QUANTIZE_PREPARE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/dtype_config.h"
#include "graph/graph_module.h"
#include "graph/symbol.h"
#include "quantize/observers.h"
#include "quantize/qconfig.h"

namespace fuselage {

inline constexpr char kPreparePassName[] = "prepare";
// PrepareReport::KeptFloat::reason of an op whose qconfig is None.
inline constexpr char kQConfigNoneReason[] = "its qconfig is None";

struct PrepareReport {
  struct KeptFloat {
    // What a caller acts on; `reason` says it to a person.
    enum class Cause {
      kNotQuantizable,  // the config, the qconfig or the op's form does not allow it
      // Its qconfig is None (PyTorch's qconfig_map entry None): prepare marks the node
      // (kQConfigNoneMeta), and lowering leaves it float too.
      kQConfigNone,
      // Its qconfig is one PyTorch 1.13's prepare_fx refuses (ValueError): a fixed-qparams
      // op (sigmoid, tanh, ...) whose activation observer is not its FixedQParamsObserver.
      // fuselage keeps it float, as PyTorch 2 does; the drop-in raises, as 1.13 does.
      kQConfigRefusedByPyTorch,
    };
    std::string node;    // the node's name
    std::string op;      // its module type, function or method
    std::string reason;  // why it stays float
    Cause cause = Cause::kNotQuantizable;
  };
  int quantized_ops = 0;
  int observer_nodes = 0;
  int observer_modules = 0;
  // Every op (call_module / call_function / call_method node with a tensor value) that
  // stays float, in graph order, with the reason: the backend config has no entry for it,
  // or it has one that this op's qconfig or form does not meet.
  std::vector<KeptFloat> kept_float;

  // One summary line, then one line per op kept float.
  std::string ToString() const;
};

// What convert needs to know of one quantized op. The observer spec and the dtype config
// are shared, read-only, by every plan that has them (a model has a handful of distinct
// ones): a plan is 40 bytes, not the ~400 of its own copies (at 10^6 nodes the map of
// plans was ~500 MB of slots).
struct QuantizedOpPlan {
  // The weighted module's float type (nn.Conv2d) and its reference type (nnqr.Conv2d);
  // empty for ops without weights.
  Symbol root_module;
  Symbol reference_module;
  // The qconfig's weight observer; null for ops without weights.
  std::shared_ptr<const ObserverSpec> weight_observer;
  // The dtype config the qconfig satisfied; null in a plan read back from a file
  // (quantize/prepared_model.h).
  std::shared_ptr<const DTypeConfig> dtype_config;
};

// The result of Prepare: the observers calibration feeds and convert reads, by module
// path, and the plan of every quantized op, by node name.
struct PreparedModel {
  PrepareReport report;
  // Keyed by the interned path, the target of the nodes that call the observer: looked up
  // by a node's target without hashing its text.
  absl::flat_hash_map<Symbol, std::unique_ptr<Observer>> observers;
  absl::flat_hash_map<std::string, QuantizedOpPlan> quantized_ops;
  // The container module holding the observer modules ("observers", or a fresh path if
  // the model has that name already); empty if no observer was inserted.
  std::string observer_container;
};

// The name prefix of the modules StorePreparedModel (quantize/prepared_model.h) adds to
// the observer container to record a weighted op's plan.
inline constexpr char kWeightPlanModulePrefix[] = "weight_post_process_";

// Runs the pass on `gm` (see the file comment). FailedPrecondition, naming the node, if
// `gm` is not a float model: it calls an observer (already prepared) or
// torch.quantize_per_tensor / quantize_per_channel or an nnq / nniq / nnqr module
// (already quantized).
absl::StatusOr<PreparedModel> Prepare(GraphModule& gm, const QConfigMapping& qconfig_mapping,
                                      const BackendConfig& backend_config);

// True if `type` is the module type of an observer Prepare inserts.
bool IsObserverModuleType(Symbol type);

// nn.LSTM or nn.GRU: a module whose weights are its tensors weight_ih_l0, weight_hh_l0, ...
// (quantized dynamically, each with its own parameters, by prepare and convert).
bool IsRecurrentModuleType(Symbol type);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_PREPARE_H_
