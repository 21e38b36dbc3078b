// Value: what flows between nodes when the interpreter runs a graph. A Value is one of
// None, a Tensor, a scalar (bool, int, float), a string, a dtype, or a list / tuple of
// Values (cat inputs, tuple outputs, getitem, size()).
//
// Values are cheap to copy: tensors share their bytes copy-on-write and lists are
// immutable and shared, so kernels take and return Values by value freely.
//
// A channels-last tensor (Value::ChannelsLast) is a 4-D quantized activation whose bytes
// are laid out [N, H, W, C] while its shape stays [N, C, H, W]: what quantized kernels
// registered for that layout hand each other (KernelRegistry's channels-last overloads),
// so int8 convolutions skip the transposes around them. It is a kind of its own, not a
// kTensor: code that reads tensors never sees its bytes in an order it does not expect
// (the interpreter gives every other kernel, observer and caller the row-major tensor,
// runtime/layout.h).
#ifndef FUSELAGE_RUNTIME_VALUE_H_
#define FUSELAGE_RUNTIME_VALUE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dtype.h"
#include "graph/tensor.h"

namespace fuselage {

class Value {
 public:
  enum class Kind : uint8_t {
    kNone, kBool, kInt, kFloat, kString, kDType, kTensor, kList, kSlice, kEllipsis,
    kChannelsLast
  };

  // A slice index (`x[1:-1:2]`) with its parts evaluated: each absent (None) or an int.
  struct SliceParts {
    std::optional<int64_t> start, stop, step;
  };

  Value() = default;  // None
  Value(Tensor tensor) : value_(std::move(tensor)) {}  // NOLINT: tensors are the common case.
  static Value None() { return Value(); }
  static Value Bool(bool b) { return Value(Rep(b)); }
  static Value Int(int64_t i) { return Value(Rep(i)); }
  static Value Float(double f) { return Value(Rep(f)); }
  static Value String(absl::string_view s) { return Value(Rep(std::string(s))); }
  static Value Dtype(DType d) { return Value(Rep(d)); }
  static Value List(std::vector<Value> items) { return Sequence(std::move(items), false); }
  static Value Tuple(std::vector<Value> items) { return Sequence(std::move(items), true); }
  static Value Slice(SliceParts parts) { return Value(Rep(parts)); }
  static Value Ellipsis() { return Value(Rep(EllipsisTag{})); }
  // `tensor`'s shape is [N, C, H, W] and its bytes are [N, H, W, C] (see above).
  static Value ChannelsLast(Tensor tensor) { return Value(Rep(ChannelsLastTensor{std::move(tensor)})); }

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int or float (bool is not a number here, as PyTorch rejects bools for most numbers).
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_dtype() const { return kind() == Kind::kDType; }
  bool is_tensor() const { return kind() == Kind::kTensor; }
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_tuple() const { return is_list() && std::get<ListPtr>(value_)->is_tuple; }
  bool is_slice() const { return kind() == Kind::kSlice; }
  bool is_ellipsis() const { return kind() == Kind::kEllipsis; }
  bool is_channels_last() const { return kind() == Kind::kChannelsLast; }

  // Accessors; calling one for another kind is a bug (checked). Check the kind first, or
  // use the ArgReader of runtime/kernel_args.h, which turns a wrong kind into an error.
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // Also accepts an int, as Python does.
  const std::string& as_string() const;
  DType as_dtype() const;
  const Tensor& as_tensor() const;
  absl::Span<const Value> items() const;  // list or tuple items
  const SliceParts& as_slice() const;
  // The tensor of a channels-last value: shape [N, C, H, W], bytes [N, H, W, C].
  const Tensor& as_channels_last() const;

  // "None", "True", "3", "0.5", "'s'", "torch.float32", "Tensor(torch.float32 [1, 3])",
  // "[a, b]", "(a,)", "slice(1, None, None)", "Ellipsis",
  // "ChannelsLastTensor(torch.quint8 [1, 64, 56, 56])": for error messages and debugging.
  std::string ToString() const;
  // What kind of value this is, for error messages: "None", "bool", "int", "float",
  // "str", "dtype", "Tensor", "list", "tuple", "slice", "ellipsis", "channels-last Tensor".
  absl::string_view KindName() const;

 private:
  struct ValueList {
    bool is_tuple = false;
    std::vector<Value> items;
  };
  using ListPtr = std::shared_ptr<const ValueList>;
  struct EllipsisTag {};
  struct ChannelsLastTensor {
    Tensor tensor;
  };
  using Rep = std::variant<std::monostate, bool, int64_t, double, std::string, DType, Tensor,
                           ListPtr, SliceParts, EllipsisTag, ChannelsLastTensor>;
  explicit Value(Rep rep) : value_(std::move(rep)) {}
  static Value Sequence(std::vector<Value> items, bool is_tuple);

  Rep value_;
};

// Appends the leaves of `value` (every non-list value, depth first, in order) to `out`.
void FlattenValue(const Value& value, std::vector<Value>* out);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_VALUE_H_
