#include "graph/graph.h"

#include <algorithm>
#include <cstring>
#include <string.h>  // memrchr (GNU)
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/status_macros.h"

namespace fuselage {

using graph_internal::CountUseListSteps;
namespace {

constexpr uint64_t kKeySpacing = uint64_t{1} << 20;

// Position of the last `c` in `s`, or npos. glibc's memrchr compares 32 bytes at a time: a
// byte loop cost 8 instructions a character ("torch.quantize_per_tensor": 160 a name).
size_t FindLast(absl::string_view s, char c) {
  if (s.empty()) return absl::string_view::npos;
  const void* found = memrchr(s.data(), c, s.size());
  return found == nullptr ? absl::string_view::npos
                          : static_cast<size_t>(static_cast<const char*>(found) - s.data());
}

// What FX derives a default name from: call_function / call_method keep the last part
// of the qualified name ("torch.nn.functional.relu" -> "relu"); other ops the whole target.
absl::string_view DefaultNameHint(OpKind op, Symbol target) {
  absl::string_view t = target.name();
  if (op == OpKind::kCallFunction || op == OpKind::kCallMethod) {
    const size_t dot = FindLast(t, '.');
    if (dot != absl::string_view::npos) t = t.substr(dot + 1);
  }
  return t;
}

// Adds `prefix` before an error's message (built only on the error path).
template <typename Prefix>
absl::Status Prefixed(absl::Status status, Prefix&& prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix(), status.message()));
}

// The prefix "node '<name>'" for Prefixed.
auto NodeNamed(const Node* node) {
  return [node] { return absl::StrCat("node '", node->name(), "'"); };
}

std::string UsersString(const Node* node) {
  return absl::StrJoin(node->users(), ", ",
                       [](std::string* out, const Node* u) { out->append(u->name()); });
}

}  // namespace

absl::string_view OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kPlaceholder: return "placeholder";
    case OpKind::kGetAttr: return "get_attr";
    case OpKind::kCallFunction: return "call_function";
    case OpKind::kCallModule: return "call_module";
    case OpKind::kCallMethod: return "call_method";
    case OpKind::kOutput: return "output";
  }
  return "<invalid>";
}

std::optional<OpKind> OpKindFromName(absl::string_view name) {
  for (OpKind op : {OpKind::kPlaceholder, OpKind::kGetAttr, OpKind::kCallFunction,
                    OpKind::kCallModule, OpKind::kCallMethod, OpKind::kOutput}) {
    if (OpKindName(op) == name) return op;
  }
  return std::nullopt;
}

const Argument* Node::FindKwarg(absl::string_view key) const {
  for (const Kwarg& kw : kwargs()) {
    if (kw.first.name() == key) return &kw.second;
  }
  return nullptr;
}

const Argument* Node::FindMeta(absl::string_view key) const {
  for (const Kwarg& kw : meta()) {
    if (kw.first.name() == key) return &kw.second;
  }
  return nullptr;
}

bool Node::opaque() const {
  const Argument* opaque = FindMeta(kOpaqueMeta);
  return opaque != nullptr && opaque->is_bool() && opaque->as_bool();
}

absl::StatusOr<NodeMeta> NodeMeta::Make(Kwargs entries) {
  for (const Kwarg& kw : entries) {
    if (kw.first.empty()) return absl::InvalidArgumentError("meta: empty key");
    if (kw.second.ContainsNode()) {
      return absl::InvalidArgumentError(
          absl::StrCat("meta '", kw.first.name(), "' must not reference nodes"));
    }
  }
  return FromEntries(std::move(entries));
}

NodeMeta NodeMeta::FromEntries(Kwargs entries) {
  NodeMeta meta;
  if (!entries.empty()) {
    meta.block_ = new Block;
    meta.block_->entries = std::move(entries);
  }
  return meta;
}

const Kwargs& NodeMeta::entries() const {
  return block_ != nullptr ? block_->entries : Node::EmptyKwargs();
}

Kwargs& NodeMeta::MutableEntries() {
  if (block_ == nullptr) {
    block_ = new Block;
    // Room for two: the passes set two (fusion's "pattern", lowering's "output_qparams").
    block_->entries.reserve(2);
  } else if (shared()) {
    Block* copy = new Block;
    copy->entries = block_->entries;
    Unref();
    block_ = copy;
  }
  return block_->entries;
}

const Kwargs& Node::EmptyKwargs() {
  static const Kwargs* empty = new Kwargs();
  return *empty;
}

std::vector<Node*> Node::InputNodes() const {
  std::vector<Node*> inputs;
  // Past a few inputs a set dedups them (a linear search per use made an output of 10^5
  // values quadratic); below, the search over a handful is cheaper than hashing.
  constexpr size_t kSearchedLinearly = 16;
  absl::flat_hash_set<const Node*> seen;
  ForEachInputUse([&](Node* n) {
    if (inputs.size() < kSearchedLinearly) {
      CountUseListSteps(inputs.size());
      if (std::find(inputs.begin(), inputs.end(), n) == inputs.end()) inputs.push_back(n);
      if (inputs.size() == kSearchedLinearly) seen.insert(inputs.begin(), inputs.end());
      return;
    }
    CountUseListSteps(1);
    if (seen.insert(n).second) inputs.push_back(n);
  });
  return inputs;
}

std::string Node::ToString() const {
  std::string args =
      Argument::Tuple(std::vector<Argument>(args_.begin(), args_.end())).ToString();
  std::string kwargs_text = absl::StrJoin(kwargs(), ", ", [](std::string* out, const Kwarg& kw) {
    absl::StrAppend(out, "'", kw.first.name(), "': ", kw.second.ToString());
  });
  return absl::StrCat("%", name_, " : ", OpKindName(op_), "[target=", target_.name(),
                      "](args = ", args, ", kwargs = {", kwargs_text, "})");
}

Graph::~Graph() {
  for (Node* n = head_; n != nullptr;) {
    Node* next = n->next_;
    DestroyNode(n);
    n = next;
  }
}

Node* Graph::NewNode(OpKind op, Symbol target, std::string name) {
  uint32_t index;
  void* slot = arena_.Allocate(&index);
  Node* node = new (slot) Node(this, index, op, target, std::move(name));
  // A new call_module node has no cached type yet: make this model's caches stale.
  if (op == OpKind::kCallModule) module_bindings_.InvalidateBindings();
  CountCaller(node);
  return node;
}

void Graph::DestroyNode(Node* node) {
  ForgetWideUses(node);
  UncountCaller(node);
  const uint32_t index = node->index_;
  node->~Node();
  arena_.Free(node, index);
}

// ---- Order and links ----------------------------------------------------------------

void Graph::Renumber() {
  uint64_t key = kKeySpacing;
  for (Node* n = head_; n != nullptr; n = n->next_, key += kKeySpacing) n->order_key_ = key;
}

void Graph::Link(Node* node, Node* before) {
  Node* after = before != nullptr ? before->prev_ : tail_;
  node->prev_ = after;
  node->next_ = before;
  if (after != nullptr) after->next_ = node; else head_ = node;
  if (before != nullptr) before->prev_ = node; else tail_ = node;
  ++size_;
  const uint64_t lo = after != nullptr ? after->order_key_ : 0;
  if (before == nullptr) {
    node->order_key_ = lo + kKeySpacing;
    return;
  }
  const uint64_t hi = before->order_key_;
  if (hi - lo < 2) {
    Renumber();
  } else {
    node->order_key_ = lo + (hi - lo) / 2;
  }
}

void Graph::Unlink(Node* node) {
  if (node->prev_ != nullptr) node->prev_->next_ = node->next_; else head_ = node->next_;
  if (node->next_ != nullptr) node->next_->prev_ = node->prev_; else tail_ = node->prev_;
  node->prev_ = node->next_ = nullptr;
  --size_;
}

// ---- Use-lists ----------------------------------------------------------------------

void Graph::AddUsesOf(Node* user) {
  // `user` is on no input's list when this starts (a new node, or after RemoveUsesOf), and
  // only `user` is appended here: it is already on an input's list exactly if it is that
  // list's last entry (appended for an earlier use of the same input). O(1) per use where
  // a search of the list made 10^5 users of one node quadratic.
  user->ForEachInputUse([user](Node* input) {
    auto& users = input->users_;
    CountUseListSteps(1);
    // users_ holds no dropped entries once no user is left (RemoveUser), so back() is a
    // live user whenever the list is not empty.
    if (users.empty() || users.back() != user) users.push_back(user);
  });
}

void Graph::RemoveUsesOf(Node* user) {
  ForgetWideUses(user);  // its inputs are about to change
  user->ForEachInputUse([user](Node* input) { RemoveUser(input, user); });
}

void Graph::RemoveUser(Node* input, const Node* user) {
  // A user is listed once; a repeated use finds it gone already. The user is most often
  // the last one listed (the newest, or the only one): popped without a search and
  // without InlinedVector::erase's general shift. The first one (a pass replacing the
  // users of a node with 10^5 of them in order) is dropped by moving the list's front:
  // erasing it shifted the whole list, which made such a pass quadratic.
  auto& users = input->users_;
  const size_t front = input->users_front_;
  CountUseListSteps(1);
  if (users.size() == front) return;  // no user left
  if (users.back() == user) {
    users.pop_back();
  } else if (users[front] == user) {
    constexpr uint32_t kMaxFront = (1u << 24) - 1;
    const size_t dropped = front + 1;
    if (dropped < users.size() - dropped && dropped < kMaxFront) {
      input->users_front_ = static_cast<uint32_t>(dropped);
      return;
    }
    // As many dropped entries as live ones: compacting now costs what the drops saved.
    CountUseListSteps(users.size());
    users.erase(users.begin(), users.begin() + static_cast<std::ptrdiff_t>(dropped));
    input->users_front_ = 0;
  } else {
    const auto begin = users.begin() + static_cast<std::ptrdiff_t>(front);
    const auto it = std::find(begin, users.end(), user);
    // The search, and the shift of the entries after the one erased.
    CountUseListSteps(static_cast<uint64_t>(users.end() - begin));
    if (it != users.end()) users.erase(it);
  }
  // No user left: no dropped entries either, so users_.back() is always a live user.
  if (users.size() == input->users_front_) ClearUsers(input);
}

void Graph::ClearUsers(Node* node) {
  node->users_.clear();
  node->users_front_ = 0;
}

namespace {
thread_local uint64_t use_list_steps = 0;
}  // namespace

uint64_t graph_internal::UseListSteps() { return use_list_steps; }
void graph_internal::CountUseListSteps(uint64_t steps) { use_list_steps += steps; }

// ---- Creating -----------------------------------------------------------------------

absl::StatusOr<Node*> Graph::InsertAt(Node* before, NodeSpec&& spec, bool named) {
  // Names the node in errors; built only on an error (passes insert millions of nodes).
  const auto what = [&spec] {
    return absl::StrCat("new ", OpKindName(spec.op), " node '",
                        spec.name.empty() ? spec.target.name() : spec.name.view(), "'");
  };
  if (before != nullptr && before->graph_ != this) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": anchor belongs to another graph"));
  }
  if (spec.op == OpKind::kOutput) {
    if (output_ != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(what(), ": the graph already has an output node '", output_->name(), "'"));
    }
    if (before != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(what(), ": the output node must be last"));
    }
  } else if (output_ != nullptr && before == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what(), ": cannot be placed after the output node"));
  }
  // The new node goes just before `before`; its inputs must precede that position, i.e.
  // precede `before` itself or be the current last node when appending.
  if (spec.target.empty()) {
    // Verify() rejects a node without a target, so creating one must fail here.
    return absl::InvalidArgumentError(absl::StrCat(what(), ": empty target"));
  }
  Node* position = before;
  RETURN_IF_ERROR(Prefixed(CheckInputsPrecede(spec.args, spec.kwargs, position), what));
  for (const Kwarg& kw : spec.kwargs) {
    if (kw.first.empty()) return absl::InvalidArgumentError(absl::StrCat(what(), ": empty kwarg name"));
  }
  Node* node = NewNode(spec.op, spec.target, std::string());
  if (!named) {
    // Named later (InsertBeforeUnnamed): in no index until then.
  } else if (spec.op == OpKind::kOutput) {
    NameNewNode(node, "output");
  } else if (spec.name.empty()) {
    NameNewNode(node, DefaultNameHint(spec.op, spec.target));
  } else {
    NameNewNode(node, spec.name.view());
  }
  node->set_args(std::move(spec.args));
  node->set_kwargs(std::move(spec.kwargs));
  node->meta_ = std::move(spec.meta);
  Link(node, before);
  AddUsesOf(node);
  if (node->op_ == OpKind::kOutput) output_ = node;
  return node;
}

absl::StatusOr<Node*> Graph::Append(NodeSpec&& spec) {
  const bool is_output = spec.op == OpKind::kOutput;
  return InsertAt(is_output ? nullptr : output_, std::move(spec));
}

absl::StatusOr<Node*> Graph::InsertBefore(Node* anchor, NodeSpec&& spec) {
  if (anchor == nullptr) return absl::InvalidArgumentError("InsertBefore: null anchor");
  return InsertAt(anchor, std::move(spec));
}

absl::StatusOr<Node*> Graph::InsertAfter(Node* anchor, NodeSpec&& spec) {
  if (anchor == nullptr) return absl::InvalidArgumentError("InsertAfter: null anchor");
  if (anchor->graph_ != this) {
    return absl::InvalidArgumentError("InsertAfter: anchor belongs to another graph");
  }
  if (anchor == output_) {
    return absl::FailedPreconditionError(
        "InsertAfter: nothing can be placed after the output node");
  }
  if (anchor->next_ == nullptr) {
    // Appending at the very end: the inputs only need to be in the graph.
    if (spec.op == OpKind::kOutput) return InsertAt(nullptr, std::move(spec));
    RETURN_IF_ERROR(Prefixed(CheckInputsPrecede(spec.args, spec.kwargs, nullptr), [anchor] {
      return absl::StrCat("new node after '", anchor->name(), "'");
    }));
    return InsertAt(nullptr, std::move(spec));
  }
  return InsertAt(anchor->next_, std::move(spec));
}

absl::StatusOr<Node*> Graph::InsertBeforeUnnamed(Node* anchor, NodeSpec&& spec) {
  if (anchor == nullptr) return absl::InvalidArgumentError("InsertBeforeUnnamed: null anchor");
  if (!spec.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InsertBeforeUnnamed: new node of target '", spec.target.name(),
        "' is given name '", spec.name.view(), "'; an unnamed node takes none"));
  }
  if (spec.op == OpKind::kOutput) {
    return absl::InvalidArgumentError("InsertBeforeUnnamed: the output node is always named");
  }
  return InsertAt(anchor, std::move(spec), /*named=*/false);
}

absl::StatusOr<Node*> Graph::AddPlaceholder(absl::string_view name) {
  return Append({OpKind::kPlaceholder, Symbol::Intern(name), {}, {}, name});
}

absl::StatusOr<Node*> Graph::AddGetAttr(absl::string_view path, absl::string_view name) {
  return Append({OpKind::kGetAttr, Symbol::Intern(path), {}, {}, name});
}

absl::StatusOr<Node*> Graph::AddCallModule(absl::string_view path, NodeArgs args,
                                           Kwargs kwargs, absl::string_view name) {
  return Append({OpKind::kCallModule, Symbol::Intern(path), std::move(args), std::move(kwargs),
                 name});
}

absl::StatusOr<Node*> Graph::AddCallFunction(absl::string_view function,
                                             NodeArgs args, Kwargs kwargs,
                                             absl::string_view name) {
  return Append({OpKind::kCallFunction, Symbol::Intern(function), std::move(args),
                 std::move(kwargs), name});
}

absl::StatusOr<Node*> Graph::AddCallMethod(absl::string_view method, NodeArgs args,
                                           Kwargs kwargs, absl::string_view name) {
  return Append({OpKind::kCallMethod, Symbol::Intern(method), std::move(args),
                 std::move(kwargs), name});
}

absl::StatusOr<Node*> Graph::SetOutput(Argument result) {
  return Append({OpKind::kOutput, Symbol::Intern("output"), {std::move(result)}, {}, "output"});
}

// ---- Changing -----------------------------------------------------------------------

absl::Status Graph::SetArgs(Node* node, NodeArgs args) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetArgs: node is not in this graph");
  }
  RETURN_IF_ERROR(Prefixed(CheckInputsPrecede(args, {}, node),
                           NodeNamed(node)));
  RemoveUsesOf(node);
  node->set_args(std::move(args));
  AddUsesOf(node);
  return absl::OkStatus();
}

absl::Status Graph::SetArg(Node* node, size_t index, Argument value) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetArg: node is not in this graph");
  }
  if (index >= node->args_.size()) {
    return absl::OutOfRangeError(absl::StrCat("node '", node->name(), "': arg index ", index,
                                              " out of range; it has ", node->args_.size(),
                                              " args"));
  }
  RETURN_IF_ERROR(Prefixed(CheckArgPrecedes(value, node),
                           NodeNamed(node)));
  // In place; the node is still re-registered with all its inputs, as SetArgs does (and
  // FX's __update_args_kwargs): it moves to the end of each input's user list.
  RemoveUsesOf(node);
  node->args_[index] = std::move(value);
  AddUsesOf(node);
  return absl::OkStatus();
}

absl::Status Graph::SetKwargs(Node* node, Kwargs kwargs) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetKwargs: node is not in this graph");
  }
  RETURN_IF_ERROR(Prefixed(CheckInputsPrecede({}, kwargs, node),
                           NodeNamed(node)));
  RemoveUsesOf(node);
  node->set_kwargs(std::move(kwargs));
  AddUsesOf(node);
  return absl::OkStatus();
}

absl::Status Graph::SetKwarg(Node* node, absl::string_view key, Argument value) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetKwarg: node is not in this graph");
  }
  if (key.empty()) return absl::InvalidArgumentError("SetKwarg: empty kwarg name");
  Kwargs kwargs = node->kwargs();
  const Symbol k = Symbol::Intern(key);
  auto it = std::find_if(kwargs.begin(), kwargs.end(), [k](const Kwarg& kw) { return kw.first == k; });
  if (it != kwargs.end()) {
    it->second = std::move(value);
  } else {
    kwargs.emplace_back(k, std::move(value));
  }
  return SetKwargs(node, std::move(kwargs));
}

absl::Status Graph::RemoveKwarg(Node* node, absl::string_view key) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("RemoveKwarg: node is not in this graph");
  }
  Kwargs kwargs = node->kwargs();
  auto it = std::find_if(kwargs.begin(), kwargs.end(),
                         [key](const Kwarg& kw) { return kw.first.name() == key; });
  if (it == kwargs.end()) {
    return absl::NotFoundError(absl::StrCat("node '", node->name(), "' has no kwarg '", key, "'"));
  }
  kwargs.erase(it);
  return SetKwargs(node, std::move(kwargs));
}

absl::Status Graph::SetTarget(Node* node, Symbol target) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetTarget: node is not in this graph");
  }
  if (target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node->name(), "': empty target"));
  }
  Retarget(node, node->op_, target);
  return absl::OkStatus();
}

void Graph::Retarget(Node* node, OpKind op, Symbol target) {
  UncountCaller(node);
  node->op_ = op;
  node->target_ = target;
  CountCaller(node);
  module_bindings_.InvalidateBindings();  // A retargeted call_module node calls another module.
}

void Graph::GrowCallers(uint32_t id) {
  // Half again (amortized O(1) per id), not the doubling of a plain resize: the table is
  // per-graph memory, counted per node (graph_bench BM_MemoryPerNode).
  const size_t size = std::max<size_t>(size_t{id} + 1, callers_.size() + callers_.size() / 2);
  callers_.reserve(size);
  callers_.resize(size, 0);
}

absl::Status Graph::SetOp(Node* node, OpKind op, Symbol target) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetOp: node is not in this graph");
  }
  if ((op == OpKind::kOutput) != (node->op_ == OpKind::kOutput)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node->name(), "': cannot turn a node into or out of output"));
  }
  if (target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node->name(), "': empty target"));
  }
  Retarget(node, op, target);
  return absl::OkStatus();
}

absl::Status Graph::SetMeta(Node* node, absl::string_view key, Argument value) {
  return SetMeta(node, Symbol::Intern(key), std::move(value));
}

absl::Status Graph::SetMeta(Node* node, Symbol k, Argument value) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetMeta: node is not in this graph");
  }
  if (k.empty()) return absl::InvalidArgumentError("SetMeta: empty meta key");
  if (value.ContainsNode()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node->name(), "': meta '",
                                                   k.name(), "' must not reference nodes"));
  }
  // In place (the other entries are neither copied nor moved) unless the block is shared
  // with other nodes: then this node gets its own copy first.
  Kwargs& meta = node->meta_.MutableEntries();
  auto it = std::find_if(meta.begin(), meta.end(), [k](const Kwarg& kw) { return kw.first == k; });
  if (it != meta.end()) {
    it->second = std::move(value);
  } else {
    meta.emplace_back(k, std::move(value));
  }
  return absl::OkStatus();
}

absl::Status Graph::SetMeta(Node* node, NodeMeta meta) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("SetMeta: node is not in this graph");
  }
  node->meta_ = std::move(meta);
  return absl::OkStatus();
}

void Graph::ForgetWideUses(const Node* user) {
  if (!wide_uses_.empty()) wide_uses_.erase(user);
}

Graph::WideUses* Graph::WideUsesOf(Node* user) {
  // Below this many node references a scan of the args is as cheap as the index.
  constexpr size_t kWideUser = 32;
  if (auto it = wide_uses_.find(user); it != wide_uses_.end()) return it->second.get();
  if (user->kwargs_ != nullptr) {
    for (const Kwarg& kw : *user->kwargs_) {
      if (kw.second.ContainsNode()) return nullptr;
    }
  }
  size_t refs = 0;
  for (const Argument& a : user->args_) {
    if (a.is_node()) {
      ++refs;
    } else if (a.is_slice() && a.ContainsNode()) {
      return nullptr;  // a slice's node parts are not indexed
    } else if (a.is_list()) {
      for (const Argument& item : a.items()) {
        // nested: not indexed
        if ((item.is_list() || item.is_slice()) && item.ContainsNode()) return nullptr;
        refs += item.is_node();
      }
      if (a.items().size() >= (size_t{1} << WideUses::kItemBits) - 1) return nullptr;
    }
  }
  if (refs < kWideUser) return nullptr;
  auto index = std::make_unique<WideUses>();
  for (size_t i = 0; i < user->args_.size(); ++i) {
    const Argument& a = user->args_[i];
    const uint64_t base = uint64_t{i} << WideUses::kItemBits;
    if (a.is_node()) {
      index->slots[a.as_node()].push_back(base);
    } else if (a.is_list()) {
      const auto items = a.items();
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].is_node()) index->slots[items[k].as_node()].push_back(base | (k + 1));
      }
    }
  }
  CountUseListSteps(refs);
  return wide_uses_.emplace(user, std::move(index)).first->second.get();
}

absl::StatusOr<int> Graph::ReplaceAllUsesWith(Node* old_node, Node* replacement) {
  if (old_node == nullptr || replacement == nullptr || old_node->graph_ != this ||
      replacement->graph_ != this) {
    return absl::InvalidArgumentError("ReplaceAllUsesWith: both nodes must be in this graph");
  }
  if (old_node == replacement) return 0;
  if (replacement->op_ == OpKind::kOutput) {
    return absl::InvalidArgumentError("ReplaceAllUsesWith: the output node cannot be used");
  }
  absl::InlinedVector<Node*, 4> users;
  bool replacement_uses_old = false;
  for (Node* user : old_node->users()) {
    if (user == replacement) {  // Keeps its use: rewiring it would make a cycle.
      replacement_uses_old = true;
      continue;
    }
    if (!Precedes(replacement, user)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ReplaceAllUsesWith('", old_node->name(), "', '", replacement->name(), "'): '",
          replacement->name(), "' does not come before user '", user->name(),
          "'; the order must stay topological"));
    }
    users.push_back(user);
  }
  CountUseListSteps(old_node->num_users());
  // Slots that are the node itself are rewritten in place; only lists that contain it are
  // rebuilt (they are shared and immutable) or, for a wide user, written in place if not
  // shared; every other arg stays as it is.
  auto swap = [&](Node* n) { return n == old_node ? replacement : n; };
  auto rewrite = [&](Argument& a) {
    if (a.is_node()) {
      if (a.as_node() == old_node) a = Argument(replacement);
    } else if (a.is_list() || a.is_slice()) {
      bool contains = false;
      a.ForEachNode([&](Node* n) { contains = contains || n == old_node; });
      CountUseListSteps(a.items().size());
      if (contains) a = a.MapNodes(swap);
    }
  };
  // Which users `replacement` has already, so none is listed twice: a search of its list
  // per rewired user while it is short, a set once it is long.
  constexpr size_t kSearchedLinearly = 16;
  absl::flat_hash_set<const Node*> replacement_users;
  bool users_in_set = false;
  const auto already_user = [&](const Node* user) {
    const auto list = replacement->users();
    if (!users_in_set && list.size() > kSearchedLinearly) {
      replacement_users.insert(list.begin(), list.end());
      CountUseListSteps(list.size());
      users_in_set = true;
    }
    if (!users_in_set) {
      CountUseListSteps(list.size());
      return std::find(list.begin(), list.end(), user) != list.end();
    }
    CountUseListSteps(1);
    return replacement_users.contains(user);
  };
  for (Node* user : users) {
    if (WideUses* wide = WideUsesOf(user)) {
      auto it = wide->slots.find(old_node);
      if (it != wide->slots.end()) {
        auto moved = std::move(it->second);
        wide->slots.erase(it);
        for (const uint64_t slot : moved) {
          Argument& a = user->args_[slot >> WideUses::kItemBits];
          const uint64_t item = slot & ((uint64_t{1} << WideUses::kItemBits) - 1);
          if (item == 0) {
            a = Argument(replacement);
          } else {
            a.SetListItem(item - 1, replacement);
          }
        }
        CountUseListSteps(moved.size());
        auto& to = wide->slots[replacement];
        to.insert(to.end(), moved.begin(), moved.end());
      }
    } else {
      for (Argument& a : user->args_) rewrite(a);
      if (user->kwargs_ != nullptr) {
        for (Kwarg& kw : *user->kwargs_) rewrite(kw.second);
      }
      CountUseListSteps(user->args_.size());
    }
    if (!already_user(user)) {
      replacement->users_.push_back(user);
      if (users_in_set) replacement_users.insert(user);
    }
  }
  // Every user but `replacement` was rewired: that is the whole list now.
  ClearUsers(old_node);
  if (replacement_uses_old) old_node->users_.push_back(replacement);
  return static_cast<int>(users.size());
}

absl::Status Graph::MoveBefore(Node* node, Node* anchor) {
  if (node == nullptr || anchor == nullptr || node->graph_ != this || anchor->graph_ != this) {
    return absl::InvalidArgumentError("MoveBefore: both nodes must be in this graph");
  }
  if (node == anchor || node->next_ == anchor) return absl::OkStatus();
  if (node == output_) {
    return absl::FailedPreconditionError("MoveBefore: the output node must stay last");
  }
  const std::string what = absl::StrCat("moving '", node->name(), "' before '", anchor->name(), "'");
  // Inputs must precede the new position, and users must follow it.
  RETURN_IF_ERROR(Prefixed(CheckInputsPrecede(node->args_, node->kwargs(), anchor),
                           [&what] { return what; }));
  for (Node* user : node->users()) {
    if (Precedes(user, anchor)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": user '", user->name(), "' would come before it"));
    }
  }
  Unlink(node);
  Link(node, anchor);
  return absl::OkStatus();
}

// ---- Removing -----------------------------------------------------------------------

absl::Status Graph::Erase(Node* node) {
  if (node == nullptr || node->graph_ != this) {
    return absl::InvalidArgumentError("Erase: node is not in this graph");
  }
  if (node->num_users() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot erase node '", node->name(), "': it still has ", node->num_users(),
        " user(s): ", UsersString(node)));
  }
  RemoveUsesOf(node);
  EraseFromNameIndex(node);
  if (node == output_) output_ = nullptr;
  Unlink(node);
  DestroyNode(node);
  return absl::OkStatus();
}

absl::Status Graph::EraseAndPassName(Node* node, Node* heir) {
  if (node == nullptr || heir == nullptr || node->graph_ != this || heir->graph_ != this) {
    return absl::InvalidArgumentError("EraseAndPassName: both nodes must be in this graph");
  }
  if (node == heir) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EraseAndPassName: node '", node->name(), "' cannot pass its name to itself"));
  }
  if (node->name_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EraseAndPassName: the node to erase has no name yet (inserted unnamed) to pass to '",
        heir->name(), "'"));
  }
  if (node->num_users() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot erase node '", node->name(), "': it still has ", node->num_users(),
        " user(s): ", UsersString(node)));
  }
  RemoveUsesOf(node);
  EraseFromNameIndex(heir);  // the heir's own name is freed (if it has one yet)
  // The name stays taken, so its index entry stays where it is and only changes hands
  // (the entry is placed by the name's hash, which does not change). The name is not
  // "freed", so the suffix counters' proof that it is taken (StillTaken) stays true.
  by_name_.Replace(node->name_hash_, node->index_, heir->index_);
  heir->name_ = std::move(node->name_);
  heir->name_hash_ = node->name_hash_;
  if (node == output_) output_ = nullptr;
  Unlink(node);
  DestroyNode(node);
  return absl::OkStatus();
}

namespace {

// The nodes of one EraseAll batch as a set: a bit per Node::index() (below the graph's
// node_index_bound()), or for a batch of a few nodes the list itself, scanned.
class NodeBatch {
 public:
  NodeBatch(absl::Span<Node* const> nodes, size_t index_bound) : nodes_(nodes) {
    if (nodes.size() > kScanned) bits_.assign((index_bound + 63) / 64, 0);
  }
  // Adds the next node of the list (a live node of the graph): nodes[i] for the i-th
  // call; false if it was added before.
  bool AddNext() {
    const Node* node = nodes_[added_];
    const bool added = !Contains(node);
    ++added_;
    if (added && !bits_.empty()) bits_[node->index() >> 6] |= uint64_t{1} << (node->index() & 63);
    return added;
  }
  // Whether live node `node` (of the graph) is among the nodes added so far.
  bool Contains(const Node* node) const {
    if (bits_.empty()) {
      const auto added_end = nodes_.begin() + static_cast<std::ptrdiff_t>(added_);
      return std::find(nodes_.begin(), added_end, node) != added_end;
    }
    return ((bits_[node->index() >> 6] >> (node->index() & 63)) & 1) != 0;
  }

 private:
  static constexpr size_t kScanned = 16;
  absl::Span<Node* const> nodes_;
  size_t added_ = 0;
  std::vector<uint64_t> bits_;
};

// How many nodes ahead EraseAll asks for memory: far enough for a miss to be served
// before the node is reached, near enough for the lines to stay in L1 until then.
constexpr size_t kEraseAhead = 8;

}  // namespace

absl::Status Graph::EraseAll(absl::Span<Node* const> nodes) {
  // Everything is checked before the first change. Nodes are added to the batch in the
  // order given, and a batch in users-first order (each node's users listed before it, as
  // a dead-code walk finds them) is recognized on the way: every user is in already.
  NodeBatch batch(nodes, node_index_bound());
  bool users_first = true;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* node = nodes[i];
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("EraseAll: nodes[", i, "] is null"));
    }
    if (node->graph_ != this) {
      return absl::InvalidArgumentError(absl::StrCat("EraseAll: nodes[", i, "] ('",
                                                     node->name(), "') is not in this graph"));
    }
    if (users_first) {
      for (const Node* user : node->users()) users_first = users_first && batch.Contains(user);
    }
    if (!batch.AddNext()) {
      return absl::InvalidArgumentError(
          absl::StrCat("EraseAll: node '", node->name(), "' is listed twice"));
    }
  }
  if (!users_first) {
    // Some user came later in the list, or is not in it at all: which, now that the whole
    // batch is known.
    for (const Node* node : nodes) {
      for (const Node* user : node->users()) {
        if (!batch.Contains(user)) {
          return absl::FailedPreconditionError(absl::StrCat("cannot erase node '", node->name(),
                                                            "': its user '", user->name(),
                                                            "' is not erased with it"));
        }
      }
    }
    // Any order: the inputs that stay lose the batch's nodes as users while every node of
    // the batch is alive (an input of the batch is skipped: its use-list goes with it).
    // Membership is read here, before any node is destroyed and its index handed back.
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (i + kEraseAhead < nodes.size()) __builtin_prefetch(nodes[i + kEraseAhead]);
      Node* user = nodes[i];
      user->ForEachInputUse([user, &batch](Node* input) {
        if (!batch.Contains(input)) RemoveUser(input, user);
      });
    }
  }
  // Each node leaves its inputs' use-lists (users first: its inputs are all alive still;
  // otherwise done above), the name index, the list and its slot. The name-index entry of
  // the node kEraseAhead ahead is asked for, with its neighbours in the list, its hash
  // read from a node asked for kEraseAhead before that: the random probes of the index
  // overlap instead of following one another.
  const auto prefetch_erase = [this](const Node* ahead) {
    by_name_.Prefetch(ahead->name_hash_);
    __builtin_prefetch(ahead->prev_, /*rw=*/1);
    __builtin_prefetch(ahead->next_, /*rw=*/1);
  };
  // The first nodes' too (the checks above have just read them): a small batch -- a
  // worklist's 16 -- would otherwise have half of its probes unprefetched.
  for (size_t i = 0; i < std::min(nodes.size(), kEraseAhead); ++i) prefetch_erase(nodes[i]);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i + 2 * kEraseAhead < nodes.size()) {
      const Node* far = nodes[i + 2 * kEraseAhead];
      __builtin_prefetch(far);
      __builtin_prefetch(&far->name_hash_);
    }
    if (i + kEraseAhead < nodes.size()) prefetch_erase(nodes[i + kEraseAhead]);
    Node* node = nodes[i];
    if (users_first) RemoveUsesOf(node);
    EraseFromNameIndex(node);
    if (node == output_) output_ = nullptr;
    Unlink(node);
    DestroyNode(node);
  }
  return absl::OkStatus();
}

int Graph::EliminateDeadCode() {
  // Walking backwards erases chains of dead nodes in one sweep: a node's inputs come
  // before it, so they are visited after it lost its last user.
  int erased = 0;
  for (Node* n = tail_; n != nullptr;) {
    Node* prev = n->prev_;
    const bool pure =
        n->op_ != OpKind::kPlaceholder && n->op_ != OpKind::kOutput && !n->opaque();
    if (pure && n->num_users() == 0) {
      FUSELAGE_CHECK(Erase(n).ok());
      ++erased;
    }
    n = prev;
  }
  return erased;
}

// ---- Reading ------------------------------------------------------------------------

std::vector<Node*> Graph::Placeholders() const {
  std::vector<Node*> result;
  for (Node* n = head_; n != nullptr; n = n->next_) {
    if (n->op_ == OpKind::kPlaceholder) result.push_back(n);
  }
  return result;
}

std::vector<Node*> Graph::Nodes() const {
  std::vector<Node*> result;
  result.reserve(size_);
  for (Node* n = head_; n != nullptr; n = n->next_) result.push_back(n);
  return result;
}

// ---- GraphBuilder -------------------------------------------------------------------

absl::StatusOr<Node*> GraphBuilder::AddNode(OpKind op, Symbol target, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("a node has an empty name");
  const graph_internal::HashedName hashed{name, graph_internal::NameHashOf(name)};
  // One probe: it finds the name taken, or the entry the new node fills.
  const size_t position = graph_->by_name_.FreePosition(hashed);
  if (position == graph_internal::NameIndex::kTaken) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate node name '", name, "'"));
  }
  Node* node = graph_->NewNode(op, target, std::string(name));
  node->name_hash_ = hashed.hash;
  graph_->by_name_.Fill(position, hashed.hash, node->index_);
  graph_->Link(node, nullptr);
  if (op == OpKind::kOutput && graph_->output_ == nullptr) graph_->output_ = node;
  return node;
}

void GraphBuilder::SetInputs(Node* node, std::vector<Argument> args, Kwargs kwargs) {
  node->set_args(std::move(args));
  node->set_kwargs(std::move(kwargs));
  graph_->AddUsesOf(node);
}

void GraphBuilder::SetMeta(Node* node, Kwargs meta) { node->set_meta(std::move(meta)); }

void GraphBuilder::SetMeta(Node* node, NodeMeta meta) { node->meta_ = std::move(meta); }

}  // namespace fuselage
