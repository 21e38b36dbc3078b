// The built-in configs against PyTorch 1.13 itself: pytorch_1_13_backend_configs.txt is the
// output of dump_pytorch_backend_configs.py run with /usr/bin/python3 (PyTorch 1.13.1).
// Every PyTorch entry must be present with the same observation type, dtype configs,
// fuser presence, fused / root / reference modules, except the differences listed in
// builtin_configs.h, which are spelled out here by hand; and there must be nothing else.
#include "backend_configs/builtin_configs.h"

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

struct GoldenEntry {
  std::string pattern, observation, fuser, fused, root, reference, dtypes;
};

// backend -> entries, from the golden file.
std::map<std::string, std::vector<GoldenEntry>> ReadGolden() {
  std::ifstream in("tests/backend_configs/pytorch_1_13_backend_configs.txt");
  EXPECT_TRUE(in.good()) << "golden file missing";
  std::map<std::string, std::vector<GoldenEntry>> golden;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::map<std::string, std::string> fields;
    for (absl::string_view part : absl::StrSplit(line, " | ")) {
      std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits(' ', 1));
      fields[kv.first] = kv.second;
    }
    golden[fields["backend"]].push_back({fields["pattern"], fields["observation"],
                                         fields["fuser"], fields["fused"], fields["root"],
                                         fields["reference"], fields["dtypes"]});
  }
  return golden;
}

std::string OrDash(Symbol s) { return s.empty() ? "-" : s.str(); }

std::string DTypesOf(const BackendPatternConfig& config) {
  std::vector<std::string> parts;
  for (const DTypeConfig& d : config.dtype_configs) parts.push_back(d.ToString());
  return absl::StrJoin(parts, "; ");
}

// Where fuselage deliberately differs from PyTorch 1.13 (see builtin_configs.h): golden
// pattern text -> {field -> our value}.
std::map<std::string, std::map<std::string, std::string>> Deviations() {
  std::map<std::string, std::map<std::string, std::string>> d;
  for (const std::string nd : {"1d", "2d", "3d"}) {
    const std::string conv = "nn.Conv" + nd, bn = "nn.BatchNorm" + nd;
    // Eval-mode fusers: conv-bn folds into the conv itself, conv-bn-relu gives ConvReLU.
    d["(" + bn + ", " + conv + ")"]["fused"] = "-";
    d["(nn.ReLU, (" + bn + ", " + conv + "))"]["fused"] = "nni.ConvReLU" + nd;
    d["(torch.nn.functional.relu, (" + bn + ", " + conv + "))"]["fused"] = "nni.ConvReLU" + nd;
    // Fused convs keep their root and reference module.
    for (const std::string fused : {"nni.ConvReLU", "nni.ConvBn", "nni.ConvBnReLU"}) {
      d[fused + nd]["root"] = conv;
      d[fused + nd]["reference"] = "nnqr.Conv" + nd;
    }
  }
  d["(nn.BatchNorm1d, nn.Linear)"]["fused"] = "-";
  return d;
}

class BuiltinConfigsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BuiltinConfigsTest, MatchesPyTorch113) {
  const std::string backend = GetParam();
  static const auto* golden = new std::map<std::string, std::vector<GoldenEntry>>(ReadGolden());
  ASSERT_TRUE(golden->count(backend)) << backend;
  absl::StatusOr<BackendConfig> config = GetBackendConfig(backend);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), backend);
  const auto deviations = Deviations();

  int compared = 0;
  int golden_fusions = 0;
  for (const GoldenEntry& g : golden->at(backend)) {
    // fuselage has no QAT modules, so PyTorch's QAT entries have no counterpart.
    if (absl::StrContains(g.pattern, "nnqat.") || absl::StrContains(g.pattern, "nniqat.")) {
      continue;
    }
    SCOPED_TRACE(g.pattern);
    absl::StatusOr<Pattern> pattern = Pattern::Parse(g.pattern, PatternFormat::kComplex);
    ASSERT_TRUE(pattern.ok()) << pattern.status();
    const BackendPatternConfig* ours = config->FindByPattern(*pattern);
    ASSERT_NE(ours, nullptr) << "missing entry";
    ++compared;
    if (g.fuser == "yes") ++golden_fusions;
    std::map<std::string, std::string> expected = {
        {"fused", g.fused}, {"root", g.root}, {"reference", g.reference}};
    auto deviation = deviations.find(g.pattern);
    if (deviation != deviations.end()) {
      for (const auto& [field, value] : deviation->second) expected[field] = value;
    }
    EXPECT_EQ(std::string(ObservationTypeName(ours->observation_type)), g.observation);
    EXPECT_EQ(ours->fuses ? "yes" : "no", g.fuser);
    EXPECT_EQ(OrDash(ours->fused_module()), expected["fused"]);
    EXPECT_EQ(OrDash(ours->root_module), expected["root"]);
    EXPECT_EQ(OrDash(ours->reference_quantized_module), expected["reference"]);
    EXPECT_EQ(DTypesOf(*ours), g.dtypes);
  }
  // Nothing beyond PyTorch's entries, and exactly its 25 fusion patterns.
  EXPECT_EQ(config->size(), static_cast<size_t>(compared));
  EXPECT_EQ(golden_fusions, 25);
  EXPECT_EQ(config->FusionRules().size(), 25u);
}

INSTANTIATE_TEST_SUITE_P(PyTorchBackends, BuiltinConfigsTest,
                         ::testing::Values("native", "fbgemm", "qnnpack", "x86"));

TEST(BuiltinConfigs, OnednnIsX86PlusConvAddFusions) {
  absl::StatusOr<BackendConfig> x86 = GetBackendConfig("x86");
  absl::StatusOr<BackendConfig> onednn = GetBackendConfig("onednn");
  ASSERT_TRUE(x86.ok() && onednn.ok());
  for (const BackendPatternConfig& entry : x86->configs()) {
    EXPECT_NE(onednn->FindByPattern(entry.pattern()), nullptr) << entry.name();
  }
  // conv-add, conv-bn-add, and each with nn.ReLU / F.relu; plus two fused-module entries.
  EXPECT_EQ(onednn->size(), x86->size() + 8);
  EXPECT_EQ(onednn->FusionRules().size(), 25u + 6u);
  EXPECT_EQ(onednn->FindFusionsProducing(Symbol::Intern("nni.ConvAddReLU2d")).size(), 4u);

  absl::StatusOr<Pattern> conv_bn_add_relu = Pattern::Parse(
      "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))", PatternFormat::kComplex);
  ASSERT_TRUE(conv_bn_add_relu.ok());
  const BackendPatternConfig* entry = onednn->FindByPattern(*conv_bn_add_relu);
  ASSERT_NE(entry, nullptr);
  EXPECT_TRUE(entry->fuses);
  EXPECT_EQ(entry->fused_module().str(), "nni.ConvAddReLU2d");
  EXPECT_EQ(entry->rule.fuser_kind, FuserKind::kFoldBatchNormThenWrap);
  // The defaults pick the conv as root (not the MatchAllNode, as PyTorch's would) and the
  // residual as the extra input.
  const Pattern& p = entry->pattern();
  EXPECT_EQ(p.PathOf(p.DefaultRootPosition()), "0.0.0");
  ASSERT_EQ(p.DefaultExtraInputPositions().size(), 1u);
  EXPECT_EQ(p.PathOf(p.DefaultExtraInputPositions()[0]), "0.1");
  EXPECT_EQ(x86->FindByPattern(*conv_bn_add_relu), nullptr);

  const auto module_entries = onednn->FindForOp({OpKind::kCallModule, Symbol::Intern("nni.ConvAddReLU2d")});
  ASSERT_EQ(module_entries.size(), 1u);
  EXPECT_EQ(module_entries[0]->root_module.str(), "nn.Conv2d");
  EXPECT_EQ(module_entries[0]->reference_quantized_module.str(), "nnqr.Conv2d");
}

TEST(BuiltinConfigs, LookupByOp) {
  absl::StatusOr<BackendConfig> config = GetBackendConfig("qnnpack");
  ASSERT_TRUE(config.ok());
  auto conv_relu = config->FindForOp({OpKind::kCallModule, Symbol::Intern("nni.ConvReLU2d")});
  ASSERT_EQ(conv_relu.size(), 1u);
  EXPECT_EQ(conv_relu[0]->observation_type, ObservationType::kOutputUseDifferentObserverAsInput);
  EXPECT_EQ(conv_relu[0]->root_module.str(), "nn.Conv2d");
  EXPECT_EQ(conv_relu[0]->reference_quantized_module.str(), "nnqr.Conv2d");
  ASSERT_EQ(conv_relu[0]->dtype_configs.size(), 2u);
  // qnnpack's symmetric config first: qint8 activations with scale >= 2^-12, weights in
  // [-127, 127].
  const DTypeConfig& symmetric = conv_relu[0]->dtype_configs[0];
  EXPECT_EQ(symmetric.input.dtype, DType::kQInt8);
  EXPECT_EQ(symmetric.input.scale_min_lower_bound, 1.0 / 4096);
  EXPECT_EQ(symmetric.weight.quant_min_lower_bound, -127);
  EXPECT_EQ(symmetric.weight.quant_max_upper_bound, 127);

  auto reshape = config->FindForOp({OpKind::kCallMethod, Symbol::Intern("reshape")});
  ASSERT_EQ(reshape.size(), 1u);
  EXPECT_EQ(reshape[0]->observation_type, ObservationType::kOutputShareObserverWithInput);

  auto linear = config->FindForOp({OpKind::kCallFunction, Symbol::Intern("torch.nn.functional.linear")});
  ASSERT_EQ(linear.size(), 1u);
  EXPECT_EQ(linear[0]->weight_arg_index, 1);
  EXPECT_EQ(linear[0]->bias_arg_index, 2);

  auto sigmoid = config->FindForOp({OpKind::kCallModule, Symbol::Intern("nn.Sigmoid")});
  ASSERT_EQ(sigmoid.size(), 1u);
  ASSERT_TRUE(sigmoid[0]->fixed_output_qparams.has_value());
  EXPECT_EQ(sigmoid[0]->fixed_output_qparams->scale, 1.0 / 256);
  EXPECT_EQ(sigmoid[0]->fixed_output_qparams->zero_point, 0);

  EXPECT_TRUE(config->FindForOp({OpKind::kCallModule, Symbol::Intern("nn.GELU")}).empty());
}

TEST(BuiltinConfigs, UnknownNameIsNotFound) {
  absl::StatusOr<BackendConfig> config = GetBackendConfig("tensorrt");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(config.status().message(), "tensorrt"));
  EXPECT_TRUE(absl::StrContains(config.status().message(), "qnnpack"));
}

}  // namespace
}  // namespace fuselage
