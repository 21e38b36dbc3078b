#include "graph/symbol.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "graph/check.h"

namespace fuselage {
namespace {

// Interning takes a mutex; reading a name does not. Names live in fixed-size chunks that
// never move, so a reader holding a valid id (which it can only have obtained after the
// name was stored) can read it lock-free. Ids are < kChunkSize * kMaxChunks (16.7M).
constexpr uint32_t kChunkBits = 14;
constexpr uint32_t kChunkSize = 1u << kChunkBits;
constexpr uint32_t kMaxChunks = 1u << 10;
static_assert(kChunkSize * kMaxChunks == (1u << Symbol::kIdBits),
              "Symbol::kIdBits must bound every id the table can hand out");

struct SymbolTable {
  absl::Mutex mu;
  absl::flat_hash_map<absl::string_view, uint32_t> ids ABSL_GUARDED_BY(mu);
  uint32_t size ABSL_GUARDED_BY(mu) = 0;
  std::atomic<std::string*> chunks[kMaxChunks] = {};

  SymbolTable() {
    absl::MutexLock lock(&mu);
    Add("");
  }

  uint32_t Add(absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const uint32_t id = size;
    const uint32_t chunk = id >> kChunkBits;
    FUSELAGE_CHECK(chunk < kMaxChunks);  // 16.7M distinct symbols: far past any model.
    std::string* storage = chunks[chunk].load(std::memory_order_acquire);
    if (storage == nullptr) {
      storage = new std::string[kChunkSize];
      chunks[chunk].store(storage, std::memory_order_release);
    }
    storage[id & (kChunkSize - 1)] = std::string(name);
    ids.emplace(absl::string_view(storage[id & (kChunkSize - 1)]), id);
    ++size;
    return id;
  }
};

SymbolTable& Table() {
  static SymbolTable* table = new SymbolTable();  // Never destroyed: symbols outlive all.
  return *table;
}

}  // namespace

Symbol Symbol::Intern(absl::string_view name) {
  SymbolTable& table = Table();
  absl::MutexLock lock(&table.mu);
  auto it = table.ids.find(name);
  if (it != table.ids.end()) return Symbol(it->second);
  return Symbol(table.Add(name));
}

Symbol Symbol::Lookup(absl::string_view name) {
  SymbolTable& table = Table();
  absl::MutexLock lock(&table.mu);
  auto it = table.ids.find(name);
  return it == table.ids.end() ? Symbol() : Symbol(it->second);
}

absl::string_view Symbol::name() const {
  const std::string* chunk =
      Table().chunks[id_ >> kChunkBits].load(std::memory_order_acquire);
  return chunk[id_ & (kChunkSize - 1)];
}

}  // namespace fuselage
