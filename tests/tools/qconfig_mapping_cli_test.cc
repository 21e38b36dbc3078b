// `--qconfig-mapping=FILE` on `quantize` and `prepare`: a mapping that keeps `layer1`
// float (PyTorch's set_module_name("layer1", None)) leaves exactly layer1 float.
//
// The model is two residual blocks, layer0 and layer1, each
//   identity(x), conv(x) -> bn -> add(bn, identity) -> relu
// with the add's meta `module_path` naming its block (graph/NAMING.md), as PyTorch's
// prepare_fx knows every call's enclosing module.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

// Two copies of the residual example's block, under layer0 and layer1.
std::unique_ptr<GraphModule> TwoBlocks(bool with_module_path) {
  auto gm = std::make_unique<GraphModule>();
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  for (const char* block : {"layer0", "layer1"}) {
    auto example = BuildResidualExample(block[5] == '0' ? 1 : 2);
    EXPECT_TRUE(example.ok()) << example.status();
    for (const char* child : {"identity", "conv", "bn", "relu"}) {
      EXPECT_TRUE(gm->SetModule(absl::StrCat(block, ".", child),
                                (*example)->FindModule(child)->Clone())
                      .ok());
    }
    Node* identity = *g.AddCallModule(absl::StrCat(block, ".identity"), {x});
    Node* conv = *g.AddCallModule(absl::StrCat(block, ".conv"), {x});
    Node* bn = *g.AddCallModule(absl::StrCat(block, ".bn"), {conv});
    Node* add = *g.AddCallFunction("operator.add", {bn, identity});
    if (with_module_path) {
      EXPECT_TRUE(g.SetMeta(add, "module_path", Argument::String(block)).ok());
    }
    x = *g.AddCallModule(absl::StrCat(block, ".relu"), {add});
  }
  EXPECT_TRUE(g.SetOutput(x).ok());
  EXPECT_TRUE(gm->Verify().ok());
  return gm;
}

// The qnnpack default qconfig globally, None for layer1.
constexpr char kKeepLayer1Float[] = R"pb(
  global {
    activation { kind: "HistogramObserver" dtype: "quint8" }
    weight { kind: "MinMaxObserver" dtype: "qint8" qscheme: "per_tensor_symmetric" }
  }
  module_name { module_name: "layer1" qconfig { none: true } }
)pb";

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFileAtomically(path, text).ok());
  return path;
}

// "type" of each call_module node and the target of each call_function node, in order.
std::vector<std::string> Ops(const GraphModule& gm) {
  std::vector<std::string> ops;
  for (const Node* n : gm.graph().Nodes()) {
    if (n->op() == OpKind::kCallModule) {
      ops.push_back(absl::StrCat(n->target().name(), ":", gm.ModuleOf(n)->type().name()));
    } else if (n->op() == OpKind::kCallFunction) {
      ops.push_back(std::string(n->target().name()));
    }
  }
  return ops;
}

std::vector<std::string> Quantize(const GraphModule& model, const std::string& name,
                                  std::vector<std::string> extra) {
  const std::string in = TempPath(absl::StrCat(name, "_in.fsl"));
  const std::string out = TempPath(absl::StrCat(name, "_out.fsl"));
  EXPECT_TRUE(SaveModel(model, in).ok());
  std::vector<std::string> args = {"quantize", in, "--backend=qnnpack", "--samples=4",
                                   "--input-shape=2,4,6,6", "-o", out};
  for (std::string& a : extra) args.push_back(std::move(a));
  CliResult r = RunFuselage(args);
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  auto gm = LoadModel(out);
  EXPECT_TRUE(gm.ok()) << gm.status();
  return gm.ok() ? Ops(**gm) : std::vector<std::string>();
}

TEST(QConfigMappingCliTest, QuantizeKeepsExactlyLayer1Float) {
  const std::string mapping = WriteFile("keep_layer1.textproto", kKeepLayer1Float);
  const std::vector<std::string> ops =
      Quantize(*TwoBlocks(true), "keep", {absl::StrCat("--qconfig-mapping=", mapping)});
  // layer0 quantized: its input quantized once, conv (bn folded) a quantized conv, add +
  // relu one quantized::add_relu (the identity is a no-op of the quantized tensor); then
  // dequantized into layer1, which is the float block as fused: conv with bn folded, add,
  // relu.
  const std::vector<std::string> expected = {
      "torch.quantize_per_tensor",    "layer0.identity:nn.Identity",
      "layer0.conv:nnq.Conv2d",       "torch.ops.quantized.add_relu",
      "layer1.identity:nn.Identity",  "layer1.conv:nn.Conv2d",
      "operator.add",                 "layer1.relu:nn.ReLU"};
  std::vector<std::string> without_dequantize;
  for (const std::string& op : ops) {
    if (op != "torch.dequantize" && op.find("dequantize") == std::string::npos) {
      without_dequantize.push_back(op);
    }
  }
  EXPECT_EQ(without_dequantize, expected) << absl::StrJoin(ops, "\n");
}

int Count(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<int>(std::count(ops.begin(), ops.end(), op));
}

TEST(QConfigMappingCliTest, WithoutTheFlagEverythingIsQuantized) {
  const std::vector<std::string> ops = Quantize(*TwoBlocks(true), "default", {});
  EXPECT_EQ(Count(ops, "layer0.conv:nnq.Conv2d"), 1);
  EXPECT_EQ(Count(ops, "layer1.conv:nnq.Conv2d"), 1);
  EXPECT_EQ(Count(ops, "torch.ops.quantized.add_relu"), 2);
  EXPECT_EQ(Count(ops, "operator.add"), 0);
}

// Without module_path the add is called from the root, as far as the mapping can tell,
// so only layer1's modules stay float.
TEST(QConfigMappingCliTest, CallsWithoutModulePathResolveInTheRoot) {
  const std::string mapping = WriteFile("keep_layer1_b.textproto", kKeepLayer1Float);
  const std::vector<std::string> ops =
      Quantize(*TwoBlocks(false), "nopath", {absl::StrCat("--qconfig-mapping=", mapping)});
  EXPECT_EQ(Count(ops, "layer1.conv:nn.Conv2d"), 1);
  EXPECT_EQ(Count(ops, "operator.add"), 0);
}

TEST(QConfigMappingCliTest, PrepareTakesTheFlag) {
  const std::string mapping = WriteFile("keep_layer1_c.textproto", kKeepLayer1Float);
  const std::string in = TempPath("prep_in.fsl");
  const std::string fused = TempPath("prep_fused.fsl");
  const std::string out = TempPath("prep_out.fsl");
  ASSERT_TRUE(SaveModel(*TwoBlocks(true), in).ok());
  CliResult r = RunFuselage({"fuse", in, "--backend=qnnpack", "-o", fused});
  ASSERT_EQ(r.code, kExitOk) << r.out << r.err;
  r = RunFuselage({"prepare", fused, "--backend=qnnpack",
                   absl::StrCat("--qconfig-mapping=", mapping), "-o", out});
  ASSERT_EQ(r.code, kExitOk) << r.out << r.err;
  // The kept-float report names layer1's conv with the reason; layer0's is not in it.
  EXPECT_NE(r.out.find("layer1_conv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("its qconfig is None"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("layer0_conv"), std::string::npos) << r.out;
}

// The qnnpack default qconfig globally, None for every operator.add.
constexpr char kKeepAddsFloat[] = R"pb(
  global {
    activation { kind: "HistogramObserver" dtype: "quint8" }
    weight { kind: "MinMaxObserver" dtype: "qint8" qscheme: "per_tensor_symmetric" }
  }
  object_type { object_type: "operator.add" qconfig { none: true } }
)pb";

// An add whose qconfig is None sits between quantized neighbours (its conv before, its
// relu after), so convert leaves dequantize -> add -> quantize; PyTorch's
// should_skip_lowering keeps it float. `fuselage lower` on the converted model file
// lowered it to quantized::add_relu, silently unlike `fuselage quantize` (only the
// prepare report knew the qconfig was None; the file now carries it on the node).
TEST(QConfigMappingCliTest, AnAddWhoseQConfigIsNoneStaysFloatThroughTheStageFiles) {
  const std::string mapping = WriteFile("keep_adds.textproto", kKeepAddsFloat);
  const std::string flag = absl::StrCat("--qconfig-mapping=", mapping);
  const std::string in = TempPath("adds_in.fsl");
  ASSERT_TRUE(SaveModel(*TwoBlocks(true), in).ok());
  std::string previous = in;
  for (std::vector<std::string> stage :
       {std::vector<std::string>{"fuse", "--backend=qnnpack"},
        std::vector<std::string>{"prepare", "--backend=qnnpack", flag},
        std::vector<std::string>{"calibrate", "--samples=4", "--input-shape=2,4,6,6"},
        std::vector<std::string>{"convert"},
        std::vector<std::string>{"lower", "--backend=qnnpack"}}) {
    const std::string out = TempPath(absl::StrCat("adds_", stage[0], ".fsl"));
    std::vector<std::string> args = {stage[0], previous};
    args.insert(args.end(), stage.begin() + 1, stage.end());
    args.insert(args.end(), {"-o", out});
    CliResult r = RunFuselage(args);
    ASSERT_EQ(r.code, kExitOk) << stage[0] << ": " << r.out << r.err;
    previous = out;
  }
  auto staged = LoadModel(previous);
  ASSERT_TRUE(staged.ok()) << staged.status();
  const std::vector<std::string> ops = Ops(**staged);
  EXPECT_EQ(Count(ops, "operator.add"), 2) << absl::StrJoin(ops, "\n");
  EXPECT_EQ(Count(ops, "torch.ops.quantized.add_relu"), 0) << absl::StrJoin(ops, "\n");
  EXPECT_EQ(Count(ops, "layer0.conv:nnq.Conv2d"), 1) << absl::StrJoin(ops, "\n");
  // The one-command flow agrees.
  EXPECT_EQ(Quantize(*TwoBlocks(true), "adds", {flag}), ops);
}

TEST(QConfigMappingCliTest, BadFlagValuesAreClearErrors) {
  const std::string in = TempPath("bad_in.fsl");
  ASSERT_TRUE(SaveModel(*TwoBlocks(true), in).ok());
  const std::string out = TempPath("bad_out.fsl");
  CliResult r = RunFuselage({"quantize", in, "--backend=qnnpack", "--qconfig-mapping=", "-o", out});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--qconfig-mapping needs a file name"), std::string::npos) << r.err;

  r = RunFuselage({"prepare", in, "--backend=qnnpack",
                   "--qconfig-mapping=/nonexistent/m.textproto", "-o", out});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("qconfig mapping file: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/m.textproto"), std::string::npos) << r.err;

  const std::string bad = WriteFile(
      "bad.textproto", "module_name { module_name: \"layer1\" qconfig { activation { kind: "
                       "\"MyObserver\" } weight { kind: \"MinMaxObserver\" } } }");
  r = RunFuselage({"quantize", in, "--backend=qnnpack", absl::StrCat("--qconfig-mapping=", bad),
                   "-o", out});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("module_name[0] 'layer1': field 'qconfig.activation.kind': unknown "
                       "observer \"MyObserver\""),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace fuselage
