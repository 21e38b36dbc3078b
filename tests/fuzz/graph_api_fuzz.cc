// Fuzz target: the Graph mutation API. The input decodes into a sequence of Graph calls
// (create, set args/kwargs/meta, retarget, rename, replace all uses, move, erase, DCE),
// with arguments drawn from the live nodes, a node of another graph, null, and nested
// constant args. After every call it asserts Graph's contract (graph/graph.h):
//  - the graph passes Verify() (a graph without an output node is judged by temporarily
//    appending one: every other invariant must still hold);
//  - a call that returns an error left the graph exactly as it was (same snapshot,
//    tests/fuzz/graph_snapshot.h: node identities, order, ops, targets, names, args,
//    kwargs, meta, users, output);
//  - a call that succeeds did what it says (a node created is in the graph under the name
//    it reports, an erased node is gone, ReplaceAllUsesWith left no other user behind).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "graph/argument.h"
#include "graph/dtype.h"
#include "graph/graph.h"
#include "graph/node.h"
#include "graph/symbol.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/graph_snapshot.h"

namespace fuselage::fuzz {
namespace {

// Bounds keep one input fast (every call that may fail snapshots the whole graph, and every
// call verifies it); the interesting bugs need few nodes.
constexpr int kMaxCalls = 100;
constexpr size_t kMaxNodes = 48;
constexpr int kMaxArgDepth = 4;
constexpr int kMaxListItems = 4;

// Reads the input as a stream of small decisions; past the end every read is 0.
class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // A value in [0, n) for n > 0.
  size_t Below(size_t n) { return Byte() % n; }
  int64_t Int() {
    static constexpr int64_t kInts[] = {0, 1, -1, 2, 7, std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
    const uint8_t b = Byte();
    return b < 7 * 16 ? kInts[b % 7] : static_cast<int64_t>(b);
  }
  // Names and targets: a small pool that makes collisions likely (FX-style suffixes, the
  // reserved "output", dotted paths, empty), or raw bytes from the input.
  std::string Text() {
    static const char* const kPool[] = {"x",      "add",   "add_1", "add_2", "output", "output_1",
                                        "conv1",  "a.b.c", "",      "_",     "1x",     "relu",
                                        "torch.add", "add_99999999999999999999"};
    constexpr size_t kPoolSize = sizeof(kPool) / sizeof(kPool[0]);
    const size_t choice = Byte();
    if (choice < 200) return kPool[choice % kPoolSize];
    const size_t length = Below(12);
    std::string s;
    for (size_t i = 0; i < length; ++i) s.push_back(static_cast<char>(Byte()));
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

OpKind AnyOpKind(Decoder& in) { return static_cast<OpKind>(1 + in.Below(6)); }

// A graph the fuzzed one must never accept nodes from.
Node* ForeignNode() {
  static Graph* const foreign = [] {
    auto* g = new Graph();
    Node* x = *g->AddPlaceholder("x");
    (void)g->SetOutput(x);
    return g;
  }();
  return foreign->first();
}

class GraphApiFuzzer {
 public:
  explicit GraphApiFuzzer(Decoder& in) : in_(in) {}

  void Run() {
    for (int call = 0; call < kMaxCalls && !in_.done(); ++call) {
      const size_t size_before = graph_.size();
      const int opcode = static_cast<int>(in_.Below(17));
      // The snapshot is the expensive part of a call, and only a failure needs it.
      const bool may_fail = MayFail(opcode);
      if (may_fail) before_.Take(graph_);
      const absl::Status status = Call(opcode, size_before);
      if (!status.ok()) {
        FUZZ_CHECK(may_fail,
                   absl::StrCat("call ", opcode, " cannot fail but returned ", status.ToString()));
        FUZZ_CHECK(!status.message().empty(), absl::StrCat("call ", opcode, ": empty error"));
        now_.Take(graph_);
        const std::string difference = before_.FirstDifference(now_);
        FUZZ_CHECK(difference.empty(),
                   absl::StrCat("call ", opcode, " failed (", status.ToString(),
                                ") but changed the graph: ", difference, "\nafter:\n",
                                GraphText(graph_)));
      }
      CheckVerifies(opcode);
    }
  }

 private:
  // A node to act on: usually a live one, sometimes a foreign node or null.
  Node* AnyNode() {
    const std::vector<Node*> nodes = graph_.Nodes();
    const size_t choice = in_.Byte();
    if (choice == 255) return nullptr;
    if (choice == 254 || nodes.empty()) return ForeignNode();
    return nodes[choice % nodes.size()];
  }

  Argument AnyArg(int depth) {
    switch (in_.Below(depth < kMaxArgDepth ? 10 : 8)) {
      case 0: return Argument::None();
      case 1: return Argument::Bool(in_.Byte() & 1);
      case 2: return Argument::Int(in_.Int());
      case 3: {
        static constexpr double kFloats[] = {0.0, -0.0, 0.5, 1e300,
                                             std::numeric_limits<double>::infinity(),
                                             std::numeric_limits<double>::quiet_NaN()};
        return Argument::Float(kFloats[in_.Below(6)]);
      }
      case 4: return Argument::String(in_.Text());
      case 5: {
        static constexpr DType kDTypes[] = {DType::kFloat32, DType::kQInt8, DType::kQUInt8,
                                            DType::kInt64};
        return Argument::Dtype(kDTypes[in_.Below(4)]);
      }
      case 6:
      case 7: return Argument(AnyNode());
      default: {
        std::vector<Argument> items;
        const size_t n = in_.Below(kMaxListItems + 1);
        for (size_t i = 0; i < n; ++i) items.push_back(AnyArg(depth + 1));
        return (in_.Byte() & 1) ? Argument::Tuple(std::move(items))
                                : Argument::List(std::move(items));
      }
    }
  }

  std::vector<Argument> AnyArgs() {
    std::vector<Argument> args;
    const size_t n = in_.Below(4);
    for (size_t i = 0; i < n; ++i) args.push_back(AnyArg(0));
    return args;
  }

  Kwargs AnyKwargs() {
    Kwargs kwargs;
    const size_t n = in_.Below(3);
    for (size_t i = 0; i < n; ++i) kwargs.emplace_back(Symbol::Intern(in_.Text()), AnyArg(0));
    return kwargs;
  }

  NodeSpec AnySpec() {
    NodeSpec spec;
    spec.op = AnyOpKind(in_);
    spec.target = Symbol::Intern(in_.Text());
    spec.args = AnyArgs();
    spec.kwargs = AnyKwargs();
    spec.name = in_.Text();
    return spec;
  }

  // Rename (always gives the node a free name) and DCE return no status; every other call
  // may fail and must then leave the graph as it was.
  static bool MayFail(int opcode) { return opcode != 12 && opcode != 16; }

  // Graphs stay small so each call stays cheap: past kMaxNodes, creating is a no-op.
  bool Full() const { return graph_.size() >= kMaxNodes; }

  // A node was created: it must be in the graph, findable under the name it got.
  absl::Status Created(absl::StatusOr<Node*> node, size_t size_before) {
    if (!node.ok()) return node.status();
    FUZZ_CHECK(*node != nullptr && (*node)->graph() == &graph_, "created node not in graph");
    FUZZ_CHECK(graph_.FindNode((*node)->name()) == *node,
               absl::StrCat("created node '", (*node)->name(), "' not found by name"));
    FUZZ_CHECK(graph_.size() == size_before + 1, "creating a node did not add exactly one");
    return absl::OkStatus();
  }

  absl::Status Call(int opcode, size_t size_before) {
    if (opcode <= 3 && Full()) return absl::OkStatus();
    switch (opcode) {
      case 0: return Created(graph_.AddPlaceholder(in_.Text()), size_before);
      case 1: return Created(graph_.Append(AnySpec()), size_before);
      case 2: {
        Node* anchor = AnyNode();
        return Created(graph_.InsertBefore(anchor, AnySpec()), size_before);
      }
      case 3: {
        Node* anchor = AnyNode();
        return Created(graph_.InsertAfter(anchor, AnySpec()), size_before);
      }
      case 4: {
        Node* node = AnyNode();
        const size_t index = in_.Below(4);
        return graph_.SetArg(node, index, AnyArg(0));
      }
      case 5: {
        Node* node = AnyNode();
        return graph_.SetArgs(node, AnyArgs());
      }
      case 6: {
        Node* node = AnyNode();
        const std::string key = in_.Text();
        return graph_.SetKwarg(node, key, AnyArg(0));
      }
      case 7: {
        Node* node = AnyNode();
        return graph_.RemoveKwarg(node, in_.Text());
      }
      case 8: {
        Node* node = AnyNode();
        return graph_.SetKwargs(node, AnyKwargs());
      }
      case 9: {
        Node* node = AnyNode();
        return graph_.SetTarget(node, Symbol::Intern(in_.Text()));
      }
      case 10: {
        Node* node = AnyNode();
        const OpKind op = AnyOpKind(in_);
        return graph_.SetOp(node, op, Symbol::Intern(in_.Text()));
      }
      case 11: {
        Node* node = AnyNode();
        const std::string key = in_.Text();
        return graph_.SetMeta(node, key, AnyArg(0));
      }
      case 12: {
        Node* node = AnyNode();
        if (node == nullptr || node->graph() != &graph_) return absl::OkStatus();
        const std::string given = graph_.Rename(node, in_.Text());
        FUZZ_CHECK(node->name() == given && graph_.FindNode(given) == node,
                   absl::StrCat("Rename returned '", given, "' but the node is '", node->name(),
                                "'"));
        return absl::OkStatus();
      }
      case 13: {
        Node* old_node = AnyNode();
        Node* replacement = AnyNode();
        absl::StatusOr<int> rewired = graph_.ReplaceAllUsesWith(old_node, replacement);
        if (!rewired.ok()) return rewired.status();
        if (old_node == replacement) return absl::OkStatus();  // Documented no-op.
        for (const Node* user : old_node->users()) {
          FUZZ_CHECK(user == replacement,
                     absl::StrCat("after ReplaceAllUsesWith('", old_node->name(), "', '",
                                  replacement->name(), "') '", user->name(),
                                  "' still uses the old node"));
        }
        return absl::OkStatus();
      }
      case 14: {
        Node* node = AnyNode();
        Node* anchor = AnyNode();
        return graph_.MoveBefore(node, anchor);
      }
      case 15: {
        Node* node = AnyNode();
        const std::string name = node != nullptr ? node->name() : "";
        const bool ours = node != nullptr && node->graph() == &graph_;
        const absl::Status status = graph_.Erase(node);
        if (!status.ok()) return status;
        FUZZ_CHECK(ours && graph_.FindNode(name) == nullptr && graph_.size() == size_before - 1,
                   absl::StrCat("Erase('", name, "') succeeded but the node is still there"));
        return absl::OkStatus();
      }
      default: {
        const int erased = graph_.EliminateDeadCode();
        FUZZ_CHECK(erased >= 0 && graph_.size() == size_before - static_cast<size_t>(erased),
                   "EliminateDeadCode miscounted");
        for (const Node* n = graph_.first(); n != nullptr; n = n->next()) {
          FUZZ_CHECK(n->num_users() > 0 || n->op() == OpKind::kPlaceholder ||
                         n->op() == OpKind::kOutput,
                     absl::StrCat("dead node '", n->name(), "' survived EliminateDeadCode"));
        }
        return absl::OkStatus();
      }
    }
  }

  // Verify() must pass. Without an output node Verify reports exactly that, so an output is
  // appended for the check and erased again, which must restore the graph.
  void CheckVerifies(int opcode) {
    if (graph_.output() != nullptr) {
      const absl::Status verified = graph_.Verify();
      FUZZ_CHECK(verified.ok(), absl::StrCat("after call ", opcode, ": ", verified.ToString(),
                                             "\n", GraphText(graph_)));
      return;
    }
    before_.Take(graph_);
    absl::StatusOr<Node*> output = graph_.SetOutput(Argument::None());
    FUZZ_CHECK(output.ok(), absl::StrCat("cannot add an output to a graph without one: ",
                                         output.status().ToString()));
    const absl::Status verified = graph_.Verify();
    FUZZ_CHECK(verified.ok(), absl::StrCat("after call ", opcode, ": ", verified.ToString(),
                                           "\n", GraphText(graph_)));
    const absl::Status erased = graph_.Erase(*output);
    FUZZ_CHECK(erased.ok(), erased.ToString());
    now_.Take(graph_);
    const std::string difference = before_.FirstDifference(now_);
    FUZZ_CHECK(difference.empty(),
               absl::StrCat("erasing the temporary output did not restore the graph: ",
                            difference));
  }

  Decoder& in_;
  Graph graph_;
  // Reused by every call (GraphSnapshot::Take): the graph before a call, and as it is now.
  GraphSnapshot before_;
  GraphSnapshot now_;
};

}  // namespace
}  // namespace fuselage::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselage::fuzz::Decoder in(data, size);
  fuselage::fuzz::GraphApiFuzzer(in).Run();
  return 0;
}
