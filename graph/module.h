// Module: a module of the model as data (torch.nn.Module without code): a type symbol
// ("nn.Conv2d", "nni.ConvAddReLU2d", "nnq.Conv2d"), named tensors (parameters and
// buffers), named attributes (stride, padding, scale, ...) and named child modules, each
// kept in insertion order so files and printouts are deterministic.
//
// Module type names follow PyTorch's import aliases: nn (torch.nn), nni
// (torch.ao.nn.intrinsic), nnq (torch.ao.nn.quantized), nniq (intrinsic.quantized),
// nnqr (quantized.reference), plus "GraphModule" for the root.
//
//   auto conv = std::make_unique<Module>("nn.Conv2d");
//   conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {0.5f}));
//   conv->SetAttribute("stride", Argument::Ints({1, 1}));
//   ASSIGN_OR_RETURN(std::vector<int64_t> stride, conv->GetInts("stride", 2));  // or an error
//   RETURN_IF_ERROR(gm.SetModule("layer1.conv", std::move(conv)));             // naming the field
#ifndef FUSELAGE_GRAPH_MODULE_H_
#define FUSELAGE_GRAPH_MODULE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"  // Not used here; kept for includers.
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/argument.h"
#include "graph/module_binding.h"
#include "graph/symbol.h"
#include "graph/tensor.h"

namespace fuselage {

class Module {
 public:
  explicit Module(Symbol type) : type_(type) {}
  explicit Module(absl::string_view type) : type_(Symbol::Intern(type)) {}
  // Moving changes what both modules hold, so, like every edit of a type or of children
  // of a module in a model's tree, it invalidates that model's cached module types
  // (graph/module_binding.h). A module outside every model's tree (e.g. a fused module
  // being built, with its children) is edited without invalidating anything.
  //
  // Only an edit that takes a module out of a tree (a child replaced or removed, a module
  // with children moved from or into) changes what an existing module path resolves to,
  // and so the module-tree generation (GraphModule's path table); changing a type, adding
  // a new child or moving a module into a childless one in a tree (what lowering and
  // fusion do to replace a module in place) changes only the binding generation: every
  // module keeps its path and address, and paths that resolved to nothing before are
  // looked up anew anyway.
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  using TensorList = std::vector<std::pair<std::string, Tensor>>;
  using AttributeList = std::vector<std::pair<std::string, Argument>>;

  // A module of type `type` holding exactly these lists (moved in: no copy, no scan), in
  // this order, and no children: for a caller that builds a module's final fields in one
  // pass (lowering's native modules), where SetTensor / SetAttribute scan the list once
  // per field. The names within each list must be distinct, as SetTensor / SetAttribute
  // keep them (the caller's invariant: checked only in builds without NDEBUG).
  Module(Symbol type, TensorList tensors, AttributeList attributes);

  Symbol type() const { return type_; }
  void set_type(Symbol type) {
    type_ = type;
    NoteBindingEdit();
  }

  // Tensors (parameters and buffers).
  const Tensor* FindTensor(absl::string_view name) const;
  Tensor* FindMutableTensor(absl::string_view name);
  // Both tensors in one scan of the list (e.g. a batch-norm fold's "weight" and "bias"),
  // each nullptr if absent; as FindMutableTensor, a list shared with clones is copied only
  // if either is found. Two FindMutableTensor calls scan the list up to four times.
  std::pair<Tensor*, Tensor*> FindMutableTensors(absl::string_view a, absl::string_view b);
  // Adds or replaces.
  void SetTensor(absl::string_view name, Tensor tensor);
  bool RemoveTensor(absl::string_view name);
  const TensorList& tensors() const {
    return shared_tensors_ != nullptr ? *shared_tensors_ : tensors_;
  }
  // The tensor or a NotFound / InvalidArgument error naming module type and field.
  absl::StatusOr<const Tensor*> GetTensor(absl::string_view name) const;

  // Attributes: constant args (no node references).
  const Argument* FindAttribute(absl::string_view name) const;
  void SetAttribute(absl::string_view name, Argument value);
  bool RemoveAttribute(absl::string_view name);
  const AttributeList& attributes() const {
    return shared_attributes_ != nullptr ? *shared_attributes_ : attributes_;
  }
  // Typed reads with errors that name the field and the expectation.
  absl::StatusOr<int64_t> GetInt(absl::string_view name) const;
  absl::StatusOr<double> GetFloat(absl::string_view name) const;  // int accepted
  absl::StatusOr<bool> GetBool(absl::string_view name) const;
  // A list of ints; a single int is broadcast to `size` entries (PyTorch's _pair).
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name, size_t size) const;

  // Children. FindChild and SetChild are O(1): a module with more than
  // kChildrenScannedLinearly children keeps a hash index of them (a root may hold hundreds
  // of thousands); a smaller one (a fused module's "0", "1", ...) is scanned.
  Module* FindChild(absl::string_view name) const;
  // Adds or replaces; returns the child.
  Module* SetChild(absl::string_view name, std::unique_ptr<Module> child);
  std::unique_ptr<Module> RemoveChild(absl::string_view name);
  // Removes every child whose name is in `names` (absent names are ignored) in one pass
  // over the children, keeping the others' order; returns how many were removed.
  // RemoveChild is O(children) per call, so removing k of n children one by one is
  // O(k * n); this is O(n).
  int RemoveChildren(const absl::flat_hash_set<std::string>& names);
  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const {
    return children_;
  }

  // Room for `n` tensors / attributes / children in all, so adding fields one by one up to
  // that count reallocates nothing (a module being built, or a clone being extended).
  void ReserveTensors(size_t n) { OwnTensors(n).reserve(n); }
  void ReserveAttributes(size_t n) { OwnAttributes(n).reserve(n); }
  void ReserveChildren(size_t n) { children_.reserve(n); }

  std::unique_ptr<Module> Clone() const;
  // The same, with room in the copy for `spare_tensors` more tensors and
  // `spare_attributes` more attributes: adding that many fields to a clone (what convert
  // and lowering do to a float module) then reallocates and moves nothing, where a plain
  // Clone's lists are at exact capacity and the first new field moves them all.
  std::unique_ptr<Module> Clone(size_t spare_tensors, size_t spare_attributes) const;
  // A module of the same type with the same attributes but no tensors and no children,
  // with room for `spare_tensors` tensors and `spare_attributes` more attributes (e.g. a
  // native module built from a reference one: Clone() and then removing every tensor
  // copies each tensor only to free it).
  std::unique_ptr<Module> CloneAttributes(size_t spare_tensors = 0,
                                          size_t spare_attributes = 0) const;

  // From now on this module's clones share its tensor and attribute lists (copy on
  // write) instead of copying them: Clone() costs one heap block (the Module) plus its
  // children's clones, where a copy costs one per non-empty list plus one per name longer
  // than 15 characters (an observer: 4-5 blocks). For a prototype cloned many times
  // (prepare's observer modules). Whichever module edits a shared list first copies it
  // then (the same cost the clone would have paid); the shared list itself is never
  // written, so modules sharing it may be read and edited from different threads as
  // unrelated modules can. Changes nothing this module holds, so it is no tree edit.
  void ShareFieldsWithClones();

  static constexpr size_t kChildrenScannedLinearly = 8;

 private:
  friend class GraphModule;  // Removes a batch of children by position (RemoveModules).

  // The child index holds positions in children_ (4 bytes each, no copy of the name) and
  // hashes and compares a position by the name stored there, so it is looked up by name.
  // Both functors point back at the owning module, which is why a moved module rebuilds
  // its index rather than taking the other's.
  struct ChildNameHash {
    using is_transparent = void;
    size_t operator()(absl::string_view name) const {
      return absl::Hash<absl::string_view>{}(name);
    }
    size_t operator()(uint32_t position) const {
      return (*this)(absl::string_view(owner->children_[position].first));
    }
    const Module* owner;
  };
  struct ChildNameEq {
    using is_transparent = void;
    absl::string_view NameAt(uint32_t position) const {
      return owner->children_[position].first;
    }
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, absl::string_view b) const { return NameAt(a) == b; }
    bool operator()(absl::string_view a, uint32_t b) const { return a == NameAt(b); }
    const Module* owner;
  };
  using ChildIndex = absl::flat_hash_set<uint32_t, ChildNameHash, ChildNameEq>;

  // The lists edits write to: the module's own, after copying a shared one into it with
  // room for `capacity` entries (at least its size).
  TensorList& OwnTensors(size_t capacity = 0);
  AttributeList& OwnAttributes(size_t capacity = 0);
  // Gives `copy` (new, with no attributes) this module's attributes: the shared list if
  // there is one and no spare room is asked for, else a copy with that room.
  void CopyAttributesTo(size_t spare_attributes, Module* copy) const;

  static constexpr size_t kNoChild = static_cast<size_t>(-1);
  // Position of child `name` in children_, or kNoChild.
  size_t ChildPosition(absl::string_view name) const;
  // Indexes children_ from scratch if it is past kChildrenScannedLinearly, else empties
  // the index.
  void RebuildChildIndex();
  // Removes the children at `positions` (each < children_.size(); any order, repeats
  // allowed) keeping the others' order, and moves the index along; returns the removed
  // children in their former order. O(children) whatever the number removed.
  std::vector<std::unique_ptr<Module>> EraseChildrenAt(const std::vector<uint32_t>& positions);
  // Invalidates what a module path resolves to, if this module is part of a model's tree
  // (that model's caches only).
  void NoteTreeEdit() const {
    if (model_ != nullptr) model_->InvalidateTree();
  }
  // Invalidates what call_module nodes resolve to (their module's type) but no path, if
  // this module is part of a model's tree.
  void NoteBindingEdit() const {
    if (model_ != nullptr) model_->InvalidateBindings();
  }
  // Makes this module and its whole subtree part of the tree of the model whose
  // generations are `model` (nullptr: of no model). O(subtree), stopping early where the
  // subtree already is (a child always belongs to its parent's model).
  void SetModel(ModuleBindingGenerations* model);
  // The edit when this module's children are replaced (moved from or into): paths change
  // only if it had any.
  void NoteChildrenReplaced(bool had_children) const {
    if (had_children) {
      NoteTreeEdit();
    } else {
      NoteBindingEdit();
    }
  }

  Symbol type_;
  // The generations of the model (graph/module_binding.h) whose tree this module is in (a
  // GraphModule's root or a descendant of one), nullptr while it is in none: only then can
  // an edit of it change what a call_module node resolves to, and only in that model.
  // Belongs to the object, not its contents: moving does not carry it.
  ModuleBindingGenerations* model_ = nullptr;
  // Each field list is either the module's own vector or, after ShareFieldsWithClones()
  // (of this module or of the one it was cloned from), a read-only vector shared with
  // other modules; while shared_* is set the own vector is empty and unused.
  TensorList tensors_;
  AttributeList attributes_;
  std::shared_ptr<const TensorList> shared_tensors_;
  std::shared_ptr<const AttributeList> shared_attributes_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  // Null while children_.size() <= kChildrenScannedLinearly (most modules: a leaf pays 8
  // bytes for it, not an empty hash set's ~56).
  std::unique_ptr<ChildIndex> child_index_;
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_H_
