// Interned symbols: node targets, module types, attribute names and string args are
// interned once, so matching and lookups compare 32-bit integers instead of strings.
//
//   const Symbol add = Symbol::Intern("operator.add");  // once, e.g. when a pattern is parsed
//   if (node->target() == add) ...                      // then one integer compare per node
//   Symbol::Lookup("never.seen")                        // the empty Symbol; interns nothing
#ifndef FUSELAGE_GRAPH_SYMBOL_H_
#define FUSELAGE_GRAPH_SYMBOL_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fuselage {

class Symbol {
 public:
  // Every id is below 2^kIdBits (the table holds at most that many symbols), so an id can
  // be stored in kIdBits bits (the table's slots keep an 8-bit hash tag beside it).
  static constexpr int kIdBits = 24;

  // The empty symbol (id 0, name "").
  constexpr Symbol() = default;

  // The table is bounded (interned text is never freed, so a process that loads hostile
  // files must not grow it without bound): it holds at most kMaxSymbols symbols (ids
  // 1 .. kMaxSymbols; 0 is ""). Text from input may fill it up to kInputSymbolLimit; the
  // last kReservedSymbols are kept for the names the library itself makes (fusion's and
  // prepare's module paths), so passes still run on the models already loaded.
  static constexpr uint32_t kMaxSymbols = (1u << kIdBits) - 1;
  static constexpr uint32_t kReservedSymbols = 1u << 20;
  static constexpr uint32_t kInputSymbolLimit = kMaxSymbols - kReservedSymbols;

  // Interns `name` (thread-safe), or ResourceExhausted naming the limit if `name` is new
  // and the table already holds kInputSymbolLimit symbols. For text that comes from input
  // (a model file, a config): a loader returns the error. The same text always yields the same symbol for the life of
  // the process. Finding text interned before takes no lock (one hash and, nearly always,
  // one comparison) and never fails; only new text takes a mutex.
  static absl::StatusOr<Symbol> TryIntern(absl::string_view name);

  // Interning for the library's own names (op targets, module types, field names, the
  // paths a pass creates): may also use the reserved symbols. Should even those run out,
  // it returns the empty symbol rather than aborting (a node or module given it fails
  // Verify: "empty target"), never another name's symbol.
  static Symbol Intern(absl::string_view name);

  // Returns the symbol for `name` if it was ever interned, else the empty symbol. Does not
  // grow the table, so it is safe on untrusted text. Takes no lock.
  static Symbol Lookup(absl::string_view name);

  // Sets out[i] = Lookup(names[i]) for every i (`out` has room for names.size()). For
  // many names whose table entries are not in the cache (a module tree walked right after
  // a model was parsed, or one of 10^5 modules): each group of names is hashed first and
  // the table's memory for all of them requested before any is read, so the cache misses
  // overlap instead of following one another. Takes no lock.
  static void LookupMany(absl::Span<const absl::string_view> names, Symbol* out);

  // How many symbols the table holds (the empty one included).
  static uint32_t TableSize();

  absl::string_view name() const;
  std::string str() const { return std::string(name()); }
  uint32_t id() const { return id_; }
  bool empty() const { return id_ == 0; }

  friend bool operator==(Symbol a, Symbol b) { return a.id_ == b.id_; }
  friend bool operator!=(Symbol a, Symbol b) { return a.id_ != b.id_; }
  friend bool operator<(Symbol a, Symbol b) { return a.id_ < b.id_; }
  template <typename H>
  friend H AbslHashValue(H h, Symbol s) {
    return H::combine(std::move(h), s.id_);
  }

 private:
  explicit constexpr Symbol(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, Symbol s) { return os << s.name(); }

namespace symbol_internal {
// Tests only: the limit TryIntern applies instead of kInputSymbolLimit (reaching the real
// one takes 15.7M symbols); returns the previous one. The code path is the real one.
uint32_t SetInputSymbolLimitForTesting(uint32_t limit);
}  // namespace symbol_internal

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_SYMBOL_H_
