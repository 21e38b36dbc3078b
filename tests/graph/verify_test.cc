// GraphModule::Verify catches each broken invariant. The graph API cannot build such
// graphs, so each case is a hand-written model textproto: the loader keeps the file's
// node order as is and leaves order, output and module checks to Verify, whose error
// must name the node and what was expected.
#include <string>

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

}  // namespace
}  // namespace fuselage
