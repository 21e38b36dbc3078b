// The seeds of pass_pipeline_fuzz must reach the end of the pipeline, or the fuzzer
// would mostly explore the loader and the first pass. For every seed (file name
// `config<byte 0>-<model>.pb`): the model loads, all five passes succeed, calibration runs
// exactly on the models with an input shape, and the lowered graph holds the native
// quantized ops PyTorch 1.13's convert_fx makes of that model with that backend. An
// already quantized model gets through fuse (nothing to fuse) and is refused by prepare.
#include "tests/fuzz/pass_pipeline.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/node.h"
#include "gtest/gtest.h"

namespace fuselage::fuzz {
namespace {

struct Seed {
  const char* file;
  bool calibrated;                       // every input has a meta "shape"
  std::vector<std::string> lowered_ops;  // module types and functions expected after lower
  bool quantized = false;                // refused by prepare: not a float model
};

const std::vector<Seed>& Seeds() {
  static const auto* seeds = new std::vector<Seed>{
      // Residual block: conv → bn → add(identity) → relu. qnnpack folds bn into the conv
      // and quantizes add + relu as one quantized add_relu; onednn fuses all four into
      // ConvAddReLU2d.
      {"config2-residual.pb", true, {"nnq.Conv2d", "torch.ops.quantized.add_relu"}},
      {"config2-residual-unshaped.pb", false, {"nnq.Conv2d", "torch.ops.quantized.add_relu"}},
      {"config4-residual.pb", true, {"nniq.ConvAddReLU2d"}},
      // The same with the global MinMax mapping (byte 0 = config + 5).
      {"config7-residual.pb", true, {"nnq.Conv2d", "torch.ops.quantized.add_relu"}},
      {"config9-residual.pb", true, {"nniq.ConvAddReLU2d"}},
      // conv → bn → relu → flatten → linear: ConvReLU2d (bn folded) and Linear.
      {"config0-conv_bn_relu_linear.pb", true, {"nniq.ConvReLU2d", "nnq.Linear"}},
      {"config1-conv_bn_relu_linear.pb", true, {"nniq.ConvReLU2d", "nnq.Linear"}},
      {"config3-conv_bn_relu_linear.pb", true, {"nniq.ConvReLU2d", "nnq.Linear"}},
      {"config6-conv_bn_relu_linear.pb", true, {"nniq.ConvReLU2d", "nnq.Linear"}},
      // conv → relu.
      {"config0-conv_relu.pb", false, {"nniq.ConvReLU2d"}},
      {"config2-conv_relu.pb", false, {"nniq.ConvReLU2d"}},
      // An already quantized model: fuse finds nothing, prepare refuses it.
      {"config0-quantized.pb", false, {}, true},
      {"config2-quantized.pb", false, {}, true},
      // A graph without placeholders: every input (none) has a shape, so it is calibrated.
      {"config0-minimal.pb", true, {}},
      {"config2-minimal.pb", true, {}},
  };
  return *seeds;
}

std::string ReadSeed(const std::string& file) {
  std::ifstream in("tests/fuzz/corpus/pass_pipeline_fuzz/" + file, std::ios::binary);
  EXPECT_TRUE(in.good()) << file;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Module types of call_module nodes and targets of call_function nodes.
std::set<std::string> Ops(const GraphModule& gm) {
  std::set<std::string> ops;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kCallFunction) ops.insert(std::string(n->target().name()));
    if (n->op() == OpKind::kCallModule) {
      const Module* m = gm.FindModule(n->target().name());
      if (m != nullptr) ops.insert(std::string(m->type().name()));
    }
  }
  return ops;
}

TEST(PassPipelineSeedsTest, EverySeedGetsThroughEveryPass) {
  const std::vector<std::string> kPasses = {"fuse", "prepare", "calibrate", "convert",
                                            "lower"};
  for (const Seed& seed : Seeds()) {
    SCOPED_TRACE(seed.file);
    const std::string bytes = ReadSeed(seed.file);
    ASSERT_FALSE(bytes.empty());
    const PipelineResult result = RunPassPipeline(
        static_cast<uint8_t>(bytes[0]), absl::string_view(bytes).substr(1));
    ASSERT_TRUE(result.load.ok()) << result.load;
    EXPECT_EQ(result.minmax_mapping, static_cast<uint8_t>(bytes[0]) >= 5);
    if (seed.quantized) {
      ASSERT_EQ(result.passes.size(), 2u);
      EXPECT_TRUE(result.passes[0].status.ok()) << result.passes[0].status;
      EXPECT_EQ(result.passes[1].pass, "prepare");
      EXPECT_EQ(result.passes[1].status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(result.passes[1].status.message().find("is already quantized"),
                std::string::npos) << result.passes[1].status;
      continue;
    }
    ASSERT_EQ(result.passes.size(), kPasses.size());
    for (size_t i = 0; i < kPasses.size(); ++i) {
      EXPECT_EQ(result.passes[i].pass, kPasses[i]);
      EXPECT_TRUE(result.passes[i].status.ok()) << kPasses[i] << ": " << result.passes[i].status;
    }
    EXPECT_EQ(result.calibration_skipped, !seed.calibrated);
    const std::set<std::string> ops = Ops(*result.module);
    for (const std::string& op : seed.lowered_ops) {
      EXPECT_EQ(ops.count(op), 1u) << "no " << op << " after lowering; ops: "
                                   << absl::StrJoin(ops, ", ");
    }
  }
}

TEST(PassPipelineSeedsTest, ARejectedModelRunsNoPass) {
  const PipelineResult result = RunPassPipeline(0, "not a model");
  EXPECT_FALSE(result.load.ok());
  EXPECT_TRUE(result.passes.empty());
  EXPECT_EQ(result.module, nullptr);
}

}  // namespace
}  // namespace fuselage::fuzz
