// Module: a module of the model as data (torch.nn.Module without code): a type symbol
// ("nn.Conv2d", "nni.ConvAddReLU2d", "nnq.Conv2d"), named tensors (parameters and
// buffers), named attributes (stride, padding, scale, ...) and named child modules, each
// kept in insertion order so files and printouts are deterministic.
//
// Module type names follow PyTorch's import aliases: nn (torch.nn), nni
// (torch.ao.nn.intrinsic), nnq (torch.ao.nn.quantized), nniq (intrinsic.quantized),
// nnqr (quantized.reference), plus "GraphModule" for the root.
#ifndef FUSELAGE_GRAPH_MODULE_H_
#define FUSELAGE_GRAPH_MODULE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
  // Moving changes what both modules hold, so, like every edit of a type or of children,
  // it invalidates cached module types (graph/module_binding.h).
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  Symbol type() const { return type_; }
  void set_type(Symbol type) {
    type_ = type;
    InvalidateModuleBindings();
  }

  // Tensors (parameters and buffers).
  const Tensor* FindTensor(absl::string_view name) const;
  Tensor* FindMutableTensor(absl::string_view name);
  // Adds or replaces.
  void SetTensor(absl::string_view name, Tensor tensor);
  bool RemoveTensor(absl::string_view name);
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  // The tensor or a NotFound / InvalidArgument error naming module type and field.
  absl::StatusOr<const Tensor*> GetTensor(absl::string_view name) const;

  // Attributes: constant args (no node references).
  const Argument* FindAttribute(absl::string_view name) const;
  void SetAttribute(absl::string_view name, Argument value);
  bool RemoveAttribute(absl::string_view name);
  const std::vector<std::pair<std::string, Argument>>& attributes() const { return attributes_; }
  // Typed reads with errors that name the field and the expectation.
  absl::StatusOr<int64_t> GetInt(absl::string_view name) const;
  absl::StatusOr<double> GetFloat(absl::string_view name) const;  // int accepted
  absl::StatusOr<bool> GetBool(absl::string_view name) const;
  // A list of ints; a single int is broadcast to `size` entries (PyTorch's _pair).
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name, size_t size) const;

  // Children.
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

  std::unique_ptr<Module> Clone() const;

 private:
  Symbol type_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::vector<std::pair<std::string, Argument>> attributes_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  // Child name -> index in children_: a root may hold hundreds of thousands of children.
  absl::flat_hash_map<std::string, size_t> child_index_;
};

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_MODULE_H_
