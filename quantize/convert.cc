#include "quantize/convert.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "quantize/observers.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace {

// PyTorch's observers take a negative ch_axis (their Update checked it is within the
// weight's rank); torch.quantize_per_channel and a reference module's weight_axis do not.
int64_t NonNegativeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The quantize node one observer node becomes.
struct ObserverReplacement {
  Node* observer = nullptr;
  double scale = 1.0;
  int64_t zero_point = 0;
  DType dtype = DType::kQUInt8;
  // A dynamic observer (PlaceholderObserver(is_dynamic=True)): the node becomes
  // torch.quantize_per_tensor_dynamic(x, dtype, reduce_range) → dequantize, as PyTorch 2's
  // convert makes it; scale and zero_point are unused.
  bool dynamic = false;
  bool reduce_range = false;
  // A float16 cast (ObserverSpec::IsFloat16Cast): the node becomes x.to(torch.float16) →
  // dequantize, as PyTorch's convert makes it; scale and zero_point are unused.
  bool float16_cast = false;
};

absl::StatusOr<ObserverReplacement> PlanObserverReplacement(Node* n, const Observer& observer,
                                                            bool dynamic_reduce_range,
                                                            const ConvertOptions& options,
                                                            ConvertReport& report) {
  const ObserverSpec& spec = observer.spec();
  if (spec.is_dynamic) {
    if (spec.dtype != DType::kQUInt8 && spec.dtype != DType::kFloat16) {
      return absl::UnimplementedError(absl::StrCat(
          "convert: observer node '", n->name(), "': dynamic quantization to ",
          DTypeName(spec.dtype), " is not supported; expected torch.quint8 or torch.float16"));
    }
    ObserverReplacement r{n, 1.0, 0, spec.dtype};
    r.dynamic = true;
    r.reduce_range = dynamic_reduce_range;
    return r;
  }
  if (spec.IsFloat16Cast()) {
    ObserverReplacement r{n, 1.0, 0, spec.dtype};
    r.float16_cast = true;
    return r;
  }
  // Built only on the error paths: this runs once per observer node.
  auto where = [n] {
    return absl::StrCat("convert: observer node '", n->name(), "' (", n->target().name(), ")");
  };
  if (IsPerChannel(spec.qscheme)) {
    return absl::UnimplementedError(
        absl::StrCat(where(), ": per-channel activation quantization is not supported"));
  }
  if (!IsQuantized(spec.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": dtype ", DTypeName(spec.dtype),
                                                   " is not a quantized dtype"));
  }
  // PyTorch would quantize with its defaults, scale 1.0 and zero point 0, and a warning:
  // parameters invented from nothing, a silently wrong model. Refuse instead, unless the
  // caller asked for PyTorch's rule (and reports the observer, as PyTorch warns).
  if (ObserverSawNoValue(observer) && options.uncalibrated_as_pytorch) {
    // Once per observer module, however many nodes call it.
    const std::string path(n->target().name());
    if (std::find(report.uncalibrated.begin(), report.uncalibrated.end(), path) ==
        report.uncalibrated.end()) {
      report.uncalibrated.push_back(path);
    }
    return ObserverReplacement{n, 1.0f, 0, spec.dtype};
  }
  if (ObserverSawNoValue(observer)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where(), " saw no value; calibrate the prepared model with at least one sample "
                 "(with at least one element) that reaches it before converting"));
  }
  // One scale and zero point (the scheme is per-tensor), without a vector of each.
  ASSIGN_OR_RETURN(PerTensorQParams qparams, observer.CalculatePerTensorQParams());
  return ObserverReplacement{n, qparams.scale, qparams.zero_point, spec.dtype};
}

// A per-channel observer of a constant (a functional conv / linear's get_attr weight, as
// prepare observes it): it becomes torch.quantize_per_channel(w, scales, zero_points,
// axis, dtype) with the scales (float32, the observer's) and zero points (int64) as new
// tensors read by get_attr nodes, as PyTorch's convert does, then a dequantize.
struct PerChannelReplacement {
  Node* observer = nullptr;
  ObserverQParams qparams;
  int64_t axis = 0;
  DType dtype = DType::kQInt8;
};

absl::StatusOr<std::optional<PerChannelReplacement>> PlanPerChannelReplacement(
    Node* n, const Observer& observer) {
  const ObserverSpec& spec = observer.spec();
  if (!IsPerChannel(spec.qscheme) || n->num_args() != 1 || !n->arg(0).is_node() ||
      n->arg(0).as_node()->op() != OpKind::kGetAttr) {
    return std::optional<PerChannelReplacement>();
  }
  if (ObserverSawNoValue(observer)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "convert: observer node '", n->name(), "' (", n->target().name(),
        ") of the weight '", n->arg(0).as_node()->target().name(),
        "' saw no value; calibrate the prepared model before converting"));
  }
  ASSIGN_OR_RETURN(ObserverQParams qparams, observer.CalculateQParams());
  return std::optional<PerChannelReplacement>(
      PerChannelReplacement{n, std::move(qparams), spec.ch_axis, spec.dtype});
}

// An observer of a constant float tensor (a get_attr: a functional op's weight) that saw
// no value, fed that tensor now, as PyTorch's convert runs the weight observers
// (run_weight_observers): dynamic quantization calibrates nothing, and its F.linear's
// weight observer has seen no value. nullptr when `observer` is to be used as it is; an
// error naming the node if the tensor does not fit the observer.
absl::StatusOr<std::unique_ptr<Observer>> ObservedConstant(const GraphModule& gm, const Node* n,
                                                           const Observer& observer) {
  const ObserverSpec& spec = observer.spec();
  if (spec.is_dynamic || spec.IsFloat16Cast() || !ObserverSawNoValue(observer) ||
      n->num_args() != 1 || !n->arg(0).is_node() ||
      n->arg(0).as_node()->op() != OpKind::kGetAttr) {
    return nullptr;
  }
  const Tensor* constant = gm.FindTensor(n->arg(0).as_node()->target().name());
  if (constant == nullptr || constant->dtype() != DType::kFloat32) return nullptr;
  std::unique_ptr<Observer> fed = observer.Clone();
  if (absl::Status st = fed->Update(*constant); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "convert: observer node '", n->name(), "' (", n->target().name(), ") of the constant '",
        n->arg(0).as_node()->target().name(), "': ", st.message()));
  }
  return fed;
}

// The targets of the nodes an observer becomes, interned once per pass.
struct ReplacementTargets {
  Symbol quantize = Symbol::Intern("torch.quantize_per_tensor");
  Symbol quantize_dynamic = Symbol::Intern("torch.quantize_per_tensor_dynamic");
  Symbol cast = Symbol::Intern("to");  // a method
  Symbol dequantize = Symbol::Intern("dequantize");
  // The names FX derives from the targets (torch.quantize_per_tensor, dequantize).
  absl::string_view quantize_name = "quantize_per_tensor";
  absl::string_view quantize_dynamic_name = "quantize_per_tensor_dynamic";
  absl::string_view cast_name = "to";
  absl::string_view dequantize_name = "dequantize";

  // The op, target and name of the node that quantizes (or casts) for `r`.
  OpKind QuantizeOp(const ObserverReplacement& r) const {
    return r.float16_cast ? OpKind::kCallMethod : OpKind::kCallFunction;
  }
  Symbol QuantizeTarget(const ObserverReplacement& r) const {
    return r.float16_cast ? cast : r.dynamic ? quantize_dynamic : quantize;
  }
  absl::string_view QuantizeName(const ObserverReplacement& r) const {
    return r.float16_cast ? cast_name : r.dynamic ? quantize_dynamic_name : quantize_name;
  }
};

// The args of the quantize node of `r`: the node's own arg storage type, which the node
// takes over whole.
NodeArgs QuantizeArgs(Node* input, const ObserverReplacement& r) {
  if (r.float16_cast) return {input, Argument::Dtype(DType::kFloat16)};
  if (r.dynamic) return {input, Argument::Dtype(r.dtype), Argument::Bool(r.reduce_range)};
  return {input, Argument::Float(r.scale), Argument::Int(r.zero_point),
          Argument::Dtype(r.dtype)};
}

// Replaces the observer node of `r` by quantize → dequantize, as FX's convert does
// (insert both, replace the observer's uses by the dequantize node, erase the observer),
// in fewer graph operations: the quantize node is inserted just before the observer with
// its final args and name, and the observer node itself becomes the dequantize node
// (op, target, args, name; kwargs and meta dropped, as a new node has none). Its users
// already read it: no use to replace, no node to erase. (The one difference: FX's
// replace_all_uses_with re-registers each user, moving it to the end of its other
// inputs' user lists; here they keep their places. Nothing after convert reads that
// order: lowering and the model file do not.) The names are FX's: the
// quantize node is named while the observer still holds its own name, the dequantize
// node after, as inserting both then erasing the observer names them, as long as the
// observer's own name is none a dequantize node could take (Prepare names observers
// activation_post_process_<n>); one that could be takes the way below.
absl::Status ReplaceObserver(Graph& g, const ReplacementTargets& targets,
                             const ObserverReplacement& r) {
  Node* observer = r.observer;
  Node* input = observer->arg(0).as_node();
  if (observer->has_kwargs()) RETURN_IF_ERROR(g.SetKwargs(observer, {}));
  if (!observer->meta().empty()) RETURN_IF_ERROR(g.SetMeta(observer, NodeMeta()));
  if (!absl::StartsWith(observer->name(), targets.dequantize_name)) {
    NodeSpec quantize;
    quantize.op = targets.QuantizeOp(r);
    quantize.target = targets.QuantizeTarget(r);
    quantize.args = QuantizeArgs(input, r);
    quantize.name = targets.QuantizeName(r);
    ASSIGN_OR_RETURN(Node * q, g.InsertBefore(observer, std::move(quantize)));
    RETURN_IF_ERROR(g.SetOp(observer, OpKind::kCallMethod, targets.dequantize));
    RETURN_IF_ERROR(g.SetArgs(observer, NodeArgs{q}));
    g.Rename(observer, targets.dequantize_name);
    return absl::OkStatus();
  }
  // The observer's name is freed (by renaming it the quantize node) before the
  // dequantize node is named, which may take it.
  RETURN_IF_ERROR(g.SetOp(observer, targets.QuantizeOp(r), targets.QuantizeTarget(r)));
  RETURN_IF_ERROR(g.SetArgs(observer, QuantizeArgs(input, r)));
  g.Rename(observer, targets.QuantizeName(r));
  NodeSpec dequantize;
  dequantize.op = OpKind::kCallMethod;
  dequantize.target = targets.dequantize;
  dequantize.args = {observer};
  dequantize.name = targets.dequantize_name;
  ASSIGN_OR_RETURN(Node * dq, g.InsertAfter(observer, std::move(dequantize)));
  // The observer's users read dq; dq keeps its own use of the quantize node (which
  // ReplaceAllUsesWith does not make a cycle).
  return g.ReplaceAllUsesWith(observer, dq).status();
}

// The parts of a reference module that do not depend on its weight's values — the
// weight_axis tensor, a per-tensor zero point (0 for every symmetric scheme), the
// weight_qscheme and weight_dtype attributes — made once per pass and copied into each
// module (a tensor copy shares its bytes), instead of allocating and interning them
// again for each of 10^5 modules.
class ReferenceModuleParts {
 public:
  const Tensor& Axis(int64_t ch_axis) { return Cached(axes_, ch_axis); }
  const Tensor& PerTensorZeroPoint(int64_t zero_point) {
    return Cached(zero_points_, zero_point);
  }
  const Argument& QScheme(bool per_channel) const {
    return per_channel ? per_channel_affine_ : per_tensor_affine_;
  }

 private:
  // A 0-d int64 tensor holding `value`, from `cache` (a handful of distinct values per
  // model: searched linearly, bounded).
  static const Tensor& Cached(std::vector<std::pair<int64_t, Tensor>>& cache, int64_t value) {
    for (const auto& [known, tensor] : cache) {
      if (known == value) return tensor;
    }
    if (cache.size() >= kMaxCached) cache.erase(cache.begin());
    cache.emplace_back(value, Tensor::FromInt64s({}, {value}));
    return cache.back().second;
  }
  static constexpr size_t kMaxCached = 8;

  std::vector<std::pair<int64_t, Tensor>> axes_;
  std::vector<std::pair<int64_t, Tensor>> zero_points_;
  // PyTorch's reference modules record symmetric schemes as affine (get_qparam_dict).
  const Argument per_tensor_affine_ = Argument::String("torch.per_tensor_affine");
  const Argument per_channel_affine_ = Argument::String("torch.per_channel_affine");
};

// What a float weighted module gains to become its reference module: the weight's
// quantization parameters and how they were computed. Numbers, not tensors: the tensors
// are built by MakeReference straight into the module (a Tensor is ~150 bytes, moved
// five times on the way there otherwise).
struct WeightQuantization {
  bool per_channel = false;
  PerTensorQParams per_tensor;        // per-tensor schemes
  ObserverQParams per_channel_params;  // per-channel schemes: one entry per channel
  int64_t ch_axis = 0;
  DType dtype = DType::kQInt8;
  // float16 (float16_dynamic_qconfig): the weight is cast, with no scale or zero point;
  // the reference module records only weight_qscheme and weight_dtype, as PyTorch's.
  bool float16 = false;
  // per_channel_affine_float_qparams (float_qparams_weight_only_qconfig's weight): float
  // zero points, one per channel, beside per_channel_params.scales.
  bool float_qparams = false;
  std::vector<float> float_zero_points;
};

// The weight observers of a pass, one per distinct spec (found by the address of the
// plan's shared spec: a handful per model), reset before each weight instead of built,
// validated and freed once per weighted module.
class WeightObservers {
 public:
  // The observer of `spec`, with no statistics; the error of MakeObserver otherwise.
  absl::StatusOr<Observer*> Fresh(const ObserverSpec& spec) {
    for (auto& [known, observer] : observers_) {
      if (known == &spec) {
        observer->Reset();
        return observer.get();
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Observer> observer, MakeObserver(spec));
    observers_.emplace_back(&spec, std::move(observer));
    return observers_.back().second.get();
  }

 private:
  std::vector<std::pair<const ObserverSpec*, std::unique_ptr<Observer>>> observers_;
};

// Runs the weight observer of `weight_observer` (from `observers`) on the weight of
// `float_module`; `reference_type` names the target in errors.
absl::StatusOr<WeightQuantization> QuantizeWeight(const Module& float_module,
                                                  Symbol reference_type,
                                                  const ObserverSpec& weight_observer,
                                                  WeightObservers& observers);

// The fields MakeReference adds to a float module: weight_scale, weight_zero_point and
// weight_axis; weight_qscheme and weight_dtype.
constexpr size_t kReferenceTensorsAdded = 3;
constexpr size_t kReferenceAttributesAdded = 2;

// Makes `module` (a float weighted module) the reference module of type `reference_type`
// with the parameters `w`; the weight-independent parts come from `parts`. Cannot fail.
void MakeReference(Module& module, Symbol reference_type, const WeightQuantization& w,
                   ReferenceModuleParts& parts) {
  module.set_type(reference_type);
  // Room for the 3 tensors and 2 attributes at once: appending them one by one regrew
  // (and moved) each list up to twice per module.
  module.ReserveTensors(module.tensors().size() + kReferenceTensorsAdded);
  module.ReserveAttributes(module.attributes().size() + kReferenceAttributesAdded);
  if (w.float16) {
    module.SetAttribute("weight_qscheme", parts.QScheme(false));
    module.SetAttribute("weight_dtype", Argument::Dtype(DType::kFloat16));
    return;
  }
  if (w.float_qparams) {
    const Shape shape = {static_cast<int64_t>(w.float_zero_points.size())};
    module.SetTensor("weight_scale", Tensor::FromFloats(shape, w.per_channel_params.scales));
    module.SetTensor("weight_zero_point", Tensor::FromFloats(shape, w.float_zero_points));
    module.SetTensor("weight_axis", parts.Axis(w.ch_axis));
    module.SetAttribute("weight_qscheme",
                        Argument::String("torch.per_channel_affine_float_qparams"));
    module.SetAttribute("weight_dtype", Argument::Dtype(w.dtype));
    return;
  }
  if (w.per_channel) {
    const ObserverQParams& q = w.per_channel_params;
    const Shape shape = {static_cast<int64_t>(q.scales.size())};
    module.SetTensor("weight_scale", Tensor::FromFloats(shape, q.scales));
    module.SetTensor("weight_zero_point", Tensor::FromInt64s(shape, q.zero_points));
  } else {
    module.SetTensor("weight_scale", Tensor::FromFloats({}, {w.per_tensor.scale}));
    // A 0-d zero point shared by every module with the same one.
    module.SetTensor("weight_zero_point", parts.PerTensorZeroPoint(w.per_tensor.zero_point));
  }
  module.SetTensor("weight_axis", parts.Axis(w.ch_axis));
  module.SetAttribute("weight_qscheme", parts.QScheme(w.per_channel));
  module.SetAttribute("weight_dtype", Argument::Dtype(w.dtype));
}

// An nn.LSTM / nn.GRU made its reference module: for each weight W (weight_ih_l0, ...),
// the fields MakeReference gives a one-weight module, named W_scale, W_zero_point,
// W_axis, W_qscheme and W_dtype, as PyTorch's nnqr.LSTM / nnqr.GRU flatten them.
void MakeRecurrentReference(
    Module& module, Symbol reference_type,
    const std::vector<std::pair<std::string, WeightQuantization>>& weights,
    ReferenceModuleParts& parts) {
  module.set_type(reference_type);
  for (const auto& [name, w] : weights) {
    Module single(reference_type, {}, {});
    MakeReference(single, reference_type, w, parts);
    for (const auto& [field, tensor] : single.tensors()) {
      module.SetTensor(absl::StrCat(name, field.substr(std::string("weight").size())), tensor);
    }
    for (const auto& [field, value] : single.attributes()) {
      module.SetAttribute(absl::StrCat(name, field.substr(std::string("weight").size())),
                          value);
    }
  }
}

std::pair<std::string, std::string> SplitModulePath(absl::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == absl::string_view::npos) return {"", std::string(path)};
  return {std::string(path.substr(0, dot)), std::string(path.substr(dot + 1))};
}

// The observers of a prepared model found by their path's symbol id in a vector: the ids
// are dense and Prepare (or a model's loading) interns a model's observer paths one after
// the other, so the entries of the observer nodes met in graph order sit close together,
// where each probe of the hash map lands on a random cache line (at 10^5 nodes most of
// convert's own time). Ids spread too far (more than 4 slots per observer + 1024) keep
// the map.
class ObserverTable {
 public:
  explicit ObserverTable(const absl::flat_hash_map<Symbol, std::unique_ptr<Observer>>& observers)
      : observers_(observers) {
    if (observers.empty()) return;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (const auto& [path, observer] : observers) {
      lo = std::min(lo, path.id());
      hi = std::max(hi, path.id());
    }
    const uint64_t span = uint64_t{hi} - lo + 1;
    if (span > 4 * uint64_t{observers.size()} + 1024) return;
    base_ = lo;
    table_.resize(span);
    for (const auto& [path, observer] : observers) {
      table_[path.id() - base_] = {path, observer.get()};
    }
  }

  // The observer of the module at `path`, or nullptr.
  const Observer* Find(Symbol path) const {
    if (table_.empty()) {
      auto it = observers_.find(path);
      return it == observers_.end() ? nullptr : it->second.get();
    }
    const uint32_t slot = path.id() - base_;  // wraps below the base: out of range
    return slot < table_.size() ? table_[slot].observer : nullptr;
  }

  // Whether the module at `path` (text) has an observer. `cursor` (0 at first) guesses
  // the next observer in id order: walking the observer container's children, which
  // Prepare adds in the order it interns their paths, each guess is one comparison of
  // text beside the last, not a lookup of the text in the symbol table plus a probe.
  bool ContainsPath(absl::string_view path, size_t* cursor) const {
    if (!table_.empty()) {
      while (*cursor < table_.size() && table_[*cursor].observer == nullptr) ++*cursor;
      if (*cursor < table_.size() && table_[*cursor].path.name() == path) {
        ++*cursor;
        return true;
      }
    }
    return Find(Symbol::Lookup(path)) != nullptr;
  }

 private:
  struct Entry {
    Symbol path;
    const Observer* observer = nullptr;
  };
  const absl::flat_hash_map<Symbol, std::unique_ptr<Observer>>& observers_;
  uint32_t base_ = 0;
  std::vector<Entry> table_;  // empty: look up observers_
};

// The error for a node prepared as a weighted module call that calls no module now.
absl::Status NoModuleError(const Node* n) {
  return absl::InvalidArgumentError(absl::StrCat(
      "convert: node '", n->name(), "' was prepared as a weighted module call; it now "
      "calls no module"));
}

// Every weighted plan whose node is in the graph must have been found at a call_module
// node that is no observer (`found` of them). Otherwise one names another node, and the
// error names the first such node in graph order; only then are all nodes looked up.
size_t CountWeightedPlans(const PreparedModel& prepared) {
  size_t weighted_plans = 0;
  for (const auto& [name, plan] : prepared.quantized_ops) {
    weighted_plans += plan.root_module.empty() ? 0 : 1;
  }
  return weighted_plans;
}

// `weighted_plans` of the plans are weighted (CountWeightedPlans).
absl::Status CheckWeightedPlansFound(const Graph& g, const PreparedModel& prepared,
                                     size_t weighted_plans, size_t found) {
  if (weighted_plans == found) return absl::OkStatus();
  for (const Node* n = g.first(); n != nullptr; n = n->next()) {
    auto it = prepared.quantized_ops.find(n->name());
    if (it == prepared.quantized_ops.end() || it->second.root_module.empty()) continue;
    if (n->op() != OpKind::kCallModule) return NoModuleError(n);
    if (prepared.observers.contains(n->target())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "' calls the observer '", n->target().name(),
          "' but was prepared as a weighted module call (", it->second.root_module.name(),
          ")"));
    }
  }
  return absl::OkStatus();  // the other plans name nodes the graph does not have
}

// Replaces the observer of `r` by get_attr scales, get_attr zero points,
// quantize_per_channel and (the observer node itself) dequantize.
absl::Status ReplacePerChannelObserver(GraphModule& gm, const PerChannelReplacement& r) {
  Graph& g = gm.graph();
  Node* observer = r.observer;
  Node* input = observer->arg(0).as_node();
  const std::string base(input->target().name());
  const int64_t channels = static_cast<int64_t>(r.qparams.scales.size());
  NodeArgs quantize_args = {input};
  for (const auto& [hint, tensor] :
       {std::make_pair(absl::StrCat(base, "_scale"),
                       Tensor::FromFloats({channels}, r.qparams.scales)),
        std::make_pair(absl::StrCat(base, "_zero_point"),
                       Tensor::FromInt64s({channels}, r.qparams.zero_points))}) {
    ASSIGN_OR_RETURN(Node * attr, gm.InsertConstantBefore(observer, hint, tensor));
    quantize_args.push_back(attr);
  }
  const Tensor* weight = gm.FindTensor(input->target().name());
  quantize_args.push_back(
      Argument::Int(weight != nullptr ? NonNegativeAxis(r.axis, weight->dim()) : r.axis));
  quantize_args.push_back(Argument::Dtype(r.dtype));
  NodeSpec quantize;
  quantize.op = OpKind::kCallFunction;
  quantize.target = Symbol::Intern("torch.quantize_per_channel");
  quantize.args = std::move(quantize_args);
  quantize.name = g.UniqueName("quantize_per_channel");
  ASSIGN_OR_RETURN(Node * q, g.InsertBefore(observer, std::move(quantize)));
  if (observer->has_kwargs()) RETURN_IF_ERROR(g.SetKwargs(observer, {}));
  if (!observer->meta().empty()) RETURN_IF_ERROR(g.SetMeta(observer, NodeMeta()));
  RETURN_IF_ERROR(g.SetOp(observer, OpKind::kCallMethod, Symbol::Intern("dequantize")));
  RETURN_IF_ERROR(g.SetArgs(observer, NodeArgs{q}));
  g.Rename(observer, "dequantize");
  return absl::OkStatus();
}

}  // namespace

std::string ConvertReport::ToString() const {
  return absl::StrCat(kConvertPassName, ": ", observers_replaced,
                      " observers replaced by quantize/dequantize, ", reference_modules,
                      " reference modules\n");
}

bool ObserverSawNoValue(const Observer& observer) {
  if (observer.spec().kind == ObserverKind::kFixedQParams) return false;
  const std::vector<float> lo = observer.min_val();
  const std::vector<float> hi = observer.max_val();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return lo.empty() || hi.empty() ||
         (lo.size() == 1 && hi.size() == 1 && lo[0] == kInf && hi[0] == -kInf);
}

absl::StatusOr<std::unique_ptr<Module>> MakeReferenceModule(const Module& float_module,
                                                            Symbol reference_type,
                                                            const ObserverSpec& weight_observer) {
  ReferenceModuleParts parts;
  WeightObservers observers;
  ASSIGN_OR_RETURN(WeightQuantization w,
                   QuantizeWeight(float_module, reference_type, weight_observer, observers));
  // Room for the fields MakeReference adds: a plain Clone's lists are exactly full.
  auto ref = float_module.Clone(kReferenceTensorsAdded, kReferenceAttributesAdded);
  MakeReference(*ref, reference_type, w, parts);
  return ref;
}

namespace {

absl::StatusOr<WeightQuantization> QuantizeWeight(const Module& float_module,
                                                  Symbol reference_type,
                                                  const ObserverSpec& weight_observer,
                                                  WeightObservers& observers) {
  // Built only on the error paths: this runs once per weighted module.
  auto where = [&] {
    return absl::StrCat("convert: ", float_module.type().name(), " → ", reference_type.name());
  };
  const Tensor* weight = float_module.FindTensor("weight");
  if (weight == nullptr || weight->dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": the module has no float32 tensor 'weight'"));
  }
  if (weight_observer.kind == ObserverKind::kPlaceholder &&
      weight_observer.dtype == DType::kFloat16) {
    WeightQuantization w;
    w.float16 = true;
    w.dtype = DType::kFloat16;
    return w;
  }
  auto observer_or = observers.Fresh(weight_observer);
  if (!observer_or.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": weight observer ",
                                                   weight_observer.ToString(), ": ",
                                                   observer_or.status().message()));
  }
  Observer& observer = **observer_or;
  absl::Status updated = observer.Update(*weight);
  if (!updated.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": observing the weight: ", updated.message()));
  }
  WeightQuantization w;
  w.per_channel = IsPerChannel(weight_observer.qscheme);
  w.ch_axis = NonNegativeAxis(weight_observer.ch_axis, weight->dim());
  w.dtype = weight_observer.dtype;
  if (weight_observer.qscheme == ObserverQScheme::kPerChannelAffineFloatQParams) {
    // PyTorch's _calculate_qparams for per_channel_affine_float_qparams, in float32 as its
    // tensors: scale = (max - min) / (quant_max - quant_min), 1 where it is not above eps;
    // zero_point = -min / scale (a float). The range is not widened to hold 0.
    const std::vector<float> lo = observer.min_val(), hi = observer.max_val();
    const float levels = static_cast<float>(observer.quant_max() - observer.quant_min());
    const float eps = static_cast<float>(weight_observer.eps);
    w.float_qparams = true;
    w.per_channel_params.scales.resize(lo.size());
    w.float_zero_points.resize(lo.size());
    for (size_t c = 0; c < lo.size(); ++c) {
      float scale = (hi[c] - lo[c]) / levels;
      if (!(scale > eps)) scale = 1.0f;
      w.per_channel_params.scales[c] = scale;
      w.float_zero_points[c] = -1.0f * lo[c] / scale;
    }
    return w;
  }
  if (w.per_channel) {
    ASSIGN_OR_RETURN(w.per_channel_params, observer.CalculateQParams());
  } else {
    // One scale and zero point: no vector of each.
    ASSIGN_OR_RETURN(w.per_tensor, observer.CalculatePerTensorQParams());
  }
  return w;
}

}  // namespace

// A declared type's observed intermediate step (quantize/prepare.h): the scale and
// zero point its observer gives, recorded on the reference module by convert.
struct ObservedStepQParams {
  Module* module = nullptr;
  int step = 0;
  double scale = 1.0;
  int64_t zero_point = 0;
};

// Appends to `out` the parameters of every observed step of `module` (called by node
// `n`), from the observers whose paths prepare recorded on it. An error naming the node,
// step and observer if the path is not an observer of this model or its observer saw no
// value; nothing is changed.
template <typename ObserverLookup>
absl::Status PlanObservedSteps(const Node* n, Module& module, const ObserverLookup& observers,
                               const ConvertOptions& options, ConvertReport& report,
                               std::vector<ObservedStepQParams>* out) {
  // The steps prepare observed, as recorded on the module (the model carries them: no
  // config needed).
  for (int step : ObservedStepsOf(module)) {
    const Argument* path = module.FindAttribute(ObservedStepAttribute(step));
    const Observer* observer =
        path->is_string() ? observers.Find(Symbol::Intern(path->as_string())) : nullptr;
    if (observer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "': attribute '", ObservedStepAttribute(step), "' (",
          path->ToString(), ") is not an observer of this prepared model"));
    }
    if (ObserverSawNoValue(*observer) && options.uncalibrated_as_pytorch) {
      const std::string observer_path(path->as_string());
      if (std::find(report.uncalibrated.begin(), report.uncalibrated.end(), observer_path) ==
          report.uncalibrated.end()) {
        report.uncalibrated.push_back(observer_path);
      }
      out->push_back({&module, step, 1.0f, 0});
      continue;
    }
    if (ObserverSawNoValue(*observer)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "convert: node '", n->name(), "': the observer of step ", step, " of ",
          module.type().name(), " (", path->as_string(), ") saw no value; calibrate first"));
    }
    ASSIGN_OR_RETURN(PerTensorQParams qparams, observer->CalculatePerTensorQParams());
    out->push_back({&module, step, qparams.scale, qparams.zero_point});
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvertReport> ConvertToReference(GraphModule& gm,
                                                 const PreparedModel& prepared,
                                                 const ConvertOptions& options) {
  Graph& g = gm.graph();
  // 1. Everything computed, nothing touched; one walk. Only call_module nodes can be
  // observers or weighted ops: the others are not looked up by name (a string hash per
  // node), except to name the node in the error if a weighted plan's node is no module
  // call any more (CheckWeightedPlansFound).
  std::vector<ObserverReplacement> replacements;
  std::vector<PerChannelReplacement> per_channel_replacements;
  // Dynamic quantization's reference reduces the input's range where the engine's
  // dynamic kernels do (PyTorch: fbgemm / x86 / onednn; QNNPACK ignores reduce_range).
  ASSIGN_OR_RETURN(std::optional<QuantizedEngine> engine, RecordedEngine(gm));
  const bool dynamic_reduce_range = options.dynamic_reduce_range.value_or(
      engine.value_or(QuantizedEngine::kOnednn) != QuantizedEngine::kQnnpack);
  // The weighted modules to make reference modules, in place (no copy of the module, nor
  // of a fused module's other children, and nothing to free): the float module is read
  // here and changed only in step 2. Two nodes calling one module change it twice, the
  // same way.
  struct ReferenceConversion {
    Module* weighted = nullptr;
    Symbol reference_type;
    WeightQuantization weight;
    // nn.LSTM / nn.GRU: each weight_* tensor's own quantization, by name (`weight` unused).
    std::vector<std::pair<std::string, WeightQuantization>> recurrent_weights;
  };
  std::vector<ReferenceConversion> conversions;
  std::vector<ObservedStepQParams> observed_steps;
  // Sized once: a conversion is ~150 bytes of tensors moved at every growth otherwise.
  // Every observer module is called by at least one node.
  const size_t weighted_plans = CountWeightedPlans(prepared);
  conversions.reserve(weighted_plans);
  replacements.reserve(prepared.observers.size());
  ReferenceModuleParts parts;
  WeightObservers weight_observers;
  size_t weighted_plans_found = 0;
  const ObserverTable observers(prepared.observers);
  ConvertReport report;
  for (Node* n = g.first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    if (const Observer* observer = observers.Find(n->target()); observer != nullptr) {
      ASSIGN_OR_RETURN(std::unique_ptr<Observer> fed, ObservedConstant(gm, n, *observer));
      if (fed != nullptr) observer = fed.get();
      ASSIGN_OR_RETURN(std::optional<PerChannelReplacement> per_channel,
                       PlanPerChannelReplacement(n, *observer));
      if (per_channel.has_value()) {
        per_channel_replacements.push_back(*std::move(per_channel));
        continue;
      }
      ASSIGN_OR_RETURN(ObserverReplacement r, PlanObserverReplacement(
                                                  n, *observer, dynamic_reduce_range, options,
                                                  report));
      replacements.push_back(r);
      continue;
    }
    auto it = prepared.quantized_ops.find(n->name());
    if (it == prepared.quantized_ops.end() || it->second.root_module.empty()) continue;
    ++weighted_plans_found;
    const QuantizedOpPlan& plan = it->second;
    const absl::string_view path = n->target().name();
    // By the interned path: one probe of the GraphModule's path table where it is current
    // (Prepare's adding observer modules keeps it so), not a walk of the text's components.
    Module* m = gm.FindModule(n->target());
    if (m == nullptr) return NoModuleError(n);
    const bool fused = m->type() != plan.root_module;
    Module* weighted = fused ? m->FindChild("0") : m;
    if (weighted == nullptr || weighted->type() != plan.root_module) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "': module '", path, "' (", m->type().name(),
          ") has no ", plan.root_module.name(), " as itself or child \"0\""));
    }
    if (plan.weight_observer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convert: node '", n->name(), "': its plan names the weighted module ",
          plan.root_module.name(), " but no weight observer"));
    }
    if (IsRecurrentModuleType(weighted->type())) {
      // PyTorch's convert_fx observes each weight of an LSTM / GRU with its own fresh
      // weight observer; the reference module holds weight_ih_l0_scale, ... per weight.
      ReferenceConversion c{weighted, plan.reference_module, {}, {}};
      for (const auto& [name, tensor] : weighted->tensors()) {
        if (!absl::StartsWith(name, "weight_")) continue;
        Module::TensorList one;
        one.emplace_back("weight", tensor);
        const Module single(weighted->type(), std::move(one), {});
        auto w = QuantizeWeight(single, plan.reference_module, *plan.weight_observer,
                                weight_observers);
        if (!w.ok()) {
          return absl::Status(w.status().code(),
                              absl::StrCat("node '", n->name(), "': tensor '", name, "': ",
                                           w.status().message()));
        }
        c.recurrent_weights.emplace_back(name, *std::move(w));
      }
      conversions.push_back(std::move(c));
      continue;
    }
    auto weight_or =
        QuantizeWeight(*weighted, plan.reference_module, *plan.weight_observer,
                       weight_observers);
    if (!weight_or.ok()) {
      return absl::Status(weight_or.status().code(), absl::StrCat("node '", n->name(), "': ",
                                                                  weight_or.status().message()));
    }
    conversions.push_back({weighted, plan.reference_module, *std::move(weight_or), {}});
    if (fused) {
      RETURN_IF_ERROR(PlanObservedSteps(n, *m, observers, options, report, &observed_steps));
    }
  }
  RETURN_IF_ERROR(
      CheckWeightedPlansFound(g, prepared, weighted_plans, weighted_plans_found));

  // 2. Mutation; it cannot fail on a graph the checks above passed.
  const ReplacementTargets targets;
  for (const ObserverReplacement& r : replacements) {
    absl::Status st = ReplaceObserver(g, targets, r);
    if (!st.ok()) return absl::InternalError(absl::StrCat("convert: ", st.message()));
    ++report.observers_replaced;
  }
  for (const PerChannelReplacement& r : per_channel_replacements) {
    absl::Status st = ReplacePerChannelObserver(gm, r);
    if (!st.ok()) return absl::InternalError(absl::StrCat("convert: ", st.message()));
    ++report.observers_replaced;
  }
  for (ReferenceConversion& c : conversions) {
    if (!c.recurrent_weights.empty()) {
      MakeRecurrentReference(*c.weighted, c.reference_type, c.recurrent_weights, parts);
      ++report.reference_modules;
      continue;
    }
    MakeReference(*c.weighted, c.reference_type, c.weight, parts);
    ++report.reference_modules;
  }
  for (const ObservedStepQParams& q : observed_steps) {
    q.module->RemoveAttribute(ObservedStepAttribute(q.step));
    q.module->SetAttribute(ObservedStepScaleAttribute(q.step), Argument::Float(q.scale));
    q.module->SetAttribute(ObservedStepZeroPointAttribute(q.step), Argument::Int(q.zero_point));
  }
  // The observer modules go with their container, in one step (removing thousands of
  // children one by one would be quadratic), and so do the plan modules of a prepared
  // model read from a file (quantize/prepared_model.h).
  if (!prepared.observer_container.empty()) {
    const Module* container = gm.FindModule(prepared.observer_container);
    bool only_observers = container != nullptr;
    if (container != nullptr) {
      std::string path = absl::StrCat(prepared.observer_container, ".");
      const size_t prefix = path.size();
      size_t cursor = 0;
      for (const auto& [name, child] : container->children()) {
        path.resize(prefix);
        path += name;
        const bool plan_module = absl::StartsWith(name, kWeightPlanModulePrefix) &&
                                 IsObserverModuleType(child->type());
        if (!plan_module && !observers.ContainsPath(path, &cursor)) {
          only_observers = false;
          break;
        }
      }
    }
    if (only_observers) {
      auto [parent_path, name] = SplitModulePath(prepared.observer_container);
      Module* parent = gm.FindModule(parent_path);
      if (parent != nullptr) parent->RemoveChild(name);
    }
  }
  return report;
}

}  // namespace fuselage
