// Graph's names (the rest of Graph is in graph.cc): FX's sanitizing and unique-suffix
// rule (MakeUnique, UniqueName, Rename), the name hash, and the open-addressing name index
// (graph_internal::NameIndex) that FindNode and every naming probe use.
#include "graph/graph.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/container/fixed_array.h"
#include "graph/check.h"

namespace fuselage {

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

}  // namespace

// ---- Names --------------------------------------------------------------------------

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

Node* Graph::FindNode(absl::string_view name) const {
  return by_name_.Find(HashedName{name, NameHashOf(name)});
}

}  // namespace fuselage
