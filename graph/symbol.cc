#include "graph/symbol.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace fuselage {
namespace {

// Interning a new name takes a mutex; finding an interned one (Intern's common case,
// Lookup, name()) takes none.
//
// Names live in fixed-size chunks of string_views that never move, so a reader holding a
// valid id (which it can only have obtained after the name was stored) can read it
// lock-free. Ids are < kChunkSize * kMaxChunks (16.7M). The text itself is copied into
// large append-only blocks (never freed, like the symbols): a new name costs no heap block
// of its own, where a std::string per name cost one for every name past 15 characters
// (every observer path "observers.activation_post_process_123").
constexpr uint32_t kChunkBits = 14;
constexpr uint32_t kChunkSize = 1u << kChunkBits;
constexpr uint32_t kMaxChunks = 1u << 10;
static_assert(kChunkSize * kMaxChunks == (1u << Symbol::kIdBits),
              "Symbol::kIdBits must bound every id the table can hand out");
constexpr uint32_t kIdMask = (1u << Symbol::kIdBits) - 1;

// Name -> id: an open-addressing table (linear probing) of 32-bit slots, each 0 (empty) or
// (tag << kIdBits) | id, the tag being the top 8 bits of the name's hash, so a probe
// rarely reads a name that does not match. Writers (holding the mutex) only fill empty
// slots, storing with release after the name itself is stored; when the table is half
// full they build a twice larger one and publish it whole. Readers load the table and
// each slot with acquire and never see a slot change once it is filled. A replaced table
// is kept (readers may still probe it): all of them together take less than the last.
struct IdTable {
  explicit IdTable(size_t capacity)
      : mask(capacity - 1), slots(new std::atomic<uint32_t>[capacity]) {
    for (size_t i = 0; i < capacity; ++i) slots[i].store(0, std::memory_order_relaxed);
  }
  size_t capacity() const { return mask + 1; }

  const size_t mask;
  const std::unique_ptr<std::atomic<uint32_t>[]> slots;
};

constexpr size_t kInitialCapacity = 1 << 12;

size_t HashOf(absl::string_view name) { return absl::Hash<absl::string_view>{}(name); }
uint32_t TagOf(size_t hash) { return static_cast<uint32_t>(hash >> (8 * sizeof(size_t) - 8)); }

// Text blocks hold this much unless one name is longer.
constexpr size_t kTextBlockSize = size_t{1} << 16;

struct SymbolTable {
  // A std::mutex, not an absl::Mutex: Debian's Abseil runs its deadlock detector on every
  // Lock/Unlock (~360 instructions per new name in callgrind, a third of its cost), and
  // this lock is only ever held for a few stores. Members marked "guarded" are read and
  // written under it only.
  std::mutex mu;
  uint32_t size = 1;  // guarded. Id 0 is "" and is never in the id table.
  std::atomic<IdTable*> ids{nullptr};
  std::vector<std::unique_ptr<IdTable>> tables;  // guarded; the current one last
  std::atomic<absl::string_view*> chunks[kMaxChunks] = {};
  // hashes[id]: the hash of id's name, so growing the id table rehashes no text.
  std::vector<size_t> hashes = {0};  // guarded
  // The text blocks (kept, never freed: the names outlive everything) and the free room in
  // the last one.
  std::vector<std::unique_ptr<char[]>> text_blocks;  // guarded
  char* text_next = nullptr;  // guarded
  char* text_end = nullptr;  // guarded

  SymbolTable() {
    std::lock_guard<std::mutex> lock(mu);
    // [0] = "" (a default string_view).
    chunks[0].store(new absl::string_view[kChunkSize], std::memory_order_release);
    tables.push_back(std::make_unique<IdTable>(kInitialCapacity));
    ids.store(tables.back().get(), std::memory_order_release);
  }

  absl::string_view NameOf(uint32_t id) const {
    return chunks[id >> kChunkBits].load(std::memory_order_acquire)[id & (kChunkSize - 1)];
  }

  // A copy of `name` in the text blocks. Under mu.
  absl::string_view StoreText(absl::string_view name) {
    if (static_cast<size_t>(text_end - text_next) < name.size()) {
      const size_t block_size = std::max(kTextBlockSize, name.size());
      text_blocks.push_back(std::make_unique<char[]>(block_size));
      text_next = text_blocks.back().get();
      text_end = text_next + block_size;
    }
    std::memcpy(text_next, name.data(), name.size());
    const absl::string_view stored(text_next, name.size());
    text_next += name.size();
    return stored;
  }

  // The id of non-empty `name` with hash `hash`, or 0. Lock-free.
  uint32_t Find(absl::string_view name, size_t hash) const {
    const IdTable* table = ids.load(std::memory_order_acquire);
    const uint32_t tag = TagOf(hash);
    for (size_t i = hash & table->mask;; i = (i + 1) & table->mask) {
      const uint32_t slot = table->slots[i].load(std::memory_order_acquire);
      if (slot == 0) return 0;
      if ((slot >> Symbol::kIdBits) == tag && NameOf(slot & kIdMask) == name) {
        return slot & kIdMask;
      }
    }
  }

  // Stores `name` (not interned yet, hash `hash`) under a new id and returns the id. Under mu.
  uint32_t Add(absl::string_view name, size_t hash) {
    const uint32_t id = size;
    const uint32_t chunk = id >> kChunkBits;
    FUSELAGE_CHECK(chunk < kMaxChunks);  // Callers stop at Symbol::kMaxSymbols (Intern*).
    absl::string_view* storage = chunks[chunk].load(std::memory_order_acquire);
    if (storage == nullptr) {
      storage = new absl::string_view[kChunkSize];
      chunks[chunk].store(storage, std::memory_order_release);
    }
    storage[id & (kChunkSize - 1)] = StoreText(name);
    hashes.push_back(hash);
    ++size;
    IdTable* table = tables.back().get();
    if (2 * static_cast<size_t>(size) > table->capacity()) {
      table = Grow();  // Holds every id but the new one.
    }
    Insert(*table, id, hash);
    return id;
  }

  static void Insert(IdTable& table, uint32_t id, size_t hash) {
    size_t i = hash & table.mask;
    while (table.slots[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & table.mask;
    table.slots[i].store((TagOf(hash) << Symbol::kIdBits) | id, std::memory_order_release);
  }

  // A table twice the size holding ids 1 .. size - 2, published for readers.
  IdTable* Grow() {
    auto bigger = std::make_unique<IdTable>(2 * tables.back()->capacity());
    for (uint32_t id = 1; id + 1 < size; ++id) Insert(*bigger, id, hashes[id]);
    tables.push_back(std::move(bigger));
    ids.store(tables.back().get(), std::memory_order_release);
    return tables.back().get();
  }
};

std::atomic<uint32_t> input_limit{Symbol::kInputSymbolLimit};

SymbolTable& Table() {
  static SymbolTable* table = new SymbolTable();  // Never destroyed: symbols outlive all.
  return *table;
}

// Interns `name` unless the table holds `limit` symbols or more (then 0). The id table's
// slot stores an id in kIdBits bits, hence kMaxSymbols.
uint32_t InternBelow(absl::string_view name, uint32_t limit) {
  SymbolTable& table = Table();
  const size_t hash = HashOf(name);
  if (const uint32_t id = table.Find(name, hash)) return id;
  std::lock_guard<std::mutex> lock(table.mu);
  if (const uint32_t id = table.Find(name, hash)) return id;  // Interned meanwhile.
  // size counts "" too, so the table holds size - 1 real symbols.
  if (table.size - 1 >= std::min(limit, Symbol::kMaxSymbols)) return 0;
  return table.Add(name, hash);
}

}  // namespace

absl::StatusOr<Symbol> Symbol::TryIntern(absl::string_view name) {
  if (name.empty()) return Symbol();
  const uint32_t limit = input_limit.load(std::memory_order_relaxed);
  const uint32_t id = InternBelow(name, limit);
  if (id == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "symbol table full: it holds ", limit,
        " symbols, the limit for names read from input; cannot intern '", name.substr(0, 64),
        name.size() > 64 ? "...'" : "'"));
  }
  return Symbol(id);
}

Symbol Symbol::Intern(absl::string_view name) {
  if (name.empty()) return Symbol();
  return Symbol(InternBelow(name, kMaxSymbols));
}

uint32_t Symbol::TableSize() {
  SymbolTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  return table.size;
}

uint32_t symbol_internal::SetInputSymbolLimitForTesting(uint32_t limit) {
  return input_limit.exchange(limit, std::memory_order_relaxed);
}

Symbol Symbol::Lookup(absl::string_view name) {
  if (name.empty()) return Symbol();
  return Symbol(Table().Find(name, HashOf(name)));
}

void Symbol::LookupMany(absl::Span<const absl::string_view> names, Symbol* out) {
  const SymbolTable& table = Table();
  // Enough misses in flight to cover the latency, few enough that the prefetched lines
  // are still there when they are read.
  constexpr size_t kGroup = 16;
  size_t hashes[kGroup];
  for (size_t begin = 0; begin < names.size(); begin += kGroup) {
    const size_t size = std::min(kGroup, names.size() - begin);
    // Find reads the table current then, which may be a larger one by now: a prefetch of
    // this one is then merely useless.
    const IdTable* ids = table.ids.load(std::memory_order_acquire);
    for (size_t i = 0; i < size; ++i) {
      hashes[i] = HashOf(names[begin + i]);
      __builtin_prefetch(&ids->slots[hashes[i] & ids->mask]);
    }
    for (size_t i = 0; i < size; ++i) {
      const absl::string_view name = names[begin + i];
      out[begin + i] = name.empty() ? Symbol() : Symbol(table.Find(name, hashes[i]));
    }
  }
}

absl::string_view Symbol::name() const { return Table().NameOf(id_); }

}  // namespace fuselage
