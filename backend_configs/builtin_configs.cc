#include "backend_configs/builtin_configs.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

using DTypeConfigs = std::vector<DTypeConfig>;
constexpr ObservationType kDifferent = ObservationType::kOutputUseDifferentObserverAsInput;
constexpr ObservationType kShare = ObservationType::kOutputShareObserverWithInput;

// ---- Dtype configs (native.py, fbgemm.py, x86.py, qnnpack.py) -----------------------

DTypeConfig WeightedOpInt8() {
  return DTypeConfig::Of(DType::kQUInt8, DType::kQUInt8, DType::kQInt8, DType::kFloat32);
}
DTypeConfig DefaultOpQUInt8() { return DTypeConfig::Of(DType::kQUInt8, DType::kQUInt8); }
DTypeConfig DynamicInt8() {
  return DTypeConfig::Of(DType::kQUInt8, DType::kFloat32, DType::kQInt8, DType::kFloat32,
                         /*is_dynamic=*/true);
}
DTypeConfig DynamicFloat16() {
  return DTypeConfig::Of(DType::kFloat16, DType::kFloat32, DType::kFloat16, DType::kFloat32,
                         /*is_dynamic=*/true);
}
DTypeConfig InputOutputOnlyQUInt8() {
  return DTypeConfig::Of(DType::kQUInt8, DType::kQUInt8, DType::kFloat32, DType::kFloat32);
}
DTypeConfig WeightOnlyQUInt8() {
  return DTypeConfig::Of(DType::kFloat32, DType::kFloat32, DType::kQUInt8);
}
DTypeConfig WeightOnlyQUInt4x2() {
  return DTypeConfig::Of(DType::kFloat32, DType::kFloat32, DType::kQUInt4x2);
}

// qnnpack's xnnpack-compatible configs: scales of at least 2^-12 keep the requantization
// scale above xnnpack's threshold; symmetric qint8 weights exclude -128.
constexpr double kQnnpackScaleMin = 1.0 / 4096.0;
DTypeWithConstraints QnnpackActivationQInt8() {
  DTypeWithConstraints c;
  c.dtype = DType::kQInt8;
  c.scale_min_lower_bound = kQnnpackScaleMin;
  return c;
}
DTypeWithConstraints QnnpackWeightQInt8Symmetric() {
  DTypeWithConstraints c = QnnpackActivationQInt8();
  c.quant_min_lower_bound = -127;
  c.quant_max_upper_bound = 127;
  return c;
}
DTypeConfig QnnpackWeightedOpQInt8Symmetric() {
  DTypeConfig config;
  config.input = QnnpackActivationQInt8();
  config.output = QnnpackActivationQInt8();
  config.weight = QnnpackWeightQInt8Symmetric();
  config.bias = DType::kFloat32;
  return config;
}
DTypeConfig QnnpackDefaultOpQInt8Symmetric() {
  DTypeConfig config;
  config.input = QnnpackActivationQInt8();
  config.output = QnnpackActivationQInt8();
  return config;
}

// The dtype configs of each op family, as each backend file assigns them.
struct FamilyDTypes {
  DTypeConfigs conv, linear, binary_op, default_op, fixed_qparams_op, share_qparams_op, rnn,
      embedding, layer_norm;
  bool has_layer_norm = false;  // only native.py adds layer norm configs
};

FamilyDTypes NativeFamilyDTypes() {
  FamilyDTypes d;
  d.conv = {WeightedOpInt8()};
  d.linear = {WeightedOpInt8(), DynamicInt8(), DynamicFloat16()};
  d.binary_op = {WeightedOpInt8()};
  d.default_op = {DefaultOpQUInt8()};
  d.fixed_qparams_op = {WeightedOpInt8()};
  d.share_qparams_op = {DefaultOpQUInt8()};
  d.rnn = {DynamicInt8(), DynamicFloat16()};
  d.embedding = {WeightOnlyQUInt8(), WeightOnlyQUInt4x2()};
  d.layer_norm = {InputOutputOnlyQUInt8()};  // used by "native" only
  return d;
}

FamilyDTypes QnnpackFamilyDTypes() {
  FamilyDTypes d;
  const DTypeConfigs weighted = {QnnpackWeightedOpQInt8Symmetric(), WeightedOpInt8()};
  const DTypeConfigs default_op = {QnnpackDefaultOpQInt8Symmetric(), DefaultOpQUInt8()};
  d.conv = weighted;
  d.linear = {QnnpackWeightedOpQInt8Symmetric(), WeightedOpInt8(), DynamicInt8(),
              DynamicFloat16()};
  d.binary_op = weighted;
  d.default_op = default_op;
  d.fixed_qparams_op = weighted;
  d.share_qparams_op = default_op;
  d.rnn = {DynamicInt8(), DynamicFloat16()};
  d.embedding = {WeightOnlyQUInt8(), WeightOnlyQUInt4x2()};
  return d;
}

// ---- Entries ------------------------------------------------------------------------

// Builds the entries of one config; the first error sticks (an error here is a bug in
// these tables, reported as Internal by GetBackendConfig).
class ConfigBuilder {
 public:
  explicit ConfigBuilder(std::string name) : config_(std::move(name)) {}

  // A quantization entry (no fusion) for `pattern` (complex format), named by it.
  BackendPatternConfig* Quantize(absl::string_view pattern, ObservationType observation,
                                 const DTypeConfigs& dtypes) {
    auto parsed = Pattern::Parse(pattern, PatternFormat::kComplex);
    if (!parsed.ok()) {
      Fail(parsed.status());
      return &scratch_;
    }
    pending_.emplace_back();
    BackendPatternConfig& entry = pending_.back();
    entry.rule.name = std::string(pattern);
    entry.rule.pattern = *std::move(parsed);
    entry.observation_type = observation;
    entry.dtype_configs = dtypes;
    return &entry;
  }

  // A fusion entry: `fuser` turns a match of `pattern` into a `fused_type` module (empty
  // type: the folded root module itself).
  BackendPatternConfig* Fuse(absl::string_view pattern, FuserKind fuser,
                             absl::string_view fused_type, const DTypeConfigs& dtypes) {
    BackendPatternConfig* entry = Quantize(pattern, kDifferent, dtypes);
    entry->fuses = true;
    entry->rule.fuser_kind = fuser;
    if (!fused_type.empty()) entry->rule.fused_module_type = Symbol::Intern(fused_type);
    return entry;
  }

  static void SetModules(BackendPatternConfig* entry, absl::string_view root,
                         absl::string_view reference) {
    entry->root_module = Symbol::Intern(root);
    entry->reference_quantized_module = Symbol::Intern(reference);
  }

  absl::StatusOr<BackendConfig> Finish() {
    for (BackendPatternConfig& entry : pending_) {
      if (!status_.ok()) break;
      Fail(config_.Add(std::move(entry)));
    }
    if (!status_.ok()) {
      return absl::InternalError(absl::StrCat("built-in backend config '", config_.name(),
                                              "' is broken: ", status_.message()));
    }
    return std::move(config_);
  }

 private:
  void Fail(const absl::Status& status) {
    if (status_.ok()) status_ = status;
  }

  BackendConfig config_;
  // Entries are collected first (a deque keeps the pointers handed out valid), then
  // validated and added in order by Finish.
  std::deque<BackendPatternConfig> pending_;
  BackendPatternConfig scratch_;  // target of writes after a parse error
  absl::Status status_;
};

struct ConvFamily {
  std::string nd;  // "1d"
  std::string conv() const { return "nn.Conv" + nd; }
  std::string transpose() const { return "nn.ConvTranspose" + nd; }
  std::string bn() const { return "nn.BatchNorm" + nd; }
  std::string reference() const { return "nnqr.Conv" + nd; }
  std::string transpose_reference() const { return "nnqr.ConvTranspose" + nd; }
  std::string conv_relu() const { return "nni.ConvReLU" + nd; }
  std::string conv_bn() const { return "nni.ConvBn" + nd; }
  std::string conv_bn_relu() const { return "nni.ConvBnReLU" + nd; }
  std::string functional() const { return "torch.nn.functional.conv" + nd; }
};

constexpr absl::string_view kFRelu = "torch.nn.functional.relu";

// _get_conv_configs.
void AddConvConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (const ConvFamily& c : {ConvFamily{"1d"}, ConvFamily{"2d"}, ConvFamily{"3d"}}) {
    // (1) The conv module and the functional conv.
    ConfigBuilder::SetModules(b.Quantize(c.conv(), kDifferent, dtypes), c.conv(),
                              c.reference());
    BackendPatternConfig* functional = b.Quantize(c.functional(), kDifferent, dtypes);
    functional->weight_arg_index = 1;
    functional->bias_arg_index = 2;
    // (2) conv + relu: fusion, the fused module, the functional conv + relu.
    for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
      b.Fuse(absl::StrCat("(", relu, ", ", c.conv(), ")"), FuserKind::kWrapInSequence,
             c.conv_relu(), dtypes);
    }
    ConfigBuilder::SetModules(b.Quantize(c.conv_relu(), kDifferent, dtypes), c.conv(),
                              c.reference());
    for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
      b.Quantize(absl::StrCat("(", relu, ", ", c.functional(), ")"), kDifferent, dtypes);
    }
    // (3) conv + bn (+ relu): eval-mode fusion folds the batch norm.
    b.Fuse(absl::StrCat("(", c.bn(), ", ", c.conv(), ")"), FuserKind::kFoldBatchNormThenWrap,
           "", dtypes);
    b.Fuse(absl::StrCat("(nn.ReLU, (", c.bn(), ", ", c.conv(), "))"),
           FuserKind::kFoldBatchNormThenWrap, c.conv_relu(), dtypes);
    BackendPatternConfig* f_relu_fusion =
        b.Fuse(absl::StrCat("(", kFRelu, ", (", c.bn(), ", ", c.conv(), "))"),
               FuserKind::kFoldBatchNormThenWrap, c.conv_relu(), dtypes);
    f_relu_fusion->root_module = Symbol::Intern(c.conv());  // as PyTorch sets it
    for (const std::string& fused : {c.conv_bn(), c.conv_bn_relu()}) {
      ConfigBuilder::SetModules(b.Quantize(fused, kDifferent, dtypes), c.conv(),
                                c.reference());
    }
    // (4) conv transpose and its batch norm fusion.
    ConfigBuilder::SetModules(b.Quantize(c.transpose(), kDifferent, dtypes), c.transpose(),
                              c.transpose_reference());
    ConfigBuilder::SetModules(
        b.Fuse(absl::StrCat("(", c.bn(), ", ", c.transpose(), ")"),
               FuserKind::kFoldBatchNormThenWrap, "", dtypes),
        c.transpose(), c.transpose_reference());
  }
}

// _get_linear_configs.
void AddLinearConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  ConfigBuilder::SetModules(b.Quantize("nn.Linear", kDifferent, dtypes), "nn.Linear",
                            "nnqr.Linear");
  BackendPatternConfig* functional =
      b.Quantize("torch.nn.functional.linear", kDifferent, dtypes);
  functional->weight_arg_index = 1;
  functional->bias_arg_index = 2;
  for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
    b.Fuse(absl::StrCat("(", relu, ", nn.Linear)"), FuserKind::kWrapInSequence,
           "nni.LinearReLU", dtypes);
  }
  ConfigBuilder::SetModules(b.Quantize("nni.LinearReLU", kDifferent, dtypes), "nn.Linear",
                            "nnqr.Linear");
  for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
    b.Quantize(absl::StrCat("(", relu, ", torch.nn.functional.linear)"), kDifferent, dtypes);
  }
  b.Fuse("(nn.BatchNorm1d, nn.Linear)", FuserKind::kFoldBatchNormThenWrap, "", dtypes);
  ConfigBuilder::SetModules(b.Quantize("nni.LinearBn1d", kDifferent, dtypes), "nn.Linear",
                            "nnqr.Linear");
}

// _get_binary_op_configs: add / mul with an optional relu. With one tensor arg (x + 1.0)
// the output shares the input's observer.
void AddBinaryOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view op : {"operator.add", "torch.add", "operator.mul", "torch.mul"}) {
    for (std::string pattern :
         {absl::StrCat("(nn.ReLU, ", op, ")"), absl::StrCat("(", kFRelu, ", ", op, ")"),
          absl::StrCat("(torch.relu, ", op, ")"), std::string(op)}) {
      BackendPatternConfig* entry = b.Quantize(pattern, kDifferent, dtypes);
      entry->num_tensor_args_to_observation_type = {
          {0, kDifferent}, {1, kShare}, {2, kDifferent}};
    }
  }
  b.Quantize("torch.matmul", kDifferent, dtypes);
}

void AddCatConfig(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  b.Quantize("torch.cat", kShare, dtypes);
}

void AddLayerNormConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  b.Quantize("nn.LayerNorm", kDifferent, dtypes);
  BackendPatternConfig* functional =
      b.Quantize("torch.nn.functional.layer_norm", kDifferent, dtypes);
  functional->weight_arg_index = 2;
  functional->bias_arg_index = 3;
}

void AddDefaultOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view op :
       {"nn.ELU", "nn.LeakyReLU", "nn.Hardswish", "nn.InstanceNorm1d", "nn.InstanceNorm2d",
        "nn.InstanceNorm3d", "nn.Dropout", "nn.PReLU", "torch.nn.functional.elu",
        "torch.nn.functional.hardswish", "torch.nn.functional.leaky_relu",
        "torch.nn.functional.dropout"}) {
    b.Quantize(op, kDifferent, dtypes);
  }
  BackendPatternConfig* group_norm =
      b.Quantize("torch.nn.functional.group_norm", kDifferent, dtypes);
  group_norm->weight_arg_index = 2;
  group_norm->bias_arg_index = 3;
  BackendPatternConfig* instance_norm =
      b.Quantize("torch.nn.functional.instance_norm", kDifferent, dtypes);
  instance_norm->weight_arg_index = 3;
  instance_norm->bias_arg_index = 4;
}

// _FIXED_QPARAMS_OP_TO_OBSERVER: [0, 1] outputs get scale 1/256, zero point 0; [-1, 1]
// outputs scale 2/256, zero point 128.
void AddFixedQParamsOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  const FixedQParams zero_to_one{1.0 / 256.0, 0};
  const FixedQParams minus_one_to_one{2.0 / 256.0, 128};
  const std::vector<std::pair<absl::string_view, FixedQParams>> ops = {
      {"nn.Hardsigmoid", zero_to_one},    {"torch.nn.functional.hardsigmoid", zero_to_one},
      {"method:hardsigmoid", zero_to_one}, {"method:hardsigmoid_", zero_to_one},
      {"nn.Sigmoid", zero_to_one},        {"torch.sigmoid", zero_to_one},
      {"method:sigmoid", zero_to_one},    {"method:sigmoid_", zero_to_one},
      {"nn.Softmax", zero_to_one},        {"nn.Tanh", minus_one_to_one},
      {"torch.tanh", minus_one_to_one},   {"method:tanh", minus_one_to_one},
      {"method:tanh_", minus_one_to_one},
  };
  for (const auto& [op, qparams] : ops) {
    b.Quantize(op, kDifferent, dtypes)->fixed_output_qparams = qparams;
  }
}

// _get_share_qparams_op_configs: ops whose output reuses the input's parameters.
void AddShareQParamsOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view op : {
           "nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
           "nn.AvgPool1d", "nn.AvgPool2d", "nn.AvgPool3d", "nn.Hardtanh", "nn.Identity",
           "nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nn.ReLU", "nn.ReLU6",
           "torch.nn.functional.adaptive_avg_pool1d", "torch.nn.functional.adaptive_avg_pool2d",
           "torch.nn.functional.adaptive_avg_pool3d", "torch.nn.functional.hardtanh",
           "torch.nn.functional.hardtanh_", "torch.nn.functional.interpolate",
           "torch.nn.functional.max_pool1d", "torch.nn.functional.max_pool2d",
           "torch.nn.functional.max_pool3d", "torch.nn.functional.relu",
           "torch.nn.functional.relu6", "torch.nn.functional.avg_pool1d",
           "torch.nn.functional.avg_pool2d", "torch.nn.functional.avg_pool3d",
           "torch.clamp", "torch.flatten", "torch.mean", "torch.repeat_interleave",
           "torch.transpose", "torch.squeeze", "torch.stack", "torch.unsqueeze",
           "operator.floordiv", "method:contiguous", "method:clamp", "method:detach",
           "method:detach_", "method:mean", "method:permute", "method:repeat",
           "method:repeat_interleave", "method:reshape", "method:resize_", "method:relu",
           "method:relu_", "method:shape", "method:size", "method:squeeze",
           "method:squeeze_", "method:transpose", "method:unsqueeze", "method:unsqueeze_",
           "method:view"}) {
    b.Quantize(op, kShare, dtypes);
  }
}

// _get_bn_configs.
void AddBatchNormConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view nd : {"2d", "3d"}) {
    const std::string bn = absl::StrCat("nn.BatchNorm", nd);
    const std::string fused = absl::StrCat("nni.BNReLU", nd);
    for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
      b.Fuse(absl::StrCat("(", relu, ", ", bn, ")"), FuserKind::kWrapInSequence, fused,
             dtypes);
    }
    b.Quantize(bn, kDifferent, dtypes);
  }
  for (absl::string_view fused : {"nni.BNReLU2d", "nni.BNReLU3d"}) {
    b.Quantize(fused, kDifferent, dtypes);
  }
}

// _get_rnn_op_configs: dynamic quantization of recurrent modules.
void AddRnnOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view op : {"GRUCell", "LSTMCell", "RNNCell", "LSTM"}) {
    ConfigBuilder::SetModules(b.Quantize(absl::StrCat("nn.", op), kDifferent, dtypes),
                              absl::StrCat("nn.", op), absl::StrCat("nnqr.", op));
  }
}

// _get_embedding_op_configs: weight-only quantization; inputs (indices) and outputs are
// not observed.
void AddEmbeddingOpConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  for (absl::string_view op : {"Embedding", "EmbeddingBag"}) {
    BackendPatternConfig* entry = b.Quantize(absl::StrCat("nn.", op), kDifferent, dtypes);
    ConfigBuilder::SetModules(entry, absl::StrCat("nn.", op), absl::StrCat("nnqr.", op));
    entry->input_output_observed = false;
  }
}

// PyTorch 2.x's onednn conv-add fusions. `add` covers operator.add, torch.add and the add
// method, and matches with its args swapped, so one pattern serves x + conv(y) and
// conv(y) + x. Root: the conv (FusionRule's default); extra input: the other summand.
void AddOnednnConvAddConfigs(ConfigBuilder& b, const DTypeConfigs& dtypes) {
  b.Fuse("(add, nn.Conv2d, MatchAllNode)", FuserKind::kWrapInSequence, "nni.ConvAdd2d",
         dtypes);
  b.Fuse("(add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode)",
         FuserKind::kFoldBatchNormThenWrap, "nni.ConvAdd2d", dtypes);
  for (absl::string_view relu : {absl::string_view("nn.ReLU"), kFRelu}) {
    b.Fuse(absl::StrCat("(", relu, ", (add, nn.Conv2d, MatchAllNode))"),
           FuserKind::kWrapInSequence, "nni.ConvAddReLU2d", dtypes);
    b.Fuse(absl::StrCat("(", relu, ", (add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode))"),
           FuserKind::kFoldBatchNormThenWrap, "nni.ConvAddReLU2d", dtypes);
  }
  for (absl::string_view fused : {"nni.ConvAdd2d", "nni.ConvAddReLU2d"}) {
    ConfigBuilder::SetModules(b.Quantize(fused, kDifferent, dtypes), "nn.Conv2d",
                              "nnqr.Conv2d");
  }
}

absl::StatusOr<BackendConfig> BuildConfig(absl::string_view name, const FamilyDTypes& d,
                                          bool onednn_fusions) {
  ConfigBuilder b{std::string(name)};
  AddConvConfigs(b, d.conv);
  AddLinearConfigs(b, d.linear);
  AddBinaryOpConfigs(b, d.binary_op);
  AddCatConfig(b, d.default_op);
  AddDefaultOpConfigs(b, d.default_op);
  AddFixedQParamsOpConfigs(b, d.fixed_qparams_op);
  AddShareQParamsOpConfigs(b, d.share_qparams_op);
  AddBatchNormConfigs(b, d.default_op);
  if (d.has_layer_norm) AddLayerNormConfigs(b, d.layer_norm);
  AddRnnOpConfigs(b, d.rnn);
  AddEmbeddingOpConfigs(b, d.embedding);
  if (onednn_fusions) AddOnednnConvAddConfigs(b, d.conv);
  ASSIGN_OR_RETURN(BackendConfig config, b.Finish());
  config.set_built_in_base(std::string(name));
  return config;
}

}  // namespace

std::vector<std::string> BuiltinBackendConfigNames() {
  return {"native", "fbgemm", "qnnpack", "x86", "onednn"};
}

absl::StatusOr<BackendConfig> GetBackendConfig(absl::string_view name) {
  // fbgemm and x86 use native's dtype configs in PyTorch 1.13 (their files say so), but
  // only native has the layer norm entries.
  if (name == "native") {
    FamilyDTypes dtypes = NativeFamilyDTypes();
    dtypes.has_layer_norm = true;
    return BuildConfig(name, dtypes, /*onednn_fusions=*/false);
  }
  if (name == "fbgemm" || name == "x86") {
    return BuildConfig(name, NativeFamilyDTypes(), /*onednn_fusions=*/false);
  }
  if (name == "qnnpack") return BuildConfig(name, QnnpackFamilyDTypes(), false);
  if (name == "onednn") return BuildConfig(name, NativeFamilyDTypes(), true);
  return absl::NotFoundError(absl::StrCat("no built-in backend config named '", name,
                                          "'; expected one of ",
                                          absl::StrJoin(BuiltinBackendConfigNames(), ", ")));
}

}  // namespace fuselage
