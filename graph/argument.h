// Argument: one positional or keyword arg of a node, or a module attribute. Args nest as
// in torch.fx: None, bool, int, float, string, dtype, a reference to a node, a list or
// tuple of args, a slice (start, stop, step: each None, an int or a node) or Ellipsis, as
// `x[..., -2:]` records them, or a torch device, layout or memory format (TorchObject).
// Strings are interned (Symbol). Lists are immutable and shared, so an Argument is 24 bytes
// and cheap to copy; "changing" a list means building a new one.
//
//   Argument a = Argument::Tuple({Argument(x), Argument::Int(1), Argument::None()});
//   if (a.is_tuple() && a.items()[0].is_node()) use(a.items()[0].as_node());
//   // An as_*() of another kind is a bug (checked): test the kind first.
#ifndef FUSELAGE_GRAPH_ARGUMENT_H_
#define FUSELAGE_GRAPH_ARGUMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/check.h"
#include "graph/dtype.h"
#include "graph/symbol.h"

namespace fuselage {

class Node;
class Argument;

struct ArgList {
  bool is_tuple = false;
  bool is_slice = false;  // exactly three items: start, stop, step
  std::vector<Argument> items;
};

class Argument {
 public:
  // kSlice is last: it is a list in the variant (see kind()), told apart by ArgList::is_slice.
  enum class Kind : uint8_t {
    kNone, kBool, kInt, kFloat, kString, kDType, kNode, kList, kEllipsis, kTorchObject, kSlice
  };

  Argument() = default;  // None
  Argument(Node* node) : value_(node) {}  // NOLINT: a node is the most common arg.
  static Argument None() { return Argument(); }
  static Argument Bool(bool b) { return Argument(Value(b)); }
  static Argument Int(int64_t i) { return Argument(Value(i)); }
  static Argument Float(double f) { return Argument(Value(f)); }
  static Argument String(absl::string_view s) { return Argument(Value(Symbol::Intern(s))); }
  static Argument Dtype(DType d) { return Argument(Value(d)); }
  static Argument List(std::vector<Argument> items);
  static Argument Tuple(std::vector<Argument> items);
  static Argument Ints(absl::Span<const int64_t> values);  // A list of ints.
  // slice(start, stop, step); each part is None, an int or a node (not checked here: the
  // loader and Graph::Verify check it).
  static Argument Slice(Argument start, Argument stop, Argument step);
  static Argument Ellipsis() { return Argument(Value(EllipsisTag{})); }
  // A torch object fuselage passes through to torch and computes nothing with, by its
  // text: "device:cpu", "layout:strided", "memory_format:channels_last" (torch.export
  // writes `device=cpu` into factory calls; IsTorchObjectText says which texts are valid).
  static Argument TorchObject(absl::string_view text) {
    return Argument(Value(TorchObjectText{Symbol::Intern(text)}));
  }

  Kind kind() const {
    const Kind kind = static_cast<Kind>(value_.index());
    if (kind == Kind::kList && std::get<ListPtr>(value_)->is_slice) return Kind::kSlice;
    return kind;
  }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_dtype() const { return kind() == Kind::kDType; }
  bool is_node() const { return std::holds_alternative<Node*>(value_); }  // hot: no kind()
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_tuple() const { return is_list() && std::get<ListPtr>(value_)->is_tuple; }
  bool is_slice() const { return kind() == Kind::kSlice; }
  bool is_ellipsis() const { return kind() == Kind::kEllipsis; }
  bool is_torch_object() const { return kind() == Kind::kTorchObject; }

  // Accessors; calling one for another kind is a bug (checked).
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // Also accepts an int, as Python does.
  Symbol as_symbol() const;
  absl::string_view as_string() const { return as_symbol().name(); }
  DType as_dtype() const;
  absl::string_view as_torch_object() const;  // "device:cpu"
  // Inline: every walk over a graph's edges reads these two.
  Node* as_node() const {
    Node* const* node = std::get_if<Node*>(&value_);
    FUSELAGE_CHECK(node != nullptr);
    return *node;
  }
  absl::Span<const Argument> items() const {  // list or tuple items; a slice's 3 parts
    const ListPtr* list = std::get_if<ListPtr>(&value_);
    FUSELAGE_CHECK(list != nullptr);
    return (*list)->items;
  }

  // True if any Node is referenced, at any depth.
  bool ContainsNode() const;
  // Calls fn(Node*) for every node reference, depth first, in order.
  template <typename Fn>
  void ForEachNode(Fn&& fn) const {
    // Not recursive itself, so that it inlines into every walk over edges; only a list
    // recurses.
    if (Node* const* node = std::get_if<Node*>(&value_)) {
      fn(*node);
    } else if (const ListPtr* list = std::get_if<ListPtr>(&value_)) {
      for (const Argument& a : (*list)->items) a.ForEachNodeInList(fn);
    }
  }
  // A copy with every node reference n replaced by fn(n).
  template <typename Fn>
  Argument MapNodes(Fn&& fn) const {
    if (is_node()) return Argument(fn(as_node()));
    if (is_slice()) {
      return Slice(items()[0].MapNodes(fn), items()[1].MapNodes(fn), items()[2].MapNodes(fn));
    }
    if (!is_list()) return *this;
    std::vector<Argument> mapped;
    mapped.reserve(items().size());
    for (const Argument& a : items()) mapped.push_back(a.MapNodes(fn));
    return is_tuple() ? Tuple(std::move(mapped)) : List(std::move(mapped));
  }
  // Nesting depth: 0 for a scalar or node, 1 + max item depth for a list (a slice is 1).
  int Depth() const;

  // Python-like rendering: None, True, 3, 0.5, 'str', torch.quint8, node_name, [a, b], (a,),
  // slice(-2, None, None), Ellipsis, torch.device('cpu'), torch.channels_last.
  std::string ToString() const;

  // Structural equality; nodes compare by identity.
  friend bool operator==(const Argument& a, const Argument& b);
  friend bool operator!=(const Argument& a, const Argument& b) { return !(a == b); }

 private:
  friend class Graph;  // SetListItem, for ReplaceAllUsesWith's in-place rewrite
  using ListPtr = std::shared_ptr<const ArgList>;
  // Sets item `i` of this list (or tuple) to `node`, in place if no other Argument shares
  // the list, else on a copy this one then holds (lists are immutable once shared).
  void SetListItem(size_t i, Node* node) {
    ListPtr& list = std::get<ListPtr>(value_);
    if (list.use_count() != 1) list = std::make_shared<ArgList>(*list);
    // Every list is created non-const (Argument::List / Tuple, the copy above).
    const_cast<ArgList&>(*list).items[i] = Argument(node);
  }
  template <typename Fn>
  ABSL_ATTRIBUTE_NOINLINE void ForEachNodeInList(Fn& fn) const {
    ForEachNode(fn);
  }
  struct EllipsisTag {
    friend bool operator==(EllipsisTag, EllipsisTag) { return true; }
  };
  struct TorchObjectText {
    Symbol text;
    friend bool operator==(TorchObjectText a, TorchObjectText b) { return a.text == b.text; }
  };
  // The order matches Kind (kSlice excepted, which is a ListPtr).
  using Value = std::variant<std::monostate, bool, int64_t, double, Symbol, DType, Node*,
                             ListPtr, EllipsisTag, TorchObjectText>;
  explicit Argument(Value v) : value_(std::move(v)) {}
  Value value_;
};

// Whether `text` names a torch object Argument::TorchObject holds: "device:" followed by a
// device ("cpu", "cuda:0"), "layout:" or "memory_format:" followed by a name (letters,
// digits, '_').
bool IsTorchObjectText(absl::string_view text);
// `text` (IsTorchObjectText) as Python spells the object: torch.device('cpu'),
// torch.strided, torch.channels_last.
std::string TorchObjectRepr(absl::string_view text);

using Kwarg = std::pair<Symbol, Argument>;
using Kwargs = std::vector<Kwarg>;

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_ARGUMENT_H_
