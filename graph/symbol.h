// Interned symbols: node targets, module types, attribute names and string args are
// interned once, so matching and lookups compare 32-bit integers instead of strings.
#ifndef FUSELAGE_GRAPH_SYMBOL_H_
#define FUSELAGE_GRAPH_SYMBOL_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fuselage {

class Symbol {
 public:
  // Every id is below 2^kIdBits (the table holds at most that many symbols), so an id can
  // be stored in kIdBits bits (Node keeps a cached module type in the padding of its op).
  static constexpr int kIdBits = 24;

  // The empty symbol (id 0, name "").
  constexpr Symbol() = default;

  // Interns `name` (thread-safe). The same text always yields the same symbol for the
  // life of the process; interned text is never freed. Finding text interned before takes
  // no lock (one hash and, nearly always, one comparison); only new text takes a mutex.
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
  friend class Node;  // Rebuilds its cached module type from the stored id.
  explicit constexpr Symbol(uint32_t id) : id_(id) {}
  uint32_t id_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, Symbol s) { return os << s.name(); }

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_SYMBOL_H_
