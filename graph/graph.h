// Graph: the nodes of one forward function, owned in a single always-topological order,
// with use-lists maintained here and nowhere else.
//
// Contract (torch.fx semantics, XLA's ownership):
//  - The Graph owns its nodes; everyone else holds `Node*`. A node's address is stable
//    until it is erased.
//  - The order is topological at all times: a node comes after every node it reads.
//    Every mutation that would break this fails with an error and changes nothing.
//  - Use-lists are always exact: `n->users()` lists the distinct nodes whose args or
//    kwargs reference `n`.
//  - Names are unique; a requested name that is taken gets a numeric suffix, as in FX.
//  - There is at most one `output` node and it is always last.
//  - Every mutating method either succeeds completely or returns an error and leaves the
//    graph exactly as it was.
//
// Example (each call returns an error and changes nothing if it would break a rule above):
//
//   Graph& g = gm.graph();
//   ASSIGN_OR_RETURN(Node* x, g.AddPlaceholder("x"));
//   ASSIGN_OR_RETURN(Node* relu, g.AddCallFunction("torch.relu", {x}));
//   RETURN_IF_ERROR(g.SetOutput(relu).status());
//   ASSIGN_OR_RETURN(Node* neg, g.InsertAfter(x, NodeSpec{OpKind::kCallFunction,
//                                                         Symbol::Intern("operator.neg"), {x}}));
//   RETURN_IF_ERROR(g.SetArg(relu, 0, Argument(neg)));  // x's and neg's users follow
//   RETURN_IF_ERROR(g.Verify());                         // x -> neg -> relu -> output
#ifndef FUSELAGE_GRAPH_GRAPH_H_
#define FUSELAGE_GRAPH_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/argument.h"
#include "graph/module_binding.h"
#include "graph/node.h"
#include "graph/node_arena.h"
#include "graph/symbol.h"

namespace fuselage {

// The positional args of a new node: Node's own storage type (two inline), so a spec of
// up to two args allocates nothing and moves into the node element by element. Also
// built from a std::vector, so `spec.args = some_vector` keeps working.
class NodeArgs : public absl::InlinedVector<Argument, 2> {
 public:
  using absl::InlinedVector<Argument, 2>::InlinedVector;
  NodeArgs() = default;
  NodeArgs(std::vector<Argument> args)  // NOLINT: a vector of args is a spec's args.
      : absl::InlinedVector<Argument, 2>(std::make_move_iterator(args.begin()),
                                         std::make_move_iterator(args.end())) {}
};

// The name requested for a new node, without a copy where none is needed:
//  - a string literal or an absl::string_view is kept as a view: the text must outlive
//    the call that creates the node (a literal always does);
//  - a std::string (temporary or not) is owned: `spec.name = absl::StrCat(...)` is safe.
// Empty means "derive from the target" as FX does (`conv1`, `add_2`).
class NodeName {
 public:
  NodeName() = default;
  NodeName(const char* literal) : view_(literal) {}      // NOLINT: implicit by design.
  NodeName(absl::string_view view) : view_(view) {}      // NOLINT
  NodeName(std::string owned)                            // NOLINT
      : owned_(std::move(owned)), is_owned_(true) {}
  // Copies and moves are memberwise: an owned name is read from owned_ (view_ is unused
  // then), so a copy never points into the original.

  absl::string_view view() const { return is_owned_ ? absl::string_view(owned_) : view_; }
  operator absl::string_view() const { return view(); }  // NOLINT
  bool empty() const { return view().empty(); }
  size_t size() const { return view().size(); }

 private:
  std::string owned_;
  absl::string_view view_;
  bool is_owned_ = false;
};

// What a new node is: the arguments of every node-creating method. The common case (up to
// two args, no kwargs, a default or viewed name) allocates nothing but the node.
struct NodeSpec {
  OpKind op = OpKind::kCallFunction;
  Symbol target;
  NodeArgs args;
  Kwargs kwargs;
  // Desired name; empty means "derive from the target" as FX does (`conv1`, `add_2`).
  NodeName name;
  // Annotations, shared with whoever else holds them (NodeMeta::Make once, then a copy per
  // node is a reference count): fusion's "pattern" without a SetMeta per fused node.
  // (Default-initialized explicitly: `{op, target, args, kwargs, name}` then draws no
  // -Wmissing-field-initializers.)
  NodeMeta meta{};
};

namespace graph_internal {
// A hash of short identifiers (node names), inline and a third of absl::Hash's
// instructions for a name of 20-odd characters. 32 bits: a node keeps its name's in 4 bytes.
uint32_t NameHashOf(absl::string_view name);
// A name with its NameHashOf, computed once: the key of every probe of a graph's name index
// and suffix counters, and what the named node keeps.
struct HashedName {
  absl::string_view text;
  uint32_t hash;
};
class NameChars;  // a name being built (graph_names.cc)
class GraphTestPeer;  // tests only

// A graph's name index: every live node under its name. An open-addressing table (linear
// probing, at most 3/4 full) of 8-byte entries that hold the name's hash and the node's
// slot number (Node::index()), so that
//  - a probe rejects every other name by its 32-bit hash, in the entry itself: it reads
//    another node (and its name's heap block) only when the whole hash matches, that is
//    when the name is there (or once in 4 billion compares);
//  - a node's entry is found by its kept hash and slot number (Erase, Rename) without
//    reading any node or name;
//  - growing rehashes from the entries alone;
//  - a probe, a claim and an erase touch one cache line of the table, mostly (a
//    flat_hash_set<Node*> reads a control byte line and a slot line, then the node).
// Erasing shifts the following entries back (no tombstones), so probes stay short
// through any number of erases and renames.
class NameIndex {
 public:
  // Nodes are found by slot number in `arena` (Graph's: it outlives the index).
  explicit NameIndex(const NodeArena* arena) : arena_(arena) {}
  NameIndex(const NameIndex&) = delete;
  NameIndex& operator=(const NameIndex&) = delete;

  size_t size() const { return size_; }
  // The node named `name`, or nullptr.
  Node* Find(HashedName name) const;
  // Indexes node `index` under `name` (the node's name need not be set yet) unless a node
  // has that name; true if it was added.
  bool InsertIfAbsent(HashedName name, uint32_t index);
  // InsertIfAbsent in two steps, for a caller that creates the node only once the name is
  // known free (one probe): the position where `name` goes (room is made first), or
  // kTaken if a node has it; then Fill(position, ...) before any other change to the index.
  static constexpr size_t kTaken = ~size_t{0};
  size_t FreePosition(HashedName name);
  void Fill(size_t position, uint32_t hash, uint32_t index);
  // Asks for the cache line where a name of hash `hash` is placed first, ahead of an
  // Erase or probe of it (EraseAll: the entries of the nodes a few erases ahead).
  void Prefetch(uint32_t hash) const {
    if (entries_ != nullptr) __builtin_prefetch(&entries_[Home(hash)], /*rw=*/1);
  }
  // Removes the entry of node `index`, indexed under a name of hash `hash` (it must be).
  void Erase(uint32_t hash, uint32_t index);
  // The entry of node `index` (hash `hash`, it must be indexed) now stands for node `heir`.
  void Replace(uint32_t hash, uint32_t index, uint32_t heir);

 private:
  // 0 is an empty entry; the slot number is stored plus one.
  static uint64_t EntryOf(uint32_t hash, uint32_t index) {
    return uint64_t{hash} << 32 | (uint64_t{index} + 1);
  }
  static uint32_t HashOf(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }
  static uint32_t IndexOf(uint64_t entry) { return static_cast<uint32_t>(entry) - 1; }
  Node* NodeOf(uint64_t entry) const;
  // Where an entry of this hash is placed first: the hash's top bits (NameHashOf mixes
  // every byte into them).
  size_t Home(uint32_t hash) const {
    return static_cast<size_t>((uint64_t{hash} * (mask_ + 1)) >> 32);
  }
  // The position of `name`'s entry, or of the empty entry where it would go (the table
  // must exist).
  size_t SlotFor(HashedName name) const;
  // The position of node `index`'s entry (present).
  size_t PositionOf(uint32_t hash, uint32_t index) const;
  void Grow();

  const NodeArena* arena_;
  std::unique_ptr<uint64_t[]> entries_;
  size_t mask_ = 0;  // capacity - 1 (a power of two), 0 while there is no table
  size_t size_ = 0;
};
// A count, per thread, of the use-list and arg-list elements the graph's use-list upkeep
// visited (compared, moved or rewritten): what tests/graph/users_cost_test reads to show
// that the upkeep is linear in a node's number of users and inputs, without a clock.
// Counting costs one add per operation on a thread-local word.
uint64_t UseListSteps();
void CountUseListSteps(uint64_t steps);
// What probing a candidate name found (Graph's naming, graph_names.cc).
enum class Claim {
  kClaimed,      // free (and taken by the node being named, if any)
  kTaken,        // another node has it
  kOwnOldName,   // the old name of the node being renamed: taken for the rule, not indexed
};
}  // namespace graph_internal

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- Creating nodes -------------------------------------------------------------
  // Each fails (InvalidArgument / FailedPrecondition) if an arg references a node of
  // another graph or a node that would not precede the new one, if a second output node
  // is requested, or if the new node would land after the output node.

  // Appends at the end, or just before the output node if there is one.
  // Each takes the spec by rvalue (a temporary, a braced spec or std::move(spec): moved
  // straight into the node, with no NodeSpec move and second destructor on the way, ~180
  // instructions a node) or by const reference (a spec kept for reuse: copied once).
  absl::StatusOr<Node*> Append(NodeSpec&& spec);
  absl::StatusOr<Node*> Append(const NodeSpec& spec) { return Append(NodeSpec(spec)); }
  absl::StatusOr<Node*> InsertBefore(Node* anchor, NodeSpec&& spec);
  absl::StatusOr<Node*> InsertBefore(Node* anchor, const NodeSpec& spec) {
    return InsertBefore(anchor, NodeSpec(spec));
  }
  absl::StatusOr<Node*> InsertAfter(Node* anchor, NodeSpec&& spec);
  absl::StatusOr<Node*> InsertAfter(Node* anchor, const NodeSpec& spec) {
    return InsertAfter(anchor, NodeSpec(spec));
  }
  // As InsertBefore, but the node gets no name yet, for a rewrite whose new node takes the
  // name of a node it replaces (fusion: the fused node takes its root's name): naming it
  // first (sanitize, probe, copy the text) would only be undone by EraseAndPassName.
  // `spec.name` must be empty (InvalidArgument otherwise). Until it is named -- by
  // EraseAndPassName(replaced, node), which is what it is for, or by Rename -- the node's
  // name() is empty, it is in no name index (FindNode does not find it), and Verify()
  // fails ("a node has an empty name"): name it before the pass ends. Erasing it unnamed
  // is fine; passing its (missing) name on with EraseAndPassName(node, ...) is an error.
  absl::StatusOr<Node*> InsertBeforeUnnamed(Node* anchor, NodeSpec&& spec);

  // Shorthands for Append.
  absl::StatusOr<Node*> AddPlaceholder(absl::string_view name);
  absl::StatusOr<Node*> AddGetAttr(absl::string_view path, absl::string_view name = "");
  absl::StatusOr<Node*> AddCallModule(absl::string_view path, NodeArgs args,
                                      Kwargs kwargs = {}, absl::string_view name = "");
  absl::StatusOr<Node*> AddCallFunction(absl::string_view function,
                                        NodeArgs args, Kwargs kwargs = {},
                                        absl::string_view name = "");
  absl::StatusOr<Node*> AddCallMethod(absl::string_view method, NodeArgs args,
                                      Kwargs kwargs = {}, absl::string_view name = "");
  absl::StatusOr<Node*> SetOutput(Argument result);

  // ---- Changing nodes -------------------------------------------------------------
  // Each re-derives the use-lists of the nodes that gain or lose a use, and fails, with
  // the node unchanged, if a new input would not precede `node` or belongs elsewhere. As in
  // FX (Node.__update_args_kwargs), the changed node is re-registered with all its inputs,
  // so it moves to the end of each input's user list, changed or not.
  absl::Status SetArg(Node* node, size_t index, Argument value);
  absl::Status SetArgs(Node* node, NodeArgs args);
  absl::Status SetKwarg(Node* node, absl::string_view key, Argument value);
  absl::Status RemoveKwarg(Node* node, absl::string_view key);
  absl::Status SetKwargs(Node* node, Kwargs kwargs);
  // Changes what the node calls (e.g. a float op lowered to a quantized one).
  absl::Status SetTarget(Node* node, Symbol target);
  absl::Status SetOp(Node* node, OpKind op, Symbol target);
  // Annotations; `value` must not reference nodes. Set in place. The Symbol overload
  // saves interning the key on every call (a pass annotating every node interns it once).
  absl::Status SetMeta(Node* node, absl::string_view key, Argument value);
  absl::Status SetMeta(Node* node, Symbol key, Argument value);
  // Replaces all of the node's meta by `meta`, shared (NodeMeta::Make checked it).
  absl::Status SetMeta(Node* node, NodeMeta meta);
  // Renames to `name` (made unique); returns the name given: the node's own name (valid
  // until the node is renamed or erased; copy it to keep it), so a caller that ignores it
  // pays no string copy.
  const std::string& Rename(Node* node, absl::string_view name);

  // Replaces every use of `old_node` (in args and kwargs of all its users) by
  // `replacement`, and returns how many users were rewired. If `replacement` is itself a
  // user of `old_node`, it remains a user of `old_node`, to avoid introducing a cycle
  // (XLA's rule). Fails, changing nothing, if `replacement` does not precede every user
  // it would gain, or belongs to another graph.
  // Costs O(users of old_node + users of replacement + the slots rewritten), whatever the
  // users' other inputs: unlike SetArgs, a rewired user is not re-registered with its
  // other inputs (their user lists keep their order), and it joins the end of
  // `replacement`'s list unless it is there already. A user with many node args (an
  // output tuple of 10^5 values) is rewritten in place through an index of where each
  // input occurs in it, so replacing its inputs one by one stays linear.
  absl::StatusOr<int> ReplaceAllUsesWith(Node* old_node, Node* replacement);

  // Moves `node` to just before `anchor`. Fails, changing nothing, if the move would
  // break topological order.
  absl::Status MoveBefore(Node* node, Node* anchor);

  // ---- Removing nodes -------------------------------------------------------------
  // Erases `node` and frees it. FailedPrecondition (naming the users) if it still has
  // users; the node's own inputs lose it as a user.
  absl::Status Erase(Node* node);
  // Erases `node` as Erase does and gives its name, exactly, to `heir`, whose own name is
  // freed: what a rewrite does when a new node takes the place of one it replaces (the
  // fused node takes the name of the pattern's root; create it under any free name). The
  // outcome is that of Erase(node) then Rename(heir, <node's name>) -- the name is free by
  // then, so Rename keeps it (graph/NAMING.md) -- but costs one name-index update and moves
  // the name's text instead of copying it. Fails, changing nothing, if either node is null
  // or of another graph, if they are the same node, or if `node` still has users
  // (FailedPrecondition naming them).
  absl::Status EraseAndPassName(Node* node, Node* heir);
  // Erases, until none is left, every node without users that has no side effect:
  // get_attr, call_function, call_module and call_method nodes. Placeholders and the
  // output are kept, as in FX, and so are opaque nodes (node.h kOpaqueMeta: a function
  // the engine does not know may have effects, e.g. torch._assert). Returns how many
  // nodes were erased.
  int EliminateDeadCode();
  // Erases every node of `nodes` (in any order; empty is fine): a batch of dead nodes,
  // e.g. lowering's, for which erasing one by one would pay a cache miss per node in the
  // name index that the batch prefetches ahead. Every user of every node must be in
  // `nodes` too. All of it is checked before anything changes: a null node, a node of
  // another graph or one listed twice (InvalidArgument), or a node with a user outside
  // the batch (FailedPrecondition naming both) fails and leaves the graph unchanged.
  // The outcome is that of erasing the nodes one by one in a users-first order: names
  // are freed and slots (Node::index()) released in the order given. Fastest in
  // users-first order (each node after all its users, as a dead-code walk finds them):
  // one pass over the batch after the checks; any other order takes a second. Costs a
  // bitmap of node_index_bound() bits for a batch of more than a few nodes: call it per
  // batch, not per node.
  absl::Status EraseAll(absl::Span<Node* const> nodes);

  // ---- Reading --------------------------------------------------------------------
  Node* first() const { return head_; }
  Node* last() const { return tail_; }
  size_t size() const { return size_; }
  Node* output() const { return output_; }
  Node* FindNode(absl::string_view name) const;
  std::vector<Node*> Placeholders() const;
  // All nodes in topological order (a snapshot: safe to mutate the graph meanwhile).
  std::vector<Node*> Nodes() const;
  // Calls fn(Node*) in order; fn must not erase nodes other than the one it was given.
  template <typename Fn>
  void ForEachNode(Fn&& fn) const {
    for (Node* n = head_; n != nullptr;) {
      Node* next = n->next();
      fn(n);
      n = next;
    }
  }
  // Every live node's index() is below this bound; it never decreases. It is the largest
  // number of nodes the graph ever held at once (erased nodes' indices are reused first),
  // so a vector of node_index_bound() entries is about size() long. Nodes created after you
  // read it may get indices at or above the value you read: size per-node vectors after
  // creating, or grow them when a new node's index() does not fit.
  size_t node_index_bound() const { return arena_.slots_used(); }
  // True if `a` comes before `b` in the order. O(1).
  bool Precedes(const Node* a, const Node* b) const { return a->order_key_ < b->order_key_; }

  // Checks every graph invariant: order is topological, use-lists are exact, names unique
  // and indexed, exactly one output and it is last, nodes belong to this graph. The error
  // names the first broken invariant and the node. The API keeps these true; Verify exists
  // for graphs read from files and as the check tests run after every pass.
  absl::Status Verify() const;

  // How many live call_module nodes call `target` (have it as their target). O(1): a count
  // per target kept by every mutation that creates, erases or retargets a node (Append,
  // Insert*, GraphBuilder, Erase*, EliminateDeadCode, SetTarget, SetOp), and checked by
  // Verify() against a recount. 0 for a symbol no call_module node has as its target.
  // What proves that a module of the tree is no longer called, without a walk.
  int NumCallers(Symbol target) const {
    return target.id() < callers_.size() ? static_cast<int>(callers_[target.id()]) : 0;
  }

  // This model's module-binding generations (graph/module_binding.h): GraphModule's caches
  // and the modules of its tree read and bump them; node creation and retargeting of
  // call_module nodes bump the binding generation here.
  ModuleBindingGenerations& module_bindings() { return module_bindings_; }
  const ModuleBindingGenerations& module_bindings() const { return module_bindings_; }

  // A name not yet used in this graph, derived from `hint` as FX does ("add" -> "add_1").
  // Not const: it advances the per-hint suffix counters (graph/NAMING.md) that keep
  // naming O(1), so it is an edit for the threading contract (graph/graph_module.h).
  std::string UniqueName(absl::string_view hint);

 private:
  friend class GraphBuilder;
  friend class graph_internal::GraphTestPeer;  // tests/graph: breaks invariants for Verify

  // `named`: false leaves the node without a name (InsertBeforeUnnamed).
  absl::StatusOr<Node*> InsertAt(Node* before, NodeSpec&& spec, bool named = true);
  // Checks that every node referenced by `args`/`kwargs` is in this graph and precedes
  // position `before` (nullptr: the end). The error message starts with ": "; callers
  // put the node's description in front (Prefixed).
  absl::Status CheckInputsPrecede(absl::Span<const Argument> args, const Kwargs& kwargs,
                                  const Node* before) const;
  absl::Status CheckArgPrecedes(const Argument& arg, const Node* before) const;
  // Links `node` before `before` (nullptr: at the end) and assigns its order key.
  void Link(Node* node, Node* before);
  void Unlink(Node* node);
  void Renumber();
  void AddUsesOf(Node* user);
  void RemoveUsesOf(Node* user);
  // Where each input occurs in the top-level args of a user with many node references
  // (ReplaceAllUsesWith's index; graph.cc). Built on the first ReplaceAllUsesWith that
  // rewires such a user, kept through the rewrites it does itself, and dropped whenever the
  // user's inputs change any other way (every such change passes RemoveUsesOf) or the user
  // is destroyed.
  // Per input, its slots: (arg index << kItemBits) | (list item + 1), or
  // arg index << kItemBits for the arg itself.
  struct WideUses {
    static constexpr int kItemBits = 24;
    absl::flat_hash_map<const Node*, absl::InlinedVector<uint64_t, 1>> slots;
  };
  absl::flat_hash_map<const Node*, std::unique_ptr<WideUses>> wide_uses_;
  void ForgetWideUses(const Node* user);
  // The index of `user`, built if needed; nullptr if it has few node references or some
  // that no index entry can name (a node in a nested list or in kwargs).
  WideUses* WideUsesOf(Node* user);
  // Takes `user` off `input`'s use-list, where it is listed at most once.
  static void RemoveUser(Node* input, const Node* user);
  // Empties `node`'s use-list (and its dropped front entries).
  static void ClearUsers(Node* node);
  using HashedName = graph_internal::HashedName;
  // Gives `node` (not yet in the name index) a unique name derived from `hint`, and
  // indexes it.
  void NameNewNode(Node* node, absl::string_view hint);
  // Indexes `node` under `candidate` and gives it that name, if no node has it.
  bool ClaimName(Node* node, HashedName candidate);
  // Removes `node` (under its current name) from the name index; nothing for a node
  // without a name yet (InsertBeforeUnnamed), which is not in it. Inline: its callers are
  // in graph.cc (Erase, EraseAll, EraseAndPassName) and graph_names.cc (Rename), and a call
  // cost each erase 3 % of its instructions (callgrind).
  void EraseFromNameIndex(Node* node) {
    if (node->name_.empty()) return;  // not named yet (InsertBeforeUnnamed): not indexed
    // Found by the node's kept hash and slot number: no name is read.
    by_name_.Erase(node->name_hash_, node->index_);
    NoteNameFreed(node->name_hash_);
  }
  struct SuffixCounter;
  // The naming rule (graph/NAMING.md) on the sanitized hint in `*name`: probes candidates
  // with claim(HashedName) -> graph_internal::Claim until one is kClaimed. `takes_name`:
  // the caller takes the free candidate (false: UniqueName only computes it).
  template <typename ClaimFn>
  void MakeUnique(graph_internal::NameChars* name, ClaimFn&& claim, bool takes_name);
  // Constructs a node in the arena / destroys one and returns its slot.
  Node* NewNode(OpKind op, Symbol target, std::string name);
  void DestroyNode(Node* node);

  // Where the nodes live: side by side in creation order, so walks over the graph read
  // mostly contiguous memory. Declared first: destroyed after every node is.
  NodeArena arena_{sizeof(Node), alignof(Node)};
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  ModuleBindingGenerations module_bindings_;
  Node* output_ = nullptr;
  size_t size_ = 0;
  // graph_internal::NameHashOf of a name, or the hash a HashedName already holds: the
  // suffix counters' keys.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(absl::string_view name) const { return graph_internal::NameHashOf(name); }
    size_t operator()(const HashedName& name) const { return name.hash; }
  };
  struct NameEqual {
    using is_transparent = void;
    static absl::string_view Key(absl::string_view name) { return name; }
    static absl::string_view Key(const HashedName& name) { return name.text; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const { return Key(a) == Key(b); }
  };
  // Nodes indexed by name (graph_internal::NameIndex: hash and slot number per entry).
  graph_internal::NameIndex by_name_{&arena_};
  // Per base name, the suffix last handed out (graph/NAMING.md), so naming stays O(1) with
  // many `add_N` nodes; and what proves without a probe that base_<last> is still taken
  // (no name with its hash was freed since a node took it), which saves the one probe
  // that nearly always finds it taken when the same hint comes again.
  // The same kind of proof for the base itself: a hint such as "dequantize" that comes
  // again and again is known taken without probing it (then only base_<last + 1> is
  // probed: one probe per new node).
  struct SuffixCounter {
    int64_t last = 0;
    bool taken = false;       // a node took base_<last> (UniqueName only computes names)
    uint32_t taken_hash = 0;  // NameHash of base_<last>
    uint64_t taken_at = 0;    // names_freed_ when it was taken
    bool base_taken = false;  // a probe found the base itself taken by a node ...
    uint64_t base_taken_at = 0;  // ... when names_freed_ was this
  };
  // True if a name of hash `hash` known taken when names_freed_ was `taken_at` is surely
  // still taken: no name of that hash was freed since (false when unsure).
  bool StillTaken(uint32_t hash, uint64_t taken_at) const;
  // A bit per counter key's hash (bit hash >> 26): a clear bit proves a hint has no counter
  // without probing next_suffix_ (an explicit free name, as prepare's observers have).
  static uint64_t CounterBit(uint32_t hash) { return uint64_t{1} << (hash >> 26); }
  uint64_t counter_bits_ = 0;
  // Every name leaving the index passes here (EraseFromNameIndex: Erase, Rename).
  void NoteNameFreed(uint32_t hash) {
    freed_hashes_[names_freed_ % kFreedWindow] = hash;
    ++names_freed_;
  }
  absl::flat_hash_map<std::string, SuffixCounter, NameHash, NameEqual> next_suffix_;
  // The counter of `key` (its hash in key.hash), or nullptr: counter_bits_ (inline: most
  // explicit names, as prepare's observers have, stop there), then the cache below, then
  // next_suffix_ (FindCounterPastBits).
  SuffixCounter* FindCounter(HashedName key) {
    if ((counter_bits_ & CounterBit(key.hash)) == 0) return nullptr;
    return FindCounterPastBits(key);
  }
  SuffixCounter* FindCounterPastBits(HashedName key);
  // The counters found last, one per key hash % kCounterCacheSize: a pass names its nodes
  // from a few hints in turn (convert: "quantize_per_tensor", "dequantize"), and a hit is a
  // compare of the key instead of a probe of next_suffix_ (~100 instructions). Pointers
  // into next_suffix_, stable until it rehashes: cleared whenever a counter is added (it
  // never loses one).
  struct CounterCacheEntry {
    uint32_t hash = 0;
    const std::string* key = nullptr;
    SuffixCounter* counter = nullptr;
  };
  static constexpr uint32_t kCounterCacheSize = 4;
  CounterCacheEntry counter_cache_[kCounterCacheSize];
  // The hashes of the last kFreedWindow names freed, and how many names were ever freed.
  static constexpr uint64_t kFreedWindow = 8;
  uint64_t names_freed_ = 0;
  uint32_t freed_hashes_[kFreedWindow] = {};

  // NumCallers: per Symbol id, the live call_module nodes with that target. Dense (ids are
  // dense and a graph's targets are most of the symbols its process interned), 4 bytes per
  // id up to the largest call_module target's; grown only when a node calls a larger id.
  std::vector<uint32_t> callers_;
  // Counts `node` as a caller of its target if it is a call_module node / stops counting it.
  void CountCaller(const Node* node) {
    if (node->op_ != OpKind::kCallModule) return;
    const uint32_t id = node->target_.id();
    if (id >= callers_.size()) GrowCallers(id);
    ++callers_[id];
  }
  void UncountCaller(const Node* node) {
    if (node->op_ == OpKind::kCallModule) --callers_[node->target_.id()];
  }
  void GrowCallers(uint32_t id);
  // Changes `node`'s op and target, keeping NumCallers (SetTarget, SetOp; checked before).
  void Retarget(Node* node, OpKind op, Symbol target);
  // Verify's check of callers_ against a recount of the call_module nodes.
  absl::Status VerifyCallerCounts() const;
};

// For model-file loaders only: adds nodes in the order given, without the API's order
// checks, so that Verify() can judge a graph as a file describes it. Use-lists are still
// derived here, never taken from the file.
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph* graph) : graph_(graph) {}
  // Appends a node with no inputs yet. Fails only if `name` is empty or taken.
  absl::StatusOr<Node*> AddNode(OpKind op, Symbol target, absl::string_view name);
  // Sets the inputs of a node made by AddNode (once) and records its uses.
  void SetInputs(Node* node, std::vector<Argument> args, Kwargs kwargs);
  void SetMeta(Node* node, Kwargs meta);
  // Shares `meta` (e.g. another node's shared_meta(), when copying a graph).
  void SetMeta(Node* node, NodeMeta meta);

 private:
  Graph* graph_;
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_GRAPH_H_
