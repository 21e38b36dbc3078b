// ToDot: the Graphviz picture of a graph. The golden (testdata/conv_bn_add_relu.dot) was
// written and checked by hand: one box per node with name, op, target and module type,
// one edge per (input, user) pair, in graph order.
#include "graph/dot.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(DotTest, ConvBnAddReluMatchesGolden) {
  std::ifstream in("tests/graph/testdata/conv_bn_add_relu.dot");
  std::stringstream golden;
  golden << in.rdbuf();
  ASSERT_FALSE(golden.str().empty());
  EXPECT_EQ(ToDot(*testing::MakeConvBnAddRelu()), golden.str());
}

TEST(DotTest, AnInputReadTwiceIsOneEdge) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* add = *gm.graph().AddCallFunction("operator.add", {x, x});
  ASSERT_TRUE(gm.graph().SetOutput(Argument::Tuple({add, x})).ok());
  const std::string dot = ToDot(gm);
  EXPECT_THAT(dot, HasSubstr("  \"x\" -> \"add\";\n  \"add\" -> \"output\";\n  \"x\" -> \"output\";\n  subgraph cluster_legend"));
  EXPECT_THAT(dot, Not(HasSubstr("\"x\" -> \"add\";\n  \"x\" -> \"add\"")));
}

// A lowered residual block: quantize -> nniq.ConvAddReLU2d (fused, pattern meta) ->
// dequantize, an observer and a float op; each gets the colour of its mark.
TEST(DotTest, MarksFusedQuantizedConversionObserverAndFloatNodes) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv_add", std::make_unique<Module>("nniq.ConvAddReLU2d")).ok());
  ASSERT_TRUE(gm.SetModule("obs", std::make_unique<Module>("MinMaxObserver")).ok());
  ASSERT_TRUE(gm.SetModule("fused_float", std::make_unique<Module>("nni.ConvReLU2d")).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, Argument::Float(0.1), Argument::Int(0), Argument::Int(0)});
  Node* conv = *g.AddCallModule("conv_add", {q, q});
  ASSERT_TRUE(g.SetMeta(conv, "pattern", Argument::String("conv_add_relu")).ok());
  Node* qadd = *g.AddCallFunction("torch.ops.quantized.add", {conv, q});
  Node* dq = *g.AddCallMethod("dequantize", {qadd});
  Node* obs = *g.AddCallModule("obs", {dq});
  Node* fused_float = *g.AddCallModule("fused_float", {obs});
  Node* relu = *g.AddCallFunction("torch.relu", {fused_float});
  ASSERT_TRUE(g.SetOutput(relu).ok());

  EXPECT_EQ(MarkNode(gm, *x).mark, NodeMark::kIo);
  EXPECT_EQ(MarkNode(gm, *q).mark, NodeMark::kConversion);
  EXPECT_EQ(MarkNode(gm, *conv).mark, NodeMark::kQuantized);
  EXPECT_TRUE(MarkNode(gm, *conv).fused);
  EXPECT_EQ(MarkNode(gm, *qadd).mark, NodeMark::kQuantized);
  EXPECT_FALSE(MarkNode(gm, *qadd).fused);
  EXPECT_EQ(MarkNode(gm, *dq).mark, NodeMark::kConversion);
  EXPECT_EQ(MarkNode(gm, *obs).mark, NodeMark::kObserver);
  EXPECT_EQ(MarkNode(gm, *fused_float).mark, NodeMark::kFloat);
  EXPECT_TRUE(MarkNode(gm, *fused_float).fused);
  EXPECT_EQ(MarkNode(gm, *relu).mark, NodeMark::kFloat);
  EXPECT_FALSE(MarkNode(gm, *relu).fused);

  const std::string dot = ToDot(gm);
  EXPECT_THAT(dot, HasSubstr("  \"conv_add\" [label=\"conv_add\\ncall_module\\ntarget: conv_add\\n"
                             "type: nniq.ConvAddReLU2d\\npattern: conv_add_relu\", "
                             "fillcolor=\"#b6d7a8\", peripheries=2, penwidth=2];\n"));
  EXPECT_THAT(dot, HasSubstr("  \"dequantize\" [label=\"dequantize\\ncall_method\\n"
                             "target: dequantize\", fillcolor=\"#ffe599\"];\n"));
  EXPECT_THAT(dot, HasSubstr("  \"relu\" [label=\"relu\\ncall_function\\ntarget: torch.relu\", "
                             "fillcolor=\"#cfe2f3\"];\n"));
  EXPECT_THAT(dot, HasSubstr("\"legend:fused\" [label=\"fused (double border)\""));
}

// Node names from a model file are not sanitized; quotes, backslashes and line breaks
// in them must not break the DOT syntax.
TEST(DotTest, TargetsAreEscaped) {
  // Node names are identifiers (the loader enforces it); targets may hold anything.
  auto gm = ParseModelText(R"pb(
    format_version: 1
    graph {
      nodes { name: "in_put" op: PLACEHOLDER target: "x\"y\\\nz" }
      nodes { name: "output" op: OUTPUT target: "output" args { node: "in_put" } }
    }
    root { type: "GraphModule" }
  )pb");
  ASSERT_TRUE(gm.ok()) << gm.status();
  const std::string dot = ToDot(**gm);
  EXPECT_THAT(dot, HasSubstr(R"(  "in_put" [label="in_put\nplaceholder\ntarget: x\"y\\\nz", )"));
  EXPECT_THAT(dot, HasSubstr(R"(  "in_put" -> "output";)"));
}

TEST(DotTest, QuoteEscapesAndDropsControlCharacters) {
  EXPECT_EQ(DotQuote("plain"), "\"plain\"");
  EXPECT_EQ(DotQuote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(DotQuote("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(DotQuote("a\nb"), "\"a\\nb\"");
  EXPECT_EQ(DotQuote(std::string("a\0b\x01", 4)), "\"ab\"");
}

}  // namespace
}  // namespace fuselage
