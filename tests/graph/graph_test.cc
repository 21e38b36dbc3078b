// Graph API: every kind of mutation keeps use-lists exact and the graph valid; failed
// mutations change nothing; names are unique the way FX makes them unique.
#include "graph/graph.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace graph_internal {
// Breaks what only a bug in Graph could break, so that Verify()'s check of it is tested.
class GraphTestPeer {
 public:
  static void MiscountCallers(Graph& g, Symbol target, int delta) {
    if (target.id() >= g.callers_.size()) g.GrowCallers(target.id());
    g.callers_[target.id()] += static_cast<uint32_t>(delta);
  }
};
}  // namespace graph_internal
namespace {

using ::fuselage::testing::Names;
using ::fuselage::testing::UseListMismatch;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Verify() plus the independent use-list recount, after every mutation.
#define EXPECT_GRAPH_VALID(g)                  \
  do {                                         \
    EXPECT_TRUE((g).Verify().ok()) << (g).Verify(); \
    EXPECT_EQ(UseListMismatch(g), "");         \
  } while (0)

// x -> neg -> relu -> output(relu)
struct Chain {
  Graph g;
  Node* x;
  Node* neg;
  Node* relu;
  Node* out;
  Chain() {
    x = *g.AddPlaceholder("x");
    neg = *g.AddCallFunction("operator.neg", {x});
    relu = *g.AddCallFunction("torch.relu", {neg});
    out = *g.SetOutput(relu);
  }
};

TEST(GraphTest, AppendBuildsOrderUsersAndFxNames) {
  Chain c;
  EXPECT_GRAPH_VALID(c.g);
  EXPECT_THAT(Names(c.g.Nodes()), ElementsAre("x", "neg", "relu", "output"));
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg"));
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  EXPECT_THAT(Names(c.relu->users()), ElementsAre("output"));
  EXPECT_THAT(c.out->users(), IsEmpty());
  EXPECT_EQ(c.g.output(), c.out);
  EXPECT_EQ(c.g.last(), c.out);
  // Appending after the output exists lands before it.
  Node* extra = *c.g.AddCallFunction("torch.flatten", {c.relu, Argument::Int(1)});
  EXPECT_EQ(extra->next(), c.out);
  EXPECT_EQ(extra->name(), "flatten");
  EXPECT_THAT(Names(c.relu->users()), ElementsAre("output", "flatten"));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, NodeUsingAnInputTwiceIsOneUser) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* add = *g.AddCallFunction("operator.add", {x, x}, {{Symbol::Intern("alpha"), x}});
  EXPECT_THAT(Names(x->users()), ElementsAre("add"));
  EXPECT_THAT(Names(add->InputNodes()), ElementsAre("x"));
  // Losing one of the three uses keeps the user.
  ASSERT_TRUE(g.SetArg(add, 0, Argument::Int(1)).ok());
  EXPECT_THAT(Names(x->users()), ElementsAre("add"));
  ASSERT_TRUE(g.RemoveKwarg(add, "alpha").ok());
  EXPECT_THAT(Names(x->users()), ElementsAre("add"));
  ASSERT_TRUE(g.SetArg(add, 1, Argument::Float(2.0)).ok());
  EXPECT_THAT(x->users(), IsEmpty());
  ASSERT_TRUE(g.SetOutput(add).ok());
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, NestedListArgsAreUses) {
  Graph g;
  Node* a = *g.AddPlaceholder("a");
  Node* b = *g.AddPlaceholder("b");
  Node* cat = *g.AddCallFunction(
      "torch.cat", {Argument::List({a, Argument::Tuple({b, Argument::None()})})});
  EXPECT_THAT(Names(a->users()), ElementsAre("cat"));
  EXPECT_THAT(Names(b->users()), ElementsAre("cat"));
  ASSERT_TRUE(g.SetArgs(cat, {Argument::List({a})}).ok());
  EXPECT_THAT(b->users(), IsEmpty());
  ASSERT_TRUE(g.SetOutput(cat).ok());
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, InsertBeforeAndAfterKeepUseLists) {
  Chain c;
  Node* before = *c.g.InsertBefore(c.relu, {OpKind::kCallMethod, Symbol::Intern("sigmoid"),
                                             {c.neg}, {}, ""});
  EXPECT_EQ(before->next(), c.relu);
  Node* after = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.abs"),
                                        {c.x}, {}, ""});
  EXPECT_EQ(after->prev(), c.x);
  EXPECT_THAT(Names(c.g.Nodes()), ElementsAre("x", "abs", "neg", "sigmoid", "relu", "output"));
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg", "abs"));
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu", "sigmoid"));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, InsertWhoseInputComesLaterFailsAndChangesNothing) {
  Chain c;
  auto bad = c.g.InsertBefore(c.neg, {OpKind::kCallFunction, Symbol::Intern("torch.abs"),
                                      {c.relu}, {}, "abs"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'relu'"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("topological"));
  EXPECT_EQ(c.g.size(), 4u);
  EXPECT_EQ(c.g.FindNode("abs"), nullptr);
  EXPECT_THAT(Names(c.relu->users()), ElementsAre("output"));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, SecondOutputAndNodesAfterOutputAreRefused) {
  Chain c;
  auto second = c.g.SetOutput(c.neg);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("already has an output"));
  auto after = c.g.InsertAfter(c.out, {OpKind::kCallFunction, Symbol::Intern("torch.abs"),
                                       {c.x}, {}, ""});
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  EXPECT_EQ(c.g.size(), 4u);
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, NodesOfAnotherGraphAreRefused) {
  Chain c;
  Chain other;
  auto bad = c.g.AddCallFunction("torch.abs", {other.x});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("another graph"));
  EXPECT_EQ(c.g.SetArg(c.relu, 0, other.neg).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.neg->users(), ElementsAre(other.relu));
  EXPECT_GRAPH_VALID(c.g);
  EXPECT_GRAPH_VALID(other.g);
}

TEST(GraphTest, SetArgMovesTheUse) {
  Chain c;
  ASSERT_TRUE(c.g.SetArg(c.relu, 0, c.x).ok());
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg", "relu"));
  EXPECT_THAT(c.neg->users(), IsEmpty());
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, SetArgFailuresChangeNothing) {
  Chain c;
  // An input that does not precede the node.
  absl::Status later = c.g.SetArg(c.neg, 0, c.relu);
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(later.message()), HasSubstr("node 'neg'"));
  // The node itself.
  EXPECT_FALSE(c.g.SetArg(c.neg, 0, c.neg).ok());
  // Out of range.
  absl::Status range = c.g.SetArg(c.neg, 5, c.x);
  EXPECT_EQ(range.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(range.message()), HasSubstr("node 'neg'"));
  EXPECT_THAT(Names(c.neg->InputNodes()), ElementsAre("x"));
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg"));
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, SetKwargAddsReplacesAndRemovesUses) {
  Chain c;
  ASSERT_TRUE(c.g.SetKwarg(c.relu, "other", c.x).ok());
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg", "relu"));
  ASSERT_NE(c.relu->FindKwarg("other"), nullptr);
  EXPECT_EQ(c.relu->FindKwarg("other")->as_node(), c.x);
  // Replacing the value keeps one kwarg and moves the use.
  ASSERT_TRUE(c.g.SetKwarg(c.relu, "other", c.neg).ok());
  EXPECT_EQ(c.relu->kwargs().size(), 1u);
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg"));
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  // neg is still an arg of relu after the kwarg goes.
  ASSERT_TRUE(c.g.RemoveKwarg(c.relu, "other").ok());
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  EXPECT_EQ(c.g.RemoveKwarg(c.relu, "other").code(), absl::StatusCode::kNotFound);
  // A kwarg input that comes later is refused.
  EXPECT_EQ(c.g.SetKwarg(c.neg, "inplace", c.relu).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c.neg->kwargs().empty());
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, ReplaceAllUsesRewiresEveryUser) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddPlaceholder("y");
  Node* a = *g.AddCallFunction("torch.relu", {x});
  Node* b = *g.AddCallFunction("operator.add", {a, x}, {{Symbol::Intern("alpha"), a}});
  Node* out = *g.SetOutput(Argument::Tuple({a, b}));
  auto replaced = g.ReplaceAllUsesWith(a, y);
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(*replaced, 2);  // b and output, each counted once.
  EXPECT_THAT(a->users(), IsEmpty());
  EXPECT_THAT(Names(y->users()), ElementsAre("add", "output"));
  EXPECT_EQ(b->arg(0).as_node(), y);
  EXPECT_EQ(b->FindKwarg("alpha")->as_node(), y);
  EXPECT_EQ(out->arg(0).items()[0].as_node(), y);
  EXPECT_GRAPH_VALID(g);
}

// FX's idiom: insert f(x) after x, then send every other use of x through it. The new
// node must keep reading x (XLA's rule), or the graph would have a cycle.
TEST(GraphTest, ReplaceAllUsesKeepsTheReplacementsOwnUse) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* neg = *g.AddCallFunction("operator.neg", {x});
  Node* add = *g.AddCallFunction("operator.add", {neg, x});
  ASSERT_TRUE(g.SetOutput(add).ok());
  Node* observer = *g.InsertAfter(x, {OpKind::kCallModule, Symbol::Intern("obs"), {x}, {}, ""});
  auto replaced = g.ReplaceAllUsesWith(x, observer);
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(*replaced, 2);
  EXPECT_THAT(Names(x->users()), ElementsAre("obs"));
  EXPECT_EQ(observer->arg(0).as_node(), x);
  EXPECT_THAT(Names(observer->users()), ElementsAre("neg", "add"));
  EXPECT_EQ(add->arg(1).as_node(), observer);
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, ReplaceAllUsesWithALaterNodeFailsAndChangesNothing) {
  Chain c;
  // x's user neg comes before relu, so neg cannot read relu.
  auto replaced = c.g.ReplaceAllUsesWith(c.x, c.relu);
  ASSERT_FALSE(replaced.ok());
  EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(replaced.status().message()), HasSubstr("user 'neg'"));
  EXPECT_EQ(c.neg->arg(0).as_node(), c.x);
  EXPECT_THAT(Names(c.x->users()), ElementsAre("neg"));
  EXPECT_GRAPH_VALID(c.g);
  // Replacing a node by itself is a no-op.
  EXPECT_EQ(*c.g.ReplaceAllUsesWith(c.neg, c.neg), 0);
}

TEST(GraphTest, EraseWithUsersIsAnErrorNamingThem) {
  Chain c;
  absl::Status st = c.g.Erase(c.neg);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'neg'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("relu"));
  EXPECT_EQ(c.g.size(), 4u);
  EXPECT_EQ(c.g.FindNode("neg"), c.neg);
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, EraseRemovesTheNodeFromItsInputsUsers) {
  Chain c;
  ASSERT_TRUE(c.g.SetArg(c.out, 0, c.neg).ok());
  ASSERT_TRUE(c.g.Erase(c.relu).ok());
  EXPECT_EQ(c.g.FindNode("relu"), nullptr);
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("output"));
  EXPECT_THAT(Names(c.g.Nodes()), ElementsAre("x", "neg", "output"));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, EliminateDeadCodeErasesDeadChainsAndKeepsPlaceholders) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* unused_input = *g.AddPlaceholder("unused");
  Node* w = *g.AddGetAttr("conv.weight");
  Node* dead1 = *g.AddCallFunction("torch.relu", {x});
  Node* dead2 = *g.AddCallMethod("view", {dead1, Argument::Int(-1)}, {{Symbol::Intern("w"), w}});
  (void)dead2;
  Node* live = *g.AddCallFunction("operator.neg", {x});
  ASSERT_TRUE(g.SetOutput(live).ok());
  EXPECT_EQ(g.EliminateDeadCode(), 3);  // view, relu, then conv_weight.
  EXPECT_THAT(Names(g.Nodes()), ElementsAre("x", "unused", "neg", "output"));
  EXPECT_THAT(Names(x->users()), ElementsAre("neg"));
  EXPECT_THAT(unused_input->users(), IsEmpty());
  EXPECT_EQ(g.EliminateDeadCode(), 0);
  EXPECT_GRAPH_VALID(g);
}

// An opaque node (node.h kOpaqueMeta) may have effects the graph cannot see
// (torch._assert): kept without users, and so are its inputs.
TEST(GraphTest, EliminateDeadCodeKeepsOpaqueNodesAndTheirInputs) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* size = *g.AddCallMethod("size", {x, Argument::Int(1)});
  Node* eq = *g.AddCallFunction("operator.eq", {size, Argument::Int(1)});
  Node* check = *g.AddCallFunction("torch._assert", {eq, Argument::String("foobar")});
  ASSERT_TRUE(g.SetMeta(eq, kOpaqueMeta, Argument::Bool(true)).ok());
  ASSERT_TRUE(g.SetMeta(check, kOpaqueMeta, Argument::Bool(true)).ok());
  Node* dead = *g.AddCallFunction("torch.relu", {x});
  (void)dead;
  ASSERT_TRUE(g.SetOutput(x).ok());
  EXPECT_TRUE(check->opaque());
  EXPECT_FALSE(size->opaque());
  EXPECT_EQ(g.EliminateDeadCode(), 1);  // relu only
  EXPECT_THAT(Names(g.Nodes()), ElementsAre("x", "size", "eq", "_assert", "output"));
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, MoveBeforeKeepsOrderTopological) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* a = *g.AddCallFunction("torch.relu", {x});
  Node* b = *g.AddCallFunction("torch.sigmoid", {x});
  Node* c = *g.AddCallFunction("operator.add", {a, b});
  ASSERT_TRUE(g.SetOutput(c).ok());
  ASSERT_TRUE(g.MoveBefore(b, a).ok());
  EXPECT_THAT(Names(g.Nodes()), ElementsAre("x", "sigmoid", "relu", "add", "output"));
  EXPECT_TRUE(g.Precedes(b, a));
  // c cannot move before one of its inputs.
  EXPECT_EQ(g.MoveBefore(c, a).code(), absl::StatusCode::kFailedPrecondition);
  // x cannot move after its users.
  EXPECT_EQ(g.MoveBefore(x, c).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Names(g.Nodes()), ElementsAre("x", "sigmoid", "relu", "add", "output"));
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, ManyInsertionsAtOnePlaceStayOrdered) {
  // Repeated halving of the order-key gap forces renumbering; order must survive it.
  Chain c;
  Node* anchor = c.relu;
  for (int i = 0; i < 100; ++i) {
    anchor = *c.g.InsertBefore(anchor, {OpKind::kCallFunction, Symbol::Intern("torch.abs"),
                                        {c.neg}, {}, ""});
  }
  EXPECT_EQ(c.g.size(), 104u);
  EXPECT_EQ(c.neg->num_users(), 101u);
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, NamesAreUniqueTheWayFxMakesThem) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  EXPECT_EQ((*g.AddCallFunction("operator.add", {x, x}))->name(), "add");
  EXPECT_EQ((*g.AddCallFunction("operator.add", {x, x}))->name(), "add_1");
  EXPECT_EQ((*g.AddCallFunction("torch.add", {x, x}))->name(), "add_2");
  // An explicit name that is taken gets the next free suffix.
  EXPECT_EQ((*g.AddCallFunction("operator.add", {x, x}, {}, "add_1"))->name(), "add_3");
  EXPECT_EQ((*g.AddCallFunction("operator.mul", {x, x}, {}, "add_7"))->name(), "add_7");
  EXPECT_EQ((*g.AddCallFunction("operator.add", {x, x}, {}, "add_7"))->name(), "add_8");
  // Qualified function names use their last part; module paths their whole path.
  EXPECT_EQ((*g.AddCallFunction("torch.nn.functional.relu", {x}))->name(), "relu");
  EXPECT_EQ((*g.AddCallModule("layer1.0.conv1", {x}))->name(), "layer1_0_conv1");
  EXPECT_EQ((*g.AddCallMethod("relu", {x}))->name(), "relu_1");
  // Characters Python does not allow become '_'; a leading digit gets a '_' prefix.
  EXPECT_EQ((*g.AddCallFunction("torch.abs", {x}, {}, "my-node"))->name(), "my_node");
  EXPECT_EQ((*g.AddCallFunction("torch.abs", {x}, {}, "1x"))->name(), "_1x");
  EXPECT_EQ((*g.AddPlaceholder("x"))->name(), "x_1");
  // A fresh suffix is not taken (which number is an implementation choice: the graph
  // hands out suffixes in O(1) rather than filling holes as FX does).
  const std::string next_add = g.UniqueName("add");
  EXPECT_TRUE(absl::StartsWith(next_add, "add_")) << next_add;
  EXPECT_EQ(g.FindNode(next_add), nullptr);
  EXPECT_EQ(g.UniqueName("fresh"), "fresh");
  ASSERT_TRUE(g.SetOutput(x).ok());
  EXPECT_GRAPH_VALID(g);
}

// The exact names of the suffix rule (graph/NAMING.md), hand-computed: a taken candidate
// "base[_k]" gets base_n for the first free n >= max(counter(base), k + 1, 1), and the
// counter remembers the n handed out, so it is tried first next time.
TEST(GraphTest, SuffixCounterHandsOutAndReusesNamesExactly) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  const Symbol quantize = Symbol::Intern("torch.quantize_per_tensor");
  auto quantize_after = [&](Node* anchor) {
    return *g.InsertAfter(anchor, {OpKind::kCallFunction, quantize, {x}, {}, ""});
  };
  Node* q0 = quantize_after(x);
  Node* q1 = quantize_after(q0);
  Node* q2 = quantize_after(q1);
  EXPECT_EQ(q0->name(), "quantize_per_tensor");
  EXPECT_EQ(q1->name(), "quantize_per_tensor_1");
  EXPECT_EQ(q2->name(), "quantize_per_tensor_2");
  // A hole below the counter stays a hole: counter 2, _2 taken, so _3.
  ASSERT_TRUE(g.Erase(q1).ok());
  Node* q3 = quantize_after(q2);
  EXPECT_EQ(q3->name(), "quantize_per_tensor_3");
  // The number last handed out is tried first, so once it is free it comes back.
  ASSERT_TRUE(g.Erase(q3).ok());
  EXPECT_EQ(quantize_after(q2)->name(), "quantize_per_tensor_3");
  EXPECT_EQ(g.FindNode("quantize_per_tensor_1"), nullptr);
  ASSERT_TRUE(g.SetOutput(x).ok());
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, SuffixesOfExplicitNamesFollowTheRule) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  auto named = [&](absl::string_view name) {
    return (*g.AddCallFunction("torch.abs", {x}, {}, name))->name();
  };
  EXPECT_EQ(named("add_0"), "add_0");
  EXPECT_EQ(named("add_0"), "add_1");  // suffix 0 taken: base add, n >= 0 + 1
  EXPECT_EQ(named("add"), "add");
  EXPECT_EQ(named("add"), "add_2");    // counter(add) = 1 and add_1 is taken
  EXPECT_EQ(named("x_01"), "x_01");
  EXPECT_EQ(named("x_01"), "x_2");     // suffix "01" is 1: n >= 2
  // 15 digits are a suffix, 16 are not.
  EXPECT_EQ(named("b_123456789012345"), "b_123456789012345");
  EXPECT_EQ(named("b_123456789012345"), "b_123456789012346");
  EXPECT_EQ(named("a_1234567890123456"), "a_1234567890123456");
  EXPECT_EQ(named("a_1234567890123456"), "a_1234567890123456_1");
  // An underscore first or last is not a suffix separator.
  EXPECT_EQ(named("_7"), "_7");
  EXPECT_EQ(named("_7"), "_7_1");
  EXPECT_EQ(named("add_"), "add_");
  EXPECT_EQ(named("add_"), "add__1");
  // Longer than std::string's inline buffer, sanitized, twice.
  EXPECT_EQ((*g.AddCallModule("features.denseblock1.denselayer10.conv1", {x}))->name(),
            "features_denseblock1_denselayer10_conv1");
  EXPECT_EQ((*g.AddCallModule("features.denseblock1.denselayer10.conv1", {x}))->name(),
            "features_denseblock1_denselayer10_conv1_1");
  // UniqueName sanitizes and suffixes the same way but takes nothing.
  EXPECT_EQ(g.UniqueName(""), "_");
  EXPECT_EQ(g.UniqueName("3.x"), "_3_x");
  EXPECT_EQ(g.UniqueName("add"), "add_3");
  EXPECT_EQ(g.UniqueName("add"), "add_3");
  EXPECT_EQ(named("add"), "add_3");
  ASSERT_TRUE(g.SetOutput(x).ok());
  EXPECT_GRAPH_VALID(g);
}

// The naming rule of graph/NAMING.md written the plain way (a set of taken names, a map of
// counters, a regex for the suffix), as the reference for random sequences of inserts,
// erases, renames and UniqueName calls: the graph must give every name it gives, whatever
// shortcuts it takes (probes it skips, counters it does not store).
class ReferenceNamer {
 public:
  std::set<std::string> taken;

  std::string Unique(const std::string& hint, const std::string* also_taken = nullptr) {
    std::string candidate = Sanitize(hint);
    auto is_taken = [&](const std::string& n) {
      return taken.count(n) > 0 || (also_taken != nullptr && n == *also_taken);
    };
    if (!is_taken(candidate)) return candidate;
    std::string base = candidate;
    int64_t number = -1;
    std::smatch m;
    static const std::regex kSuffix("^(.+)_([0-9]{1,15})$");
    if (std::regex_match(candidate, m, kSuffix)) {
      base = m[1];
      number = std::stoll(m[2]);
    }
    int64_t next = std::max<int64_t>({counters_[base], number + 1, 1});
    while (is_taken(base + "_" + std::to_string(next))) ++next;
    counters_[base] = next;
    return base + "_" + std::to_string(next);
  }

 private:
  static std::string Sanitize(const std::string& hint) {
    std::string out;
    for (char c : hint) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    if (out.empty()) out = "_";
    if (std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
    return out;
  }
  std::map<std::string, int64_t> counters_;
};

TEST(GraphTest, NamesMatchTheRuleOverRandomInsertsErasesAndRenames) {
  const std::vector<std::string> targets = {"torch.quantize_per_tensor", "dequantize",
                                            "operator.add", "torch.nn.functional.relu"};
  const std::vector<std::string> hints = {
      "",      "add",    "add_1", "add_3",  "relu", "quantize_per_tensor",
      "quantize_per_tensor_2", "dequantize_1", "q_7", "1x", "my-node", "a_000000000000005",
      "x",     "output", "_",     "add__1", "relu_0"};
  std::mt19937 random(7);
  auto pick = [&random](size_t n) { return static_cast<size_t>(random() % n); };
  Graph g;
  ReferenceNamer reference;
  Node* x = *g.AddPlaceholder("x");
  ASSERT_TRUE(g.SetOutput(x).ok());
  reference.taken = {"x", "output"};
  std::vector<Node*> nodes;  // erasable: nothing uses them
  for (int step = 0; step < 4000; ++step) {
    const size_t op = pick(10);
    if (op < 5 || nodes.empty()) {  // insert, default or explicit name
      const std::string& target = targets[pick(targets.size())];
      const std::string hint = pick(2) == 0 ? "" : hints[pick(hints.size())];
      const std::string default_hint = target.substr(target.rfind('.') + 1);
      const std::string expected = reference.Unique(hint.empty() ? default_hint : hint);
      Node* n = *g.AddCallFunction(target, {x}, {}, hint);
      ASSERT_EQ(n->name(), expected) << "step " << step;
      reference.taken.insert(expected);
      nodes.push_back(n);
    } else if (op < 8) {  // erase
      const size_t i = pick(nodes.size());
      reference.taken.erase(nodes[i]->name());
      ASSERT_TRUE(g.Erase(nodes[i]).ok());
      nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 8) {  // rename
      Node* n = nodes[pick(nodes.size())];
      const std::string hint = hints[pick(hints.size())];
      const std::string old_name = n->name();
      std::string expected = old_name;
      if (hint != old_name) {
        reference.taken.erase(old_name);
        expected = reference.Unique(hint, &old_name);
        reference.taken.insert(expected);
      }
      ASSERT_EQ(g.Rename(n, hint), expected) << "step " << step;
    } else {  // a name computed, not taken
      const std::string hint = hints[pick(hints.size())];
      ASSERT_EQ(g.UniqueName(hint), reference.Unique(hint)) << "step " << step;
    }
  }
  EXPECT_EQ(g.size(), reference.taken.size());
  EXPECT_GRAPH_VALID(g);
}

// Sanitizing works on eight characters at a time for hints of eight or more: every byte
// value, at every position of words and of the overlapping last word, must come out as the
// plain per-character rule says (std::isalnum in the C locale: ASCII letters and digits).
TEST(GraphTest, SanitizeMatchesThePerCharacterRuleForEveryByteAtEveryPosition) {
  Graph g;
  ReferenceNamer reference;
  for (size_t size : {1, 7, 8, 9, 15, 16, 17, 26}) {
    for (size_t position = 0; position < size; ++position) {
      for (int byte = 0; byte < 256; ++byte) {
        std::string hint(size, 'a');
        hint[position] = static_cast<char>(byte);
        ASSERT_EQ(g.UniqueName(hint), reference.Unique(hint))
            << "size " << size << " position " << position << " byte " << byte;
      }
    }
  }
  // Mixed text past a word, non-ASCII (UTF-8) and control characters included.
  for (const std::string& hint :
       {std::string("features.denseblock1.denselayer10.conv1"), std::string("caf\xc3\xa9.layer-1"),
        std::string("a\x10\x19\x1f\x7f\x80\xb0\xb9\xffZz09@[`{/:"),
        std::string("0123456789abcdefghij")}) {
    EXPECT_EQ(g.UniqueName(hint), reference.Unique(hint)) << hint;
  }
}

// A numeric suffix is at most 15 digits after an underscore that is neither first nor last.
TEST(GraphTest, SuffixSplitEdgeCases) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  auto named = [&](absl::string_view name) {
    return (*g.AddCallFunction("torch.relu", {x}, {}, name))->name();
  };
  for (const char* name : {"a_123456789012345", "a_1234567890123456", "_12", "a__7", "12",
                           "a_1b2", "a_b_9", "x_0", "a_000000000000005"}) {
    named(name);
  }
  EXPECT_EQ(named("a_123456789012345"), "a_123456789012346");  // 15 digits: a suffix
  EXPECT_EQ(named("a_1234567890123456"), "a_1234567890123456_1");  // 16: part of the base
  // "12" sanitized is "_12": taken, and its underscore is first, so "_12" is all base
  // ("_12_1" went to the first "12" above).
  EXPECT_EQ(named("_12"), "_12_2");
  EXPECT_EQ(named("a__7"), "a__8");      // base "a_"
  EXPECT_EQ(named("12"), "_12_3");
  EXPECT_EQ(named("a_1b2"), "a_1b2_1");  // not all digits after the last underscore
  EXPECT_EQ(named("a_b_9"), "a_b_10");
  EXPECT_EQ(named("x_0"), "x_1");
  // Base "a", number 5, but the counter of "a" is past it (a_123456789012346 above).
  EXPECT_EQ(named("a_000000000000005"), "a_123456789012347");
  ASSERT_TRUE(g.SetOutput(x).ok());
  EXPECT_GRAPH_VALID(g);
}

// Renames between long names (past std::string's inline buffer), where the new text is
// written over the old name's storage when it fits: the node has exactly the new name,
// is found by it and not by the old one, and the old name is free again.
TEST(GraphTest, RenameBetweenLongNamesKeepsTheIndexExact) {
  Chain c;
  const Symbol observer = Symbol::Intern("activation_post_process_123");
  Node* obs = *c.g.InsertAfter(
      c.x, {OpKind::kCallModule, observer, {c.x}, {}, "activation_post_process_123"});
  EXPECT_EQ(obs->name(), "activation_post_process_123");
  const Symbol quantize = Symbol::Intern("torch.quantize_per_tensor");
  Node* q = *c.g.InsertAfter(obs, {OpKind::kCallFunction, quantize, {obs}, {}, ""});
  EXPECT_EQ(q->name(), "quantize_per_tensor");
  EXPECT_EQ(c.g.Rename(obs, "quantize_per_tensor"), "quantize_per_tensor_1");  // shorter
  EXPECT_EQ(c.g.FindNode("quantize_per_tensor_1"), obs);
  EXPECT_EQ(c.g.FindNode("activation_post_process_123"), nullptr);
  EXPECT_EQ(c.g.Rename(obs, "a_much_longer_name_than_the_one_before"),  // longer: a new block
            "a_much_longer_name_than_the_one_before");
  EXPECT_EQ(c.g.FindNode("a_much_longer_name_than_the_one_before"), obs);
  EXPECT_EQ(c.g.FindNode("quantize_per_tensor_1"), nullptr);
  EXPECT_EQ(c.g.Rename(obs, "short"), "short");  // inline
  EXPECT_EQ(c.g.Rename(q, "activation_post_process_123"), "activation_post_process_123");
  EXPECT_EQ(c.g.FindNode("activation_post_process_123"), q);
  EXPECT_EQ(c.g.FindNode("quantize_per_tensor"), nullptr);
  EXPECT_EQ(c.g.UniqueName("quantize_per_tensor"), "quantize_per_tensor");
  EXPECT_GRAPH_VALID(c.g);
}

// A hint that comes again and again ("dequantize") is known taken without a probe only
// while no name of its hash was freed: freed directly, among many other frees, or by
// renaming its node (also to the hint's sanitized self), it is handed out again.
TEST(GraphTest, ARepeatedHintIsGivenAgainOnceItsNameIsFreed) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  ASSERT_TRUE(g.SetOutput(x).ok());
  auto dq = [&](absl::string_view name = "") {
    return *g.InsertAfter(x, {OpKind::kCallMethod, Symbol::Intern("dequantize"), {x}, {}, name});
  };
  Node* first = dq();
  EXPECT_EQ(first->name(), "dequantize");
  EXPECT_EQ(dq()->name(), "dequantize_1");
  EXPECT_EQ(dq()->name(), "dequantize_2");
  EXPECT_EQ(dq()->name(), "dequantize_3");
  ASSERT_TRUE(g.Erase(first).ok());
  first = dq();
  EXPECT_EQ(first->name(), "dequantize");  // freed just now
  EXPECT_EQ(dq()->name(), "dequantize_4");
  // Freed among more frees than the proof remembers.
  std::vector<Node*> others;
  for (int i = 0; i < 20; ++i) others.push_back(dq(absl::StrCat("other_", i)));
  ASSERT_TRUE(g.Erase(first).ok());
  for (Node* n : others) ASSERT_TRUE(g.Erase(n).ok());
  first = dq();
  EXPECT_EQ(first->name(), "dequantize");
  EXPECT_EQ(dq()->name(), "dequantize_5");
  // Renamed away: the name is free.
  EXPECT_EQ(g.Rename(first, "renamed"), "renamed");
  EXPECT_EQ(dq()->name(), "dequantize");
  EXPECT_EQ(dq()->name(), "dequantize_6");
  EXPECT_EQ(g.UniqueName("dequantize"), "dequantize_7");
  EXPECT_EQ(dq()->name(), "dequantize_7");
  // Renamed to a hint that sanitizes to its own name: that counts as taken for the rename,
  // and then the old name is free.
  Node* own = dq("my_node");
  EXPECT_EQ(dq("my_node")->name(), "my_node_1");
  EXPECT_EQ(dq("my_node")->name(), "my_node_2");
  EXPECT_EQ(g.Rename(own, "my-node"), "my_node_3");
  EXPECT_EQ(dq("my_node")->name(), "my_node");
  EXPECT_EQ(dq("my_node")->name(), "my_node_4");
  EXPECT_GRAPH_VALID(g);
}

// Node::index(): distinct among live nodes, below node_index_bound(), fixed while the node
// lives, reused after an erase (so the bound stays the peak node count), checked against
// an independent record of which node holds which index over random inserts and erases.
TEST(GraphTest, NodeIndicesAreDenseUniqueAndReusedAfterErase) {
  Graph g;
  EXPECT_EQ(g.node_index_bound(), 0u);
  Node* x = *g.AddPlaceholder("x");
  ASSERT_TRUE(g.SetOutput(x).ok());
  std::vector<Node*> live = {x, g.output()};
  std::map<Node*, uint32_t> first_seen;  // every live node's index when it was created
  for (Node* n : live) first_seen[n] = n->index();
  size_t peak = live.size();
  std::mt19937 random(11);
  for (int step = 0; step < 3000; ++step) {
    if (random() % 3 != 0 || live.size() == 2) {
      Node* n =
          *g.InsertAfter(x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"), {x}, {}, ""});
      first_seen[n] = n->index();
      live.push_back(n);
    } else {
      const size_t i = 2 + random() % (live.size() - 2);
      first_seen.erase(live[i]);
      ASSERT_TRUE(g.Erase(live[i]).ok());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    peak = std::max(peak, live.size());
    // The bound is the peak number of live nodes: erased indices are used again first.
    ASSERT_EQ(g.node_index_bound(), peak) << "step " << step;
    std::set<uint32_t> seen;
    for (Node* n : live) {
      ASSERT_LT(n->index(), g.node_index_bound()) << n->name();
      ASSERT_TRUE(seen.insert(n->index()).second) << "index " << n->index() << " twice";
      ASSERT_EQ(n->index(), first_seen[n]) << n->name() << " changed its index";
    }
  }
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, AnErasedNodesIndexGoesToTheNextNewNode) {
  Chain c;
  EXPECT_EQ(c.g.node_index_bound(), 4u);
  std::set<uint32_t> indices = {c.x->index(), c.neg->index(), c.relu->index(), c.out->index()};
  EXPECT_EQ(indices, (std::set<uint32_t>{0, 1, 2, 3}));
  Node* dead = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"),
                                      {c.x}, {}, ""});
  EXPECT_EQ(dead->index(), 4u);
  EXPECT_EQ(c.g.node_index_bound(), 5u);
  ASSERT_TRUE(c.g.Erase(dead).ok());
  EXPECT_EQ(c.g.node_index_bound(), 5u);  // never decreases
  Node* fresh = *c.g.InsertAfter(c.neg, {OpKind::kCallMethod, Symbol::Intern("relu"),
                                         {c.neg}, {}, ""});
  EXPECT_EQ(fresh->index(), 4u);
  EXPECT_EQ(c.g.node_index_bound(), 5u);
  // EraseAndPassName frees the erased node's index too; the heir keeps its own.
  const uint32_t heir_index = fresh->index();
  const uint32_t neg_index = c.neg->index();
  ASSERT_TRUE(c.g.ReplaceAllUsesWith(c.neg, fresh).ok());
  ASSERT_TRUE(c.g.SetArgs(fresh, {c.x}).ok());
  ASSERT_TRUE(c.g.MoveBefore(fresh, c.relu).ok());
  ASSERT_TRUE(c.g.EraseAndPassName(c.neg, fresh).ok());
  EXPECT_EQ(fresh->name(), "neg");
  EXPECT_EQ(fresh->index(), heir_index);
  Node* next = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"),
                                      {c.x}, {}, ""});
  EXPECT_EQ(next->index(), neg_index);
  EXPECT_GRAPH_VALID(c.g);
}

// The counter's last name is skipped without a probe only while it is certainly taken:
// freed by an erase or a rename, directly or among many other names, it comes back.
TEST(GraphTest, TheLastSuffixComesBackWhenFreedAmongOtherErases) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  ASSERT_TRUE(g.SetOutput(x).ok());
  auto add = [&](absl::string_view name) { return *g.AddCallFunction("operator.add", {x, x}, {}, name); };
  add("add");
  add("add");
  Node* add_2 = add("add");
  ASSERT_EQ(add_2->name(), "add_2");
  // Twelve other names freed after add_2 (more than any window of recent frees).
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(g.Erase(add(absl::StrCat("other", i))).ok());
  EXPECT_EQ(add("add")->name(), "add_3");
  ASSERT_TRUE(g.Erase(g.FindNode("add_3")).ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(g.Erase(add(absl::StrCat("other", i))).ok());
  EXPECT_EQ(add("add")->name(), "add_3");
  // Renamed away, with a few other frees after it.
  EXPECT_EQ(g.Rename(g.FindNode("add_3"), "moved"), "moved");
  ASSERT_TRUE(g.Erase(add("tmp")).ok());
  EXPECT_EQ(add("add")->name(), "add_3");
  // Still taken: the next one.
  ASSERT_TRUE(g.Erase(add("tmp")).ok());
  EXPECT_EQ(add("add")->name(), "add_4");
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, RenameCountsTheNodesOwnNameAsTaken) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* add = *g.AddCallFunction("operator.add", {x, x});
  Node* add_1 = *g.AddCallFunction("operator.add", {add, x});
  ASSERT_TRUE(g.SetOutput(add_1).ok());
  // "add" is taken and so, while it is computed, is add_1 itself: add_2.
  EXPECT_EQ(g.Rename(add_1, "add"), "add_2");
  EXPECT_EQ(g.FindNode("add_2"), add_1);
  EXPECT_EQ(g.FindNode("add_1"), nullptr);
  // Sanitized as a new name is.
  EXPECT_EQ(g.Rename(add_1, "fused.conv-relu"), "fused_conv_relu");
  // The freed names can be taken again.
  EXPECT_EQ(g.Rename(add_1, "add_1"), "add_1");
  Node* again = *g.AddCallFunction("operator.add", {x, x}, {}, "fused_conv_relu");
  EXPECT_EQ(again->name(), "fused_conv_relu");
  EXPECT_EQ(g.FindNode("fused_conv_relu"), again);
  EXPECT_GRAPH_VALID(g);
}

// As FX's Node.__update_args_kwargs: a node whose args change is re-registered with every
// input, so it moves to the end of their user lists, changed or not.
TEST(GraphTest, SetArgReRegistersTheNodeWithItsInputsAsFxDoes) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddPlaceholder("y");
  Node* z = *g.AddPlaceholder("z");
  Node* a = *g.AddCallFunction("operator.add", {x, y});
  Node* b = *g.AddCallFunction("torch.relu", {x});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({a, b})).ok());
  EXPECT_THAT(Names(x->users()), ElementsAre("add", "relu"));
  ASSERT_TRUE(g.SetArg(a, 1, z).ok());
  EXPECT_THAT(Names(x->users()), ElementsAre("relu", "add"));
  EXPECT_THAT(y->users(), IsEmpty());
  EXPECT_THAT(Names(z->users()), ElementsAre("add"));
  EXPECT_EQ(a->arg(1).as_node(), z);
  // A list value: each node in it gains the use once.
  ASSERT_TRUE(g.SetArg(b, 0, Argument::List({y, z, y})).ok());
  EXPECT_THAT(x->users(), ElementsAre(a));
  EXPECT_THAT(Names(y->users()), ElementsAre("relu"));
  EXPECT_THAT(Names(z->users()), ElementsAre("add", "relu"));
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, ReplaceAllUsesRewritesNestedUsesAndKeepsOtherArgs) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddPlaceholder("y");
  Node* a = *g.AddCallFunction("torch.relu", {x});
  const Argument untouched = Argument::List({x, Argument::Int(2)});
  Node* cat = *g.AddCallFunction(
      "torch.cat", {Argument::List({a, x, a}), untouched, Argument::Float(0.5)},
      {{Symbol::Intern("out"), Argument::Tuple({Argument::None(), a})}});
  ASSERT_TRUE(g.SetOutput(cat).ok());
  EXPECT_THAT(Names(x->users()), ElementsAre("relu", "cat"));
  ASSERT_EQ(*g.ReplaceAllUsesWith(a, y), 1);
  EXPECT_EQ(cat->arg(0), Argument::List({y, x, y}));
  EXPECT_EQ(cat->arg(1), untouched);
  EXPECT_EQ(cat->arg(2), Argument::Float(0.5));
  EXPECT_EQ(*cat->FindKwarg("out"), Argument::Tuple({Argument::None(), y}));
  EXPECT_TRUE(cat->arg(0).is_tuple() == false && cat->FindKwarg("out")->is_tuple());
  EXPECT_THAT(a->users(), IsEmpty());
  EXPECT_THAT(Names(y->users()), ElementsAre("cat"));
  // cat was re-registered with x too (FX's order).
  EXPECT_THAT(Names(x->users()), ElementsAre("relu", "cat"));
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, SetMetaReplacesInPlaceAndKeepsOrder) {
  Chain c;
  ASSERT_TRUE(c.g.SetMeta(c.relu, "pattern", Argument::String("relu")).ok());
  ASSERT_TRUE(c.g.SetMeta(c.relu, "output_qparams", Argument::Tuple({Argument::Float(0.5),
                                                                     Argument::Int(3)})).ok());
  ASSERT_TRUE(c.g.SetMeta(c.relu, "pattern", Argument::String("fused")).ok());
  ASSERT_EQ(c.relu->meta().size(), 2u);
  EXPECT_EQ(c.relu->meta()[0].first.name(), "pattern");
  EXPECT_EQ(c.relu->meta()[0].second.as_string(), "fused");
  EXPECT_EQ(c.relu->meta()[1].first.name(), "output_qparams");
  EXPECT_EQ(c.relu->FindMeta("output_qparams")->items()[1].as_int(), 3);
  EXPECT_TRUE(c.neg->meta().empty());
  // The Symbol overload is the same operation.
  ASSERT_TRUE(c.g.SetMeta(c.relu, Symbol::Intern("pattern"), Argument::String("again")).ok());
  ASSERT_EQ(c.relu->meta().size(), 2u);
  EXPECT_EQ(c.relu->FindMeta("pattern")->as_string(), "again");
  // An empty key is refused, as an empty kwarg name is, and changes nothing.
  EXPECT_EQ(c.g.SetMeta(c.neg, "", Argument::Int(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.SetMeta(c.neg, Symbol(), Argument::Int(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.neg->meta().empty());
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, RenameToATakenNameGetsASuffix) {
  Chain c;
  EXPECT_EQ(c.g.Rename(c.neg, "relu"), "relu_1");
  EXPECT_EQ(c.g.FindNode("relu_1"), c.neg);
  EXPECT_EQ(c.g.FindNode("neg"), nullptr);
  EXPECT_EQ(c.g.Rename(c.neg, "relu_1"), "relu_1");
  EXPECT_EQ(c.g.Rename(c.neg, "negated"), "negated");
  EXPECT_EQ(c.g.FindNode("relu_1"), nullptr);
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, MetaCannotReferenceNodes) {
  Chain c;
  EXPECT_TRUE(c.g.SetMeta(c.relu, "pattern", Argument::String("relu")).ok());
  EXPECT_EQ(c.relu->FindMeta("pattern")->as_string(), "relu");
  EXPECT_EQ(c.g.SetMeta(c.relu, "input", c.x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.relu->FindMeta("input"), nullptr);
  EXPECT_THAT(c.x->users(), ElementsAre(c.neg));
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, SetTargetAndSetOpKeepUses) {
  Chain c;
  ASSERT_TRUE(c.g.SetOp(c.relu, OpKind::kCallMethod, Symbol::Intern("relu")).ok());
  EXPECT_EQ(c.relu->op(), OpKind::kCallMethod);
  EXPECT_THAT(Names(c.neg->users()), ElementsAre("relu"));
  EXPECT_EQ(c.g.SetOp(c.relu, OpKind::kOutput, Symbol::Intern("output")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.SetTarget(c.relu, Symbol()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.relu->target().name(), "relu");
  EXPECT_GRAPH_VALID(c.g);
}

// NodeSpec's name is a view of a literal or a string_view, or owns a std::string: an
// owned temporary (StrCat) outlives the statement that made it, and survives copies and
// moves of the spec; a vector of args is accepted as before.
TEST(GraphTest, NodeSpecNamesAndArgsKeepTheirValuesWhateverTheirSource) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  NodeSpec owned;
  owned.target = Symbol::Intern("torch.relu");
  owned.args = {x};
  owned.name = absl::StrCat("activation_post_process_", 12345);  // a temporary, owned
  NodeSpec copy = owned;                                          // copied, still owned
  NodeSpec moved = std::move(owned);
  EXPECT_EQ(copy.name.view(), "activation_post_process_12345");
  EXPECT_EQ((*g.Append(std::move(moved)))->name(), "activation_post_process_12345");
  EXPECT_EQ((*g.Append(copy))->name(), "activation_post_process_12346");

  const std::string long_text = "a_name_longer_than_the_inline_buffer";
  NodeSpec viewed{OpKind::kCallFunction, Symbol::Intern("torch.relu"), {x}, {},
                  absl::string_view(long_text)};
  EXPECT_EQ((*g.Append(std::move(viewed)))->name(), long_text);

  NodeSpec literal;
  literal.op = OpKind::kCallMethod;
  literal.target = Symbol::Intern("dequantize");
  literal.args.push_back(x);
  literal.name = "dq";
  EXPECT_TRUE(literal.name.view() == "dq" && !literal.name.empty());
  EXPECT_EQ((*g.Append(std::move(literal)))->name(), "dq");

  // More args than the inline two, given as a std::vector.
  const std::vector<Argument> three = {x, Argument::Int(1), x};
  NodeSpec cat;
  cat.target = Symbol::Intern("torch.cat");
  cat.args = three;
  Node* c = *g.Append(std::move(cat));
  EXPECT_EQ(c->name(), "cat");
  ASSERT_EQ(c->num_args(), 3u);
  EXPECT_EQ(c->arg(0).as_node(), x);
  EXPECT_EQ(c->arg(1).as_int(), 1);
  EXPECT_EQ(c->arg(2).as_node(), x);
  EXPECT_THAT(Names(x->users()),
              ElementsAre("activation_post_process_12345", "activation_post_process_12346",
                          long_text, "dq", "cat"));
  // An empty name derives from the target.
  NodeSpec unnamed{
      OpKind::kCallFunction, Symbol::Intern("torch.nn.functional.relu"), {x}, {}, ""};
  EXPECT_TRUE(unnamed.name.empty());
  EXPECT_EQ((*g.Append(std::move(unnamed)))->name(), "relu");
  ASSERT_TRUE(g.SetOutput(c).ok());
  EXPECT_GRAPH_VALID(g);
}

// x -> conv -> bn -> relu -> output, fused as fusion does: the fused node goes before the
// last matched node, takes its users, and takes the root's name when the root is erased.
struct ConvBnRelu {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  Node* conv = *g.AddCallModule("layer1.0.conv1", {x});
  Node* bn = *g.AddCallModule("layer1.0.bn1", {conv});
  Node* relu = *g.AddCallModule("layer1.0.relu", {bn});
  Node* out = *g.SetOutput(relu);

  // Fusion's last steps once `fused` (before relu, reading x) exists, and what they must
  // leave: the fused node alone in the pattern's place, under the root's name.
  void FuseInto(Node* fused) {
    ASSERT_EQ(*g.ReplaceAllUsesWith(relu, fused), 1);
    ASSERT_TRUE(g.Erase(relu).ok());
    ASSERT_TRUE(g.Erase(bn).ok());
    ASSERT_TRUE(g.EraseAndPassName(conv, fused).ok());
    EXPECT_EQ(fused->name(), "layer1_0_conv1");
    EXPECT_EQ(g.FindNode("layer1_0_conv1"), fused);
    EXPECT_THAT(Names(g.Nodes()), ElementsAre("x", "layer1_0_conv1", "output"));
    EXPECT_EQ(out->arg(0).as_node(), fused);
    EXPECT_GRAPH_VALID(g);
    // The passed name is taken.
    EXPECT_EQ(g.UniqueName("layer1.0.conv1"), "layer1_0_conv1_1");
  }
};

TEST(GraphTest, EraseAndPassNameHandsTheRootsNameToTheFusedNode) {
  ConvBnRelu p;
  Node* fused = *p.g.InsertBefore(
      p.relu, {OpKind::kCallModule, Symbol::Intern("layer1.0.conv1"), {p.x}, {}, "_fusing"});
  p.FuseInto(fused);
  EXPECT_EQ(p.g.FindNode("_fusing"), nullptr);
  EXPECT_THAT(fused->users(), ElementsAre(p.out));
  EXPECT_THAT(p.x->users(), ElementsAre(fused));
  EXPECT_EQ(p.g.size(), 3u);
  // The heir's old name is free again.
  EXPECT_EQ(p.g.UniqueName("_fusing"), "_fusing");
}

// The same fusion with the fused node inserted unnamed: it has no name, is in no index and
// fails Verify until EraseAndPassName names it; the names end as with a temporary name.
TEST(GraphTest, AnUnnamedInsertIsNamedByEraseAndPassName) {
  ConvBnRelu p;
  Node* fused = *p.g.InsertBeforeUnnamed(
      p.relu, {OpKind::kCallModule, Symbol::Intern("layer1.0.conv1"), {p.x}, {}, ""});
  EXPECT_EQ(fused->name(), "");
  EXPECT_EQ(p.g.FindNode(""), nullptr);
  EXPECT_EQ(fused->prev(), p.bn);
  EXPECT_THAT(p.x->users(), ElementsAre(p.conv, fused));
  const absl::Status unnamed = p.g.Verify();
  EXPECT_EQ(unnamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unnamed.message(), HasSubstr("empty name"));
  EXPECT_THAT(unnamed.message(), HasSubstr("layer1.0.conv1"));
  p.FuseInto(fused);
}

// What else an unnamed node allows: Rename names it (even to an empty hint, "_"), Erase
// erases it; a name given in the spec, an output node and passing its missing name on are
// refused, changing nothing.
TEST(GraphTest, UnnamedInsertOtherUsesAndRefusals) {
  Chain c;
  const Symbol neg = Symbol::Intern("operator.neg");
  Node* a = *c.g.InsertBeforeUnnamed(c.relu, {OpKind::kCallFunction, neg, {c.x}, {}, ""});
  EXPECT_EQ(c.g.Rename(a, ""), "_");
  EXPECT_EQ(c.g.FindNode("_"), a);
  Node* b = *c.g.InsertBeforeUnnamed(c.relu, {OpKind::kCallFunction, neg, {c.x}, {}, ""});
  EXPECT_EQ(c.g.Rename(b, "neg"), "neg_1");  // the rule as for any rename
  Node* d = *c.g.InsertBeforeUnnamed(c.relu, {OpKind::kCallFunction, neg, {c.x}, {}, ""});
  ASSERT_TRUE(c.g.Erase(d).ok());
  EXPECT_GRAPH_VALID(c.g);

  const std::vector<std::string> before = Names(c.g.Nodes());
  const absl::Status named =
      c.g.InsertBeforeUnnamed(c.relu, {OpKind::kCallFunction, neg, {c.x}, {}, "given"}).status();
  EXPECT_EQ(named.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(named.message(), HasSubstr("given"));
  EXPECT_FALSE(
      c.g.InsertBeforeUnnamed(c.relu, {OpKind::kOutput, Symbol::Intern("output"), {c.x}, {}, ""})
          .ok());
  EXPECT_FALSE(c.g.InsertBeforeUnnamed(nullptr, {OpKind::kCallFunction, neg, {c.x}, {}, ""}).ok());
  // Inputs must still precede the anchor.
  EXPECT_FALSE(c.g.InsertBeforeUnnamed(c.neg, {OpKind::kCallFunction, neg, {c.relu}, {}, ""}).ok());
  EXPECT_EQ(Names(c.g.Nodes()), before);
  EXPECT_GRAPH_VALID(c.g);

  Node* e = *c.g.InsertBeforeUnnamed(c.relu, {OpKind::kCallFunction, neg, {c.x}, {}, ""});
  const absl::Status pass = c.g.EraseAndPassName(e, a);
  EXPECT_EQ(pass.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pass.message(), HasSubstr("no name yet"));
  EXPECT_EQ(a->name(), "_");
  ASSERT_TRUE(c.g.Erase(e).ok());
  EXPECT_GRAPH_VALID(c.g);
}

// The loader's AddNode probes the name index once: a taken name is refused (nothing
// added), a free one is indexed where that probe found room, through the index's growth.
TEST(GraphTest, GraphBuilderAddsNamesOnceAndRefusesDuplicates) {
  Graph g;
  GraphBuilder builder(&g);
  const Symbol relu = Symbol::Intern("torch.relu");
  Node* x = *builder.AddNode(OpKind::kPlaceholder, Symbol::Intern("x"), "x");
  std::vector<Node*> nodes;
  for (int i = 0; i < 1000; ++i) {  // grows the index several times
    Node* n = *builder.AddNode(OpKind::kCallFunction, relu, absl::StrCat("r_", i));
    builder.SetInputs(n, {x}, {});
    nodes.push_back(n);
  }
  const absl::Status duplicate =
      builder.AddNode(OpKind::kCallFunction, relu, "r_500").status();
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate.message(), HasSubstr("duplicate node name 'r_500'"));
  EXPECT_FALSE(builder.AddNode(OpKind::kCallFunction, relu, "").ok());
  Node* out = *builder.AddNode(OpKind::kOutput, Symbol::Intern("output"), "output");
  builder.SetInputs(out, {nodes.back()}, {});
  EXPECT_EQ(g.size(), 1002u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(g.FindNode(absl::StrCat("r_", i)), nodes[i]);
  EXPECT_EQ(g.FindNode("r_1000"), nullptr);
  EXPECT_GRAPH_VALID(g);
  // Naming after loading follows the rule over the loaded names.
  EXPECT_EQ(g.UniqueName("r_5"), "r_1000");
}

TEST(GraphTest, EraseAndPassNameFailuresChangeNothing) {
  Chain c;
  Graph other;
  Node* stranger = *other.AddPlaceholder("stranger");
  const std::vector<std::string> before = Names(c.g.Nodes());
  // neg still has a user (relu): refused, naming it.
  const absl::Status used = c.g.EraseAndPassName(c.neg, c.x);
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(used.message()), HasSubstr("'neg'"));
  EXPECT_THAT(std::string(used.message()), HasSubstr("relu"));
  EXPECT_EQ(c.g.EraseAndPassName(c.out, c.out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.EraseAndPassName(c.out, stranger).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.EraseAndPassName(stranger, c.x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.EraseAndPassName(nullptr, c.x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.g.EraseAndPassName(c.out, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Names(c.g.Nodes()), before);
  EXPECT_EQ(stranger->name(), "stranger");
  EXPECT_EQ(c.g.FindNode("neg"), c.neg);
  EXPECT_GRAPH_VALID(c.g);
}

// EraseAndPassName against its definition, Erase then Rename to the freed name, on two
// graphs driven by the same random steps: every name handed out afterwards must agree
// (names, suffix counters and the freed-name window included).
TEST(GraphTest, EraseAndPassNameNamesAsEraseThenRename) {
  const std::vector<std::string> hints = {"", "add", "add_1", "relu", "relu_2", "q", "_fusing"};
  std::mt19937 random(11);
  auto pick = [&random](size_t n) { return static_cast<size_t>(random() % n); };
  Graph fast, slow;
  Node* fast_x = *fast.AddPlaceholder("x");
  Node* slow_x = *slow.AddPlaceholder("x");
  ASSERT_TRUE(fast.SetOutput(fast_x).ok());
  ASSERT_TRUE(slow.SetOutput(slow_x).ok());
  std::vector<Node*> fast_nodes, slow_nodes;  // in step: same index, same role
  for (int step = 0; step < 3000; ++step) {
    const size_t op = pick(8);
    if (op < 4 || fast_nodes.size() < 2) {
      const std::string& hint = hints[pick(hints.size())];
      const char* target = pick(2) == 0 ? "operator.add" : "torch.relu";
      fast_nodes.push_back(*fast.AddCallFunction(target, {fast_x}, {}, hint));
      slow_nodes.push_back(*slow.AddCallFunction(target, {slow_x}, {}, hint));
    } else if (op < 6) {
      const size_t i = pick(fast_nodes.size());
      ASSERT_TRUE(fast.Erase(fast_nodes[i]).ok());
      ASSERT_TRUE(slow.Erase(slow_nodes[i]).ok());
      fast_nodes.erase(fast_nodes.begin() + static_cast<std::ptrdiff_t>(i));
      slow_nodes.erase(slow_nodes.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const size_t i = pick(fast_nodes.size());
      size_t heir = pick(fast_nodes.size() - 1);
      if (heir >= i) ++heir;
      const std::string name = slow_nodes[i]->name();
      ASSERT_TRUE(fast.EraseAndPassName(fast_nodes[i], fast_nodes[heir]).ok());
      ASSERT_TRUE(slow.Erase(slow_nodes[i]).ok());
      ASSERT_EQ(slow.Rename(slow_nodes[heir], name), name);
      fast_nodes.erase(fast_nodes.begin() + static_cast<std::ptrdiff_t>(i));
      slow_nodes.erase(slow_nodes.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(Names(fast.Nodes()), Names(slow.Nodes())) << "step " << step;
    const std::string& probe = hints[pick(hints.size())];
    ASSERT_EQ(fast.UniqueName(probe), slow.UniqueName(probe)) << "step " << step;
  }
  EXPECT_GRAPH_VALID(fast);
  EXPECT_GRAPH_VALID(slow);
}

// The name index against a std::map from name to node, through random inserts (explicit
// and default names, short and past std::string's inline buffer), erases, renames and
// EraseAndPassName on a graph that grows past many table sizes and shrinks again (erases
// shift entries back, so runs that wrap around the table's end are exercised too): every
// live name is found as its node, and every freed name is not found.
TEST(GraphTest, TheNameIndexFindsExactlyTheLiveNamesThroughGrowthAndErases) {
  const std::vector<std::string> hints = {"", "add", "relu_3", "a_long_name_past_sixteen",
                                          "activation_post_process_7", "q"};
  std::mt19937 random(13);
  auto pick = [&random](size_t n) { return static_cast<size_t>(random() % n); };
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  ASSERT_TRUE(g.SetOutput(x).ok());
  std::map<std::string, Node*> live = {{"x", x}, {"output", g.output()}};
  std::set<std::string> freed;
  std::vector<Node*> nodes;  // erasable
  auto forget = [&](const std::string& name) {
    live.erase(name);
    freed.insert(name);
  };
  auto remember = [&](Node* n) {
    ASSERT_EQ(live.count(n->name()), 0u) << n->name();
    live[n->name()] = n;
    freed.erase(n->name());
  };
  for (int step = 0; step < 30000; ++step) {
    // Grow for the first half, then shrink: the table grows to thousands of entries,
    // then most of them are erased.
    const size_t op = pick(10);
    const bool grow = step < 15000;
    if (nodes.size() < 2 || (grow ? op < 6 : op < 2)) {
      const std::string& hint = hints[pick(hints.size())];
      Node* n = *g.AddCallFunction(pick(2) == 0 ? "operator.add" : "torch.relu", {x}, {}, hint);
      remember(n);
      nodes.push_back(n);
    } else if (op < 8) {
      const size_t i = pick(nodes.size());
      forget(nodes[i]->name());
      ASSERT_TRUE(g.Erase(nodes[i]).ok());
      nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 8) {
      Node* n = nodes[pick(nodes.size())];
      const std::string old_name = n->name();
      const std::string& given = g.Rename(n, hints[pick(hints.size())]);
      if (given != old_name) {
        forget(old_name);
        remember(n);
      }
    } else {
      const size_t i = pick(nodes.size());
      size_t heir = pick(nodes.size() - 1);
      if (heir >= i) ++heir;
      const std::string name = nodes[i]->name();
      forget(nodes[heir]->name());
      ASSERT_TRUE(g.EraseAndPassName(nodes[i], nodes[heir]).ok());
      live[name] = nodes[heir];
      nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (step % 1000 == 999) {
      for (const auto& [name, node] : live) ASSERT_EQ(g.FindNode(name), node) << name;
      for (const std::string& name : freed) ASSERT_EQ(g.FindNode(name), nullptr) << name;
      ASSERT_EQ(g.size(), live.size());
      ASSERT_TRUE(g.Verify().ok()) << g.Verify();
    }
  }
  EXPECT_GRAPH_VALID(g);
}

// Two names with the same 32-bit NameHashOf: the index tells them apart by their text,
// whichever is indexed first and whichever is erased or renamed.
TEST(GraphTest, NamesWithTheSameHashAreTwoNames) {
  std::map<uint32_t, std::string> seen;
  std::string first, second;
  for (int i = 0; i < 2000000 && second.empty(); ++i) {
    std::string name = absl::StrCat("n", i);
    auto [it, added] = seen.emplace(graph_internal::NameHashOf(name), name);
    if (!added) {
      first = it->second;
      second = std::move(name);
    }
  }
  ASSERT_FALSE(second.empty()) << "no two names of the same hash among 2 million";
  ASSERT_EQ(graph_internal::NameHashOf(first), graph_internal::NameHashOf(second));
  Chain c;
  Node* a = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"), {c.x}, {}, first});
  EXPECT_EQ(c.g.FindNode(second), nullptr);
  EXPECT_EQ(c.g.UniqueName(second), second);
  Node* b = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"), {c.x}, {}, second});
  EXPECT_EQ(a->name(), first);
  EXPECT_EQ(b->name(), second);
  EXPECT_EQ(c.g.FindNode(first), a);
  EXPECT_EQ(c.g.FindNode(second), b);
  EXPECT_GRAPH_VALID(c.g);
  ASSERT_TRUE(c.g.Erase(a).ok());
  EXPECT_EQ(c.g.FindNode(first), nullptr);
  EXPECT_EQ(c.g.FindNode(second), b);
  EXPECT_EQ(c.g.Rename(b, first), first);
  EXPECT_EQ(c.g.FindNode(first), b);
  EXPECT_EQ(c.g.FindNode(second), nullptr);
  Node* d = *c.g.InsertAfter(c.x, {OpKind::kCallFunction, Symbol::Intern("torch.relu"), {c.x}, {}, second});
  EXPECT_EQ(d->name(), second);
  EXPECT_EQ(c.g.FindNode(second), d);
  EXPECT_GRAPH_VALID(c.g);
}

// Meta given at creation is shared between the nodes that got it; changing one node's
// meta copies the block for that node only (copy on write), the others keep the original.
TEST(GraphTest, SharedMetaIsGivenAtCreationAndCopiedOnWrite) {
  Graph g;
  Node* x = *g.AddPlaceholder("x");
  const Symbol pattern = Symbol::Intern("pattern");
  absl::StatusOr<NodeMeta> meta = NodeMeta::Make({{pattern, Argument::String("conv_relu")}});
  ASSERT_TRUE(meta.ok()) << meta.status();
  NodeSpec spec{OpKind::kCallModule, Symbol::Intern("conv"), {x}, {}, ""};
  spec.meta = *meta;
  Node* a = *g.Append(spec);
  Node* b = *g.Append(spec);
  EXPECT_TRUE(meta->shared());
  EXPECT_EQ(&a->meta(), &b->meta());  // one block
  ASSERT_EQ(a->meta().size(), 1u);
  EXPECT_EQ(a->FindMeta("pattern")->as_string(), "conv_relu");
  EXPECT_EQ(b->FindMeta("pattern")->as_string(), "conv_relu");

  ASSERT_TRUE(g.SetMeta(a, "output_qparams", Argument::Int(3)).ok());
  EXPECT_NE(&a->meta(), &b->meta());
  ASSERT_EQ(a->meta().size(), 2u);
  EXPECT_EQ(a->meta()[0].first, pattern);
  EXPECT_EQ(a->FindMeta("output_qparams")->as_int(), 3);
  ASSERT_EQ(b->meta().size(), 1u);  // untouched
  EXPECT_EQ(meta->entries().size(), 1u);
  ASSERT_TRUE(g.SetMeta(b, pattern, Argument::String("other")).ok());
  EXPECT_EQ(b->FindMeta("pattern")->as_string(), "other");
  EXPECT_EQ(meta->entries()[0].second.as_string(), "conv_relu");
  EXPECT_EQ(a->FindMeta("pattern")->as_string(), "conv_relu");

  // A whole meta set later, and shared from another node.
  Node* c = *g.AddCallFunction("torch.relu", {x});
  ASSERT_TRUE(g.SetMeta(c, a->shared_meta()).ok());
  EXPECT_EQ(&c->meta(), &a->meta());
  ASSERT_TRUE(g.Erase(a).ok());  // c still holds the block
  EXPECT_EQ(c->FindMeta("output_qparams")->as_int(), 3);
  ASSERT_TRUE(g.SetMeta(c, NodeMeta()).ok());
  EXPECT_TRUE(c->meta().empty());
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({b, c})).ok());
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, NodeMetaRefusesNodesAndEmptyKeys) {
  Chain c;
  const absl::StatusOr<NodeMeta> with_node =
      NodeMeta::Make({{Symbol::Intern("input"), Argument::List({Argument::Int(1), c.x})}});
  EXPECT_EQ(with_node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(with_node.status().message()), HasSubstr("'input'"));
  EXPECT_EQ(NodeMeta::Make({{Symbol(), Argument::Int(1)}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<NodeMeta> none = NodeMeta::Make({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(none->entries().empty());
  EXPECT_EQ(c.g.SetMeta(nullptr, *none).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.x->users(), ElementsAre(c.neg));
  EXPECT_GRAPH_VALID(c.g);
}

// ---- NumCallers: call_module nodes per target ------------------------------------------

// The independent count: a walk over the nodes.
int RecountCallers(const Graph& g, Symbol target) {
  int count = 0;
  for (const Node* n : g.Nodes()) count += n->op() == OpKind::kCallModule && n->target() == target;
  return count;
}

#define EXPECT_CALLERS(g, target, expected)                       \
  do {                                                            \
    EXPECT_EQ((g).NumCallers(target), expected) << (target).name(); \
    EXPECT_EQ(RecountCallers((g), (target)), expected) << (target).name(); \
  } while (0)

TEST(GraphTest, NumCallersFollowsEveryNodeCreationAndErase) {
  Graph g;
  const Symbol conv = Symbol::Intern("layer1.0.conv1");
  const Symbol relu = Symbol::Intern("layer1.0.relu");
  EXPECT_CALLERS(g, conv, 0);
  EXPECT_EQ(g.NumCallers(Symbol()), 0);
  EXPECT_EQ(g.NumCallers(Symbol::Intern("never.called.by.any.node.of.h1")), 0);
  Node* x = *g.AddPlaceholder("x");
  Node* c1 = *g.AddCallModule("layer1.0.conv1", {x});
  Node* out = *g.SetOutput(c1);
  EXPECT_CALLERS(g, conv, 1);
  Node* c2 = *g.InsertBefore(out, {OpKind::kCallModule, conv, {c1}, {}, ""});
  EXPECT_EQ(c2->name(), "layer1_0_conv1_1");
  Node* r1 = *g.InsertAfter(c2, {OpKind::kCallModule, relu, {c2}, {}, ""});
  Node* unnamed = *g.InsertBeforeUnnamed(out, {OpKind::kCallModule, conv, {r1}, {}, {}});
  // A call_function / get_attr of the same symbol is not a caller.
  Node* attr = *g.AddGetAttr("layer1.0.conv1", "conv_as_attr");
  Node* fn = *g.AddCallFunction("layer1.0.conv1", {attr}, {}, "conv_as_function");
  EXPECT_CALLERS(g, conv, 3);
  EXPECT_CALLERS(g, relu, 1);
  // EraseAndPassName: the erased call_module stops counting, the heir keeps counting.
  ASSERT_TRUE(g.SetArg(out, 0, unnamed).ok());
  EXPECT_FALSE(g.EraseAndPassName(unnamed, c2).ok());  // no name to pass, and a user
  EXPECT_CALLERS(g, conv, 3);
  ASSERT_TRUE(g.SetArg(out, 0, r1).ok());
  EXPECT_EQ(g.Rename(unnamed, "named"), "named");
  ASSERT_TRUE(g.EraseAndPassName(unnamed, r1).ok());
  EXPECT_EQ(r1->name(), "named");
  EXPECT_CALLERS(g, conv, 2);
  EXPECT_CALLERS(g, relu, 1);
  // A failed erase changes no count.
  EXPECT_FALSE(g.Erase(c2).ok());
  EXPECT_CALLERS(g, conv, 2);
  ASSERT_TRUE(g.Erase(fn).ok());
  ASSERT_TRUE(g.Erase(attr).ok());
  EXPECT_CALLERS(g, conv, 2);
  // EliminateDeadCode: the dead call_module nodes stop counting.
  ASSERT_TRUE(g.SetArg(out, 0, x).ok());
  EXPECT_EQ(g.EliminateDeadCode(), 3);
  EXPECT_CALLERS(g, conv, 0);
  EXPECT_CALLERS(g, relu, 0);
  EXPECT_GRAPH_VALID(g);
}

TEST(GraphTest, NumCallersFollowsRetargetsAndFailedMutationsChangeNone) {
  Chain c;
  const Symbol a = Symbol::Intern("features.a");
  const Symbol b = Symbol::Intern("features.b");
  Node* m = *c.g.InsertAfter(c.x, {OpKind::kCallModule, a, {c.x}, {}, ""});
  ASSERT_TRUE(c.g.SetArg(c.neg, 0, m).ok());
  EXPECT_CALLERS(c.g, a, 1);
  // SetTarget moves the caller from one target to the other.
  ASSERT_TRUE(c.g.SetTarget(m, b).ok());
  EXPECT_CALLERS(c.g, a, 0);
  EXPECT_CALLERS(c.g, b, 1);
  // SetOp to and from call_module starts and stops counting.
  ASSERT_TRUE(c.g.SetOp(m, OpKind::kCallMethod, Symbol::Intern("relu")).ok());
  EXPECT_CALLERS(c.g, b, 0);
  ASSERT_TRUE(c.g.SetOp(c.neg, OpKind::kCallModule, a).ok());
  ASSERT_TRUE(c.g.SetOp(m, OpKind::kCallModule, a).ok());
  EXPECT_CALLERS(c.g, a, 2);
  // A retarget of a call_function node to a module path is no caller.
  ASSERT_TRUE(c.g.SetTarget(c.relu, b).ok());
  EXPECT_CALLERS(c.g, b, 0);
  EXPECT_GRAPH_VALID(c.g);
  // Failures leave every count as it was.
  EXPECT_FALSE(c.g.SetTarget(m, Symbol()).ok());
  EXPECT_FALSE(c.g.SetOp(m, OpKind::kCallModule, Symbol()).ok());
  EXPECT_FALSE(c.g.SetOp(m, OpKind::kOutput, Symbol::Intern("output")).ok());
  EXPECT_FALSE(c.g.SetOp(c.out, OpKind::kCallModule, a).ok());
  EXPECT_FALSE(c.g.InsertBefore(c.x, {OpKind::kCallModule, a, {c.neg}, {}, ""}).ok());
  EXPECT_FALSE(c.g.InsertBeforeUnnamed(c.out, {OpKind::kCallModule, a, {}, {}, "named"}).ok());
  EXPECT_FALSE(c.g.Append({OpKind::kCallModule, Symbol(), {}, {}, ""}).ok());
  EXPECT_FALSE(c.g.EraseAll({m}).ok());  // m has a user
  EXPECT_CALLERS(c.g, a, 2);
  EXPECT_CALLERS(c.g, b, 0);
  EXPECT_EQ(m->target(), a);
  EXPECT_EQ(m->op(), OpKind::kCallModule);
  EXPECT_GRAPH_VALID(c.g);
}

TEST(GraphTest, NumCallersCountsTheNodesALoaderBuildsAndTargetsOfLargeIds) {
  Graph g;
  GraphBuilder builder(&g);
  Node* x = *builder.AddNode(OpKind::kPlaceholder, Symbol::Intern("x"), "x");
  // Targets interned after many other symbols: the table grows to their ids.
  std::vector<Symbol> targets;
  for (int i = 0; i < 300; ++i) targets.push_back(Symbol::Intern(absl::StrCat("h1.callers.m", i)));
  Node* prev = x;
  for (int i = 0; i < 600; ++i) {
    Node* n = *builder.AddNode(OpKind::kCallModule, targets[static_cast<size_t>(i % 300)],
                               absl::StrCat("m_", i));
    builder.SetInputs(n, {prev}, {});
    prev = n;
  }
  Node* out = *builder.AddNode(OpKind::kOutput, Symbol::Intern("output"), "output");
  builder.SetInputs(out, {prev}, {});
  EXPECT_GRAPH_VALID(g);
  for (const Symbol t : targets) EXPECT_CALLERS(g, t, 2);
}

TEST(GraphTest, VerifyRecountsTheCallersOfEachTarget) {
  Chain c;
  const Symbol a = Symbol::Intern("features.counted");
  Node* m = *c.g.InsertAfter(c.x, {OpKind::kCallModule, a, {c.x}, {}, "m"});
  (void)m;
  EXPECT_GRAPH_VALID(c.g);
  graph_internal::GraphTestPeer::MiscountCallers(c.g, a, +1);
  absl::Status st = c.g.Verify();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("call_module caller count of 'features.counted' is 2; the graph has 1"));
  graph_internal::GraphTestPeer::MiscountCallers(c.g, a, -1);
  EXPECT_TRUE(c.g.Verify().ok());
  // A count left for a target no node calls is named by its symbol id.
  const Symbol gone = Symbol::Intern("features.gone");
  graph_internal::GraphTestPeer::MiscountCallers(c.g, gone, +1);
  st = c.g.Verify();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("caller count of symbol #", gone.id(), " is 1; the graph has 0")));
}

// ---- EraseAll: a batch of dead nodes ---------------------------------------------------

// x -> r_0 -> ... -> r_{chains-1} -> output, and off each r_i a dead chain as lowering
// leaves them: dequantize(r_i) -> call_module layer.i(dq, kwargs w=get_attr) -> quantize.
struct DeadChains {
  Graph g;
  std::vector<Node*> live;
  std::vector<Node*> dead_users_first;  // per chain: q, ref, w, dq
  explicit DeadChains(int chains) {
    Node* x = *g.AddPlaceholder("x");
    live.push_back(x);
    Node* prev = x;
    for (int i = 0; i < chains; ++i) {
      Node* r = *g.AddCallFunction("torch.relu", {prev});
      Node* dq = *g.AddCallMethod("dequantize", {r});
      Node* w = *g.AddGetAttr(absl::StrCat("layer", i, ".weight"));
      Node* ref = *g.AddCallModule(absl::StrCat("layer", i), {dq, dq}, {{Symbol::Intern("w"), w}});
      Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                                   {ref, Argument::Float(0.5), Argument::Int(0)});
      for (Node* n : {q, ref, w, dq}) dead_users_first.push_back(n);
      live.push_back(r);
      prev = r;
    }
    live.push_back(*g.SetOutput(prev));
  }
};

// Everything a later pass can observe: names in order, users, indices, call counts, and
// the names and indices the next new nodes get.
std::vector<std::string> Observable(Graph& g, int chains) {
  std::vector<std::string> seen;
  for (const Node* n : g.Nodes()) {
    seen.push_back(absl::StrCat(n->name(), "#", n->index(), " users:",
                                absl::StrJoin(Names(n->users()), ",")));
  }
  for (int i = 0; i < chains; ++i) {
    seen.push_back(absl::StrCat("callers ", g.NumCallers(Symbol::Intern(absl::StrCat("layer", i)))));
  }
  seen.push_back(absl::StrCat("bound ", g.node_index_bound()));
  for (const char* hint : {"dequantize", "quantize_per_tensor", "layer3", "relu"}) {
    Node* n = *g.InsertAfter(g.first(), {OpKind::kCallFunction, Symbol::Intern(hint),
                                         {g.first()}, {}, hint});
    seen.push_back(absl::StrCat("new ", n->name(), "#", n->index()));
  }
  return seen;
}

TEST(GraphTest, EraseAllEndsAsErasingOneByOne) {
  // 40 chains (160 nodes: the bitmap) and 3 chains (12 nodes: the scanned list).
  for (const int chains : {40, 3}) {
    SCOPED_TRACE(chains);
    DeadChains one_by_one(chains);
    for (Node* n : one_by_one.dead_users_first) ASSERT_TRUE(one_by_one.g.Erase(n).ok());
    EXPECT_GRAPH_VALID(one_by_one.g);
    DeadChains batch(chains);
    ASSERT_TRUE(batch.g.EraseAll(batch.dead_users_first).ok());
    EXPECT_GRAPH_VALID(batch.g);
    EXPECT_EQ(batch.g.size(), static_cast<size_t>(chains + 2));
    EXPECT_EQ(Names(batch.g.Nodes()), Names(batch.live));
    for (int i = 0; i < chains; ++i) {
      EXPECT_EQ(batch.g.FindNode(absl::StrCat("layer", i)), nullptr);
    }
    EXPECT_EQ(Observable(batch.g, chains), Observable(one_by_one.g, chains));
    EXPECT_GRAPH_VALID(batch.g);
  }
}

TEST(GraphTest, EraseAllTakesTheBatchInAnyOrder) {
  for (const int chains : {40, 3}) {
    SCOPED_TRACE(chains);
    DeadChains inputs_first(chains);
    std::vector<Node*> order(inputs_first.dead_users_first.rbegin(),
                             inputs_first.dead_users_first.rend());
    std::mt19937 random(7);
    std::shuffle(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(order.size() / 2),
                 random);
    ASSERT_TRUE(inputs_first.g.EraseAll(order).ok());
    EXPECT_GRAPH_VALID(inputs_first.g);
    EXPECT_EQ(Names(inputs_first.g.Nodes()), Names(inputs_first.live));
    for (Node* n : inputs_first.live) {
      const size_t expected_users = n->op() == OpKind::kOutput ? 0u : 1u;
      EXPECT_EQ(n->num_users(), expected_users) << n->name();
    }
  }
}

TEST(GraphTest, EraseAllOfNothingOfTheOutputAndOfUnnamedNodes) {
  Chain c;
  EXPECT_TRUE(c.g.EraseAll({}).ok());
  Node* unnamed = *c.g.InsertBeforeUnnamed(
      c.out, {OpKind::kCallModule, Symbol::Intern("pending"), {c.relu}, {}, {}});
  ASSERT_TRUE(c.g.EraseAll({c.out, unnamed, c.relu}).ok());
  EXPECT_EQ(c.g.output(), nullptr);
  EXPECT_EQ(c.g.NumCallers(Symbol::Intern("pending")), 0);
  EXPECT_THAT(Names(c.g.Nodes()), ElementsAre("x", "neg"));
  EXPECT_THAT(c.neg->users(), IsEmpty());
  ASSERT_TRUE(c.g.SetOutput(c.neg).ok());
  EXPECT_GRAPH_VALID(c.g);
  EXPECT_EQ(c.g.output()->name(), "output");  // the output's name was freed
}

TEST(GraphTest, EraseAllFailuresNameTheNodeAndChangeNothing) {
  for (const int chains : {40, 3}) {
    SCOPED_TRACE(chains);
    DeadChains d(chains);
    Graph other;
    Node* stranger = *other.AddPlaceholder("stranger");
    const std::vector<std::string> before = Names(d.g.Nodes());
    const auto expect_unchanged = [&] {
      EXPECT_EQ(Names(d.g.Nodes()), before);
      EXPECT_CALLERS(d.g, Symbol::Intern("layer0"), 1);
      EXPECT_GRAPH_VALID(d.g);
    };
    std::vector<Node*> batch = d.dead_users_first;
    // A user left out: the ref's user q is not in the batch.
    batch.erase(batch.begin());
    absl::Status st = d.g.EraseAll(batch);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("cannot erase node 'layer0': its user 'quantize_per_tensor' is not "
                          "erased with it"));
    expect_unchanged();
    // A live node whose users are outside the batch.
    batch = d.dead_users_first;
    batch.push_back(d.live[1]);
    st = d.g.EraseAll(batch);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(st.message()), HasSubstr("cannot erase node 'relu'"));
    expect_unchanged();
    // Listed twice.
    batch = d.dead_users_first;
    batch.push_back(batch[1]);
    st = d.g.EraseAll(batch);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("node 'layer0' is listed twice"));
    expect_unchanged();
    // Null, and a node of another graph.
    batch = d.dead_users_first;
    batch.push_back(nullptr);
    st = d.g.EraseAll(batch);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("is null"));
    expect_unchanged();
    batch.back() = stranger;
    st = d.g.EraseAll(batch);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("('stranger') is not in this graph"));
    expect_unchanged();
    EXPECT_EQ(other.size(), 1u);
  }
}

}  // namespace
}  // namespace fuselage
