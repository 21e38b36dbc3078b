#include "runtime/value.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"

namespace fuselage {

Value Value::Sequence(std::vector<Value> items, bool is_tuple) {
  auto list = std::make_shared<ValueList>();
  list->is_tuple = is_tuple;
  list->items = std::move(items);
  return Value(Rep(ListPtr(std::move(list))));
}

bool Value::as_bool() const {
  FUSELAGE_CHECK(is_bool());
  return std::get<bool>(value_);
}

int64_t Value::as_int() const {
  FUSELAGE_CHECK(is_int());
  return std::get<int64_t>(value_);
}

double Value::as_float() const {
  FUSELAGE_CHECK(is_number());
  return is_int() ? static_cast<double>(std::get<int64_t>(value_)) : std::get<double>(value_);
}

const std::string& Value::as_string() const {
  FUSELAGE_CHECK(is_string());
  return std::get<std::string>(value_);
}

DType Value::as_dtype() const {
  FUSELAGE_CHECK(is_dtype());
  return std::get<DType>(value_);
}

const Tensor& Value::as_tensor() const {
  FUSELAGE_CHECK(is_tensor());
  return std::get<Tensor>(value_);
}

absl::Span<const Value> Value::items() const {
  FUSELAGE_CHECK(is_list());
  return std::get<ListPtr>(value_)->items;
}

const Value::SliceParts& Value::as_slice() const {
  FUSELAGE_CHECK(is_slice());
  return std::get<SliceParts>(value_);
}

const Tensor& Value::as_channels_last() const {
  FUSELAGE_CHECK(is_channels_last());
  return std::get<ChannelsLastTensor>(value_).tensor;
}

absl::string_view Value::KindName() const {
  switch (kind()) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kDType: return "dtype";
    case Kind::kTensor: return "Tensor";
    case Kind::kList: return is_tuple() ? "tuple" : "list";
    case Kind::kSlice: return "slice";
    case Kind::kEllipsis: return "ellipsis";
    case Kind::kChannelsLast: return "channels-last Tensor";
  }
  return "?";
}

std::string Value::ToString() const {
  switch (kind()) {
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return absl::StrCat(as_int());
    case Kind::kFloat: return absl::StrCat(as_float());
    case Kind::kString: return absl::StrCat("'", as_string(), "'");
    case Kind::kDType: return std::string(DTypeName(as_dtype()));
    case Kind::kTensor:
      return absl::StrCat("Tensor(", DTypeName(as_tensor().dtype()), " ",
                          as_tensor().ShapeString(), ")");
    case Kind::kList: {
      const std::string inner = absl::StrJoin(
          items(), ", ", [](std::string* out, const Value& v) { out->append(v.ToString()); });
      if (!is_tuple()) return absl::StrCat("[", inner, "]");
      return absl::StrCat("(", inner, items().size() == 1 ? ",)" : ")");
    }
    case Kind::kSlice: {
      const auto part = [](const std::optional<int64_t>& p) {
        return p.has_value() ? absl::StrCat(*p) : std::string("None");
      };
      const SliceParts& s = as_slice();
      return absl::StrCat("slice(", part(s.start), ", ", part(s.stop), ", ", part(s.step), ")");
    }
    case Kind::kEllipsis: return "Ellipsis";
    case Kind::kChannelsLast:
      return absl::StrCat("ChannelsLastTensor(", DTypeName(as_channels_last().dtype()), " ",
                          as_channels_last().ShapeString(), ")");
  }
  return "?";
}

void FlattenValue(const Value& value, std::vector<Value>* out) {
  if (!value.is_list()) {
    out->push_back(value);
    return;
  }
  for (const Value& item : value.items()) FlattenValue(item, out);
}

}  // namespace fuselage
