// Node: one operation of a Graph, with torch.fx semantics (op kind, target, args, kwargs,
// unique name, users). Nodes are owned by their Graph and live at stable addresses until
// erased. A Node is read-only to everyone but its Graph: every mutation (args, users,
// position, name) goes through Graph, which keeps use-lists and order consistent.
//
//   for (const Node* n : gm.graph().Nodes()) {          // in graph (= topological) order
//     if (n->op() != OpKind::kCallFunction || n->target().name() != "torch.relu") continue;
//     for (const Node* input : n->InputNodes()) ...     // the nodes its args reference
//     for (const Node* user : n->users()) ...           // the nodes that read it
//   }
//   // Changing a node goes through its graph: gm.graph().SetArg(n, 0, Argument(other)).
#ifndef FUSELAGE_GRAPH_NODE_H_
#define FUSELAGE_GRAPH_NODE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/argument.h"
#include "graph/symbol.h"

namespace fuselage {

class Graph;

// The values are part of the model file format: append, never renumber.
enum class OpKind : uint8_t {
  kPlaceholder = 1,
  kGetAttr = 2,
  kCallFunction = 3,
  kCallModule = 4,
  kCallMethod = 5,
  kOutput = 6,
};

// "placeholder", "get_attr", "call_function", "call_module", "call_method", "output".
absl::string_view OpKindName(OpKind op);
std::optional<OpKind> OpKindFromName(absl::string_view name);

// A node's annotations (meta), shareable: one immutable block may be held by many nodes
// (every node a fusion rule makes carries the same "pattern"), so giving a new node its
// meta costs a reference count, not an allocation. Copying a NodeMeta shares the block;
// Graph::SetMeta copies a shared block before changing it (copy on write). The count is
// atomic: a pass may keep NodeMetas in tables shared between threads.
class NodeMeta {
 public:
  NodeMeta() = default;  // no meta
  // Fails (InvalidArgument naming the key) on an empty key or a value that references a
  // node: meta survives passes and the model file, nodes do not.
  static absl::StatusOr<NodeMeta> Make(Kwargs entries);
  NodeMeta(const NodeMeta& other) : block_(other.block_) { Ref(); }
  NodeMeta(NodeMeta&& other) noexcept : block_(other.block_) { other.block_ = nullptr; }
  NodeMeta& operator=(NodeMeta other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }
  ~NodeMeta() { Unref(); }

  const Kwargs& entries() const;
  bool empty() const { return block_ == nullptr; }
  // True if another NodeMeta holds the same block.
  bool shared() const { return block_ != nullptr && block_->refs.load(std::memory_order_acquire) > 1; }

 private:
  friend class Graph;
  friend class GraphBuilder;
  friend class Node;
  struct Block {
    std::atomic<int32_t> refs{1};
    Kwargs entries;
  };
  // Unchecked: Graph and GraphBuilder (a loader keeps what the file says) check themselves.
  static NodeMeta FromEntries(Kwargs entries);
  // The entries to change in place: a block of this NodeMeta alone (copied if shared).
  Kwargs& MutableEntries();
  void Ref() const {
    if (block_ != nullptr) block_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void Unref() {
    if (block_ != nullptr && block_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete block_;
    }
    block_ = nullptr;
  }
  Block* block_ = nullptr;
};

// Node meta kOpaqueMeta = true marks an opaque node: a call of a function the engine does
// not know (a PyTorch model's `operator.eq`, `torch._assert`, a user's @torch.fx.wrap
// function), kept in the graph so that a model calling it still fuses, prepares and
// converts. Passes carry it as a float op whose value they never inspect (no pattern can
// name its target, prepare keeps it float), and the interpreter refuses to run a graph
// holding one (graph/NAMING.md). Only the PyTorch bridge, which keeps the callable, runs it.
inline constexpr char kOpaqueMeta[] = "opaque";

class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  OpKind op() const { return op_; }
  // call_function: a qualified function name ("torch.add", "operator.getitem");
  // call_method: the method name ("relu"); call_module / get_attr: the dotted path of the
  // module or tensor ("layer1.0.conv1"); placeholder: the parameter name; output: "output".
  Symbol target() const { return target_; }
  const std::string& name() const { return name_; }
  absl::Span<const Argument> args() const { return args_; }
  const Argument& arg(size_t i) const { return args_[i]; }
  size_t num_args() const { return args_.size(); }
  const Kwargs& kwargs() const { return kwargs_ ? *kwargs_ : EmptyKwargs(); }
  bool has_kwargs() const { return kwargs_ != nullptr; }  // kwargs_ is null when empty
  // The kwarg named `key`, or nullptr.
  const Argument* FindKwarg(absl::string_view key) const;

  // Distinct nodes that use this one, in the order they started using it (as FX's
  // `Node.users` dict). A node that uses this one twice is listed once.
  absl::Span<Node* const> users() const {
    return absl::MakeConstSpan(users_.data() + users_front_, users_.size() - users_front_);
  }
  size_t num_users() const { return users_.size() - users_front_; }

  // Distinct nodes this one reads, in first-use order over args then kwargs.
  std::vector<Node*> InputNodes() const;

  // Free-form annotations that survive passes and the model file, e.g. "pattern" on a
  // fused node names the pattern that made it.
  const Kwargs& meta() const { return meta_.entries(); }
  const Argument* FindMeta(absl::string_view key) const;
  // Whether meta kOpaqueMeta is true (see there).
  bool opaque() const;
  // The meta as a shareable handle: hand it to another node (NodeSpec::meta,
  // Graph::SetMeta(Node*, NodeMeta)) without copying the entries.
  const NodeMeta& shared_meta() const { return meta_; }

  Graph* graph() const { return graph_; }
  // A small number that identifies the node among the live nodes of its graph: distinct
  // for distinct live nodes, fixed while the node lives, below graph()->node_index_bound(),
  // and handed to a later node once this one is erased. Dense (the graph's nodes number
  // 0 .. bound-1 with few holes), so a pass keeps per-node state in a vector indexed by
  // it instead of a hash map keyed by Node*. See Graph::node_index_bound().
  uint32_t index() const { return index_; }
  // Neighbours in the graph's topological order (nullptr at the ends).
  Node* prev() const { return prev_; }
  Node* next() const { return next_; }

  // Readable one-line form: "%conv : call_module[target=conv](args = (%x,), kwargs = {})".
  std::string ToString() const;

 private:
  friend class Graph;
  friend class GraphBuilder;
  friend class NodeMeta;     // An empty NodeMeta reads EmptyKwargs.
  Node(Graph* graph, uint32_t index, OpKind op, Symbol target, std::string name)
      : graph_(graph),
        op_(op),
        users_front_(0),
        target_(target),
        index_(index),
        name_(std::move(name)) {}

  // Calls fn(Node*) for every node reference in args and kwargs (with repeats). Reads
  // kwargs_ directly: kwargs() is a call (EmptyKwargs) on every node without kwargs.
  template <typename Fn>
  void ForEachInputUse(Fn&& fn) const {
    for (const Argument& a : args_) a.ForEachNode(fn);
    if (kwargs_ != nullptr) {
      for (const Kwarg& kw : *kwargs_) kw.second.ForEachNode(fn);
    }
  }

  Graph* graph_;
  Node* prev_ = nullptr;
  Node* next_ = nullptr;
  uint64_t order_key_ = 0;  // Strictly increasing along the list; see Graph.
  // No cache lives in a Node (GraphModule keeps the module type of each call_module node
  // in a table of its own): readers sharing a model never race with a cache fill on a
  // word they read.
  OpKind op_;
  // How many entries at the front of users_ are no longer users (Graph::RemoveUser takes
  // the first user off in O(1) this way; the list is compacted once they outnumber the
  // live ones, and emptied whenever no user is left). In the padding after op_.
  uint32_t users_front_ : 24;
  Symbol target_;
  static const Kwargs& EmptyKwargs();
  void set_kwargs(Kwargs kwargs) {
    kwargs_ = kwargs.empty() ? nullptr : std::make_unique<Kwargs>(std::move(kwargs));
  }
  void set_meta(Kwargs meta) { meta_ = NodeMeta::FromEntries(std::move(meta)); }

  void set_args(std::vector<Argument> args) {
    args_.assign(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  }
  // A new node's args in the same storage type (NodeSpec::args): moved, never reallocated.
  void set_args(absl::InlinedVector<Argument, 2>&& args) { args_ = std::move(args); }

  // Inline capacity 2: most nodes have one or two args and users, so no heap block.
  absl::InlinedVector<Argument, 2> args_;
  absl::InlinedVector<Node*, 2> users_;
  // Most nodes have no kwargs and no meta: kept out of line to keep Node small.
  std::unique_ptr<Kwargs> kwargs_;
  NodeMeta meta_;
  uint32_t index_;  // the node's arena slot number (NodeArena)
  // Graph::NameHash of name_, kept by Graph with the name: the name index never hashes a
  // node's text again (not when it grows, not on Erase or Rename).
  uint32_t name_hash_ = 0;
  // Last: a scan reads links, op, target, args, users and kwargs (the first 128 bytes),
  // rarely the name, so the name does not sit between them.
  std::string name_;
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_NODE_H_
