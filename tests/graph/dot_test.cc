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
  EXPECT_THAT(dot, HasSubstr("  \"x\" -> \"add\";\n  \"add\" -> \"output\";\n  \"x\" -> \"output\";\n}\n"));
  EXPECT_THAT(dot, Not(HasSubstr("\"x\" -> \"add\";\n  \"x\" -> \"add\"")));
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
