#include "graph/graph.h"

#include <algorithm>
#include <cstring>
#include <string.h>  // memrchr (GNU)
#include <new>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/container/fixed_array.h"
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

}  // namespace

// A name being built: candidates are made and probed here, on the stack (a name of up to
// 100-odd characters), and only the free one is copied into the node.
class graph_internal::NameChars {
 public:
  // Room for `hint` sanitized (one more character) plus "_<19 digits>".
  explicit NameChars(size_t hint_size) : chars_(hint_size + 22) {}
  absl::string_view view() const { return {chars_.data(), size_}; }
  size_t size() const { return size_; }
  char* data() { return chars_.data(); }
  void push_back(char c) { chars_[size_++] = c; }
  // Sets the size: shrinking, or after writing up to size() + room characters at data().
  void resize(size_t size) { size_ = size; }

 private:
  absl::FixedArray<char, 128> chars_;  // uninitialized
  size_t size_ = 0;
};

namespace {
using graph_internal::Claim;
using graph_internal::HashedName;
using graph_internal::NameChars;
using graph_internal::NameHashOf;

absl::string_view View(const NameChars& name) { return name.view(); }

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Position of the last `c` in `s`, or npos. glibc's memrchr compares 32 bytes at a time: a
// byte loop cost 8 instructions a character ("torch.quantize_per_tensor": 160 a name).
size_t FindLast(absl::string_view s, char c) {
  if (s.empty()) return absl::string_view::npos;
  const void* found = memrchr(s.data(), c, s.size());
  return found == nullptr ? absl::string_view::npos
                          : static_cast<size_t>(static_cast<const char*>(found) - s.data());
}

// Each character as Sanitize writes it: itself if in [A-Za-z0-9], else '_'. A table
// lookup per character (for hints shorter than a word; longer ones: SanitizeWord).
struct SanitizedChars {
  char of[256];
};
constexpr SanitizedChars MakeSanitizedChars() {
  SanitizedChars table{};
  for (int c = 0; c < 256; ++c) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    table.of[c] = alnum ? static_cast<char>(c) : '_';
  }
  return table;
}
constexpr SanitizedChars kSanitized = MakeSanitizedChars();

uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
void Store64(char* p, uint64_t v) { std::memcpy(p, &v, sizeof(v)); }

// Eight characters as Sanitize writes them, at once (SWAR): a byte is kept if its bit 7 is
// clear and its low 7 bits are a digit or, with bit 5 set (which lowercases a letter and
// leaves no other byte a letter), a lowercase letter; every other byte becomes '_'. The
// range checks add a constant to each byte's low 7 bits and read bit 7: no carry crosses
// into the next byte. About 2.5 instructions a character where the table took 7. Always
// inlined: gcc kept it out of line, and the call cost as much as the work.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t SanitizeWord(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101u;
  constexpr uint64_t kHigh = kOnes * 0x80;
  const auto at_least = [](uint64_t v, uint64_t lo) { return (v + kOnes * (0x80 - lo)) & kHigh; };
  const auto at_most = [](uint64_t v, uint64_t hi) { return ~(v + kOnes * (0x7f - hi)) & kHigh; };
  const uint64_t low = word & ~kHigh;
  const uint64_t lowered = low | kOnes * 0x20;
  const uint64_t digit = at_least(low, '0') & at_most(low, '9');
  const uint64_t letter = at_least(lowered, 'a') & at_most(lowered, 'z');
  const uint64_t kept = (digit | letter) & ~word;  // bit 7 of each kept byte
  const uint64_t keep_mask = (kept >> 7) * 0xff;    // 0xff in each kept byte
  return (word & keep_mask) | (kOnes * '_' & ~keep_mask);
}

// FX's naming: illegal characters become '_', a leading digit gets a '_' prefix.
void Sanitize(absl::string_view hint, NameChars* out) {
  // Through a local pointer: a store through char* may alias out's size, which would be
  // reloaded for every character.
  char* to = out->data();
  if (hint.empty() || IsDigit(hint[0])) *to++ = '_';
  const char* from = hint.data();
  const size_t size = hint.size();
  if (size >= 8) {
    size_t i = 0;
    for (; i + 8 <= size; i += 8) Store64(to + i, SanitizeWord(Load64(from + i)));
    // The last word overlaps the one before: its first bytes are written again, the same.
    if (i < size) Store64(to + size - 8, SanitizeWord(Load64(from + size - 8)));
  } else {
    for (size_t i = 0; i < size; ++i) to[i] = kSanitized.of[static_cast<unsigned char>(from[i])];
  }
  out->resize(static_cast<size_t>(to + size - out->data()));
}

// Appends the decimal digits of `n` (>= 0): counted by comparisons, written by one
// division loop.
void AppendNumber(int64_t n, NameChars* out) {
  const uint64_t value = static_cast<uint64_t>(n);
  size_t digits = 1;
  for (uint64_t bound = 10; digits < 19 && value >= bound; bound *= 10) ++digits;
  char* end = out->data() + out->size() + digits;
  uint64_t rest = value;
  for (char* p = end; p != end - digits; rest /= 10) *--p = static_cast<char>('0' + rest % 10);
  out->resize(out->size() + digits);
}

uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t MixWord(uint64_t h, uint64_t word) {
  h = (h ^ word) * 0xbf58476d1ce4e5b9u;
  return h ^ (h >> 31);
}

// "add_12" has base "add" (size 3) and number 12; a name without a numeric suffix (at
// most 15 digits after an underscore that is neither first nor last) is all base, -1.
struct SuffixSplit {
  size_t base_size;
  int64_t number;
};
SuffixSplit SplitSuffix(absl::string_view name) {
  // The run of digits at the end, then the underscore before it: no search for the last
  // underscore and no second pass to check the digits.
  size_t start = name.size();
  while (start > 0 && IsDigit(name[start - 1])) --start;
  const size_t digits = name.size() - start;
  if (digits == 0 || digits > 15 || start < 2 || name[start - 1] != '_') {
    return {name.size(), -1};
  }
  int64_t number = 0;
  for (size_t i = start; i < name.size(); ++i) number = number * 10 + (name[i] - '0');
  return {start - 1, number};
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

// ---- Names --------------------------------------------------------------------------

namespace {
thread_local uint64_t use_list_steps = 0;
}  // namespace

uint64_t graph_internal::UseListSteps() { return use_list_steps; }
void graph_internal::CountUseListSteps(uint64_t steps) { use_list_steps += steps; }

uint32_t graph_internal::NameHashOf(absl::string_view name) {
  // Words of 8 bytes (the last one overlapping when the size is not a multiple of 8),
  // each mixed in with a multiply-xorshift, then MurmurHash3's finalizer, so that both the
  // low 7 bits (the table's tag) and the high bits (its position) depend on every byte.
  const char* p = name.data();
  size_t n = name.size();
  uint64_t h = 0x9e3779b97f4a7c15u ^ n;
  if (n >= 8) {
    for (; n > 8; p += 8, n -= 8) h = MixWord(h, Load64(p));
    h = MixWord(h, Load64(p + n - 8));
  } else if (n >= 4) {
    h = MixWord(h, uint64_t{Load32(p)} | uint64_t{Load32(p + n - 4)} << 32);
  } else if (n > 0) {
    const auto byte = [p](size_t i) { return uint64_t{static_cast<unsigned char>(p[i])}; };
    h = MixWord(h, byte(0) | byte(n / 2) << 8 | byte(n - 1) << 16);
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdu;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53u;
  // The low 32 bits of the finalized hash: each depends on every byte.
  return static_cast<uint32_t>(h ^ (h >> 33));
}

// ---- The name index (graph_internal::NameIndex) -----------------------------------

Node* graph_internal::NameIndex::NodeOf(uint64_t entry) const {
  return static_cast<Node*>(arena_->SlotAt(IndexOf(entry)));
}

// Always inlined: a call per probe showed in the passes (+0.5 % of prepare's instructions).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline size_t graph_internal::NameIndex::SlotFor(
    HashedName name) const {
  for (size_t i = Home(name.hash);; i = (i + 1) & mask_) {
    const uint64_t entry = entries_[i];
    if (entry == 0) return i;
    if (HashOf(entry) == name.hash && NodeOf(entry)->name() == name.text) return i;
  }
}

Node* graph_internal::NameIndex::Find(HashedName name) const {
  if (size_ == 0) return nullptr;
  const uint64_t entry = entries_[SlotFor(name)];
  return entry == 0 ? nullptr : NodeOf(entry);
}

bool graph_internal::NameIndex::InsertIfAbsent(HashedName name, uint32_t index) {
  // At most 3/4 full: probes for a free name then end within a few entries.
  if ((size_ + 1) * 4 > (mask_ + 1) * 3) Grow();
  const size_t i = SlotFor(name);
  if (entries_[i] != 0) return false;
  entries_[i] = EntryOf(name.hash, index);
  ++size_;
  return true;
}

size_t graph_internal::NameIndex::FreePosition(HashedName name) {
  if ((size_ + 1) * 4 > (mask_ + 1) * 3) Grow();
  const size_t i = SlotFor(name);
  return entries_[i] != 0 ? kTaken : i;
}

void graph_internal::NameIndex::Fill(size_t position, uint32_t hash, uint32_t index) {
  entries_[position] = EntryOf(hash, index);
  ++size_;
}

size_t graph_internal::NameIndex::PositionOf(uint32_t hash, uint32_t index) const {
  const uint64_t wanted = EntryOf(hash, index);
  size_t i = Home(hash);
  while (entries_[i] != wanted) {
    FUSELAGE_CHECK(entries_[i] != 0);  // the node is indexed under this hash
    i = (i + 1) & mask_;
  }
  return i;
}

void graph_internal::NameIndex::Erase(uint32_t hash, uint32_t index) {
  size_t hole = PositionOf(hash, index);
  // Backward shift: each following entry of the run that may sit at the hole (its home is
  // not after the hole, cyclically) moves into it, and leaves a new hole behind.
  for (size_t j = (hole + 1) & mask_; entries_[j] != 0; j = (j + 1) & mask_) {
    const size_t home = Home(HashOf(entries_[j]));
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      entries_[hole] = entries_[j];
      hole = j;
    }
  }
  entries_[hole] = 0;
  --size_;
}

void graph_internal::NameIndex::Replace(uint32_t hash, uint32_t index, uint32_t heir) {
  entries_[PositionOf(hash, index)] = EntryOf(hash, heir);
}

void graph_internal::NameIndex::Grow() {
  const size_t old_capacity = mask_ == 0 ? 0 : mask_ + 1;
  const size_t capacity = old_capacity == 0 ? 16 : 2 * old_capacity;
  std::unique_ptr<uint64_t[]> old = std::move(entries_);
  entries_ = std::make_unique<uint64_t[]>(capacity);  // zeroed: all empty
  mask_ = capacity - 1;
  for (size_t k = 0; k < old_capacity; ++k) {
    const uint64_t entry = old[k];
    if (entry == 0) continue;
    size_t i = Home(HashOf(entry));
    while (entries_[i] != 0) i = (i + 1) & mask_;
    entries_[i] = entry;
  }
}

bool Graph::StillTaken(uint32_t hash, uint64_t taken_at) const {
  if (names_freed_ - taken_at > kFreedWindow) return false;
  for (uint64_t i = taken_at; i < names_freed_; ++i) {
    if (freed_hashes_[i % kFreedWindow] == hash) return false;
  }
  return true;
}

// `*name` holds a sanitized hint; while claim(candidate) does not return kClaimed, the
// candidate becomes base_n for the next n of the rule: n >= max(counter(base), suffix + 1,
// 1), counter(base) = the n handed out. Each candidate is hashed once (a HashedName): the
// probe of a free one also indexes it (lazy_emplace), and a suffix-less hint's hash also
// finds its counter. Two proofs skip probes whose outcome they know (so the name is the
// same): that the hint itself is taken (base_taken) and that base_<last> is (taken).
Graph::SuffixCounter* Graph::FindCounterPastBits(HashedName key) {
  CounterCacheEntry& cached = counter_cache_[key.hash % kCounterCacheSize];
  if (cached.counter != nullptr && cached.hash == key.hash && *cached.key == key.text) {
    return cached.counter;
  }
  const auto it = next_suffix_.find(key);
  if (it == next_suffix_.end()) return nullptr;
  cached = {key.hash, &it->first, &it->second};
  return &it->second;
}

template <typename ClaimFn>
void Graph::MakeUnique(NameChars* name, ClaimFn&& claim, bool takes_name) {
  const uint32_t hint_hash = NameHashOf(View(*name));
  SuffixCounter* const hint_counter = FindCounter(HashedName{View(*name), hint_hash});
  // "Taken by a node", proven or probed (the node's own old name does not count: it is
  // free in the index, and becomes free for good once the node is renamed).
  bool hint_in_index = hint_counter != nullptr && hint_counter->base_taken &&
                       StillTaken(hint_hash, hint_counter->base_taken_at);
  if (!hint_in_index) {
    const Claim found = claim(HashedName{View(*name), hint_hash});
    if (found == Claim::kClaimed) return;
    hint_in_index = found == Claim::kTaken;
  }
  const SuffixSplit split = SplitSuffix(View(*name));
  name->resize(split.base_size);  // now the base
  SuffixCounter* counter = hint_counter;
  uint32_t base_hash = hint_hash;
  if (split.number >= 0) {
    base_hash = NameHashOf(View(*name));
    counter = FindCounter(HashedName{View(*name), base_hash});
  }
  const int64_t last = counter == nullptr ? 0 : counter->last;
  int64_t next = std::max<int64_t>({last, split.number + 1, 1});
  if (counter != nullptr && next == last && counter->taken &&
      StillTaken(counter->taken_hash, counter->taken_at)) {
    ++next;
  }
  name->push_back('_');
  uint32_t taken_hash;
  while (true) {
    AppendNumber(next, name);
    taken_hash = NameHashOf(View(*name));
    if (claim(HashedName{View(*name), taken_hash}) == Claim::kClaimed) break;
    name->resize(split.base_size + 1);
    ++next;
  }
  // A counter of 1 behaves as no counter (n >= 1 either way), so base_1 creates no entry:
  // most bases never get a second suffix (fusion's "layer1_0_conv1_1"), and an entry
  // costs an allocation.
  if (counter == nullptr) {
    if (next == 1) return;
    const absl::string_view base(name->data(), split.base_size);
    counter = &next_suffix_.emplace(std::string(base), SuffixCounter()).first->second;
    counter_bits_ |= CounterBit(base_hash);
    // The map may have rehashed: the cached pointers into it may dangle.
    for (CounterCacheEntry& cached : counter_cache_) cached = CounterCacheEntry();
  }
  SuffixCounter& c = *counter;
  c.last = next;
  c.taken = takes_name;  // UniqueName only computes the name
  c.taken_hash = taken_hash;
  c.taken_at = names_freed_;
  if (split.number < 0 && hint_in_index) {
    // The base is the hint, known taken now; the proof is renewed with each use, so a hint
    // that keeps coming is probed again only after a name of its hash was freed.
    c.base_taken = true;
    c.base_taken_at = names_freed_;
  }
}

std::string Graph::UniqueName(absl::string_view hint) {
  NameChars name(hint.size());
  Sanitize(hint, &name);
  MakeUnique(
      &name,
      [this](HashedName candidate) {
        return by_name_.Find(candidate) != nullptr ? Claim::kTaken : Claim::kClaimed;
      },
      /*takes_name=*/false);
  return std::string(View(name));
}

// Claims `candidate` for `node` if it is free: one probe finds it and indexes the node,
// whose name (and its hash) is set before its slot is filled.
bool Graph::ClaimName(Node* node, HashedName candidate) {
  if (!by_name_.InsertIfAbsent(candidate, node->index_)) return false;
  std::string& name = node->name_;
  const absl::string_view text = candidate.text;
  if (text.size() >= sizeof(std::string) / 2 && name.capacity() >= text.size()) {
    // A renamed node whose old name is on the heap and long enough (convert renames
    // each observer, "activation_post_process_<n>", to "quantize_per_tensor_<n>"): the
    // text goes into that block, which saves freeing it and allocating another.
    name.assign(text.data(), text.size());
  } else {
    // Constructed, not assigned: std::string's assign is a long out-of-line path.
    name = std::string(text.data(), text.size());
  }
  node->name_hash_ = candidate.hash;
  return true;
}

void Graph::NameNewNode(Node* node, absl::string_view hint) {
  NameChars name(hint.size());
  Sanitize(hint, &name);
  MakeUnique(
      &name,
      [this, node](HashedName candidate) {
        return ClaimName(node, candidate) ? Claim::kClaimed : Claim::kTaken;
      },
      /*takes_name=*/true);
}

const std::string& Graph::Rename(Node* node, absl::string_view name) {
  // (A node not named yet has an empty name_ and must be named even if `name` is empty.)
  if (node->name_ == name && !node->name_.empty()) return node->name_;
  // The new name is chosen as if the node still held its old one (a candidate equal to it
  // counts as taken); the node leaves the index first so that the free one is indexed in
  // the probe that finds it. node->name_ keeps the old name until that last probe.
  EraseFromNameIndex(node);
  NameChars unique(name.size());
  Sanitize(name, &unique);
  MakeUnique(
      &unique,
      [this, node](HashedName candidate) {
        if (candidate.text == node->name_) return Claim::kOwnOldName;
        return ClaimName(node, candidate) ? Claim::kClaimed : Claim::kTaken;
      },
      /*takes_name=*/true);
  return node->name_;
}

void Graph::EraseFromNameIndex(Node* node) {
  if (node->name_.empty()) return;  // not named yet (InsertBeforeUnnamed): not indexed
  // Found by the node's kept hash and slot number: no name is read.
  by_name_.Erase(node->name_hash_, node->index_);
  NoteNameFreed(node->name_hash_);
}

Node* Graph::FindNode(absl::string_view name) const {
  return by_name_.Find(HashedName{name, NameHashOf(name)});
}

// ---- Checks -------------------------------------------------------------------------

absl::Status Graph::CheckArgPrecedes(const Argument& arg, const Node* before) const {
  absl::Status status;
  arg.ForEachNode([&](Node* input) {
    if (!status.ok()) return;
    if (input == nullptr) {
      status = absl::InvalidArgumentError(": an arg is a null node");
    } else if (input->graph_ != this) {
      status = absl::InvalidArgumentError(absl::StrCat(
          ": arg node '", input->name(), "' belongs to another graph"));
    } else if (before != nullptr && !Precedes(input, before)) {
      status = absl::FailedPreconditionError(absl::StrCat(
          ": arg node '", input->name(),
          "' does not come before it; the order must stay topological"));
    } else if (input->op_ == OpKind::kOutput) {
      status = absl::InvalidArgumentError(": the output node cannot be an arg");
    }
  });
  return status;
}

absl::Status Graph::CheckInputsPrecede(absl::Span<const Argument> args, const Kwargs& kwargs,
                                       const Node* before) const {
  for (const Argument& a : args) RETURN_IF_ERROR(CheckArgPrecedes(a, before));
  for (const Kwarg& kw : kwargs) RETURN_IF_ERROR(CheckArgPrecedes(kw.second, before));
  return absl::OkStatus();
}

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
    const bool pure = n->op_ != OpKind::kPlaceholder && n->op_ != OpKind::kOutput;
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

namespace {

// Verify's use-list questions, each linear overall: a node with few users or inputs is
// searched as before; one with many (10^5 users of one node, an output of 10^5 values)
// is answered from a set of its users / inputs, built once per Verify on its first
// question (a search per use made Verify quadratic in a node's number of users).
class EdgeChecker {
 public:
  // True if `user` is on `input`'s use-list.
  bool Listed(const Node* input, const Node* user) {
    const auto users = input->users();
    if (users.size() <= kSearched) {
      CountUseListSteps(users.size());
      return std::find(users.begin(), users.end(), user) != users.end();
    }
    auto [it, added] = users_of_.try_emplace(input);
    if (added) {
      it->second.insert(users.begin(), users.end());
      CountUseListSteps(users.size());
    }
    CountUseListSteps(1);
    return it->second.contains(user);
  }
  // True if `user` reads `input` (in its args or kwargs).
  bool Uses(const Node* user, const Node* input) {
    auto known = inputs_of_.find(user);
    if (known == inputs_of_.end()) {
      if (!Wide(user)) {
        bool uses = false;
        size_t steps = 0;
        const auto visit = [&](Node* n) {
          uses = uses || n == input;
          ++steps;
        };
        for (const Argument& a : user->args()) a.ForEachNode(visit);
        for (const Kwarg& kw : user->kwargs()) kw.second.ForEachNode(visit);
        CountUseListSteps(steps);
        return uses;
      }
      known = inputs_of_.try_emplace(user).first;
      size_t steps = 0;
      const auto add = [&](Node* n) {
        known->second.insert(n);
        ++steps;
      };
      for (const Argument& a : user->args()) a.ForEachNode(add);
      for (const Kwarg& kw : user->kwargs()) kw.second.ForEachNode(add);
      CountUseListSteps(steps);
    }
    CountUseListSteps(1);
    return known->second.contains(input);
  }
  // True if users()[i] of `node` is also one of its users before i (asked for i = 0, 1,
  // ... of one node at a time).
  bool ListedBefore(const Node* node, size_t i) {
    const auto users = node->users();
    if (users.size() <= kSearched) {
      CountUseListSteps(i);
      return std::find(users.begin(), users.begin() + static_cast<std::ptrdiff_t>(i),
                       users[i]) != users.begin() + static_cast<std::ptrdiff_t>(i);
    }
    if (i == 0) seen_.clear();
    CountUseListSteps(1);
    return !seen_.insert(users[i]).second;
  }

 private:
  static constexpr size_t kSearched = 16;
  // More than kSearched node references in args and kwargs.
  static bool Wide(const Node* user) {
    size_t refs = 0;
    for (const Argument& a : user->args()) {
      if (CountRefs(a, &refs)) return true;
    }
    for (const Kwarg& kw : user->kwargs()) {
      if (CountRefs(kw.second, &refs)) return true;
    }
    return false;
  }
  // Adds `a`'s node references to *refs, stopping (true) once past kSearched.
  static bool CountRefs(const Argument& a, size_t* refs) {
    if (a.is_node()) return ++*refs > kSearched;
    if (!a.is_list() && !a.is_slice()) return false;
    for (const Argument& item : a.items()) {
      if (CountRefs(item, refs)) return true;
    }
    return false;
  }

  absl::flat_hash_map<const Node*, absl::flat_hash_set<const Node*>> users_of_;
  absl::flat_hash_map<const Node*, absl::flat_hash_set<const Node*>> inputs_of_;
  absl::flat_hash_set<const Node*> seen_;  // ListedBefore: the users of one node so far
};

}  // namespace

absl::Status Graph::Verify() const {
  EdgeChecker edges;
  size_t count = 0;
  const Node* prev = nullptr;
  Node* outputs_seen = nullptr;
  for (Node* n = head_; n != nullptr; prev = n, n = n->next_) {
    ++count;
    auto where = [n] { return absl::StrCat("node '", n->name_, "'"); };
    if (n->graph_ != this) {
      return absl::InternalError(absl::StrCat(where(), ": belongs to another graph"));
    }
    if (n->prev_ != prev) return absl::InternalError(absl::StrCat(where(), ": broken links"));
    // Keys strictly increase along the list, so "comes before" is a key comparison below.
    if (prev != nullptr && prev->order_key_ >= n->order_key_) {
      return absl::InternalError(absl::StrCat(where(), ": order keys not increasing"));
    }
    if (n->name_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a node has an empty name: the ", OpKindName(n->op_), " node of target '",
          n->target_.name(), "' was inserted unnamed (InsertBeforeUnnamed) and never named"));
    }
    if (n->name_hash_ != graph_internal::NameHashOf(n->name_)) {
      return absl::InternalError(absl::StrCat(where(), ": stale name hash"));
    }
    const Node* indexed = by_name_.Find(HashedName{n->name_, n->name_hash_});
    if (indexed == nullptr) {
      return absl::InternalError(absl::StrCat(where(), ": missing from the name index"));
    }
    if (indexed != n) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate node name '", n->name_, "'"));
    }
    if (n->target_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": empty target"));
    }
    if (n->op_ == OpKind::kOutput) {
      if (outputs_seen != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "more than one output node: '", outputs_seen->name_, "' and '", n->name_, "'"));
      }
      outputs_seen = n;
    } else if (outputs_seen != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), " comes after the output node '", outputs_seen->name_,
          "'; the output must be last"));
    }
    // Topological order: every input is in this graph and comes earlier.
    absl::Status status;
    n->ForEachInputUse([&](Node* input) {
      if (!status.ok()) return;
      if (input == n) {
        status = absl::InvalidArgumentError(absl::StrCat(where(), " uses itself (a cycle)"));
      } else if (input->graph_ != this) {
        status = absl::InternalError(absl::StrCat(where(), " uses a node of another graph"));
      } else if (input->order_key_ >= n->order_key_) {
        status = absl::InvalidArgumentError(absl::StrCat(
            where(), " uses '", input->name_,
            "', which does not come before it: the order is not topological"));
      } else if (input->op_ == OpKind::kOutput) {
        status = absl::InvalidArgumentError(absl::StrCat(where(), " uses the output node"));
      } else if (!edges.Listed(input, n)) {
        status = absl::InternalError(absl::StrCat(
            where(), " uses '", input->name_, "' but is missing from its users"));
      }
    });
    RETURN_IF_ERROR(status);
    // Every listed user really uses this node, and is listed once.
    for (size_t i = 0; i < n->num_users(); ++i) {
      const Node* user = n->users()[i];
      if (!edges.Uses(user, n)) {
        return absl::InternalError(absl::StrCat(where(), " lists '", user->name_,
                                                "' as a user, but it does not use it"));
      }
      if (edges.ListedBefore(n, i)) {
        return absl::InternalError(absl::StrCat(where(), " lists user '", user->name_, "' twice"));
      }
    }
  }
  if (prev != tail_) return absl::InternalError("graph tail is stale");
  if (count != size_) return absl::InternalError("graph size is stale");
  if (outputs_seen == nullptr) return absl::InvalidArgumentError("the graph has no output node");
  if (outputs_seen != output_) return absl::InternalError("graph output pointer is stale");
  if (by_name_.size() != size_) return absl::InternalError("name index has stale entries");
  return VerifyCallerCounts();
}

absl::Status Graph::VerifyCallerCounts() const {
  std::vector<uint32_t> recount(callers_.size(), 0);
  for (const Node* n = head_; n != nullptr; n = n->next_) {
    if (n->op_ != OpKind::kCallModule) continue;
    const uint32_t id = n->target_.id();
    if (id >= recount.size()) {
      return absl::InternalError(absl::StrCat("node '", n->name_, "' calls '", n->target_.name(),
                                              "', which has no call_module caller count"));
    }
    ++recount[id];
  }
  for (uint32_t id = 0; id < recount.size(); ++id) {
    if (recount[id] == callers_[id]) continue;
    // Named by a node that calls it; a target no node calls any more is known by its id.
    std::string target = absl::StrCat("symbol #", id);
    for (const Node* n = head_; n != nullptr; n = n->next_) {
      if (n->op_ == OpKind::kCallModule && n->target_.id() == id) {
        target = absl::StrCat("'", n->target_.name(), "'");
        break;
      }
    }
    return absl::InternalError(absl::StrCat("call_module caller count of ", target, " is ",
                                            callers_[id], "; the graph has ", recount[id],
                                            " call_module node(s) calling it"));
  }
  return absl::OkStatus();
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
