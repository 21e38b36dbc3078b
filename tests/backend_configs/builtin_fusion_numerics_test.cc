// Issue 4's numerics guarantee, for EVERY fusion entry of every built-in backend config and
// of the example config file: a small random graph realizing the entry's pattern (random
// weights, non-trivial batch-norm statistics, 1d / 2d / 3d inputs as its ops need) is run
// through the interpreter, fused with the config's own matcher, checked to have become
// exactly one node of the entry's fused type, and run again; fused equals unfused within
// 1e-5 of the unfused output's largest magnitude.
//
// The entries are iterated, never listed here, so a new fusion entry is covered (or, if
// this file does not know how to build its ops, reported as a failure naming it).
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "patterns/fuse.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

constexpr double kRelativeTolerance = 1e-5;
constexpr int64_t kChannels = 4;  // every module maps 4 channels / features to 4
constexpr char kExampleConfig[] = "backend_configs/examples/conv_bn_add_relu.textproto";

Tensor RandomTensor(std::mt19937& rng, std::vector<int64_t> shape, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return Tensor::FromFloats(std::move(shape), std::move(values));
}

// "nn.Conv3d" -> 3; 0 if the type does not end in "<digit>d".
int SpatialDimsOf(absl::string_view type) {
  if (type.size() < 2 || type.back() != 'd') return 0;
  const char digit = type[type.size() - 2];
  return digit >= '1' && digit <= '3' ? digit - '0' : 0;
}

// A float module of `type` mapping kChannels to kChannels with shape-preserving
// geometry (kernel 3, padding 1, stride 1), random weights and batch-norm statistics far
// from the identity; nullptr for a type this test cannot build.
std::unique_ptr<Module> MakeModule(std::mt19937& rng, absl::string_view type) {
  auto m = std::make_unique<Module>(type);
  const int dims = SpatialDimsOf(type);
  auto per_dim = [dims](int64_t v) { return Argument::Ints(std::vector<int64_t>(dims, v)); };
  if (type == "nn.ReLU") return m;
  if (type == "nn.Linear") {
    m->SetTensor("weight", RandomTensor(rng, {kChannels, kChannels}, -1, 1));
    m->SetTensor("bias", RandomTensor(rng, {kChannels}, -1, 1));
    m->SetAttribute("in_features", Argument::Int(kChannels));
    m->SetAttribute("out_features", Argument::Int(kChannels));
    return m;
  }
  if (dims > 0 && absl::StartsWith(type, "nn.Conv")) {
    const bool transposed = absl::StartsWith(type, "nn.ConvTranspose");
    // Conv weight [O, C, *K]; transposed [C, O, *K]: both 4 x 4 here.
    std::vector<int64_t> weight_shape = {kChannels, kChannels};
    weight_shape.resize(2 + dims, 3);
    m->SetTensor("weight", RandomTensor(rng, weight_shape, -0.5f, 0.5f));
    m->SetTensor("bias", RandomTensor(rng, {kChannels}, -1, 1));
    m->SetAttribute("in_channels", Argument::Int(kChannels));
    m->SetAttribute("out_channels", Argument::Int(kChannels));
    m->SetAttribute("kernel_size", per_dim(3));
    m->SetAttribute("stride", per_dim(1));
    m->SetAttribute("padding", per_dim(1));
    m->SetAttribute("dilation", per_dim(1));
    if (transposed) m->SetAttribute("output_padding", per_dim(0));
    m->SetAttribute("groups", Argument::Int(1));
    m->SetAttribute("padding_mode", Argument::String("zeros"));
    return m;
  }
  if (dims > 0 && absl::StartsWith(type, "nn.BatchNorm")) {
    m->SetTensor("weight", RandomTensor(rng, {kChannels}, 0.5f, 1.5f));
    m->SetTensor("bias", RandomTensor(rng, {kChannels}, -0.5f, 0.5f));
    m->SetTensor("running_mean", RandomTensor(rng, {kChannels}, -0.5f, 0.5f));
    m->SetTensor("running_var", RandomTensor(rng, {kChannels}, 0.5f, 2.0f));
    m->SetAttribute("num_features", Argument::Int(kChannels));
    m->SetAttribute("eps", Argument::Float(1e-5));
    m->SetAttribute("momentum", Argument::Float(0.1));
    m->SetAttribute("affine", Argument::Bool(true));
    m->SetAttribute("track_running_stats", Argument::Bool(true));
    return m;
  }
  return nullptr;
}

// The functions and methods this test can call on one tensor (relu) or two (add).
bool IsRealizableFunction(OpRef op) {
  static const char* const kKnown[] = {"torch.relu", "torch.nn.functional.relu", "relu",
                                       "operator.add", "torch.add", "add"};
  for (const char* name : kKnown) {
    if (op.target == Symbol::Intern(name)) return true;
  }
  return false;
}

// The input shape the pattern's modules need: [2, 4, *S] with 1-3 spatial dims from the
// convs (or, without one, the batch norms), [3, 4] for linear alone.
std::vector<int64_t> InputShapeFor(const Pattern& pattern) {
  int conv_dims = 0, bn_dims = 0;
  bool linear = false;
  for (const PatternPosition& p : pattern.positions()) {
    for (const OpRef& op : p.alternatives) {
      if (op.op != OpKind::kCallModule) continue;
      const absl::string_view type = op.target.name();
      if (type == "nn.Linear") linear = true;
      if (absl::StartsWith(type, "nn.Conv")) conv_dims = SpatialDimsOf(type);
      if (absl::StartsWith(type, "nn.BatchNorm")) bn_dims = SpatialDimsOf(type);
    }
  }
  // BatchNorm1d follows a linear as [N, C], anything else 1d as [N, C, L].
  const int dims = conv_dims > 0 ? conv_dims : linear ? 0 : std::max(bn_dims, 1);
  std::vector<int64_t> shape = {2, kChannels};
  const int64_t sizes[3] = {5, 6, 7};
  for (int i = 0; i < dims; ++i) shape.push_back(sizes[3 - dims + i]);
  return shape;
}

// Builds a graph realizing one fusion entry's pattern: x (and `extra` for MatchAllNode
// positions) feed the innermost ops; each op position becomes a node of its first
// alternative this test can build.
class PatternRealizer {
 public:
  PatternRealizer(GraphModule& gm, std::mt19937& rng) : gm_(gm), rng_(rng) {}

  // The node for position `i`, or an error naming what could not be built.
  absl::StatusOr<Argument> Realize(const Pattern& pattern, int i) {
    const PatternPosition& p = pattern.position(i);
    if (p.match_all) return Argument(Extra());
    std::vector<Argument> args;
    for (int child : p.args) {
      absl::StatusOr<Argument> arg = Realize(pattern, child);
      if (!arg.ok()) return arg.status();
      args.push_back(*arg);
    }
    for (const OpRef& op : p.alternatives) {
      if (op.op == OpKind::kCallModule) {
        std::unique_ptr<Module> module = MakeModule(rng_, op.target.name());
        if (module == nullptr) continue;
        if (args.empty()) args.push_back(Argument(Input()));
        const std::string path = absl::StrCat("m", module_count_++);
        absl::Status set = gm_.SetModule(path, std::move(module));
        if (!set.ok()) return set;
        absl::StatusOr<Node*> n = gm_.graph().AddCallModule(path, args, {}, path);
        if (!n.ok()) return n.status();
        return Argument(*n);
      }
      if (!IsRealizableFunction(op)) continue;
      const bool binary = absl::StrContains(op.target.name(), "add");
      if (args.empty()) args.push_back(Argument(Input()));
      if (binary && args.size() == 1) args.push_back(Argument(Extra()));
      absl::StatusOr<Node*> n =
          op.op == OpKind::kCallMethod
              ? gm_.graph().AddCallMethod(op.target.name(), args, {}, "")
              : gm_.graph().AddCallFunction(op.target.name(), args, {}, "");
      if (!n.ok()) return n.status();
      return Argument(*n);
    }
    return absl::UnimplementedError(absl::StrCat("no way to build position ", i, " ('",
                                                 p.spelling, "')"));
  }

  Node* x() const { return x_; }
  Node* extra() const { return extra_; }

 private:
  Node* Input() {
    if (x_ == nullptr) x_ = *gm_.graph().AddPlaceholder("x");
    return x_;
  }
  Node* Extra() {
    Input();  // x comes first, so the inputs are (x, extra)
    if (extra_ == nullptr) extra_ = *gm_.graph().AddPlaceholder("extra");
    return extra_;
  }

  GraphModule& gm_;
  std::mt19937& rng_;
  Node* x_ = nullptr;
  Node* extra_ = nullptr;
  int module_count_ = 0;
};

// The op nodes (not placeholders or the output) of the graph.
std::vector<Node*> OpNodes(const Graph& graph) {
  std::vector<Node*> ops;
  for (Node* n : graph.Nodes()) {
    if (n->op() != OpKind::kPlaceholder && n->op() != OpKind::kOutput) ops.push_back(n);
  }
  return ops;
}

// Checks one fusion entry end to end; returns "" on success, else why it failed.
std::string CheckEntry(const PatternMatcher& matcher,
                       const KernelRegistry& kernels, const BackendPatternConfig& entry,
                       std::mt19937& rng) {
  GraphModule gm;
  PatternRealizer realizer(gm, rng);
  absl::StatusOr<Argument> out = realizer.Realize(entry.pattern(), 0);
  if (!out.ok()) return absl::StrCat("cannot realize: ", out.status().ToString());
  if (absl::Status s = gm.graph().SetOutput(*out).status(); !s.ok()) return s.ToString();
  if (absl::Status s = gm.Verify(); !s.ok()) return absl::StrCat("unfused graph: ", s.ToString());

  const std::vector<int64_t> shape = InputShapeFor(entry.pattern());
  std::vector<Value> inputs = {Value(RandomTensor(rng, shape, -1, 1))};
  if (realizer.extra() != nullptr) inputs.push_back(Value(RandomTensor(rng, shape, -1, 1)));
  absl::StatusOr<std::vector<Value>> before = Run(gm, inputs, kernels);
  if (!before.ok()) return absl::StrCat("unfused run: ", before.status().ToString());

  // The root module's type, for entries whose fuser returns the folded root itself.
  const PatternPosition& root = entry.pattern().position(
      entry.rule.root_position.value_or(entry.pattern().DefaultRootPosition()));
  absl::StatusOr<int> fused = FusePatterns(gm, matcher);
  if (!fused.ok()) return absl::StrCat("fuse: ", fused.status().ToString());
  if (absl::Status s = gm.Verify(); !s.ok()) return absl::StrCat("fused graph: ", s.ToString());
  if (*fused != 1) return absl::StrCat("fused ", *fused, " matches; expected 1");
  const std::vector<Node*> ops = OpNodes(gm.graph());
  if (ops.size() != 1 || ops[0]->op() != OpKind::kCallModule) {
    return absl::StrCat("fused graph has ", ops.size(), " op nodes; expected one call_module");
  }
  const Module* fused_module = gm.FindModule(ops[0]->target().name());
  if (fused_module == nullptr) return "fused node's module is missing";
  const bool folded_root = entry.fused_module().empty();
  const bool type_ok = folded_root ? root.Matches({OpKind::kCallModule, fused_module->type()})
                                   : fused_module->type() == entry.fused_module();
  if (!type_ok) {
    return absl::StrCat("fused module is ", fused_module->type().name(), "; expected ",
                        folded_root ? root.spelling : std::string(entry.fused_module().name()));
  }

  absl::StatusOr<std::vector<Value>> after = Run(gm, inputs, kernels);
  if (!after.ok()) return absl::StrCat("fused run: ", after.status().ToString());
  if (before->size() != 1 || after->size() != 1 || !(*before)[0].is_tensor() ||
      !(*after)[0].is_tensor()) {
    return "expected one tensor output before and after";
  }
  const Tensor& ref = (*before)[0].as_tensor();
  const Tensor& got = (*after)[0].as_tensor();
  if (ref.shape() != got.shape()) {
    return absl::StrCat("output ", got.ShapeString(), " != unfused ", ref.ShapeString());
  }
  double max_ref = 0, max_diff = 0;
  for (int64_t k = 0; k < ref.numel(); ++k) {
    max_ref = std::max(max_ref, std::fabs(double{ref.data<float>()[k]}));
    max_diff = std::max(max_diff,
                        std::fabs(double{ref.data<float>()[k]} - double{got.data<float>()[k]}));
  }
  if (max_ref < 0.1) return absl::StrCat("output too small to compare (max ", max_ref, ")");
  if (max_diff > kRelativeTolerance * max_ref) {
    return absl::StrCat("max |fused - unfused| = ", max_diff, " > 1e-5 * ", max_ref);
  }
  return "";
}

// Checks every fusion entry of `config`; returns how many were checked.
int CheckEveryFusion(const BackendConfig& config) {
  absl::StatusOr<std::unique_ptr<KernelRegistry>> kernels = BuiltinKernels();
  EXPECT_TRUE(kernels.ok()) << kernels.status();
  absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(config);
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  if (!kernels.ok() || !matcher.ok()) return 0;
  std::mt19937 rng(4);
  std::vector<std::string> failures;
  int checked = 0;
  for (const BackendPatternConfig& entry : config.configs()) {
    if (!entry.fuses) continue;
    ++checked;
    const std::string why = CheckEntry(*matcher, **kernels, entry, rng);
    if (!why.empty()) {
      const std::string pattern = entry.pattern().ToString();
      failures.push_back(entry.name() == pattern
                             ? absl::StrCat(pattern, ": ", why)
                             : absl::StrCat(entry.name(), " ", pattern, ": ", why));
    }
  }
  EXPECT_TRUE(failures.empty()) << config.name() << ": " << failures.size() << " of " << checked
                                << " fusion entries failed:\n  "
                                << absl::StrJoin(failures, "\n  ");
  return checked;
}

TEST(BuiltinFusionNumericsTest, EveryFusionOfEveryBuiltinConfig) {
  const std::vector<std::string> names = BuiltinBackendConfigNames();
  EXPECT_EQ(names.size(), 5u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    absl::StatusOr<BackendConfig> config = GetBackendConfig(name);
    ASSERT_TRUE(config.ok()) << config.status();
    // 25 fusion entries (PyTorch 1.13's table), onednn adds 6 conv-add ones.
    EXPECT_EQ(CheckEveryFusion(*config), name == "onednn" ? 31 : 25);
  }
}

TEST(BuiltinFusionNumericsTest, EveryFusionOfTheExampleConfig) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExampleConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  // qnnpack's 25 plus conv_bn_add_relu.
  EXPECT_EQ(CheckEveryFusion(*config), 26);
  EXPECT_NE(config->Find("conv_bn_add_relu"), nullptr);
}

}  // namespace
}  // namespace fuselage
