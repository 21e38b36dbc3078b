#include "runtime/kernel_args.h"

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

absl::Status WrongKind(absl::string_view name, absl::string_view expected, const Value& got) {
  return absl::InvalidArgumentError(absl::StrCat("arg '", name, "': expected ", expected,
                                                 "; got ", got.KindName(), " ",
                                                 got.ToString()));
}

}  // namespace

absl::Status ExpectFloatTensor(const Tensor& tensor, absl::string_view what) {
  if (tensor.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a torch.float32 tensor; got ",
                                                   DTypeName(tensor.dtype()), " ",
                                                   tensor.ShapeString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ValueToInts(const Value& value, absl::string_view what) {
  if (value.is_int()) return std::vector<int64_t>{value.as_int()};
  if (!value.is_list()) return WrongKind(what, "an int or a list of ints", value);
  std::vector<int64_t> ints;
  for (const Value& item : value.items()) {
    if (!item.is_int()) return WrongKind(what, "a list of ints", value);
    ints.push_back(item.as_int());
  }
  return ints;
}

const Value* ArgReader::Find(size_t index, absl::string_view name) const {
  if (index < args_.size()) return &args_[index];
  for (const auto& [key, value] : kwargs_) {
    if (key.name() == name) return &value;
  }
  return nullptr;
}

absl::Status ArgReader::ExpectAtMostPositional(size_t max_positional) const {
  if (args_.size() > max_positional) {
    return absl::InvalidArgumentError(absl::StrCat("expected at most ", max_positional,
                                                   " positional args; got ", args_.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> ArgReader::Required(size_t index, absl::string_view name) const {
  const Value* v = Find(index, name);
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required arg '", name, "' (position ", index, ")"));
  }
  return *v;
}

absl::StatusOr<const Tensor*> ArgReader::GetTensor(size_t index, absl::string_view name) const {
  const Value* v = Find(index, name);
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required tensor arg '", name, "' (position ", index, ")"));
  }
  if (!v->is_tensor()) return WrongKind(name, "a Tensor", *v);
  return &v->as_tensor();
}

absl::StatusOr<const Tensor*> ArgReader::GetFloatTensor(size_t index,
                                                        absl::string_view name) const {
  ASSIGN_OR_RETURN(const Tensor* t, GetTensor(index, name));
  RETURN_IF_ERROR(ExpectFloatTensor(*t, absl::StrCat("arg '", name, "'")));
  return t;
}

absl::StatusOr<const Tensor*> ArgReader::OptionalFloatTensor(size_t index,
                                                             absl::string_view name) const {
  const Value* v = Find(index, name);
  if (v == nullptr || v->is_none()) return static_cast<const Tensor*>(nullptr);
  return GetFloatTensor(index, name);
}

absl::StatusOr<int64_t> ArgReader::GetInt(size_t index, absl::string_view name) const {
  ASSIGN_OR_RETURN(Value v, Required(index, name));
  if (!v.is_int()) return WrongKind(name, "an int", v);
  return v.as_int();
}

absl::StatusOr<int64_t> ArgReader::OptionalInt(size_t index, absl::string_view name,
                                               int64_t default_value) const {
  const Value* v = Find(index, name);
  if (v == nullptr || v->is_none()) return default_value;
  if (!v->is_int()) return WrongKind(name, "an int", *v);
  return v->as_int();
}

absl::StatusOr<double> ArgReader::GetFloat(size_t index, absl::string_view name) const {
  ASSIGN_OR_RETURN(Value v, Required(index, name));
  if (!v.is_number()) return WrongKind(name, "a number", v);
  return v.as_float();
}

absl::StatusOr<double> ArgReader::OptionalFloat(size_t index, absl::string_view name,
                                                double default_value) const {
  const Value* v = Find(index, name);
  if (v == nullptr || v->is_none()) return default_value;
  if (!v->is_number()) return WrongKind(name, "a number", *v);
  return v->as_float();
}

absl::StatusOr<bool> ArgReader::OptionalBool(size_t index, absl::string_view name,
                                             bool default_value) const {
  const Value* v = Find(index, name);
  if (v == nullptr || v->is_none()) return default_value;
  if (!v->is_bool()) return WrongKind(name, "a bool", *v);
  return v->as_bool();
}

absl::StatusOr<std::vector<int64_t>> ArgReader::OptionalInts(
    size_t index, absl::string_view name, size_t size,
    std::vector<int64_t> default_value) const {
  const Value* v = Find(index, name);
  if (v == nullptr || v->is_none()) return default_value;
  ASSIGN_OR_RETURN(std::vector<int64_t> ints, ValueToInts(*v, name));
  if (size == 0) return ints;
  if (v->is_int()) return std::vector<int64_t>(size, ints[0]);
  if (ints.size() == 1) return std::vector<int64_t>(size, ints[0]);
  if (ints.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat("arg '", name, "': expected ", size,
                                                   " ints; got ", ints.size()));
  }
  return ints;
}

}  // namespace fuselage
