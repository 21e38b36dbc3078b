#include "graph/argument.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/node.h"

namespace fuselage {

Argument Argument::List(std::vector<Argument> items) {
  auto list = std::make_shared<ArgList>();
  list->is_tuple = false;
  list->items = std::move(items);
  return Argument(Value(ListPtr(std::move(list))));
}

Argument Argument::Tuple(std::vector<Argument> items) {
  auto list = std::make_shared<ArgList>();
  list->is_tuple = true;
  list->items = std::move(items);
  return Argument(Value(ListPtr(std::move(list))));
}

Argument Argument::Slice(Argument start, Argument stop, Argument step) {
  auto list = std::make_shared<ArgList>();
  list->is_slice = true;
  list->items = {std::move(start), std::move(stop), std::move(step)};
  return Argument(Value(ListPtr(std::move(list))));
}

Argument Argument::Ints(absl::Span<const int64_t> values) {
  std::vector<Argument> items;
  items.reserve(values.size());
  for (int64_t v : values) items.push_back(Int(v));
  return List(std::move(items));
}

bool Argument::as_bool() const {
  FUSELAGE_CHECK(is_bool());
  return std::get<bool>(value_);
}
int64_t Argument::as_int() const {
  FUSELAGE_CHECK(is_int());
  return std::get<int64_t>(value_);
}
double Argument::as_float() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(value_));
  FUSELAGE_CHECK(is_float());
  return std::get<double>(value_);
}
Symbol Argument::as_symbol() const {
  FUSELAGE_CHECK(is_string());
  return std::get<Symbol>(value_);
}
DType Argument::as_dtype() const {
  FUSELAGE_CHECK(is_dtype());
  return std::get<DType>(value_);
}
absl::string_view Argument::as_torch_object() const {
  FUSELAGE_CHECK(is_torch_object());
  return std::get<TorchObjectText>(value_).text.name();
}

bool IsTorchObjectText(absl::string_view text) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return false;
  const absl::string_view type = text.substr(0, colon), name = text.substr(colon + 1);
  const bool is_device = type == "device";
  if (!is_device && type != "layout" && type != "memory_format") return false;
  // A device may carry its index ("cuda:0"); a layout or memory format is one identifier.
  return !name.empty() && std::all_of(name.begin(), name.end(), [&](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           (is_device && c == ':');
  });
}

std::string TorchObjectRepr(absl::string_view text) {
  const size_t colon = text.find(':');
  if (text.substr(0, colon) == "device")
    return absl::StrCat("torch.device('", text.substr(colon + 1), "')");
  return absl::StrCat("torch.", text.substr(colon + 1));
}

bool Argument::ContainsNode() const {
  bool found = false;
  ForEachNode([&](Node*) { found = true; });
  return found;
}

int Argument::Depth() const {
  if (is_slice()) return 1;
  if (!is_list()) return 0;
  int depth = 0;
  for (const Argument& a : items()) depth = std::max(depth, a.Depth());
  return depth + 1;
}

namespace {

std::string FloatToString(double f) {
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (std::isnan(f)) return "nan";
  std::string s = absl::StrCat(f);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string Argument::ToString() const {
  switch (kind()) {
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return absl::StrCat(as_int());
    case Kind::kFloat: return FloatToString(as_float());
    case Kind::kString: return absl::StrCat("'", as_string(), "'");
    case Kind::kDType: return std::string(DTypeName(as_dtype()));
    case Kind::kNode: return as_node()->name();
    case Kind::kEllipsis: return "Ellipsis";
    case Kind::kTorchObject: return TorchObjectRepr(as_torch_object());
    case Kind::kSlice:
    case Kind::kList: {
      std::string inner = absl::StrJoin(items(), ", ", [](std::string* out, const Argument& a) {
        out->append(a.ToString());
      });
      if (is_slice()) return absl::StrCat("slice(", inner, ")");
      if (!is_tuple()) return absl::StrCat("[", inner, "]");
      return items().size() == 1 ? absl::StrCat("(", inner, ",)") : absl::StrCat("(", inner, ")");
    }
  }
  return "<invalid>";
}

bool operator==(const Argument& a, const Argument& b) {
  if (a.kind() != b.kind()) return false;
  if (!a.is_list() && !a.is_slice()) return a.value_ == b.value_;
  if (a.is_tuple() != b.is_tuple()) return false;
  return std::equal(a.items().begin(), a.items().end(), b.items().begin(), b.items().end());
}

}  // namespace fuselage
