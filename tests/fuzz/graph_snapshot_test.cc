// GraphSnapshot (tests/fuzz/graph_snapshot.h) is the oracle of graph_api_fuzz's "a failed
// call leaves the graph as it was": it must see every kind of change, and it must not see
// one where there is none (a NaN arg equals itself).
#include "tests/fuzz/graph_snapshot.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "graph/argument.h"
#include "graph/graph.h"
#include "graph/node.h"
#include "graph/symbol.h"
#include "gtest/gtest.h"

namespace fuselage::fuzz {
namespace {

// x -> add(x, 0.5, alpha=NaN) [meta tag='t'] -> output
class GraphSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = *graph_.AddPlaceholder("x");
    NodeSpec spec;
    spec.target = Symbol::Intern("torch.add");
    spec.args = {Argument(x_), Argument::Float(0.5)};
    spec.kwargs = {{Symbol::Intern("alpha"),
                    Argument::Float(std::numeric_limits<double>::quiet_NaN())}};
    add_ = *graph_.Append(spec);
    ASSERT_TRUE(graph_.SetMeta(add_, "tag", Argument::String("t")).ok());
    ASSERT_TRUE(graph_.SetOutput(Argument(add_)).ok());
    ASSERT_TRUE(graph_.Verify().ok());
  }

  // The first difference GraphSnapshot reports between before and now ("" if none).
  std::string ChangeSince(const GraphSnapshot& before) {
    return before.FirstDifference(GraphSnapshot(graph_));
  }

  Graph graph_;
  Node* x_ = nullptr;
  Node* add_ = nullptr;
};

TEST_F(GraphSnapshotTest, AnUnchangedGraphIsEqualEvenWithANaNArg) {
  const GraphSnapshot before(graph_);
  EXPECT_EQ(ChangeSince(before), "");
  EXPECT_TRUE(before == GraphSnapshot(graph_));
}

TEST_F(GraphSnapshotTest, SeesAChangedArg) {
  const GraphSnapshot before(graph_);
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::Float(0.25)).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "args differ")) << ChangeSince(before);
}

TEST_F(GraphSnapshotTest, TellsZeroFromNegativeZero) {
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::Float(0.0)).ok());
  const GraphSnapshot before(graph_);
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::Float(-0.0)).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "args differ")) << ChangeSince(before);
}

TEST_F(GraphSnapshotTest, SeesANestedListItemChange) {
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::List({Argument::Int(1), Argument::Int(2)})).ok());
  const GraphSnapshot before(graph_);
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::List({Argument::Int(1), Argument::Int(3)})).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "args differ")) << ChangeSince(before);
  const GraphSnapshot list(graph_);
  ASSERT_TRUE(graph_.SetArg(add_, 1, Argument::Tuple({Argument::Int(1), Argument::Int(3)})).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(list), "args differ")) << ChangeSince(list);
}

TEST_F(GraphSnapshotTest, SeesKwargMetaNameAndTargetChanges) {
  GraphSnapshot before(graph_);
  ASSERT_TRUE(graph_.SetKwarg(add_, "alpha", Argument::Float(2.0)).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "kwargs differ")) << ChangeSince(before);

  before = GraphSnapshot(graph_);
  ASSERT_TRUE(graph_.SetMeta(add_, "tag", Argument::String("u")).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "meta differs")) << ChangeSince(before);

  before = GraphSnapshot(graph_);
  graph_.Rename(add_, "sum");
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "name differs")) << ChangeSince(before);

  before = GraphSnapshot(graph_);
  ASSERT_TRUE(graph_.SetTarget(add_, Symbol::Intern("torch.sub")).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "target differs")) << ChangeSince(before);
}

TEST_F(GraphSnapshotTest, SeesUsersAndAnErasedNode) {
  GraphSnapshot before(graph_);
  // x gains a second user.
  NodeSpec relu;
  relu.target = Symbol::Intern("torch.relu");
  relu.args = {Argument(x_)};
  Node* r = *graph_.InsertAfter(x_, relu);
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "size")) << ChangeSince(before);

  before = GraphSnapshot(graph_);
  ASSERT_TRUE(graph_.SetArg(add_, 0, Argument(r)).ok());  // x loses add, r gains it
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "users differ") ||
              absl::StrContains(ChangeSince(before), "args differ"))
      << ChangeSince(before);

  ASSERT_TRUE(graph_.SetArg(add_, 0, Argument(x_)).ok());
  before = GraphSnapshot(graph_);
  ASSERT_TRUE(graph_.Erase(r).ok());
  EXPECT_TRUE(absl::StrContains(ChangeSince(before), "size")) << ChangeSince(before);
}

TEST_F(GraphSnapshotTest, SeesTheOutputGoing) {
  const GraphSnapshot before(graph_);
  ASSERT_TRUE(graph_.Erase(graph_.output()).ok());
  EXPECT_NE(ChangeSince(before), "");
}

}  // namespace
}  // namespace fuselage::fuzz
