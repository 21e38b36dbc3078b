#include "graph/symbol.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "graph/check.h"

namespace fuselage {
namespace {

// Interning a new name takes a mutex; finding an interned one (Intern's common case,
// Lookup, name()) takes none.
//
// Names live in fixed-size chunks that never move, so a reader holding a valid id (which
// it can only have obtained after the name was stored) can read it lock-free. Ids are
// < kChunkSize * kMaxChunks (16.7M).
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

struct SymbolTable {
  absl::Mutex mu;
  uint32_t size ABSL_GUARDED_BY(mu) = 1;  // Id 0 is "" and is never in the id table.
  std::atomic<IdTable*> ids{nullptr};
  std::vector<std::unique_ptr<IdTable>> tables ABSL_GUARDED_BY(mu);  // current one last
  std::atomic<std::string*> chunks[kMaxChunks] = {};

  SymbolTable() {
    absl::MutexLock lock(&mu);
    chunks[0].store(new std::string[kChunkSize], std::memory_order_release);  // [0] = ""
    tables.push_back(std::make_unique<IdTable>(kInitialCapacity));
    ids.store(tables.back().get(), std::memory_order_release);
  }

  const std::string& NameOf(uint32_t id) const {
    return chunks[id >> kChunkBits].load(std::memory_order_acquire)[id & (kChunkSize - 1)];
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

  // Stores `name` (not interned yet, hash `hash`) under a new id and returns the id.
  uint32_t Add(absl::string_view name, size_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const uint32_t id = size;
    const uint32_t chunk = id >> kChunkBits;
    FUSELAGE_CHECK(chunk < kMaxChunks);  // 16.7M distinct symbols: far past any model.
    std::string* storage = chunks[chunk].load(std::memory_order_acquire);
    if (storage == nullptr) {
      storage = new std::string[kChunkSize];
      chunks[chunk].store(storage, std::memory_order_release);
    }
    storage[id & (kChunkSize - 1)] = std::string(name);
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
  IdTable* Grow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto bigger = std::make_unique<IdTable>(2 * tables.back()->capacity());
    for (uint32_t id = 1; id + 1 < size; ++id) Insert(*bigger, id, HashOf(NameOf(id)));
    tables.push_back(std::move(bigger));
    ids.store(tables.back().get(), std::memory_order_release);
    return tables.back().get();
  }
};

SymbolTable& Table() {
  static SymbolTable* table = new SymbolTable();  // Never destroyed: symbols outlive all.
  return *table;
}

}  // namespace

Symbol Symbol::Intern(absl::string_view name) {
  if (name.empty()) return Symbol();
  SymbolTable& table = Table();
  const size_t hash = HashOf(name);
  if (const uint32_t id = table.Find(name, hash)) return Symbol(id);
  absl::MutexLock lock(&table.mu);
  if (const uint32_t id = table.Find(name, hash)) return Symbol(id);  // Interned meanwhile.
  return Symbol(table.Add(name, hash));
}

Symbol Symbol::Lookup(absl::string_view name) {
  if (name.empty()) return Symbol();
  return Symbol(Table().Find(name, HashOf(name)));
}

absl::string_view Symbol::name() const { return Table().NameOf(id_); }

}  // namespace fuselage
