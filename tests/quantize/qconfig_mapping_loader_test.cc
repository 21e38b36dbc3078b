// The QConfigMapping file format (quantize/qconfig_mapping.proto): what a file gives, every
// error path of the loader, and QConfigResolver's precedence against PyTorch 1.13's
// generate_qconfig_map (fx/qconfig_mapping_utils.py), worked out by hand from its code.
#include "quantize/qconfig_mapping_loader.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

constexpr char kQnnpackQConfig[] = R"pb(
  activation { kind: "HistogramObserver" dtype: "quint8" }
  weight { kind: "MinMaxObserver" dtype: "qint8" qscheme: "per_tensor_symmetric" }
)pb";

absl::Status ParseError(const std::string& text) {
  return ParseQConfigMappingText(text, "m.textproto").status();
}

// The message of a parse that must fail with InvalidArgument.
std::string ErrorOf(const std::string& text) {
  absl::Status s = ParseError(text);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(s.message());
}

std::string WithGlobalActivation(const std::string& activation) {
  return absl::StrCat("global { activation { ", activation,
                      " } weight { kind: \"MinMaxObserver\" dtype: \"qint8\" "
                      "qscheme: \"per_tensor_symmetric\" } }");
}

TEST(QConfigMappingLoaderTest, ReadsEveryEntryKindWithPyTorchDefaults) {
  const std::string text = absl::StrCat(
      "global {", kQnnpackQConfig, "}\n",
      R"pb(
        object_type {
          object_type: "nn.Linear"
          qconfig {
            activation { kind: "MovingAverageMinMaxObserver" averaging_constant: 0.5 quant_min: 0 quant_max: 127 }
            weight { kind: "PerChannelMinMaxObserver" dtype: "torch.qint8" ch_axis: 1 }
          }
        }
        object_type { object_type: "reshape" qconfig { none: true } }
        module_name_regex { regex: "layer[0-9]\\.0" qconfig { none: true } }
        module_name { module_name: "fc" qconfig { none: true } }
        module_name_object_type_order {
          module_name: "" object_type: "nn.Linear" index: 1
          qconfig {
            activation { kind: "FixedQParamsObserver" scale: 0.00390625 zero_point: 0 }
            weight { kind: "NoopObserver" }
          }
        }
      )pb");
  absl::StatusOr<QConfigMapping> m = ParseQConfigMappingText(text, "m.textproto");
  ASSERT_TRUE(m.ok()) << m.status();

  // global: HistogramObserver() takes PyTorch's defaults where the file is silent.
  ASSERT_TRUE(m->global().has_value());
  const ObserverSpec& h = m->global()->activation;
  EXPECT_EQ(h.kind, ObserverKind::kHistogram);
  EXPECT_EQ(h.dtype, DType::kQUInt8);
  EXPECT_EQ(h.qscheme, ObserverQScheme::kPerTensorAffine);
  EXPECT_EQ(h.bins, 2048);
  EXPECT_EQ(h.upsample_rate, 16);  // PyTorch 2 fixes it at 16
  EXPECT_EQ(h.eps, kFloat32Eps);
  EXPECT_EQ(*m->global(), *DefaultQConfig("qnnpack"));

  const OptionalQConfig* linear = m->FindObjectType("nn.Linear");
  ASSERT_TRUE(linear != nullptr && linear->has_value());
  EXPECT_EQ((*linear)->activation.averaging_constant, 0.5);
  EXPECT_EQ((*linear)->activation.quant_max, 127);
  // A per-channel kind defaults to per_channel_affine, as PyTorch's constructor.
  EXPECT_EQ((*linear)->weight.qscheme, ObserverQScheme::kPerChannelAffine);
  EXPECT_EQ((*linear)->weight.ch_axis, 1);
  EXPECT_FALSE(m->FindObjectType("reshape")->has_value());
  EXPECT_FALSE(m->FindModuleName("fc")->has_value());

  QConfigResolver resolver(*m, Symbol::Intern("ResNet"));
  EXPECT_EQ(*resolver.ForModuleCall(Symbol::Intern("nn.Linear"), "head").value(), *linear);  // 1st
  const OptionalQConfig& second =
      **resolver.ForModuleCall(Symbol::Intern("nn.Linear"), "tail");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->activation.kind, ObserverKind::kFixedQParams);
  EXPECT_EQ(second->activation.fixed_scale, 1.0 / 256);
  EXPECT_EQ(second->activation.quant_min, 0);  // FixedQParamsObserver's default range
  EXPECT_EQ(second->activation.quant_max, 255);
  EXPECT_EQ(second->weight.dtype, DType::kFloat16);  // NoopObserver's default dtype
  EXPECT_FALSE(m->QConfigFor("nn.Conv2d", "layer1.0").has_value());   // regex
  EXPECT_TRUE(m->QConfigFor("nn.Conv2d", "layer1.1").has_value());
}

TEST(QConfigMappingLoaderTest, EmptyFileIsPyTorchsEmptyMapping) {
  absl::StatusOr<QConfigMapping> m = ParseQConfigMappingText("", "empty");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->global().has_value());  // QConfigMapping(): global None
}

TEST(QConfigMappingLoaderTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(ErrorOf("global {\n  activation { kind: 3 }"), HasSubstr("m.textproto: line 2"));
  EXPECT_THAT(ErrorOf("no_such_field: 1"), HasSubstr("no_such_field"));
}

TEST(QConfigMappingLoaderTest, ObserverErrorsNameTheField) {
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MyObserver\"")),
              HasSubstr("field 'global.activation.kind': unknown observer \"MyObserver\""));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("dtype: \"quint8\"")),
              HasSubstr("field 'global.activation.kind': missing"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" dtype: \"quint7\"")),
              HasSubstr("field 'global.activation.dtype': unknown dtype \"quint7\""));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" qscheme: \"affine\"")),
              HasSubstr("field 'global.activation.qscheme': unknown qscheme"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" bins: 10")),
              HasSubstr("field 'global.activation.bins': MinMaxObserver takes no bins"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"HistogramObserver\" ch_axis: 1")),
              HasSubstr("HistogramObserver takes no ch_axis"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" averaging_constant: 0.1")),
              HasSubstr("takes no averaging_constant"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" scale: 0.1")),
              HasSubstr("takes no scale"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"ReuseInputObserver\" dtype: \"quint8\"")),
              HasSubstr("ReuseInputObserver takes no dtype"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"FixedQParamsObserver\" zero_point: 0")),
              HasSubstr("field 'global.activation.scale': missing"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation(
                  "kind: \"FixedQParamsObserver\" scale: 0.1 zero_point: 300")),
              HasSubstr("zero_point 300 is outside [0, 255]"));
  // What ObserverSpec::Validate refuses, as PyTorch's constructors assert.
  EXPECT_THAT(ErrorOf(WithGlobalActivation(
                  "kind: \"MinMaxObserver\" quant_min: 1 quant_max: 10")),
              HasSubstr("must include 0"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" quant_min: -5")),
              HasSubstr("quant_min and quant_max must be set together"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation(
                  "kind: \"MinMaxObserver\" dtype: \"qint8\" quant_min: -200 quant_max: 100")),
              HasSubstr("exceeds 256"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation(
                  "kind: \"MinMaxObserver\" qscheme: \"per_channel_affine\"")),
              HasSubstr("field 'global.activation': MinMaxObserver: qscheme "
                        "torch.per_channel_affine is not per-tensor"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" dtype: \"float32\"")),
              HasSubstr("is not observable"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"MinMaxObserver\" eps: 0")),
              HasSubstr("eps 0 must be > 0"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"HistogramObserver\" bins: 0")),
              HasSubstr("must be > 0"));
}

TEST(QConfigMappingLoaderTest, QConfigValueErrors) {
  EXPECT_THAT(ErrorOf("global { none: true activation { kind: \"MinMaxObserver\" } }"),
              HasSubstr("field 'global': none: true (keep float) cannot have observers"));
  EXPECT_THAT(ErrorOf("global { activation { kind: \"MinMaxObserver\" } }"),
              HasSubstr("field 'global.weight': missing"));
  EXPECT_THAT(ErrorOf("global { }"), HasSubstr("field 'global.activation': missing"));
  EXPECT_THAT(ErrorOf("object_type { object_type: \"nn.Conv2d\" }"),
              HasSubstr("m.textproto: object_type[0] 'nn.Conv2d': field 'qconfig': missing"));
}

TEST(QConfigMappingLoaderTest, EntryErrorsNameTheEntry) {
  EXPECT_THAT(ErrorOf("object_type { qconfig { none: true } }"),
              HasSubstr("object_type[0]: field 'object_type': missing"));
  EXPECT_THAT(ErrorOf("module_name { module_name: \"a\" qconfig { none: true } }\n"
                      "module_name { module_name: \"a\" qconfig { none: true } }"),
              HasSubstr("module_name[1] 'a': field 'module_name': given twice"));
  EXPECT_THAT(ErrorOf("object_type { object_type: \"nn.ReLU\" qconfig { none: true } }\n"
                      "object_type { object_type: \"nn.ReLU\" qconfig { none: true } }"),
              HasSubstr("object_type[1] 'nn.ReLU': field 'object_type': given twice"));
  EXPECT_THAT(ErrorOf("module_name_regex { regex: \"(unclosed\" qconfig { none: true } }"),
              HasSubstr("module_name_regex[0] '(unclosed': field 'regex': module name regex "
                        "'(unclosed' does not compile"));
  EXPECT_THAT(ErrorOf("module_name_regex { regex: \"a.*\" qconfig { none: true } }\n"
                      "module_name_regex { regex: \"a.*\" qconfig { none: true } }"),
              HasSubstr("given twice"));
  EXPECT_THAT(ErrorOf("module_name_object_type_order { object_type: \"nn.ReLU\" index: -1 "
                      "qconfig { none: true } }"),
              HasSubstr("module_name_object_type_order[0] ', nn.ReLU, -1': field 'index': "
                        "-1 must be >= 0"));
  EXPECT_THAT(ErrorOf("module_name_object_type_order { module_name: \"a\" index: 0 "
                      "qconfig { none: true } }"),
              HasSubstr("field 'object_type': missing"));
  EXPECT_THAT(ErrorOf("module_name_object_type_order { module_name: \"a\" object_type: "
                      "\"nn.ReLU\" qconfig { none: true } }\n"
                      "module_name_object_type_order { module_name: \"a\" object_type: "
                      "\"nn.ReLU\" qconfig { none: true } }"),
              HasSubstr("'a, nn.ReLU, 0': field 'index': given twice"));
}

TEST(QConfigMappingLoaderTest, StringsAreBoundedAndUtf8) {
  const std::string long_name(5000, 'a');
  EXPECT_THAT(ErrorOf(absl::StrCat("module_name { module_name: \"", long_name,
                                   "\" qconfig { none: true } }")),
              HasSubstr("module_name[0]: field 'module_name': \"aaaa"));
  EXPECT_THAT(ErrorOf(absl::StrCat("module_name { module_name: \"", long_name,
                                   "\" qconfig { none: true } }")),
              HasSubstr("is 5000 bytes; the limit is 4096"));
  EXPECT_THAT(ErrorOf("object_type { object_type: \"nn.\\xff\" qconfig { none: true } }"),
              HasSubstr("object_type[0]: field 'object_type': \"nn.\\xff\" is not valid UTF-8"));
  EXPECT_THAT(ErrorOf(WithGlobalActivation("kind: \"Min\\xc3\"")),
              HasSubstr("field 'global.activation.kind': \"Min\\xc3\" is not valid UTF-8"));
}

TEST(QConfigMappingLoaderTest, FileErrors) {
  absl::StatusOr<QConfigMapping> missing = LoadQConfigMappingFile("/nonexistent/m.textproto");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("qconfig mapping file: "));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/m.textproto"));
  // A stream that never ends is refused at the size limit, not read forever.
  absl::StatusOr<QConfigMapping> endless = LoadQConfigMappingFile("/dev/zero");
  EXPECT_EQ(endless.status().code(), absl::StatusCode::kInvalidArgument) << endless.status();

  const std::string path = absl::StrCat(::testing::TempDir(), "/keep_fc.textproto");
  std::ofstream(path) << "module_name { module_name: \"fc\" qconfig { none: true } }\n";
  absl::StatusOr<QConfigMapping> m = LoadQConfigMappingFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->FindModuleName("fc")->has_value());
  std::ofstream(path) << "module_name { module_name: \"fc\" qconfig { nne: true } }\n";
  EXPECT_THAT(std::string(LoadQConfigMappingFile(path).status().message()),
              HasSubstr(absl::StrCat(path, ": line 1")));
}

// QConfigResolver against generate_qconfig_map, case by case. Qconfigs are told apart by
// their activation's averaging constant.
class ResolverPrecedenceTest : public ::testing::Test {
 protected:
  static QConfig Q(double tag) {
    QConfig q = *DefaultQConfig("qnnpack");
    q.activation.kind = ObserverKind::kMovingAverageMinMax;
    q.activation.averaging_constant = tag;
    return q;
  }
  static double Tag(const OptionalQConfig& q) {
    return q.has_value() ? q->activation.averaging_constant : -1;
  }
  static double Tag(const absl::StatusOr<const OptionalQConfig*>& q) {
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? Tag(**q) : -2;
  }
  Symbol S(absl::string_view s) { return Symbol::Intern(s); }
};

TEST_F(ResolverPrecedenceTest, ModuleCallsMostSpecificWins) {
  // PyTorch's documented order: global < object_type < module_name_regex < module_name <
  // module_name_object_type_order.
  QConfigMapping m;
  m.SetGlobal(Q(0.1)).SetObjectType("nn.Conv2d", Q(0.2)).SetModuleName("layer1", Q(0.4));
  ASSERT_TRUE(m.SetModuleNameRegex("layer[12]\\.0\\..*", Q(0.3)).ok());
  m.SetModuleNameObjectTypeOrder("layer1.0", "nn.Conv2d", 1, Q(0.5));
  m.SetModuleNameObjectTypeOrder("layer2.0", "nn.Conv2d", 0, std::nullopt);
  QConfigResolver r(m, S("Net"));
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Linear"), "fc")), 0.1);            // global
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "stem")), 0.2);          // type
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer2.0.conv1")), -1); // order: 1st conv of layer2.0
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer2.0.conv2")), 0.3); // regex beats type
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer2.1.conv1")), 0.2); // regex misses
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer1.0.conv1")), 0.4); // name (ancestor) beats regex
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer1.0.conv2")), 0.5); // order beats name
  EXPECT_EQ(Tag(r.ForModuleCall(S("nn.Conv2d"), "layer1.0.conv3")), 0.4); // index 2: no entry
  // The index counts calls of one type in one parent: a ReLU in layer1.0 does not move it.
  QConfigResolver r2(m, S("Net"));
  EXPECT_EQ(Tag(r2.ForModuleCall(S("nn.ReLU"), "layer1.0.relu")), 0.4);
  EXPECT_EQ(Tag(r2.ForModuleCall(S("nn.Conv2d"), "layer1.0.conv1")), 0.4);
  EXPECT_EQ(Tag(r2.ForModuleCall(S("nn.Conv2d"), "layer1.0.conv1")), 0.5);  // 2nd call, same module
}

TEST_F(ResolverPrecedenceTest, FunctionAndMethodCalls) {
  QConfigMapping m;
  m.SetGlobal(Q(0.1)).SetObjectType("operator.add", Q(0.2)).SetObjectType("reshape", Q(0.3));
  QConfigResolver r(m, S("Net"));
  EXPECT_EQ(Tag(r.ForFunctionCall(S("operator.add"), "", S("Net"))), 0.2);
  EXPECT_EQ(Tag(r.ForFunctionCall(S("operator.mul"), "", S("Net"))), 0.1);
  EXPECT_EQ(Tag(r.ForMethodCall(S("reshape"), "", S("Net"))), 0.3);
  EXPECT_EQ(Tag(r.ForMethodCall(S("view"), "", S("Net"))), 0.1);
  // The enclosing module's name and type override the function's own type (PyTorch calls
  // _maybe_adjust_qconfig_for_module_type_or_name with the scope after the function).
  m.SetModuleName("block", std::nullopt).SetObjectType("BasicBlock", Q(0.4));
  QConfigResolver r2(m, S("Net"));
  EXPECT_EQ(Tag(r2.ForFunctionCall(S("operator.add"), "block.sub", S("Other"))), -1);
  EXPECT_EQ(Tag(r2.ForFunctionCall(S("operator.add"), "layer1.0", S("BasicBlock"))), 0.4);
  EXPECT_EQ(Tag(r2.ForMethodCall(S("reshape"), "layer1.0", S("BasicBlock"))), 0.4);
  // A regex is tried on the root scope "" too, as re.match(".*", "") matches.
  ASSERT_TRUE(m.SetModuleNameRegex(".*", Q(0.6)).ok());
  QConfigResolver r3(m, S("Net"));
  EXPECT_EQ(Tag(r3.ForFunctionCall(S("operator.mul"), "", S("Net"))), 0.6);
  // Function calls are indexed in their scope; method calls are not indexed.
  m.SetModuleNameObjectTypeOrder("", "operator.add", 1, Q(0.7));
  m.SetModuleNameObjectTypeOrder("", "reshape", 0, Q(0.8));
  QConfigResolver r4(m, S("Net"));
  EXPECT_EQ(Tag(r4.ForFunctionCall(S("operator.add"), "", S("Net"))), 0.6);
  EXPECT_EQ(Tag(r4.ForFunctionCall(S("operator.add"), "", S("Net"))), 0.7);
  EXPECT_EQ(Tag(r4.ForMethodCall(S("reshape"), "", S("Net"))), 0.6);
}

TEST_F(ResolverPrecedenceTest, FusedModulesShareTheirPartsObjectType) {
  // update_qconfig_for_fusion: nni.ConvReLU2d takes the entry nn.Conv2d and nn.ReLU share,
  // over its own; names still win over it.
  QConfigMapping m;
  m.SetGlobal(Q(0.1)).SetObjectType("nn.Conv2d", Q(0.2)).SetObjectType("nn.ReLU", Q(0.2));
  m.SetObjectType("nni.ConvReLU2d", Q(0.3)).SetModuleName("head", Q(0.4));
  const std::vector<Symbol> parts = {S("nn.Conv2d"), S("nn.ReLU")};
  QConfigResolver r(m, S("Net"));
  EXPECT_EQ(Tag(r.ForModuleCall(S("nni.ConvReLU2d"), "stem", parts)), 0.2);
  EXPECT_EQ(Tag(r.ForModuleCall(S("nni.ConvReLU2d"), "head", parts)), 0.4);
  EXPECT_EQ(Tag(r.ForModuleCall(S("nni.ConvReLU2d"), "stem")), 0.3);  // not known as fused
  // A fused module counts as a call of its first part's type.
  m.SetModuleNameObjectTypeOrder("block", "nn.Conv2d", 1, std::nullopt);
  QConfigResolver order(m, S("Net"));
  EXPECT_EQ(Tag(order.ForModuleCall(S("nni.ConvReLU2d"), "block.0", parts)), 0.2);
  EXPECT_EQ(Tag(order.ForModuleCall(S("nn.Conv2d"), "block.2")), -1);  // index 1
  // Parts without entries: the fused type's own entry, else global.
  const std::vector<Symbol> bn_relu = {S("nn.BatchNorm2d"), S("nn.ReLU6")};
  EXPECT_EQ(Tag(r.ForModuleCall(S("nni.BNReLU2d"), "bn", bn_relu)), 0.1);
  // Parts that disagree are an error, as PyTorch's LookupError.
  m.SetObjectType("nn.ReLU", Q(0.5));
  QConfigResolver r2(m, S("Net"));
  absl::StatusOr<const OptionalQConfig*> bad = r2.ForModuleCall(S("nni.ConvReLU2d"), "stem", parts);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("nn.Conv2d and nn.ReLU have different ones"));
  m.SetObjectType("nn.ReLU", std::nullopt);
  QConfigResolver r3(m, S("Net"));
  EXPECT_FALSE(r3.ForModuleCall(S("nni.ConvReLU2d"), "stem", parts).ok());
}

}  // namespace
}  // namespace fuselage
