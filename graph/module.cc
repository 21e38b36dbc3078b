#include "graph/module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace fuselage {
namespace {

// `*to` = a copy of `from` with capacity for `spare` more entries. Without spare it is the
// plain copy (vector's copy assignment is cheaper than reserve + range insert: callgrind
// showed ~230 more instructions per observer clone in prepare).
template <typename Vec>
void CopyWithRoom(const Vec& from, size_t spare, Vec* to) {
  if (spare == 0) {
    *to = from;
    return;
  }
  to->reserve(from.size() + spare);
  for (const auto& entry : from) to->push_back(entry);
}

template <typename Vec>
auto FindEntry(Vec& entries, absl::string_view name) -> decltype(entries.begin()) {
  return std::find_if(entries.begin(), entries.end(),
                      [name](const auto& e) { return e.first == name; });
}

}  // namespace

Module::Module(Symbol type, TensorList tensors, AttributeList attributes)
    : type_(type), tensors_(std::move(tensors)), attributes_(std::move(attributes)) {
#ifndef NDEBUG
  const auto distinct = [](const auto& list) {
    for (size_t i = 0; i < list.size(); ++i) {
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (list[i].first == list[j].first) return false;
      }
    }
    return true;
  };
  FUSELAGE_CHECK(distinct(tensors_));
  FUSELAGE_CHECK(distinct(attributes_));
#endif
}

Module::Module(Module&& other) noexcept
    : type_(other.type_),
      tensors_(std::move(other.tensors_)),
      attributes_(std::move(other.attributes_)),
      shared_tensors_(std::move(other.shared_tensors_)),
      shared_attributes_(std::move(other.shared_attributes_)),
      children_(std::move(other.children_)) {
  other.children_.clear();
  other.child_index_.reset();
  RebuildChildIndex();
  for (auto& child : children_) {
    if (child.second != nullptr) child.second->SetModel(model_);  // none: this one is new
  }
  other.NoteChildrenReplaced(!children_.empty());  // This one is new, so in no tree yet.
}

Module& Module::operator=(Module&& other) noexcept {
  if (this == &other) return *this;
  const bool had_children = !children_.empty();
  const bool other_had_children = !other.children_.empty();
  type_ = other.type_;
  tensors_ = std::move(other.tensors_);
  attributes_ = std::move(other.attributes_);
  shared_tensors_ = std::move(other.shared_tensors_);
  shared_attributes_ = std::move(other.shared_attributes_);
  children_ = std::move(other.children_);
  other.children_.clear();
  other.child_index_.reset();
  RebuildChildIndex();
  for (auto& child : children_) {
    if (child.second != nullptr) child.second->SetModel(model_);
  }
  NoteChildrenReplaced(had_children);
  other.NoteChildrenReplaced(other_had_children);
  return *this;
}

namespace {

// `own` after copying into it, with room for `capacity`, the list `shared` held (if any),
// which it then lets go of: the first edit of a list shared with clones.
template <typename List>
List& Unshare(List& own, std::shared_ptr<const List>& shared, size_t capacity) {
  if (shared != nullptr) {
    own.reserve(std::max(capacity, shared->size()));
    own.assign(shared->begin(), shared->end());
    shared.reset();
  }
  return own;
}

}  // namespace

Module::TensorList& Module::OwnTensors(size_t capacity) {
  return Unshare(tensors_, shared_tensors_, capacity);
}

Module::AttributeList& Module::OwnAttributes(size_t capacity) {
  return Unshare(attributes_, shared_attributes_, capacity);
}

void Module::ShareFieldsWithClones() {
  if (shared_tensors_ == nullptr && !tensors_.empty()) {
    shared_tensors_ = std::make_shared<const TensorList>(std::move(tensors_));
    tensors_ = TensorList();
  }
  if (shared_attributes_ == nullptr && !attributes_.empty()) {
    shared_attributes_ = std::make_shared<const AttributeList>(std::move(attributes_));
    attributes_ = AttributeList();
  }
}

const Tensor* Module::FindTensor(absl::string_view name) const {
  const TensorList& tensors = this->tensors();
  auto it = FindEntry(tensors, name);
  return it == tensors.end() ? nullptr : &it->second;
}

Tensor* Module::FindMutableTensor(absl::string_view name) {
  // A shared list is copied only if the caller gets a tensor it may write.
  if (FindTensor(name) == nullptr) return nullptr;
  TensorList& tensors = OwnTensors();
  return &FindEntry(tensors, name)->second;
}

std::pair<Tensor*, Tensor*> Module::FindMutableTensors(absl::string_view a,
                                                       absl::string_view b) {
  // Positions first (reading a shared list), so a list shared with clones is copied only
  // if there is a tensor to hand out.
  constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t at_a = kAbsent, at_b = kAbsent;
  const TensorList& list = tensors();
  for (size_t i = 0; i < list.size() && (at_a == kAbsent || at_b == kAbsent); ++i) {
    const absl::string_view name = list[i].first;
    if (at_a == kAbsent && name == a) {
      at_a = i;
    } else if (at_b == kAbsent && name == b) {
      at_b = i;
    }
  }
  // a == b: both are the one tensor (the loop above gave it to `a` only).
  if (at_b == kAbsent && a == b) at_b = at_a;
  if (at_a == kAbsent && at_b == kAbsent) return {nullptr, nullptr};
  TensorList& own = OwnTensors();  // same order as the shared list, so same positions
  return {at_a == kAbsent ? nullptr : &own[at_a].second,
          at_b == kAbsent ? nullptr : &own[at_b].second};
}

void Module::SetTensor(absl::string_view name, Tensor tensor) {
  const bool present = FindTensor(name) != nullptr;
  TensorList& tensors = OwnTensors(this->tensors().size() + (present ? 0 : 1));
  if (present) {
    FindEntry(tensors, name)->second = std::move(tensor);
  } else {
    tensors.emplace_back(std::string(name), std::move(tensor));
  }
}

bool Module::RemoveTensor(absl::string_view name) {
  if (FindTensor(name) == nullptr) return false;
  TensorList& tensors = OwnTensors();
  tensors.erase(FindEntry(tensors, name));
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
  const AttributeList& attributes = this->attributes();
  auto it = FindEntry(attributes, name);
  return it == attributes.end() ? nullptr : &it->second;
}

void Module::SetAttribute(absl::string_view name, Argument value) {
  const bool present = FindAttribute(name) != nullptr;
  AttributeList& attributes = OwnAttributes(this->attributes().size() + (present ? 0 : 1));
  if (present) {
    FindEntry(attributes, name)->second = std::move(value);
  } else {
    attributes.emplace_back(std::string(name), std::move(value));
  }
}

bool Module::RemoveAttribute(absl::string_view name) {
  if (FindAttribute(name) == nullptr) return false;
  AttributeList& attributes = OwnAttributes();
  attributes.erase(FindEntry(attributes, name));
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

size_t Module::ChildPosition(absl::string_view name) const {
  if (children_.size() <= kChildrenScannedLinearly) {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].first == name) return i;
    }
    return kNoChild;
  }
  auto it = child_index_->find(name);
  return it == child_index_->end() ? kNoChild : *it;
}

void Module::RebuildChildIndex() {
  if (children_.size() <= kChildrenScannedLinearly) {
    child_index_.reset();
    return;
  }
  if (child_index_ == nullptr) {
    child_index_ = std::make_unique<ChildIndex>(0, ChildNameHash{this}, ChildNameEq{this});
  } else {
    child_index_->clear();
  }
  // Room for as many children as children_ has room for: after ReserveChildren(n) (prepare
  // reserves its observer container) adding up to n children rehashes no name.
  child_index_->reserve(children_.capacity());
  for (size_t i = 0; i < children_.size(); ++i) child_index_->insert(static_cast<uint32_t>(i));
}

Module* Module::FindChild(absl::string_view name) const {
  const size_t position = ChildPosition(name);
  return position == kNoChild ? nullptr : children_[position].second.get();
}

Module* Module::SetChild(absl::string_view name, std::unique_ptr<Module> child) {
  Module* raw = child.get();
  if (raw != nullptr) raw->SetModel(model_);
  if (children_.size() <= kChildrenScannedLinearly) {
    const size_t position = ChildPosition(name);
    if (position != kNoChild) {
      NoteTreeEdit();  // The old child (and its subtree) leaves the tree.
      children_[position].second = std::move(child);
      return raw;
    }
    NoteBindingEdit();  // A new path; every existing one resolves as before.
    children_.emplace_back(std::string(name), std::move(child));
    if (children_.size() > kChildrenScannedLinearly) RebuildChildIndex();
    return raw;
  }
  // Indexed: one hash of `name` finds the child or the index slot for the new one (whose
  // position is children_.size(); any rehash before it is stored sees children_ as is).
  const auto next_position = static_cast<uint32_t>(children_.size());
  bool added = false;
  const auto it = child_index_->lazy_emplace(name, [&](const ChildIndex::constructor& construct) {
    construct(next_position);
    added = true;
  });
  if (added) {
    NoteBindingEdit();
    children_.emplace_back(std::string(name), std::move(child));
  } else {
    NoteTreeEdit();
    children_[*it].second = std::move(child);
  }
  return raw;
}

std::vector<std::unique_ptr<Module>> Module::EraseChildrenAt(
    const std::vector<uint32_t>& positions) {
  std::vector<std::unique_ptr<Module>> removed;
  if (positions.empty()) return removed;
  NoteTreeEdit();
  removed.reserve(positions.size());
  // new_position[i]: where child i goes, or kGone. Marking the removed ones in it first
  // takes the positions in any order and with repeats: the walk below is over every child
  // anyway, so sorting them (what RemoveModules did per parent, ~80 instructions per
  // removed child) buys nothing.
  constexpr uint32_t kGone = static_cast<uint32_t>(-1);
  std::vector<uint32_t> new_position(children_.size(), 0);
  for (size_t k = 0; k < positions.size(); ++k) {
    // Each removed child is written (model_) and later freed: a cache miss per child
    // in a large tree, overlapped by asking for the one a few removals ahead.
    constexpr size_t kRemovalsAhead = 8;
    if (k + kRemovalsAhead < positions.size()) {
      __builtin_prefetch(children_[positions[k + kRemovalsAhead]].second.get(), /*rw=*/1);
    }
    const uint32_t position = positions[k];
    new_position[position] = kGone;
    if (children_[position].second != nullptr) children_[position].second->SetModel(nullptr);
  }
  size_t kept = 0;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (new_position[i] == kGone) {
      removed.push_back(std::move(children_[i].second));
      continue;
    }
    new_position[i] = static_cast<uint32_t>(kept);
    if (kept != i) children_[kept] = std::move(children_[i]);
    ++kept;
  }
  children_.resize(kept);
  if (children_.size() <= kChildrenScannedLinearly) {
    child_index_.reset();
    return removed;
  }
  // Renumber the index in place instead of rehashing every name: an entry's hash is that
  // of the name at its position, and each kept name moved from its old position to its
  // new one, so writing the new position keeps the entry's hash (and slot) valid. The
  // index hashes nothing while it is renumbered (erasing by iterator does not hash).
  for (auto it = child_index_->begin(); it != child_index_->end();) {
    const uint32_t to = new_position[*it];
    if (to == kGone) {
      child_index_->erase(it++);
    } else {
      const_cast<uint32_t&>(*it) = to;  // The slot holds a plain uint32_t.
      ++it;
    }
  }
  return removed;
}

void Module::SetModel(ModuleBindingGenerations* model) {
  if (model_ == model) return;
  model_ = model;
  for (auto& child : children_) {
    if (child.second != nullptr) child.second->SetModel(model);
  }
}

std::unique_ptr<Module> Module::RemoveChild(absl::string_view name) {
  const size_t position = ChildPosition(name);
  if (position == kNoChild) return nullptr;
  return std::move(EraseChildrenAt({static_cast<uint32_t>(position)}).front());
}

int Module::RemoveChildren(const absl::flat_hash_set<std::string>& names) {
  std::vector<uint32_t> positions;
  positions.reserve(names.size());
  for (const std::string& name : names) {
    const size_t position = ChildPosition(name);
    if (position != kNoChild) positions.push_back(static_cast<uint32_t>(position));
  }
  return static_cast<int>(EraseChildrenAt(positions).size());
}

std::unique_ptr<Module> Module::Clone() const { return Clone(0, 0); }

void Module::CopyAttributesTo(size_t spare_attributes, Module* copy) const {
  if (shared_attributes_ != nullptr && spare_attributes == 0) {
    copy->shared_attributes_ = shared_attributes_;
  } else {
    CopyWithRoom(attributes(), spare_attributes, &copy->attributes_);
  }
}

std::unique_ptr<Module> Module::CloneAttributes(size_t spare_tensors,
                                                size_t spare_attributes) const {
  auto copy = std::make_unique<Module>(type_);
  copy->tensors_.reserve(spare_tensors);
  CopyAttributesTo(spare_attributes, copy.get());
  return copy;
}

std::unique_ptr<Module> Module::Clone(size_t spare_tensors, size_t spare_attributes) const {
  auto copy = std::make_unique<Module>(type_);
  if (shared_tensors_ != nullptr && spare_tensors == 0) {
    copy->shared_tensors_ = shared_tensors_;
  } else {
    CopyWithRoom(tensors(), spare_tensors, &copy->tensors_);
  }
  CopyAttributesTo(spare_attributes, copy.get());
  copy->children_.reserve(children_.size());
  for (const auto& [name, child] : children_) {
    std::unique_ptr<Module> child_copy = child == nullptr ? nullptr : child->Clone();
    copy->children_.emplace_back(name, std::move(child_copy));
  }
  copy->RebuildChildIndex();
  return copy;
}

}  // namespace fuselage
