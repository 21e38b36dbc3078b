#include "graph/module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fuselage {
namespace {

template <typename Vec>
auto FindEntry(Vec& entries, absl::string_view name) -> decltype(entries.begin()) {
  return std::find_if(entries.begin(), entries.end(),
                      [name](const auto& e) { return e.first == name; });
}

}  // namespace

Module::Module(Module&& other) noexcept
    : type_(other.type_),
      tensors_(std::move(other.tensors_)),
      attributes_(std::move(other.attributes_)),
      children_(std::move(other.children_)),
      child_index_(std::move(other.child_index_)) {
  other.children_.clear();
  other.child_index_.clear();
  InvalidateModuleBindings();
}

Module& Module::operator=(Module&& other) noexcept {
  if (this == &other) return *this;
  type_ = other.type_;
  tensors_ = std::move(other.tensors_);
  attributes_ = std::move(other.attributes_);
  children_ = std::move(other.children_);
  child_index_ = std::move(other.child_index_);
  other.children_.clear();
  other.child_index_.clear();
  InvalidateModuleBindings();
  return *this;
}

const Tensor* Module::FindTensor(absl::string_view name) const {
  auto it = FindEntry(tensors_, name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Tensor* Module::FindMutableTensor(absl::string_view name) {
  auto it = FindEntry(tensors_, name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void Module::SetTensor(absl::string_view name, Tensor tensor) {
  auto it = FindEntry(tensors_, name);
  if (it != tensors_.end()) {
    it->second = std::move(tensor);
  } else {
    tensors_.emplace_back(std::string(name), std::move(tensor));
  }
}

bool Module::RemoveTensor(absl::string_view name) {
  auto it = FindEntry(tensors_, name);
  if (it == tensors_.end()) return false;
  tensors_.erase(it);
  return true;
}

absl::StatusOr<const Tensor*> Module::GetTensor(absl::string_view name) const {
  const Tensor* t = FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(type_.name(), " module has no tensor '", name, "'"));
  }
  return t;
}

const Argument* Module::FindAttribute(absl::string_view name) const {
  auto it = FindEntry(attributes_, name);
  return it == attributes_.end() ? nullptr : &it->second;
}

void Module::SetAttribute(absl::string_view name, Argument value) {
  auto it = FindEntry(attributes_, name);
  if (it != attributes_.end()) {
    it->second = std::move(value);
  } else {
    attributes_.emplace_back(std::string(name), std::move(value));
  }
}

bool Module::RemoveAttribute(absl::string_view name) {
  auto it = FindEntry(attributes_, name);
  if (it == attributes_.end()) return false;
  attributes_.erase(it);
  return true;
}

absl::StatusOr<int64_t> Module::GetInt(absl::string_view name) const {
  const Argument* a = FindAttribute(name);
  if (a == nullptr || !a->is_int()) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_.name(), " attribute '", name, "': expected an int, got ",
        a == nullptr ? "nothing" : a->ToString()));
  }
  return a->as_int();
}

absl::StatusOr<double> Module::GetFloat(absl::string_view name) const {
  const Argument* a = FindAttribute(name);
  if (a == nullptr || !(a->is_float() || a->is_int())) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_.name(), " attribute '", name, "': expected a float, got ",
        a == nullptr ? "nothing" : a->ToString()));
  }
  return a->as_float();
}

absl::StatusOr<bool> Module::GetBool(absl::string_view name) const {
  const Argument* a = FindAttribute(name);
  if (a == nullptr || !a->is_bool()) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_.name(), " attribute '", name, "': expected a bool, got ",
        a == nullptr ? "nothing" : a->ToString()));
  }
  return a->as_bool();
}

absl::StatusOr<std::vector<int64_t>> Module::GetInts(absl::string_view name, size_t size) const {
  const Argument* a = FindAttribute(name);
  if (a != nullptr && a->is_int()) return std::vector<int64_t>(size, a->as_int());
  if (a != nullptr && a->is_list() && a->items().size() == size &&
      std::all_of(a->items().begin(), a->items().end(),
                  [](const Argument& i) { return i.is_int(); })) {
    std::vector<int64_t> values;
    for (const Argument& i : a->items()) values.push_back(i.as_int());
    return values;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      type_.name(), " attribute '", name, "': expected an int or a list of ", size,
      " ints, got ", a == nullptr ? "nothing" : a->ToString()));
}

Module* Module::FindChild(absl::string_view name) const {
  auto it = child_index_.find(name);
  return it == child_index_.end() ? nullptr : children_[it->second].second.get();
}

Module* Module::SetChild(absl::string_view name, std::unique_ptr<Module> child) {
  InvalidateModuleBindings();
  Module* raw = child.get();
  auto [it, inserted] = child_index_.emplace(std::string(name), children_.size());
  if (inserted) {
    children_.emplace_back(std::string(name), std::move(child));
  } else {
    children_[it->second].second = std::move(child);
  }
  return raw;
}

std::unique_ptr<Module> Module::RemoveChild(absl::string_view name) {
  auto it = child_index_.find(name);
  if (it == child_index_.end()) return nullptr;
  InvalidateModuleBindings();
  const size_t index = it->second;
  std::unique_ptr<Module> child = std::move(children_[index].second);
  children_.erase(children_.begin() + static_cast<std::ptrdiff_t>(index));
  child_index_.erase(it);
  for (auto& [child_name, i] : child_index_) {
    if (i > index) --i;
  }
  return child;
}

int Module::RemoveChildren(const absl::flat_hash_set<std::string>& names) {
  size_t kept = 0;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (names.contains(children_[i].first)) continue;
    if (kept != i) children_[kept] = std::move(children_[i]);
    ++kept;
  }
  const int removed = static_cast<int>(children_.size() - kept);
  if (removed == 0) return 0;
  InvalidateModuleBindings();
  children_.resize(kept);
  child_index_.clear();
  for (size_t i = 0; i < children_.size(); ++i) child_index_.emplace(children_[i].first, i);
  return removed;
}

std::unique_ptr<Module> Module::Clone() const {
  auto copy = std::make_unique<Module>(type_);
  copy->tensors_ = tensors_;
  copy->attributes_ = attributes_;
  for (const auto& [name, child] : children_) copy->SetChild(name, child->Clone());
  return copy;
}

}  // namespace fuselage
