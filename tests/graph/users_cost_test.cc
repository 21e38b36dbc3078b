// The graph's use-list upkeep is linear in a node's number of users and inputs (issue
// #22, item 8: with 10^5 users of one node, verify / fuse / quantize were quadratic).
// Without a clock: graph_internal::UseListSteps() counts the use-list and arg-list
// entries the upkeep visits (compared, moved or rewritten), and doubling the users must
// about double the count (a quadratic cost quadruples it). bench/users_bench measures the
// same paths in time at 10^5 users.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace {

// x with `n` users relu_i = torch.relu(x), all returned in one output tuple: x has n
// users and the output n inputs.
struct FanOut {
  Graph g;
  Node* x = nullptr;
  std::vector<Node*> users;
  explicit FanOut(int n) {
    x = *g.AddPlaceholder("x");
    std::vector<Argument> outputs;
    for (int i = 0; i < n; ++i) {
      users.push_back(*g.AddCallFunction("torch.relu", {x}));
      outputs.push_back(Argument(users.back()));
    }
    EXPECT_TRUE(g.SetOutput(Argument::Tuple(std::move(outputs))).ok());
  }
};

// The steps `work` takes.
template <typename Work>
uint64_t StepsOf(Work&& work) {
  const uint64_t before = graph_internal::UseListSteps();
  work();
  return graph_internal::UseListSteps() - before;
}

// What a fusion pass does to each user in turn: a new node reading x takes the user's
// place (ReplaceAllUsesWith: the output's tuple slot is rewritten) and the user is erased
// (it leaves x's list, from the front). Then every use of x moves to a new node, and the
// whole graph is verified.
uint64_t RewriteSteps(int n) {
  FanOut f(n);
  uint64_t steps = StepsOf([&] { EXPECT_TRUE(f.g.Verify().ok()); });
  Node* y = *f.g.InsertAfter(
      f.x, NodeSpec{OpKind::kCallFunction, Symbol::Intern("torch.neg"), {f.x}, {}, {}});
  steps += StepsOf([&] {
    for (Node* user : f.users) {
      auto fused = f.g.InsertBefore(user, NodeSpec{OpKind::kCallFunction,
                                                   Symbol::Intern("torch.sigmoid"), {f.x}, {}, {}});
      ASSERT_TRUE(fused.ok());
      ASSERT_TRUE(f.g.ReplaceAllUsesWith(user, *fused).ok());
      ASSERT_TRUE(f.g.Erase(user).ok());
    }
  });
  steps += StepsOf([&] {
    auto moved = f.g.ReplaceAllUsesWith(f.x, y);
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(*moved, n);  // y itself keeps its use of x
  });
  steps += StepsOf([&] {
    EXPECT_EQ(f.g.output()->InputNodes().size(), static_cast<size_t>(n));
    EXPECT_TRUE(f.g.Verify().ok()) << f.g.Verify();
  });
  // The outcome, checked independently of the graph's own bookkeeping.
  EXPECT_EQ(testing::UseListMismatch(f.g), "");
  EXPECT_EQ(f.x->num_users(), 1u);
  EXPECT_EQ(y->num_users(), static_cast<size_t>(n));
  return steps;
}

TEST(UsersCostTest, RewritingEveryUserOfANodeIsLinearInUsers) {
  const uint64_t small = RewriteSteps(2000);
  const uint64_t large = RewriteSteps(4000);
  ASSERT_GT(small, 0u);
  // Linear: ~2x. Quadratic (a search or shift of x's list per user, a copy of the output
  // tuple per rewired user): ~4x.
  EXPECT_LT(static_cast<double>(large) / small, 2.5) << small << " -> " << large << " steps";
}

TEST(UsersCostTest, UseListsStayExactThroughFrontAndBackRemovals) {
  FanOut f(50);
  // Users leave x's list from the front, from the back and from the middle, and join it
  // again; the list must stay exactly the users in the order they started using x.
  std::vector<Node*> expected = f.users;
  const auto erase = [&](size_t i) {
    Node* user = expected[i];
    auto replacement = f.g.InsertBefore(user, NodeSpec{OpKind::kCallFunction,
                                                       Symbol::Intern("torch.tanh"), {}, {}, {}});
    ASSERT_TRUE(replacement.ok());
    ASSERT_TRUE(f.g.ReplaceAllUsesWith(user, *replacement).ok());
    ASSERT_TRUE(f.g.Erase(user).ok());
    expected.erase(expected.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (int round = 0; round < 10; ++round) {
    erase(0);
    erase(expected.size() - 1);
    erase(expected.size() / 2);
    Node* added = *f.g.InsertBefore(
        f.g.output(),
        NodeSpec{OpKind::kCallFunction, Symbol::Intern("torch.relu"), {f.x}, {}, {}});
    expected.push_back(added);
    ASSERT_EQ(std::vector<Node*>(f.x->users().begin(), f.x->users().end()), expected)
        << "round " << round;
  }
  while (!expected.empty()) {
    erase(0);
  }
  EXPECT_EQ(f.x->num_users(), 0u);
  EXPECT_TRUE(f.x->users().empty());
  EXPECT_EQ(testing::UseListMismatch(f.g), "");
}

}  // namespace
}  // namespace fuselage
