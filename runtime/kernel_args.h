// ArgReader: typed access to a kernel's evaluated args, each found by position or by
// keyword as Python binds them (`F.conv2d(x, w, stride=2)` and `F.conv2d(x, w, None, 2)`
// read the same). A missing required arg, or one of the wrong kind, is an InvalidArgument
// naming the parameter and the expectation; nothing aborts.
#ifndef FUSELAGE_RUNTIME_KERNEL_ARGS_H_
#define FUSELAGE_RUNTIME_KERNEL_ARGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/tensor.h"
#include "runtime/kernel_registry.h"
#include "runtime/value.h"

namespace fuselage {

class ArgReader {
 public:
  // Both must outlive the reader.
  ArgReader(absl::Span<const Value> args, const ValueKwargs& kwargs)
      : args_(args), kwargs_(kwargs) {}

  // The arg at positional `index`, else the keyword `name`, else nullptr. A None value
  // is returned as present; the Optional* readers treat None as absent.
  const Value* Find(size_t index, absl::string_view name) const;

  // InvalidArgument if more than `max_positional` positional args were given.
  absl::Status ExpectAtMostPositional(size_t max_positional) const;

  absl::StatusOr<Value> Required(size_t index, absl::string_view name) const;
  // Any dtype.
  absl::StatusOr<const Tensor*> GetTensor(size_t index, absl::string_view name) const;
  // A float32 tensor (a quantized or integer tensor is an InvalidArgument naming its dtype).
  absl::StatusOr<const Tensor*> GetFloatTensor(size_t index, absl::string_view name) const;
  // nullptr when absent or None; else as GetFloatTensor.
  absl::StatusOr<const Tensor*> OptionalFloatTensor(size_t index, absl::string_view name) const;

  absl::StatusOr<int64_t> GetInt(size_t index, absl::string_view name) const;
  absl::StatusOr<int64_t> OptionalInt(size_t index, absl::string_view name,
                                      int64_t default_value) const;
  // int or float.
  absl::StatusOr<double> GetFloat(size_t index, absl::string_view name) const;
  absl::StatusOr<double> OptionalFloat(size_t index, absl::string_view name,
                                       double default_value) const;
  absl::StatusOr<bool> OptionalBool(size_t index, absl::string_view name,
                                    bool default_value) const;
  // A list/tuple of ints, or a single int repeated `size` times (PyTorch's _pair); with
  // size 0 a single int becomes a one-element list and lists of any length are accepted.
  absl::StatusOr<std::vector<int64_t>> OptionalInts(size_t index, absl::string_view name,
                                                    size_t size,
                                                    std::vector<int64_t> default_value) const;

 private:
  absl::Span<const Value> args_;
  const ValueKwargs& kwargs_;
};

// A float32 tensor check with a message naming `what` ("input", "weight"...).
absl::Status ExpectFloatTensor(const Tensor& tensor, absl::string_view what);
// The ints of a list/tuple Value (or a single int as a one-element list).
absl::StatusOr<std::vector<int64_t>> ValueToInts(const Value& value, absl::string_view what);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_KERNEL_ARGS_H_
