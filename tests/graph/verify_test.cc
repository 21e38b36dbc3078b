// GraphModule::Verify catches each broken invariant. The graph API cannot build such
// graphs, so each case is a hand-written model textproto: the loader keeps the file's
// node order as is and leaves order, output and module checks to Verify, whose error
// must name the node and what was expected.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A root module with a conv (one 1x1x1x1 weight), a relu and a plain container.
constexpr char kRoot[] = R"pb(
  root {
    type: "GraphModule"
    children {
      name: "conv"
      module {
        type: "nn.Conv2d"
        tensors {
          name: "weight"
          tensor { dtype: FLOAT32 shape: [ 1, 1, 1, 1 ] data: "\000\000\200?" }
        }
      }
    }
    children { name: "relu" module { type: "nn.ReLU" } }
  }
)pb";

std::string Model(const std::string& nodes, const std::string& root = kRoot) {
  return absl::StrCat("format_version: 1\ngraph {\n", nodes, "}\n", root);
}

constexpr char kX[] = R"pb(nodes { name: "x" op: PLACEHOLDER target: "x" })pb";
constexpr char kOutputOfX[] =
    R"pb(nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } })pb";

absl::Status Load(const std::string& text) { return ParseModelText(text).status(); }

TEST(VerifyTest, WellFormedModelLoads) {
  const std::string text = Model(absl::StrCat(kX, R"pb(
    nodes { name: "conv" op: CALL_MODULE target: "conv" args { node: "x" } }
    nodes { name: "relu" op: CALL_MODULE target: "relu" args { node: "conv" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "relu" } }
  )pb"));
  auto gm = ParseModelText(text);
  ASSERT_TRUE(gm.ok()) << gm.status();
  EXPECT_TRUE((*gm)->Verify().ok());
  EXPECT_EQ((*gm)->graph().size(), 4u);
}

TEST(VerifyTest, ForwardReference) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "a" op: CALL_FUNCTION target: "torch.relu" args { node: "b" } }
    nodes { name: "b" op: CALL_FUNCTION target: "torch.relu" args { node: "x" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "a" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("node 'a'"), HasSubstr("'b'"), HasSubstr("not topological")));
}

TEST(VerifyTest, CycleOfTwo) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "a" op: CALL_FUNCTION target: "operator.add" args { node: "x" } args { node: "b" } }
    nodes { name: "b" op: CALL_FUNCTION target: "torch.relu" args { node: "a" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "b" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), AllOf(HasSubstr("node 'a'"), HasSubstr("'b'")));
}

TEST(VerifyTest, SelfCycle) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "a" op: CALL_FUNCTION target: "operator.add" args { node: "x" } args { node: "a" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "a" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), AllOf(HasSubstr("node 'a'"), HasSubstr("cycle")));
}

TEST(VerifyTest, OutputNotLast) {
  absl::Status st = Load(Model(absl::StrCat(kX, kOutputOfX, R"pb(
    nodes { name: "late" op: CALL_FUNCTION target: "torch.relu" args { node: "x" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("node 'late'"), HasSubstr("after the output node 'output'"),
                    HasSubstr("must be last")));
}

TEST(VerifyTest, TwoOutputs) {
  absl::Status st = Load(Model(absl::StrCat(kX, kOutputOfX, R"pb(
    nodes { name: "output_1" op: OUTPUT target: "output" args { node: "x" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("more than one output"), HasSubstr("'output_1'")));
}

TEST(VerifyTest, NoOutput) {
  absl::Status st = Load(Model(kX));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("no output node"));
}

TEST(VerifyTest, CallModuleTargetMissing) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "fc" op: CALL_MODULE target: "layer1.fc" args { node: "x" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "fc" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("node 'fc'"), HasSubstr("call_module target 'layer1.fc'"),
                    HasSubstr("not a module")));
}

TEST(VerifyTest, GetAttrTargetMissing) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "w" op: GET_ATTR target: "conv.bias" }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "w" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("node 'w'"), HasSubstr("get_attr target 'conv.bias'"),
                    HasSubstr("neither a tensor nor a module")));
}

TEST(VerifyTest, GetAttrOfAnExistingTensorAndModuleIsFine) {
  EXPECT_TRUE(Load(Model(R"pb(
    nodes { name: "w" op: GET_ATTR target: "conv.weight" }
    nodes { name: "m" op: GET_ATTR target: "relu" }
    nodes { name: "output" op: OUTPUT target: "output" args { tuple { items { node: "w" } items { node: "m" } } } }
  )pb")).ok());
}

TEST(VerifyTest, CallModuleArity) {
  absl::Status st = Load(Model(absl::StrCat(kX, R"pb(
    nodes { name: "conv" op: CALL_MODULE target: "conv" args { node: "x" } args { node: "x" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "conv" } }
  )pb")));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("node 'conv'"), HasSubstr("nn.Conv2d takes 1 positional args"),
                    HasSubstr("got 2")));
}

TEST(VerifyTest, UnknownModuleType) {
  const std::string root = R"pb(
    root {
      type: "GraphModule"
      children { name: "block" module { type: "nn.Module" children { name: "mystery" module { type: "nn.Mystery" } } } }
    }
  )pb";
  absl::Status st = Load(Model(absl::StrCat(kX, kOutputOfX), root));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("module 'block.mystery'"), HasSubstr("unknown module type 'nn.Mystery'")));
}

TEST(VerifyTest, MissingRequiredTensor) {
  const std::string root = R"pb(
    root { type: "GraphModule" children { name: "conv" module { type: "nn.Conv2d" } } }
  )pb";
  absl::Status st = Load(Model(absl::StrCat(kX, kOutputOfX), root));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("module 'conv'"), HasSubstr("missing required tensor 'weight'")));
}

// ---- Module attributes and tensors against their schemas (issue 22 item 9) -------------
// `verify` passed what `run` refused: stride 0, negative padding, groups 0, a weight whose
// shape disagrees with the attributes. Each case edits one field of a valid grouped conv
// (in 4, out 8, 3x3, groups 2: weight [8, 2, 3, 3], bias [8]) at "block.conv"; the error
// names the module, the field and the expectation.

std::unique_ptr<Module> ValidConv() {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({8, 2, 3, 3}, std::vector<float>(144, 0.5f)));
  conv->SetTensor("bias", Tensor::FromFloats({8}, std::vector<float>(8, 0.0f)));
  conv->SetAttribute("in_channels", Argument::Int(4));
  conv->SetAttribute("out_channels", Argument::Int(8));
  conv->SetAttribute("kernel_size", Argument::Ints({3, 3}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({1, 1}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(2));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

// x -> block.<name> -> output, the module given; Verify's status, after a save and load
// round trip too (what `fuselage verify FILE` sees).
absl::Status VerifyWithModule(std::unique_ptr<Module> module, const std::string& name = "conv") {
  GraphModule gm;
  EXPECT_TRUE(gm.SetModule("block", std::make_unique<Module>("nn.Sequential")).ok());
  EXPECT_TRUE(gm.SetModule("block." + name, std::move(module)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* m = *gm.graph().AddCallModule("block." + name, {x});
  EXPECT_TRUE(gm.graph().SetOutput(m).ok());
  const absl::Status direct = gm.Verify();
  const absl::Status loaded = ParseModel(SerializeModel(gm)).status();
  EXPECT_EQ(direct.ok(), loaded.ok()) << direct << " vs " << loaded;
  if (!direct.ok()) {
    EXPECT_THAT(std::string(loaded.message()), HasSubstr(std::string(direct.message())));
  }
  return direct;
}

TEST(VerifyModuleFieldsTest, AValidConvVerifies) {
  EXPECT_TRUE(VerifyWithModule(ValidConv()).ok()) << VerifyWithModule(ValidConv());
  // Absent attributes take PyTorch's defaults and are fine.
  auto bare = std::make_unique<Module>("nn.Conv2d");
  bare->SetTensor("weight", Tensor::FromFloats({2, 3, 1, 1}, std::vector<float>(6, 1.0f)));
  EXPECT_TRUE(VerifyWithModule(std::move(bare)).ok());
  auto valid_padding = ValidConv();
  valid_padding->SetAttribute("padding", Argument::String("same"));
  EXPECT_TRUE(VerifyWithModule(std::move(valid_padding)).ok());
}

struct ConvCase {
  const char* label;
  std::function<void(Module&)> edit;
  std::vector<std::string> fragments;
};

TEST(VerifyModuleFieldsTest, ConvAttributesAndTensorsAreChecked) {
  const std::vector<ConvCase> cases = {
      {"stride 0", [](Module& m) { m.SetAttribute("stride", Argument::Ints({0, 1})); },
       {"attribute 'stride'", "[0, 1]", "every entry >= 1"}},
      {"stride as a string", [](Module& m) { m.SetAttribute("stride", Argument::String("2")); },
       {"attribute 'stride'", "an int or a list of 2 ints"}},
      {"stride of three", [](Module& m) { m.SetAttribute("stride", Argument::Ints({1, 1, 1})); },
       {"attribute 'stride'", "a list of 2 ints"}},
      {"negative padding", [](Module& m) { m.SetAttribute("padding", Argument::Int(-1)); },
       {"attribute 'padding'", "[-1, -1]", ">= 0"}},
      {"padding 'full'", [](Module& m) { m.SetAttribute("padding", Argument::String("full")); },
       {"attribute 'padding'", "'valid' or 'same'"}},
      {"dilation 0", [](Module& m) { m.SetAttribute("dilation", Argument::Ints({1, 0})); },
       {"attribute 'dilation'", ">= 1"}},
      {"kernel_size 0", [](Module& m) { m.SetAttribute("kernel_size", Argument::Int(0)); },
       {"attribute 'kernel_size'", ">= 1"}},
      {"groups 0", [](Module& m) { m.SetAttribute("groups", Argument::Int(0)); },
       {"attribute 'groups'", "is 0", "an int >= 1"}},
      {"groups not dividing in_channels",
       [](Module& m) { m.SetAttribute("groups", Argument::Int(3)); },
       {"attribute 'in_channels'", "is 4", "multiple of groups (3)"}},
      {"weight in channels",
       [](Module& m) {
         m.SetTensor("weight", Tensor::FromFloats({8, 3, 3, 3}, std::vector<float>(216, 0)));
       },
       {"attribute 'in_channels'", "is 4 but weight [8, 3, 3, 3] with groups 2 gives in channels 6"}},
      {"weight out channels",
       [](Module& m) { m.SetAttribute("out_channels", Argument::Int(6)); },
       {"attribute 'out_channels'", "is 6 but weight [8, 2, 3, 3]", "out channels 8"}},
      {"weight kernel",
       [](Module& m) { m.SetAttribute("kernel_size", Argument::Ints({5, 5})); },
       {"attribute 'kernel_size'", "[5, 5]", "kernel [3, 3]"}},
      {"weight rank",
       [](Module& m) { m.SetTensor("weight", Tensor::FromFloats({8, 2, 9}, std::vector<float>(144, 0))); },
       {"tensor 'weight'", "[8, 2, 9]", "expected rank 4"}},
      {"bias length",
       [](Module& m) { m.SetTensor("bias", Tensor::FromFloats({4}, std::vector<float>(4, 0))); },
       {"tensor 'bias'", "[4]", "expected [8]"}},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.label);
    std::unique_ptr<Module> conv = ValidConv();
    c.edit(*conv);
    const absl::Status status = VerifyWithModule(std::move(conv));
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("module 'block.conv' (nn.Conv2d): "));
    for (const std::string& fragment : c.fragments) {
      EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
    }
  }
}

TEST(VerifyModuleFieldsTest, TransposedConvLinearAndBatchNorm) {
  // ConvTranspose2d: weight [in, out / groups, k, k]; output_padding below stride.
  auto transposed = std::make_unique<Module>("nn.ConvTranspose2d");
  transposed->SetTensor("weight", Tensor::FromFloats({4, 3, 2, 2}, std::vector<float>(48, 0)));
  transposed->SetAttribute("in_channels", Argument::Int(4));
  transposed->SetAttribute("out_channels", Argument::Int(3));
  transposed->SetAttribute("stride", Argument::Int(2));
  transposed->SetAttribute("output_padding", Argument::Int(1));
  EXPECT_TRUE(VerifyWithModule(transposed->Clone(), "up").ok());
  transposed->SetAttribute("output_padding", Argument::Int(2));
  EXPECT_THAT(std::string(VerifyWithModule(transposed->Clone(), "up").message()),
              AllOf(HasSubstr("module 'block.up' (nn.ConvTranspose2d)"),
                    HasSubstr("attribute 'output_padding'"), HasSubstr("smaller than its stride")));
  transposed->SetAttribute("output_padding", Argument::Int(0));
  transposed->SetAttribute("out_channels", Argument::Int(4));
  EXPECT_THAT(std::string(VerifyWithModule(transposed->Clone(), "up").message()),
              AllOf(HasSubstr("attribute 'out_channels'"), HasSubstr("out channels 3")));

  auto linear = std::make_unique<Module>("nn.Linear");
  linear->SetTensor("weight", Tensor::FromFloats({3, 5}, std::vector<float>(15, 0)));
  linear->SetTensor("bias", Tensor::FromFloats({3}, std::vector<float>(3, 0)));
  linear->SetAttribute("in_features", Argument::Int(5));
  linear->SetAttribute("out_features", Argument::Int(3));
  EXPECT_TRUE(VerifyWithModule(linear->Clone(), "fc").ok());
  linear->SetAttribute("in_features", Argument::Int(4));
  EXPECT_THAT(std::string(VerifyWithModule(linear->Clone(), "fc").message()),
              AllOf(HasSubstr("module 'block.fc' (nn.Linear)"), HasSubstr("attribute 'in_features'"),
                    HasSubstr("is 4 but weight [3, 5] has in features 5")));
  linear->SetAttribute("in_features", Argument::Int(5));
  linear->SetTensor("bias", Tensor::FromFloats({5}, std::vector<float>(5, 0)));
  EXPECT_THAT(std::string(VerifyWithModule(linear->Clone(), "fc").message()),
              AllOf(HasSubstr("tensor 'bias'"), HasSubstr("expected [3]")));

  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  for (const char* name : {"weight", "bias", "running_mean", "running_var"}) {
    bn->SetTensor(name, Tensor::FromFloats({4}, std::vector<float>(4, 1)));
  }
  bn->SetAttribute("num_features", Argument::Int(4));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  EXPECT_TRUE(VerifyWithModule(bn->Clone(), "bn").ok());
  bn->SetTensor("running_var", Tensor::FromFloats({3}, std::vector<float>(3, 1)));
  EXPECT_THAT(std::string(VerifyWithModule(bn->Clone(), "bn").message()),
              AllOf(HasSubstr("module 'block.bn' (nn.BatchNorm2d)"),
                    HasSubstr("tensor 'running_var'"), HasSubstr("expected [4] (num_features)")));
  bn->SetTensor("running_var", Tensor::FromFloats({4}, std::vector<float>(4, 1)));
  bn->SetAttribute("eps", Argument::Float(-1));
  EXPECT_THAT(std::string(VerifyWithModule(bn->Clone(), "bn").message()),
              AllOf(HasSubstr("attribute 'eps'"), HasSubstr(">= 0")));
}

// A fused module's parts are modules of the tree like any other: their fields are checked
// under their own path.
TEST(VerifyModuleFieldsTest, FusedModulePartsAreChecked) {
  auto fused = std::make_unique<Module>("nni.ConvReLU2d");
  fused->SetChild("0", ValidConv());
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  EXPECT_TRUE(VerifyWithModule(fused->Clone(), "cr").ok());
  // A child's own fields are checked too, under its path.
  auto bad_child = ValidConv();
  bad_child->SetAttribute("groups", Argument::Int(0));
  fused->SetChild("0", std::move(bad_child));
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  EXPECT_THAT(std::string(VerifyWithModule(fused->Clone(), "cr").message()),
              AllOf(HasSubstr("module 'block.cr.0' (nn.Conv2d)"), HasSubstr("attribute 'groups'")));
}

}  // namespace
}  // namespace fuselage
