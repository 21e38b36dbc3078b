// The float kernels that move or select values (indexing, views, reshapes, splits, joins,
// identities: any dtype, quantized included, unless said) and their registration list
// (float_kernel_table.h; RegisterFloatKernels adds it).
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_kernel_table.h"
#include "runtime/float_ops.h"
#include "runtime/kernel_args.h"

namespace fuselage {
namespace float_kernels_internal {
namespace {

// ---- Identity-like modules (any value) ----------------------------------------------

absl::StatusOr<Value> PassThroughModule(const KernelContext&, const Module& m,
                                        absl::Span<const Value> args, const ValueKwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.type().name(), " takes 1 input; got ", args.size()));
  }
  return args[0];
}

// Python's slice.indices(size) for step > 0: start, step and element count, with negative
// bounds counted from the end and out-of-range bounds clamped (as `x[-100:100]` does).
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

absl::StatusOr<SliceRange> ResolveSlice(const Value::SliceParts& s, int64_t size) {
  SliceRange range;
  range.step = s.step.value_or(1);
  if (range.step <= 0) {
    // torch refuses negative steps on tensors too ("step must be greater than zero").
    return absl::InvalidArgumentError(absl::StrCat(
        "getitem: slice step ", range.step, "; expected a step greater than zero"));
  }
  const auto clamp = [size](std::optional<int64_t> bound, int64_t absent) {
    if (!bound.has_value()) return absent;
    int64_t b = *bound < 0 ? *bound + size : *bound;
    return std::min(std::max<int64_t>(b, 0), size);
  };
  range.start = clamp(s.start, 0);
  const int64_t stop = clamp(s.stop, size);
  range.count = stop > range.start ? (stop - range.start + range.step - 1) / range.step : 0;
  return range;
}

// seq[slice] on a list or tuple (`x.shape[-2:]`): the same kind of sequence.
absl::StatusOr<Value> SliceSequence(const Value& seq, const Value::SliceParts& parts) {
  const auto items = seq.items();
  ASSIGN_OR_RETURN(SliceRange range, ResolveSlice(parts, static_cast<int64_t>(items.size())));
  std::vector<Value> picked;
  picked.reserve(range.count);
  for (int64_t k = 0; k < range.count; ++k) picked.push_back(items[range.start + k * range.step]);
  return seq.is_tuple() ? Value::Tuple(std::move(picked)) : Value::List(std::move(picked));
}

// Tensor basic indexing (`x[..., 1:, None, 0]`): each index item is an int (drops the dim),
// a slice (keeps it, step > 0), None (a new dim of 1) or Ellipsis (as many full dims as
// the other items leave). Any dtype: the result is a copy of the selected elements.
absl::StatusOr<Value> IndexTensor(const Tensor& x, const Value& index) {
  if (x.qparams().scheme == QScheme::kPerChannelAffine) {
    // Its scales follow one axis, which indexing may drop or cut.
    return absl::UnimplementedError("getitem on a per-channel quantized tensor is not supported");
  }
  std::vector<Value> items;
  if (index.is_tuple()) {
    items.assign(index.items().begin(), index.items().end());
  } else {
    items.push_back(index);
  }
  int64_t consumed = 0;
  int ellipses = 0;
  for (const Value& item : items) {
    if (item.is_int() || item.is_slice()) {
      ++consumed;
    } else if (item.is_ellipsis()) {
      ++ellipses;
    } else if (!item.is_none()) {
      return absl::UnimplementedError(absl::StrCat(
          "getitem on a Tensor: index ", item.KindName(), " ", item.ToString(),
          " is not supported (ints, slices, None and Ellipsis are)"));
    }
  }
  if (ellipses > 1) {
    return absl::InvalidArgumentError("getitem: an index can only have a single ellipsis");
  }
  if (consumed > x.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "getitem: too many indices for a tensor of dimension ", x.dim(), " (", consumed, ")"));
  }
  // Per input dim: first index, step and count; `keep` is false for an int index.
  struct DimPick {
    int64_t start, step, count;
  };
  std::vector<DimPick> picks;
  Shape out_shape;
  const auto full = [&](int64_t d) {
    picks.push_back({0, 1, x.shape()[d]});
    out_shape.push_back(x.shape()[d]);
  };
  int64_t d = 0;
  for (const Value& item : items) {
    if (item.is_none()) {
      out_shape.push_back(1);
    } else if (item.is_ellipsis()) {
      for (int64_t k = 0; k < x.dim() - consumed; ++k) full(d++);
    } else if (item.is_int()) {
      const int64_t size = x.shape()[d];
      int64_t i = item.as_int();
      if (i < -size || i >= size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "getitem: index ", i, " is out of bounds for dimension ", d, " with size ", size));
      }
      picks.push_back({i < 0 ? i + size : i, 1, 1});
      ++d;
    } else {
      ASSIGN_OR_RETURN(SliceRange range, ResolveSlice(item.as_slice(), x.shape()[d]));
      picks.push_back({range.start, range.step, range.count});
      out_shape.push_back(range.count);
      ++d;
    }
  }
  while (d < x.dim()) full(d++);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(x.dtype(), out_shape, x.qparams()));
  if (out.numel() == 0) return Value(std::move(out));
  // Row-major strides (in elements) of x; then an odometer over the picked elements.
  std::vector<int64_t> stride(x.dim(), 1);
  for (int64_t k = x.dim() - 2; k >= 0; --k) stride[k] = stride[k + 1] * x.shape()[k + 1];
  const size_t element = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  std::vector<int64_t> at(x.dim(), 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t offset = 0;
    for (int64_t k = 0; k < x.dim(); ++k) {
      offset += (picks[k].start + at[k] * picks[k].step) * stride[k];
    }
    std::memcpy(dst + n * element, src + offset * element, element);
    for (int64_t k = x.dim() - 1; k >= 0; --k) {
      if (++at[k] < picks[k].count) break;
      at[k] = 0;
    }
  }
  return Value(std::move(out));
}

// torch.narrow(input, dim, start, length) / Tensor.narrow: `length` entries of `dim` from
// `start` (negative counts from the end); unlike a slice, a range past the end is an
// error, as in torch. Any dtype.
absl::StatusOr<Value> NarrowKernel(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim_arg, r.GetInt(1, "dim"));
  ASSIGN_OR_RETURN(int64_t start, r.GetInt(2, "start"));
  ASSIGN_OR_RETURN(int64_t length, r.GetInt(3, "length"));
  if (x->dim() == 0) return absl::InvalidArgumentError("narrow: the input is a 0-dim tensor");
  ASSIGN_OR_RETURN(const int64_t dim, NormalizeDim(dim_arg, x->dim()));
  const int64_t size = x->shape()[dim];
  if (start < -size || start > size) {
    return absl::InvalidArgumentError(absl::StrCat("narrow: start ", start,
                                                   " is out of range for dim ", dim,
                                                   " of size ", size));
  }
  if (start < 0) start += size;
  if (length < 0 || start + length > size) {
    return absl::InvalidArgumentError(absl::StrCat("narrow: start ", start, " + length ",
                                                   length, " exceeds dim ", dim, " of size ",
                                                   size));
  }
  std::vector<Value> index(dim, Value::Slice({}));
  index.push_back(Value::Slice({start, start + length, std::nullopt}));
  return IndexTensor(*x, Value::Tuple(std::move(index)));
}

absl::StatusOr<Value> GetItem(const KernelContext&, absl::Span<const Value> args,
                              const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value seq, r.Required(0, "a"));
  ASSIGN_OR_RETURN(Value index, r.Required(1, "b"));
  if (seq.is_tensor()) return IndexTensor(seq.as_tensor(), index);
  if (!seq.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: expected a list or tuple; got ",
                                                   seq.KindName()));
  }
  if (index.is_slice()) return SliceSequence(seq, index.as_slice());
  if (!index.is_int()) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: index must be an int; got ",
                                                   index.KindName(), " ", index.ToString()));
  }
  const int64_t size = static_cast<int64_t>(seq.items().size());
  int64_t i = index.as_int();
  if (i < -size || i >= size) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: index ", i, " out of range for a ",
                                                   seq.KindName(), " of ", size));
  }
  if (i < 0) i += size;
  return seq.items()[i];
}

absl::StatusOr<Value> CatKernel(const KernelContext&, absl::Span<const Value> args,
                                const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value list, r.Required(0, "tensors"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  if (!list.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'tensors': expected a list of Tensors; got ",
                                                   list.KindName()));
  }
  std::vector<Tensor> tensors;
  for (const Value& v : list.items()) {
    if (!v.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat("arg 'tensors': item is a ", v.KindName(),
                                                     "; expected a Tensor"));
    }
    tensors.push_back(v.as_tensor());
  }
  ASSIGN_OR_RETURN(Tensor y, Cat(tensors, dim));
  return Value(std::move(y));
}

// flatten(input, start_dim, end_dim) on any dtype.
absl::StatusOr<Value> FlattenKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t start, r.OptionalInt(1, "start_dim", 0));
  ASSIGN_OR_RETURN(int64_t end, r.OptionalInt(2, "end_dim", -1));
  ASSIGN_OR_RETURN(Tensor y, Flatten(*x, start, end));
  return Value(std::move(y));
}

// F.pixel_shuffle(input, upscale_factor) / F.pixel_unshuffle(input,
// downscale_factor) on any dtype.
template <absl::StatusOr<Tensor> (*op)(const Tensor&, int64_t)>
absl::StatusOr<Value> PixelShuffleKernel(const KernelContext&, absl::Span<const Value> args,
                                         const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t factor,
                   r.GetInt(1, op == &PixelShuffle ? "upscale_factor" : "downscale_factor"));
  ASSIGN_OR_RETURN(Tensor y, op(*x, factor));
  return Value(std::move(y));
}

// The sizes after a method's tensor argument, given as varargs (x.view(n, -1)) or as one
// list (x.view([n, -1])), or as the keyword `name`.
absl::StatusOr<std::vector<int64_t>> SizesAfterInput(absl::Span<const Value> args,
                                                     const ArgReader& r, absl::string_view name) {
  if (args.size() == 2 && args[1].is_list()) return ValueToInts(args[1], name);
  if (args.size() < 2) {
    ASSIGN_OR_RETURN(Value s, r.Required(1, name));
    return ValueToInts(s, name);
  }
  std::vector<int64_t> sizes;
  for (size_t i = 1; i < args.size(); ++i) {
    if (!args[i].is_int()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " entry ", i - 1, " is a ",
                                                     args[i].KindName(), "; expected an int"));
    }
    sizes.push_back(args[i].as_int());
  }
  return sizes;
}

// Tensor.view / Tensor.reshape: the shape as varargs (x.view(n, -1)) or one list; also
// torch.reshape(input, shape). Any dtype.
absl::StatusOr<Value> ReshapeKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, SizesAfterInput(args, r, "shape"));
  ASSIGN_OR_RETURN(Tensor y, Reshape(*x, std::move(shape)));
  return Value(std::move(y));
}

// Tensor.size(dim=None): a tuple of ints, or one int.
absl::StatusOr<Value> SizeKernel(const KernelContext&, absl::Span<const Value> args,
                                 const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  const Value* dim = r.Find(1, "dim");
  if (dim == nullptr || dim->is_none()) {
    std::vector<Value> sizes;
    for (int64_t d : x->shape()) sizes.push_back(Value::Int(d));
    return Value::Tuple(std::move(sizes));
  }
  if (!dim->is_int()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'dim': expected an int; got ",
                                                   dim->ToString()));
  }
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim->as_int(), x->dim()));
  if (x->dim() == 0) return absl::InvalidArgumentError("size(dim) of a 0-d tensor");
  return Value::Int(x->shape()[d]);
}

// builtins.getattr(x, "shape"), as torch.fx records `x.shape`: the sizes as a tuple of
// ints (what x.size() gives; torch.Size is a tuple). Other attributes are not known here.
absl::StatusOr<Value> GetAttrKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value object, r.Required(0, "object"));
  ASSIGN_OR_RETURN(Value name, r.Required(1, "name"));
  if (!name.is_string() || name.as_string() != "shape" || !object.is_tensor()) {
    return absl::UnimplementedError(absl::StrCat(
        "getattr(", object.KindName(), ", ", name.ToString(),
        "): only a tensor's 'shape' is supported"));
  }
  std::vector<Value> sizes;
  for (int64_t d : object.as_tensor().shape()) sizes.push_back(Value::Int(d));
  return Value::Tuple(std::move(sizes));
}

// Tensor.dim(): the number of dimensions.
absl::StatusOr<Value> DimKernel(const KernelContext&, absl::Span<const Value> args,
                                const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(1));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  return Value::Int(x->dim());
}

// Tensor.contiguous(): our tensors are always contiguous.
absl::StatusOr<Value> ContiguousKernel(const KernelContext&, absl::Span<const Value> args,
                                       const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  return Value(*x);
}

// F.dropout(input, p=0.5, training=True, inplace=False): the identity when training is
// False (how FX records an eval-mode model); random dropout is not something a reference
// interpreter should do, so training=True is Unimplemented.
absl::StatusOr<Value> DropoutKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(bool training, r.OptionalBool(2, "training", true));
  if (training) {
    return absl::UnimplementedError("dropout with training=True (only eval mode runs)");
  }
  return Value(*x);
}

// The ints of args[first..] given as varargs (x.permute(0, 2, 1)) or as one list
// (x.permute([0, 2, 1])), else the keyword `name`.
absl::StatusOr<std::vector<int64_t>> IntVarargs(absl::Span<const Value> args,
                                                const ValueKwargs& kwargs, size_t first,
                                                absl::string_view name) {
  if (args.size() == first + 1 && args[first].is_list()) return ValueToInts(args[first], name);
  if (args.size() > first) {
    std::vector<int64_t> out;
    for (size_t i = first; i < args.size(); ++i) {
      if (!args[i].is_int()) {
        return absl::InvalidArgumentError(absl::StrCat(name, " entry ", i - first, " is a ",
                                                       args[i].KindName(), "; expected an int"));
      }
      out.push_back(args[i].as_int());
    }
    return out;
  }
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(Value v, r.Required(first, name));
  return ValueToInts(v, name);
}

// permute(input, dims) / Tensor.permute(*dims), any dtype.
absl::StatusOr<Value> PermuteKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntVarargs(args, kwargs, 1, "dims"));
  ASSIGN_OR_RETURN(Tensor y, Permute(*x, dims));
  return Value(std::move(y));
}

// transpose(input, dim0, dim1), any dtype.
absl::StatusOr<Value> TransposeKernel(const KernelContext&, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t d0, r.GetInt(1, "dim0"));
  ASSIGN_OR_RETURN(int64_t d1, r.GetInt(2, "dim1"));
  ASSIGN_OR_RETURN(Tensor y, Transpose(*x, d0, d1));
  return Value(std::move(y));
}

Value TensorTuple(std::vector<Tensor> tensors) {
  std::vector<Value> items;
  for (Tensor& t : tensors) items.push_back(Value(std::move(t)));
  return Value::Tuple(std::move(items));
}

// The size of dim `dim` of x (normalized), for chunk / split / unbind.
absl::StatusOr<int64_t> DimSize(const Tensor& x, int64_t dim, absl::string_view what) {
  if (x.dim() == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": 0-d input"));
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x.dim()));
  return x.shape()[d];
}

// chunk(input, chunks, dim=0): pieces of ceil(n / chunks), the last one smaller, as
// PyTorch (so fewer than `chunks` pieces may come out). Any dtype.
absl::StatusOr<Value> ChunkKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t chunks, r.GetInt(1, "chunks"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(2, "dim", 0));
  if (chunks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: chunks is ", chunks,
                                                   "; expected > 0"));
  }
  ASSIGN_OR_RETURN(int64_t n, DimSize(*x, dim, "chunk"));
  std::vector<int64_t> sizes;
  if (n == 0) {
    sizes.assign(chunks, 0);
  } else {
    const int64_t step = (n + chunks - 1) / chunks;
    for (int64_t at = 0; at < n; at += step) sizes.push_back(std::min(step, n - at));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces, SplitSizes(*x, sizes, dim));
  return TensorTuple(std::move(pieces));
}

// split(tensor, split_size_or_sections, dim=0): equal pieces of an int size (the last
// one smaller), or the listed sizes. Any dtype.
absl::StatusOr<Value> SplitKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  const Value* t = r.Find(0, "tensor");
  if (t == nullptr) t = r.Find(0, "input");  // Tensor.split's self
  if (t == nullptr || !t->is_tensor()) {
    return absl::InvalidArgumentError("split: arg 'tensor' must be a Tensor");
  }
  const Tensor& x = t->as_tensor();
  const Value* how = r.Find(1, "split_size_or_sections");
  if (how == nullptr) how = r.Find(1, "split_size");
  if (how == nullptr) {
    return absl::InvalidArgumentError("split: missing arg 'split_size_or_sections'");
  }
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(2, "dim", 0));
  ASSIGN_OR_RETURN(int64_t n, DimSize(x, dim, "split"));
  std::vector<int64_t> sizes;
  if (how->is_int()) {
    const int64_t step = how->as_int();
    if (step < 0 || (step == 0 && n != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("split: split_size is ", step,
                                                     "; expected > 0"));
    }
    if (n == 0) sizes.push_back(0);
    for (int64_t at = 0; at < n; at += step) sizes.push_back(std::min(step, n - at));
  } else {
    ASSIGN_OR_RETURN(sizes, ValueToInts(*how, "split_size_or_sections"));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces, SplitSizes(x, sizes, dim));
  return TensorTuple(std::move(pieces));
}

// unbind(input, dim=0): the slices along dim, that dim removed. Any dtype.
absl::StatusOr<Value> UnbindKernel(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  ASSIGN_OR_RETURN(int64_t n, DimSize(*x, dim, "unbind"));
  if (x->qparams().scheme == QScheme::kPerChannelAffine) {
    return absl::UnimplementedError("unbind: per-channel quantized tensors");
  }
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x->dim()));
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces,
                   SplitSizes(*x, std::vector<int64_t>(n, 1), d));
  std::vector<int64_t> shape(x->shape().begin(), x->shape().end());
  shape.erase(shape.begin() + d);
  for (Tensor& piece : pieces) {
    ASSIGN_OR_RETURN(piece, piece.Reshaped(shape));
  }
  return TensorTuple(std::move(pieces));
}

// stack(tensors, dim=0).
absl::StatusOr<Value> StackKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value list, r.Required(0, "tensors"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  if (!list.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stack: arg 'tensors': expected a list of Tensors; got ", list.KindName()));
  }
  std::vector<Tensor> tensors;
  for (const Value& v : list.items()) {
    if (!v.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat("stack: arg 'tensors': item is a ",
                                                     v.KindName(), "; expected a Tensor"));
    }
    tensors.push_back(v.as_tensor());
  }
  ASSIGN_OR_RETURN(Tensor y, Stack(tensors, dim));
  return Value(std::move(y));
}

// torchvision.ops.stochastic_depth(input, p, mode, training=True): the identity in eval
// (training=False) or with p == 0; random row dropping is not for a reference interpreter.
absl::StatusOr<Value> StochasticDepthKernel(const KernelContext&, absl::Span<const Value> args,
                                            const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(double p, r.GetFloat(1, "p"));
  if (p < 0.0 || p > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat("stochastic_depth: p is ", p,
                                                   "; expected a probability in [0, 1]"));
  }
  const Value* mode = r.Find(2, "mode");
  if (mode == nullptr || !mode->is_string() ||
      (mode->as_string() != "batch" && mode->as_string() != "row")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stochastic_depth: arg 'mode' is ", mode == nullptr ? "missing" : mode->ToString(),
        "; expected 'batch' or 'row'"));
  }
  ASSIGN_OR_RETURN(bool training, r.OptionalBool(3, "training", true));
  if (training && p != 0.0) {
    return absl::UnimplementedError(
        "stochastic_depth with training=True (only eval mode runs)");
  }
  return Value(*x);
}

// x with shape `shape`, which drops or inserts size-1 dims only; a per-channel axis
// moves to `axis` (the caller's count of the dims before it in the new shape).
absl::StatusOr<Tensor> ReshapedKeepingAxis(const Tensor& x, std::vector<int64_t> shape,
                                           int64_t axis) {
  ASSIGN_OR_RETURN(Tensor y, x.Reshaped(std::move(shape)));
  if (x.qparams().scheme == QScheme::kPerChannelAffine) {
    QuantParams q = x.qparams();
    q.axis = axis;
    y.set_qparams(std::move(q));
  }
  return y;
}

// squeeze(input, dim=None): drops every size-1 dim, or only `dim` if it has size 1. Any
// dtype.
absl::StatusOr<Value> SqueezeKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  const Value* dim = r.Find(1, "dim");
  std::vector<bool> drop(x->dim(), false);
  if (dim == nullptr || dim->is_none()) {
    for (int64_t d = 0; d < x->dim(); ++d) drop[d] = x->shape()[d] == 1;
  } else {
    if (!dim->is_int()) {
      return absl::InvalidArgumentError(absl::StrCat("squeeze: arg 'dim' is ", dim->ToString(),
                                                     "; expected an int"));
    }
    ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim->as_int(), x->dim()));
    if (x->dim() > 0) drop[d] = x->shape()[d] == 1;
  }
  const int64_t old_axis = x->qparams().axis;
  if (x->qparams().scheme == QScheme::kPerChannelAffine && drop[old_axis]) {
    return absl::UnimplementedError("squeeze: the channel axis of a per-channel quantized tensor");
  }
  std::vector<int64_t> shape;
  int64_t axis = 0;
  for (int64_t d = 0; d < x->dim(); ++d) {
    if (drop[d]) continue;
    if (d < old_axis) ++axis;
    shape.push_back(x->shape()[d]);
  }
  ASSIGN_OR_RETURN(Tensor y, ReshapedKeepingAxis(*x, std::move(shape), axis));
  return Value(std::move(y));
}

// Tensor.expand(*sizes) / expand(sizes): the input repeated along its size-1 dims and
// along new leading dims to `sizes` (-1 keeps an existing dim), any dtype. A copy, where
// PyTorch gives a view: values are never written through it here.
absl::StatusOr<Value> ExpandKernel(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, SizesAfterInput(args, r, "size"));
  if (x->is_quantized() && x->qparams().scheme != QScheme::kPerTensorAffine)
    return absl::InvalidArgumentError("expand: a tensor quantized per channel is not expanded here");
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t lead = rank - x->dim();
  if (lead < 0)
    return absl::InvalidArgumentError(absl::StrCat("expand: ", rank, " sizes for a ", x->dim(),
                                                   "-dim tensor; expected at least ", x->dim()));
  std::vector<int64_t> shape(rank), in_strides(rank, 0);  // stride 0 along a repeated dim
  int64_t stride = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    const int64_t n = i >= lead ? x->shape()[i - lead] : 1;
    if ((i < lead && sizes[i] < 0) || (sizes[i] != -1 && n != 1 && sizes[i] != n) || sizes[i] < -1)
      return absl::InvalidArgumentError(absl::StrCat("expand: size ", sizes[i], " at dim ", i,
                                                     " for a dim of ", i < lead ? "none" : absl::StrCat(n)));
    shape[i] = sizes[i] == -1 ? n : sizes[i];
    if (i >= lead && n != 1) in_strides[i] = stride;
    stride *= n;
  }
  ASSIGN_OR_RETURN(Tensor y, Tensor::Uninitialized(x->dtype(), shape, x->qparams()));
  const size_t element = DTypeSize(x->dtype());
  const char* in = x->bytes().data();
  char* out = static_cast<char*>(y.mutable_raw_data());
  std::vector<int64_t> index(rank, 0);
  for (int64_t o = 0, total = y.numel(); o < total; ++o) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += index[d] * in_strides[d];
    std::memcpy(out + o * element, in + offset * element, element);
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == shape[d]; --d) index[d] = 0;
  }
  return Value(std::move(y));
}

// unsqueeze(input, dim): a size-1 dim inserted at dim in [-rank - 1, rank]. Any dtype.
absl::StatusOr<Value> UnsqueezeKernel(const KernelContext&, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim, r.GetInt(1, "dim"));
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x->dim() + 1));
  std::vector<int64_t> shape(x->shape().begin(), x->shape().end());
  shape.insert(shape.begin() + d, 1);
  const int64_t axis = x->qparams().axis + (d <= x->qparams().axis ? 1 : 0);
  ASSIGN_OR_RETURN(Tensor y, ReshapedKeepingAxis(*x, std::move(shape), axis));
  return Value(std::move(y));
}

}  // namespace

std::vector<NamedModuleKernel> ShapeModuleKernels() {
  return {
      {"nn.Flatten", [](const KernelContext&, const Module& m, absl::Span<const Value> args,
                        const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
         if (args.size() != 1 || !kwargs.empty() || !args[0].is_tensor()) {
           return absl::InvalidArgumentError("nn.Flatten takes 1 Tensor input");
         }
         ASSIGN_OR_RETURN(int64_t start, IntAttr(m, "start_dim", 1));
         ASSIGN_OR_RETURN(int64_t end, IntAttr(m, "end_dim", -1));
         ASSIGN_OR_RETURN(Tensor y, Flatten(args[0].as_tensor(), start, end));
         return Value(std::move(y));
       }},
      {"nn.Identity", PassThroughModule},
      {"nn.Dropout", PassThroughModule},
      {"nn.Dropout2d", PassThroughModule},
      {"nn.PixelShuffle", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t r, m.GetInt("upscale_factor"));
         return PixelShuffle(x, r);
       })},
      {"nn.PixelUnshuffle", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t r, m.GetInt("downscale_factor"));
         return PixelUnshuffle(x, r);
       })},
  };
}

std::vector<NamedFunctionKernel> ShapeFunctionKernels() {
  return {
      {kFunction, "operator.getitem", GetItem},
      {kFunction, "torch.cat", CatKernel},
      {kFunction, "torch.flatten", FlattenKernel},
      {kFunction, "torch.narrow", NarrowKernel},
      {kMethod, "narrow", NarrowKernel},
      {kFunction, "torch.nn.functional.pixel_shuffle", PixelShuffleKernel<PixelShuffle>},
      {kFunction, "torch.nn.functional.pixel_unshuffle", PixelShuffleKernel<PixelUnshuffle>},
      {kMethod, "flatten", FlattenKernel},
      {kMethod, "view", ReshapeKernel},
      {kMethod, "reshape", ReshapeKernel},
      {kFunction, "torch.reshape", ReshapeKernel},
      {kMethod, "size", SizeKernel},
      {kMethod, "dim", DimKernel},
      {kFunction, "builtins.getattr", GetAttrKernel},
      {kMethod, "contiguous", ContiguousKernel},
      {kFunction, "torch.nn.functional.dropout", DropoutKernel},
      {kFunction, "torchvision.ops.stochastic_depth.stochastic_depth", StochasticDepthKernel},
      {kFunction, "torch.squeeze", SqueezeKernel},
      {kMethod, "squeeze", SqueezeKernel},
      {kFunction, "torch.unsqueeze", UnsqueezeKernel},
      {kMethod, "unsqueeze", UnsqueezeKernel},
      {kMethod, "expand", ExpandKernel},
      {kFunction, "torch.permute", PermuteKernel},
      {kMethod, "permute", PermuteKernel},
      {kFunction, "torch.transpose", TransposeKernel},
      {kMethod, "transpose", TransposeKernel},
      {kFunction, "torch.chunk", ChunkKernel},
      {kMethod, "chunk", ChunkKernel},
      {kFunction, "torch.functional.split", SplitKernel},
      {kMethod, "split", SplitKernel},
      {kFunction, "torch.unbind", UnbindKernel},
      {kMethod, "unbind", UnbindKernel},
      {kFunction, "torch.stack", StackKernel},
  };
}

}  // namespace float_kernels_internal
}  // namespace fuselage
