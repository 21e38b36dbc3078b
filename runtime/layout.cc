#include "runtime/layout.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/onednn/channels_last.h"

namespace fuselage {
namespace {

struct Image {
  int64_t batch, channels, pixels;
};

Image ImageOf(const Tensor& t) {
  return {t.shape()[0], t.shape()[1], t.shape()[2] * t.shape()[3]};
}

// Whether every tensor among `args` (either layout) has `shape` and can be kept
// channels-last; the other args (scales, flags) do not matter.
bool AllTensorsShaped(absl::Span<const Value> args, const Shape& shape) {
  for (const Value& a : args) {
    const Tensor* t = a.is_tensor()          ? &a.as_tensor()
                      : a.is_channels_last() ? &a.as_channels_last()
                                             : nullptr;
    if (t == nullptr) continue;
    if (t->shape() != shape || !CanBeChannelsLast(*t)) return false;
  }
  return true;
}

// Runs `call` on `args` with every tensor channels-last (as plain tensors whose bytes are
// [N, H, W, C]) and marks its tensor output channels-last; the row-major fallback when
// the tensors do not all share one shape (`call` on row-major args).
template <typename Call>
absl::StatusOr<Value> RunKeepingChannelsLast(absl::Span<const Value> args, const Call& call) {
  const Value* first = nullptr;
  for (const Value& a : args) {
    if (a.is_channels_last()) {
      first = &a;
      break;
    }
  }
  if (first == nullptr) {
    // No positional tensor is channels-last; one inside a list arg is moved back.
    if (!HasChannelsLast(args)) return call(args);
    const std::vector<Value> row_major = ToRowMajor(args);
    return call(row_major);
  }
  const Shape shape = first->as_channels_last().shape();
  if (!AllTensorsShaped(args, shape)) {
    const std::vector<Value> row_major = ToRowMajor(args);
    return call(row_major);
  }
  std::vector<Value> moved;
  moved.reserve(args.size());
  for (const Value& a : args) {
    if (a.is_channels_last()) {
      moved.push_back(Value(a.as_channels_last()));
    } else if (a.is_tensor()) {
      ASSIGN_OR_RETURN(Tensor t, ToChannelsLastBytes(a.as_tensor()));
      moved.push_back(Value(std::move(t)));
    } else {
      moved.push_back(a);
    }
  }
  ASSIGN_OR_RETURN(Value out, call(moved));
  if (!out.is_tensor() || out.as_tensor().shape() != shape) {
    return absl::InternalError(absl::StrCat(
        "a kernel kept channels-last returned ", out.ToString(), "; expected a tensor of shape ",
        first->as_channels_last().ShapeString(), " (the kernel is not elementwise: register it without "
        "KeepingChannelsLast)"));
  }
  return Value::ChannelsLast(out.as_tensor());
}

}  // namespace

bool CanBeChannelsLast(const Tensor& tensor) {
  return tensor.dim() == 4 &&
         (tensor.dtype() == DType::kQUInt8 || tensor.dtype() == DType::kQInt8) &&
         tensor.qparams().scheme == QScheme::kPerTensorAffine;
}

absl::StatusOr<Tensor> ToChannelsLastBytes(const Tensor& tensor) {
  if (!CanBeChannelsLast(tensor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot keep a ", DTypeName(tensor.dtype()), " tensor of shape ", tensor.ShapeString(),
        " channels-last; expected a 4-D quint8 / qint8 tensor quantized per tensor"));
  }
  ASSIGN_OR_RETURN(Tensor out,
                   Tensor::Uninitialized(tensor.dtype(), tensor.shape(), tensor.qparams()));
  if (out.numel() == 0) return out;
  const Image image = ImageOf(tensor);
  onednn::ToChannelsLast(tensor.raw_data(), 1, image.batch, image.channels, image.pixels,
                         out.mutable_raw_data());
  return out;
}

Tensor FromChannelsLastBytes(const Tensor& channels_last) {
  // The shape and dtype are a CanBeChannelsLast tensor's, which Uninitialized accepts.
  Tensor out = *Tensor::Uninitialized(channels_last.dtype(), channels_last.shape(),
                                      channels_last.qparams());
  if (out.numel() == 0) return out;
  const Image image = ImageOf(channels_last);
  onednn::FromChannelsLast(channels_last.raw_data(), 1, image.batch, image.channels,
                           image.pixels, out.mutable_raw_data());
  return out;
}

Value ToRowMajor(const Value& value) {
  if (value.is_channels_last()) return Value(FromChannelsLastBytes(value.as_channels_last()));
  if (!value.is_list()) return value;
  bool any = false;
  for (const Value& item : value.items()) any = any || item.is_channels_last() || item.is_list();
  if (!any) return value;
  std::vector<Value> items;
  items.reserve(value.items().size());
  for (const Value& item : value.items()) items.push_back(ToRowMajor(item));
  return value.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

bool HasChannelsLast(absl::Span<const Value> args) {
  for (const Value& a : args) {
    if (a.is_channels_last()) return true;
    if (a.is_list() && HasChannelsLast(a.items())) return true;
  }
  return false;
}

std::vector<Value> ToRowMajor(absl::Span<const Value> args) {
  std::vector<Value> out;
  out.reserve(args.size());
  for (const Value& a : args) out.push_back(ToRowMajor(a));
  return out;
}

FunctionKernel KeepingChannelsLast(FunctionKernel kernel) {
  return [kernel = std::move(kernel)](const KernelContext& ctx, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    return RunKeepingChannelsLast(args, [&](absl::Span<const Value> a) {
      return kernel(ctx, a, kwargs);
    });
  };
}

ModuleKernel KeepingChannelsLast(ModuleKernel kernel) {
  return [kernel = std::move(kernel)](const KernelContext& ctx, const Module& module,
                                      absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    return RunKeepingChannelsLast(args, [&](absl::Span<const Value> a) {
      return kernel(ctx, module, a, kwargs);
    });
  };
}

}  // namespace fuselage
