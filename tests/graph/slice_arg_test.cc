// Slice and Ellipsis args (`x.shape[-2:]`, `x[..., 0]`, `x[:n]`): the Argument kinds, the
// printer (as torch.fx's GraphModule.code prints them), the model file and its loader checks,
// and ReplaceAllUsesWith reaching a node inside a slice.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/argument.h"
#include "graph/graph_module.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

// forward(x, n): getitem = x[(Ellipsis, slice(1, n, 2))]; getitem_1 = x[slice(-2, None, None)]
constexpr char kSliceModel[] = R"pb(
  format_version: 1
  graph {
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "n" op: PLACEHOLDER target: "n" }
    nodes {
      name: "getitem" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "x" }
      args { tuple { items { ellipsis: true }
                     items { slice { items { int_value: 1 } items { node: "n" }
                                     items { int_value: 2 } } } } }
    }
    nodes {
      name: "getitem_1" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "getitem" }
      args { slice { items { int_value: -2 } items { none: true } items { none: true } } }
    }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "getitem_1" } }
  }
  root { type: "GraphModule" }
)pb";

std::string WithSlice(const std::string& slice_items) {
  return absl::StrCat(R"pb(
    format_version: 1
    graph {
      nodes { name: "x" op: PLACEHOLDER target: "x" }
      nodes {
        name: "getitem" op: CALL_FUNCTION target: "operator.getitem"
        args { node: "x" }
        args { slice { )pb", slice_items, R"pb( } }
      }
      nodes { name: "output" op: OUTPUT target: "output" args { node: "getitem" } }
    }
    root { type: "GraphModule" })pb");
}

TEST(SliceArgTest, KindsAndRendering) {
  const Argument s = Argument::Slice(Argument::Int(-2), Argument::None(), Argument::None());
  EXPECT_TRUE(s.is_slice());
  EXPECT_FALSE(s.is_list());
  EXPECT_FALSE(s.is_tuple());
  EXPECT_EQ(s.ToString(), "slice(-2, None, None)");
  EXPECT_TRUE(Argument::Ellipsis().is_ellipsis());
  EXPECT_EQ(Argument::Ellipsis(), Argument::Ellipsis());
  EXPECT_NE(Argument::Ellipsis(), Argument::None());
  EXPECT_EQ(s, Argument::Slice(Argument::Int(-2), Argument::None(), Argument::None()));
  EXPECT_NE(s, Argument::Slice(Argument::Int(-1), Argument::None(), Argument::None()));
  // A slice is not the tuple of its parts.
  EXPECT_NE(s, Argument::Tuple({Argument::Int(-2), Argument::None(), Argument::None()}));
  EXPECT_EQ(PythonRepr(Argument::Tuple({Argument::Ellipsis(), Argument::Int(0)})),
            "(Ellipsis, 0)");
}

TEST(SliceArgTest, LoadsPrintsAndRoundTrips) {
  auto gm = ParseModelText(kSliceModel);
  ASSERT_TRUE(gm.ok()) << gm.status();
  ASSERT_TRUE((*gm)->graph().Verify().ok());
  // What torch.fx 1.13's GraphModule.code prints for the same graph.
  EXPECT_THAT(PrintCode(**gm), HasSubstr("getitem = x[(Ellipsis, slice(1, n, 2))]"));
  EXPECT_THAT(PrintCode(**gm), HasSubstr("getitem_1 = getitem[slice(-2, None, None)]"));
  // The node inside the slice is a use of n.
  const Node* n = (*gm)->graph().FindNode("n");
  ASSERT_EQ(n->num_users(), 1u);
  EXPECT_EQ(n->users()[0]->name(), "getitem");

  auto again = ParseModel(SerializeModel(**gm));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(SerializeModelText(**again), SerializeModelText(**gm));
  const Argument& index = (*again)->graph().FindNode("getitem")->arg(1);
  ASSERT_TRUE(index.is_tuple());
  EXPECT_TRUE(index.items()[0].is_ellipsis());
  ASSERT_TRUE(index.items()[1].is_slice());
  EXPECT_EQ(index.items()[1].items()[1].as_node(), (*again)->graph().FindNode("n"));
}

// Indexing.forward of testdata/make_fx_goldens.py, node for node as symbolic_trace records
// it (with getattr named builtins.getattr, as the exporter writes it).
constexpr char kIndexingModel[] = R"pb(
  format_version: 1
  graph {
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "n" op: PLACEHOLDER target: "n" }
    nodes {
      name: "getattr_1" op: CALL_FUNCTION target: "builtins.getattr"
      args { node: "x" } args { string_value: "shape" }
    }
    nodes {
      name: "getitem" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "getattr_1" }
      args { slice { items { int_value: -2 } items { none: true } items { none: true } } }
    }
    nodes {
      name: "getitem_1" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "x" }
      args { tuple {
        items { ellipsis: true }
        items { slice { items { int_value: 1 } items { none: true } items { none: true } } }
        items { slice { items { none: true } items { none: true } items { int_value: 2 } } } } }
    }
    nodes {
      name: "getitem_2" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "x" }
      args { tuple {
        items { slice { items { none: true } items { none: true } items { none: true } } }
        items { slice { items { none: true } items { node: "n" } items { none: true } } } } }
    }
    nodes {
      name: "getitem_3" op: CALL_FUNCTION target: "operator.getitem"
      args { node: "x" } args { tuple { items { none: true } items { int_value: 0 } } }
    }
    nodes {
      name: "output" op: OUTPUT target: "output"
      args { tuple { items { node: "getitem" } items { node: "getitem_1" }
                     items { node: "getitem_2" } items { node: "getitem_3" } } }
    }
  }
  root { type: "GraphModule" }
)pb";

TEST(SliceArgTest, PrintCodeMatchesTorchFx) {
  auto gm = ParseModelText(kIndexingModel);
  ASSERT_TRUE(gm.ok()) << gm.status();
  std::ifstream in("tests/graph/testdata/fx_code_indexing.txt");
  std::stringstream golden;
  golden << in.rdbuf();
  ASSERT_FALSE(golden.str().empty()) << "cannot read fx_code_indexing.txt";
  EXPECT_EQ(PrintCode(**gm), golden.str());
}

TEST(SliceArgTest, ReplaceAllUsesWithReachesANodeInASlice) {
  auto gm = ParseModelText(kSliceModel);
  ASSERT_TRUE(gm.ok()) << gm.status();
  Graph& g = (*gm)->graph();
  Node* x = g.FindNode("x");
  Node* n = g.FindNode("n");
  // Rewire x's uses to n (types do not matter to the graph): the slice in getitem_1 holds
  // none, the tuple in getitem holds n already.
  Node* getitem = g.FindNode("getitem");
  auto replaced = g.ReplaceAllUsesWith(n, x);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(getitem->arg(1).items()[1].items()[1].as_node(), x);
  EXPECT_EQ(n->num_users(), 0u);
  EXPECT_TRUE(g.Verify().ok()) << g.Verify();
}

TEST(SliceArgTest, LoaderRejectsBadSlices) {
  struct Case {
    std::string items;
    std::string expected;
  };
  const Case cases[] = {
      {"items { int_value: 1 } items { none: true }",
       "node 'getitem' args[1]: field 'slice' has 2 items; expected 3 (start, stop, step)"},
      {"items { int_value: 1 } items { node: \"ghost\" } items { none: true }",
       "node 'getitem' args[1] slice stop: refers to node 'ghost', which does not exist"},
      {"items { float_value: 0.5 } items { none: true } items { none: true }",
       "node 'getitem' args[1] slice start: expected None, an int or a node"},
      {"items { none: true } items { none: true } items { string_value: \"s\" }",
       "slice step: expected None, an int or a node"},
  };
  for (const Case& c : cases) {
    auto result = ParseModelText(WithSlice(c.items));
    ASSERT_FALSE(result.ok()) << c.items;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(c.expected));
  }
  // A well-formed slice loads.
  EXPECT_TRUE(ParseModelText(WithSlice("items { none: true } items { none: true } "
                                       "items { int_value: 3 }")).ok());
}

TEST(SliceArgTest, ASliceNestsAsAListForTheDepthLimit) {
  ModelLimits limits;
  limits.max_arg_depth = 2;
  const std::string slice =
      "slice { items { none: true } items { none: true } items { none: true } }";
  // Depth 1 (in a tuple) is within 2; depth 2 (in a tuple in a tuple) is past it.
  EXPECT_TRUE(ParseModelText(WithSlice("items { none: true } items { none: true } "
                                       "items { none: true }"), limits).ok());
  const auto nested = [&](int tuples) {
    std::string arg = slice;
    for (int i = 0; i < tuples; ++i) arg = absl::StrCat("tuple { items { ", arg, " } }");
    return absl::StrCat(R"pb(
      format_version: 1
      graph {
        nodes { name: "x" op: PLACEHOLDER target: "x" }
        nodes { name: "getitem" op: CALL_FUNCTION target: "operator.getitem"
                args { node: "x" } args { )pb", arg, R"pb( } }
        nodes { name: "output" op: OUTPUT target: "output" args { node: "getitem" } }
      }
      root { type: "GraphModule" })pb");
  };
  EXPECT_TRUE(ParseModelText(nested(1), limits).ok());
  auto deep = ParseModelText(nested(2), limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(std::string(deep.status().message()),
              HasSubstr("node 'getitem' args[1][0][0]: args nest deeper than 2"));
}

}  // namespace
}  // namespace fuselage
