#include "graph/symbol.h"

#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace fuselage {
namespace {

struct SymbolTable {
  absl::Mutex mu;
  // A deque keeps every string at a stable address, so the map's views stay valid.
  std::deque<std::string> names ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<absl::string_view, uint32_t> ids ABSL_GUARDED_BY(mu);

  SymbolTable() {
    names.emplace_back();
    ids.emplace(absl::string_view(names.back()), 0);
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
  const uint32_t id = static_cast<uint32_t>(table.names.size());
  table.names.emplace_back(name);
  table.ids.emplace(absl::string_view(table.names.back()), id);
  return Symbol(id);
}

Symbol Symbol::Lookup(absl::string_view name) {
  SymbolTable& table = Table();
  absl::MutexLock lock(&table.mu);
  auto it = table.ids.find(name);
  return it == table.ids.end() ? Symbol() : Symbol(it->second);
}

absl::string_view Symbol::name() const {
  SymbolTable& table = Table();
  absl::MutexLock lock(&table.mu);
  return table.names[id_];
}

}  // namespace fuselage
