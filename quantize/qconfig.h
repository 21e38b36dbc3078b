// QConfig and QConfigMapping: which observers watch activations and weights, for the
// whole model, per object type (module type, function or method), per module name or
// per module-name regex — torch.ao.quantization's QConfig / QConfigMapping as data.
//
// An ObserverSpec is what PyTorch writes as `MinMaxObserver.with_args(...)`: the kind of
// observer and its constructor arguments. `DefaultQConfig(backend)` and
// `DefaultQConfigMapping(backend)` reproduce PyTorch 1.13's `get_default_qconfig` and
// `get_default_qconfig_mapping` for "fbgemm", "x86", "qnnpack" and "onednn".
#ifndef FUSELAGE_QUANTIZE_QCONFIG_H_
#define FUSELAGE_QUANTIZE_QCONFIG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dtype.h"
#include "graph/symbol.h"

namespace fuselage {

// Node meta set (true) by prepare on an op it kept float because its qconfig is None
// (PyTorch's qconfig_map entry None; graph/NAMING.md). It goes with the model through
// the model file and to_torch / from_torch, and lowering reads it: PyTorch's
// should_skip_lowering leaves such a binary op or weighted functional float even between
// quantized neighbours.
inline constexpr char kQConfigNoneMeta[] = "qconfig_none";

enum class ObserverKind : uint8_t {
  kMinMax,
  kMovingAverageMinMax,
  kPerChannelMinMax,
  kMovingAveragePerChannelMinMax,
  kHistogram,
  // Records nothing; marks a dtype (e.g. float16, or float32 for "stay float").
  kPlaceholder,
  // Weight observer of ops without weights (PyTorch's NoopObserver).
  kNoop,
  // Fixed scale / zero point (sigmoid, tanh, hardsigmoid, softmax).
  kFixedQParams,
  // Shares the observer of the op's input (PyTorch's ReuseInputObserver, for reshape).
  kReuseInput,
};

// The class name PyTorch uses, which is also the module type of the observer node
// fuselage inserts ("MinMaxObserver", "HistogramObserver", ...).
absl::string_view ObserverKindName(ObserverKind kind);
std::optional<ObserverKind> ObserverKindFromName(absl::string_view name);

// torch.qscheme values an observer can compute. (A quantized Tensor only carries the
// affine schemes; symmetric ones are affine with a fixed zero point.)
enum class ObserverQScheme : uint8_t {
  kPerTensorAffine,
  kPerTensorSymmetric,
  kPerChannelAffine,
  kPerChannelSymmetric,
  kPerChannelAffineFloatQParams,
};
// "torch.per_tensor_affine", ...
absl::string_view ObserverQSchemeName(ObserverQScheme qscheme);
std::optional<ObserverQScheme> ObserverQSchemeFromName(absl::string_view name);
bool IsPerChannel(ObserverQScheme qscheme);
bool IsSymmetric(ObserverQScheme qscheme);

// torch.finfo(torch.float32).eps, PyTorch's default observer eps.
inline constexpr double kFloat32Eps = 1.1920928955078125e-07;

// One observer and its constructor arguments (PyTorch's `Observer.with_args(...)`).
struct ObserverSpec {
  ObserverKind kind = ObserverKind::kMinMax;
  DType dtype = DType::kQUInt8;
  ObserverQScheme qscheme = ObserverQScheme::kPerTensorAffine;
  bool reduce_range = false;
  // A customized range; both set or both unset, as PyTorch's has_customized_qrange.
  std::optional<int64_t> quant_min;
  std::optional<int64_t> quant_max;
  double eps = kFloat32Eps;
  double averaging_constant = 0.01;  // moving-average observers
  int64_t ch_axis = 0;               // per-channel observers
  int64_t bins = 2048;               // histogram
  int64_t upsample_rate = 16;        // histogram (PyTorch 2's; 1.13's default was 128)
  double fixed_scale = 1.0;          // fixed-qparams
  int64_t fixed_zero_point = 0;      // fixed-qparams
  // Placeholder only: the op's input is quantized to `dtype` at run time (dynamic
  // quantization, PyTorch's PlaceholderObserver(is_dynamic=True)).
  bool is_dynamic = false;

  // A static PlaceholderObserver of torch.float16 (float16_static_qconfig's activation and
  // weight, float16_dynamic_qconfig's weight): PyTorch's float16 "quantization" is a cast,
  // so the observer records nothing and convert makes it x.to(torch.float16) → dequantize
  // (a weighted module's weight: weight_dtype torch.float16), not an int8 quantize.
  bool IsFloat16Cast() const {
    return kind == ObserverKind::kPlaceholder && dtype == DType::kFloat16 && !is_dynamic;
  }

  // The effective [quant_min, quant_max] as PyTorch's calculate_qmin_qmax computes it
  // (custom range halved by reduce_range; else the dtype's 8-bit range, reduced or not).
  // InvalidArgument where PyTorch's constructor asserts (range without 0, min >= max,
  // a custom range wider than 256 values for qint8, only one of the two set).
  absl::StatusOr<std::pair<int64_t, int64_t>> QuantRange() const;

  // Checks what PyTorch's observer constructors check: the qscheme fits the kind
  // (per-tensor vs per-channel), the dtype is a quantized dtype (float dtypes only for
  // placeholder / noop), no reduce_range with symmetric quint8, eps > 0, averaging
  // constant in (0, 1], bins > 0 and upsample_rate > 0. The error names the field.
  absl::Status Validate() const;

  friend bool operator==(const ObserverSpec& a, const ObserverSpec& b);
  friend bool operator!=(const ObserverSpec& a, const ObserverSpec& b) { return !(a == b); }
  // Python-like rendering: "MinMaxObserver(dtype=torch.qint8, qscheme=...)".
  std::string ToString() const;
};

struct QConfig {
  ObserverSpec activation;
  ObserverSpec weight;

  friend bool operator==(const QConfig& a, const QConfig& b) {
    return a.activation == b.activation && a.weight == b.weight;
  }
  friend bool operator!=(const QConfig& a, const QConfig& b) { return !(a == b); }
};

// PyTorch's `QConfigAny`: nullopt means "do not quantize".
using OptionalQConfig = std::optional<QConfig>;

// The observers of PyTorch 1.13's observer.py defaults.
ObserverSpec DefaultWeightObserver();            // MinMax, qint8, per-tensor symmetric
ObserverSpec DefaultPerChannelWeightObserver();  // PerChannelMinMax, qint8, per-channel symmetric
ObserverSpec DefaultPlaceholderObserver();       // Placeholder, float32

// get_default_qconfig(backend): "fbgemm" / "x86" -> Histogram(reduce_range=True) +
// per-channel weights; "qnnpack" -> Histogram(reduce_range=False) + per-tensor weights;
// "onednn" -> Histogram(reduce_range=False) + per-channel weights. InvalidArgument for any
// other backend (PyTorch silently falls back to default_qconfig; we would rather say so).
absl::StatusOr<QConfig> DefaultQConfig(absl::string_view backend);

// Which qconfig applies to each node, with PyTorch's precedence (lowest to highest):
// global < object type < module-name regex < module name < module name + object type +
// call index (QConfigResolver applies the last). A module name also matches its
// descendants ("layer1" covers "layer1.0.conv1") unless one of them has its own entry.
// Object types are fuselage's names (graph/NAMING.md): module types ("nn.Conv2d"),
// call_function targets ("torch.nn.functional.conv2d", "operator.add") and call_method
// names ("reshape") — the three never collide. Setting a key twice replaces its qconfig
// but keeps its first position (regexes are tried in insertion order, first match wins).
class QConfigMapping {
 public:
  QConfigMapping& SetGlobal(OptionalQConfig qconfig);
  QConfigMapping& SetObjectType(absl::string_view object_type, OptionalQConfig qconfig);
  QConfigMapping& SetModuleName(absl::string_view module_name, OptionalQConfig qconfig);
  // `regex` uses ECMAScript syntax and, as Python's re.match, must match at the start of
  // the module name. InvalidArgument (mapping unchanged) if it does not compile.
  absl::Status SetModuleNameRegex(absl::string_view regex, OptionalQConfig qconfig);
  // PyTorch's set_module_name_object_type_order: the `index`-th call (from 0, in graph
  // order) of `object_type` directly inside module `module_name` ("" = the root). Only
  // QConfigResolver, which counts the calls, applies these entries.
  QConfigMapping& SetModuleNameObjectTypeOrder(absl::string_view module_name,
                                               absl::string_view object_type, int64_t index,
                                               OptionalQConfig qconfig);

  const OptionalQConfig& global() const { return global_; }
  // The entry for exactly this key, or nullptr.
  const OptionalQConfig* FindObjectType(absl::string_view object_type) const;
  const OptionalQConfig* FindObjectType(Symbol object_type) const;
  const OptionalQConfig* FindModuleName(absl::string_view module_name) const;
  const OptionalQConfig* FindModuleNameObjectTypeOrder(absl::string_view module_name,
                                                       Symbol object_type,
                                                       int64_t index) const;
  bool has_object_type_order_entries() const { return !object_type_orders_.empty(); }

  // The qconfig for one call looked up on its own: `object_type` is the module type /
  // function / method it calls, `module_name` its call_module target ("" for functions
  // and methods). Order entries and fused modules need the whole graph walk:
  // QConfigResolver, which Prepare uses, applies those too.
  const OptionalQConfig& QConfigFor(absl::string_view object_type,
                                    absl::string_view module_name) const;
  // The same for an interned object type (no string lookup).
  const OptionalQConfig& QConfigFor(Symbol object_type, absl::string_view module_name) const;

  // PyTorch's _maybe_adjust_qconfig_for_module_type_or_name: the module-name entry of
  // `module_name` or its nearest ancestor, else the first regex matching it (also ""),
  // else the object-type entry of `object_type`, else `fallback`.
  const OptionalQConfig& AdjustForTypeOrName(Symbol object_type, absl::string_view module_name,
                                             const OptionalQConfig& fallback) const;
  // The same without the object-type step: module name (or ancestor), regex, `fallback`.
  const OptionalQConfig& AdjustForName(absl::string_view module_name,
                                       const OptionalQConfig& fallback) const;

  // PyTorch's update_qconfig_for_fusion: the object-type qconfig of a fused module
  // (nni.ConvReLU2d) whose parts (its children) have the module types `parts`: the entry
  // of the first part's type, or nullptr if it has none (or the mapping has no
  // object-type entries at all). InvalidArgument, as PyTorch's LookupError, if the parts'
  // entries differ (one set and another not, or two different qconfigs).
  absl::StatusOr<const OptionalQConfig*> FusedObjectType(absl::Span<const Symbol> parts) const;

 private:
  struct RegexEntry;
  using OrderKey = std::tuple<std::string, Symbol, int64_t>;
  OptionalQConfig global_;
  absl::flat_hash_map<Symbol, OptionalQConfig> object_types_;
  absl::flat_hash_map<std::string, OptionalQConfig> module_names_;
  std::vector<std::shared_ptr<const RegexEntry>> regexes_;
  absl::flat_hash_map<OrderKey, OptionalQConfig> object_type_orders_;
};

// The qconfig of each node of one graph, in graph order: PyTorch 1.13's
// generate_qconfig_map, including module_name_object_type_order, whose call indices it
// counts. Call it once per call_module / call_function / call_method node (not for
// observers), first node first; the references it returns point into the mapping.
//
//   QConfigResolver resolver(mapping, gm.root().type());
//   for (node : graph) ... resolver.ForModuleCall(type, "layer1.0.conv1") ...
//
// `scope` is the module whose forward makes a function or method call and `scope_type`
// its type; a graph without scope information passes the root ("" and the root's type).
class QConfigResolver {
 public:
  QConfigResolver(const QConfigMapping& mapping, Symbol root_type)
      : mapping_(mapping), root_type_(root_type) {}

  // A call_module node calling `module_name` (a module of type `module_type`); its call
  // index counts within its parent module. For a fused module, `fused_parts` are its
  // children's types: their shared object-type entry applies (FusedObjectType, whose
  // error this returns), and the call counts as one of its first part's type (the
  // module it replaced, as PyTorch counts by the types the tracer saw before fusion).
  absl::StatusOr<const OptionalQConfig*> ForModuleCall(
      Symbol module_type, absl::string_view module_name,
      absl::Span<const Symbol> fused_parts = {});
  // A call_function node: the function's object-type entry, then the scope's entries
  // (PyTorch lets the enclosing module's name and type override the function's type),
  // then the order entry.
  const OptionalQConfig& ForFunctionCall(Symbol function, absl::string_view scope,
                                         Symbol scope_type);
  // A call_method node: the method name's entries, then the scope's (PyTorch does not
  // index method calls).
  const OptionalQConfig& ForMethodCall(Symbol method, absl::string_view scope,
                                       Symbol scope_type);
  Symbol root_type() const { return root_type_; }

 private:
  // The next call index of `object_type` in `scope` (counted only when the mapping has
  // order entries).
  const OptionalQConfig& ApplyOrder(absl::string_view scope, Symbol object_type,
                                    const OptionalQConfig& qconfig);

  const QConfigMapping& mapping_;
  Symbol root_type_;
  absl::flat_hash_map<std::pair<std::string, Symbol>, int64_t> next_index_;
};

// get_default_qconfig_mapping(backend) of PyTorch 1.13: the global default qconfig, the
// same for convs / linear / relu / batch norm, per-tensor weights for transposed convs on
// fbgemm / x86, placeholder weights for layer norm, input-reusing "reshape", and the
// fixed-qparams observers of sigmoid / tanh / hardsigmoid / softmax.
absl::StatusOr<QConfigMapping> DefaultQConfigMapping(absl::string_view backend);

// Sets the fixed-qparams ops' object-type qconfigs that get_default_qconfig_mapping
// installs whatever the global qconfig (_FIXED_QPARAMS_OP_TO_OBSERVER: sigmoid /
// hardsigmoid / softmax on [0, 1), tanh on [-1, 1)); PyTorch's prepare_fx refuses any
// other observer on them, so a mapping built by hand needs these too.
void SetFixedQParamsObjectTypes(QConfigMapping& mapping);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_QCONFIG_H_
