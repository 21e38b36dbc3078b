#include "onnx/onnx_fold.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

using onnx_subset::AttributeProto;
using onnx_subset::NodeProto;
using onnx_subset::TensorProto;
using Shape = std::vector<int64_t>;
using Type = OnnxConstant::Type;

// Where a fold is, for its errors (the node; it converts to that text), and the most
// elements a constant it makes may have: what is left of the model's folding budget
// (FoldOnnxNode's max_elements), so a small file cannot make a large amount of data.
struct Site {
  absl::string_view node;
  int64_t max_elements;
  operator absl::string_view() const { return node; }  // NOLINT(google-explicit-constructor)
};

absl::Status Error(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// The error for a constant larger than the site allows.
absl::Status TooLarge(const Site& where, absl::string_view what) {
  return Error(where, absl::StrCat(what, "; fuselage folds constants of <= ", where.max_elements,
                                   " elements here (of ", kMaxFoldElements, " at most, and ",
                                   kFoldBudget, " made per model beyond its initializers)"));
}

// The element count of `shape`, or an error if a dimension is negative or the count passes
// the site's limit (checked as it is multiplied, so it cannot overflow).
absl::StatusOr<int64_t> CheckedElements(const Shape& shape, const Site& where,
                                        absl::string_view what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > where.max_elements / d))
      return TooLarge(where, absl::StrCat(what, " of shape ", ShapeText(shape)));
    n *= d;
  }
  if (n > where.max_elements) return TooLarge(where, absl::StrCat(what, " of shape ", ShapeText(shape)));
  return n;
}

absl::StatusOr<OnnxConstant> Make(Type type, Shape shape, const Site& where,
                                  absl::string_view what = "a constant") {
  if (shape.size() > kMaxFoldRank)
    return Error(where, absl::StrCat(what, " of rank ", shape.size(), "; fuselage makes tensors "
                                     "of rank <= ", kMaxFoldRank));
  ASSIGN_OR_RETURN(int64_t n, CheckedElements(shape, where, what));
  OnnxConstant c;
  c.type = type;
  c.shape = std::move(shape);
  if (type == Type::kFloat)
    c.floats.assign(n, 0.0f);
  else
    c.ints.assign(n, 0);
  return c;
}

const char* TypeName(Type t) {
  return t == Type::kFloat ? "float" : t == Type::kInt64 ? "integer" : "bool";
}

double Get(const OnnxConstant& c, int64_t i) {
  return c.type == Type::kFloat ? static_cast<double>(c.floats[i]) : static_cast<double>(c.ints[i]);
}

// Row-major strides of `shape`.
Shape Strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// The linear index into an input of `in_shape` broadcast to `out_shape` of the output's
// element `out_index`.
int64_t BroadcastIndex(int64_t out_index, const Shape& out_shape, const Shape& in_shape) {
  int64_t in_index = 0, in_stride = 1;
  const size_t offset = out_shape.size() - in_shape.size();
  for (int64_t d = static_cast<int64_t>(out_shape.size()) - 1; d >= 0; --d) {
    const int64_t coordinate = out_index % out_shape[d];
    out_index /= out_shape[d];
    if (d >= static_cast<int64_t>(offset)) {
      const int64_t dim = in_shape[d - offset];
      if (dim != 1) in_index += coordinate * in_stride;
      in_stride *= dim;
    }
  }
  return in_index;
}

// Two's-complement arithmetic on int64 (numpy's, with no undefined behaviour).
int64_t Wrap(uint64_t v) {
  int64_t r;
  std::memcpy(&r, &v, sizeof(r));
  return r;
}
int64_t WrapAdd(int64_t a, int64_t b) { return Wrap(uint64_t(a) + uint64_t(b)); }
int64_t WrapSub(int64_t a, int64_t b) { return Wrap(uint64_t(a) - uint64_t(b)); }
int64_t WrapMul(int64_t a, int64_t b) { return Wrap(uint64_t(a) * uint64_t(b)); }

// An elementwise op on broadcast inputs of one element type: `on_float` on doubles, or
// `on_int` on integers (an error status for a value it cannot compute); the result is of
// `out` type (bool results as 0 / 1).
using FloatFn = std::function<double(double, double)>;
using IntFn = std::function<absl::StatusOr<int64_t>(int64_t, int64_t)>;
absl::StatusOr<OnnxConstant> Binary(const OnnxConstant& a, const OnnxConstant& b,
                                    std::optional<Type> out, const FloatFn& on_float,
                                    const IntFn& on_int, const Site& where) {
  if (a.type != b.type)
    return Error(where, absl::StrCat("inputs of element types ", TypeName(a.type), " and ",
                                     TypeName(b.type), "; expected one type"));
  if (a.type == Type::kBool && out != Type::kBool)
    return Error(where, "bool inputs; expected numbers");
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.shape, b.shape, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(out.value_or(a.type), shape, where));
  const int64_t n = r.size();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ia = BroadcastIndex(i, shape, a.shape), ib = BroadcastIndex(i, shape, b.shape);
    if (a.type == Type::kFloat) {
      const double v = on_float(a.floats[ia], b.floats[ib]);
      if (r.type == Type::kFloat)
        r.floats[i] = static_cast<float>(v);
      else
        r.ints[i] = v != 0.0;
    } else {
      ASSIGN_OR_RETURN(r.ints[i], on_int(a.ints[ia], b.ints[ib]));
    }
  }
  return r;
}

absl::StatusOr<int64_t> IntDiv(int64_t a, int64_t b, absl::string_view where) {
  if (b == 0) return Error(where, "an integer division by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return a;  // wraps, as numpy
  return a / b;  // truncated toward zero, as onnx.reference's Div of integers
}

absl::StatusOr<OnnxConstant> Arithmetic(const std::string& op, const OnnxConstant& a,
                                        const OnnxConstant& b, const Site& where) {
  const std::string w(where.node);
  if (op == "Add")
    return Binary(a, b, std::nullopt, std::plus<double>(),
                  [](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return WrapAdd(x, y); }, where);
  if (op == "Sub")
    return Binary(a, b, std::nullopt, std::minus<double>(),
                  [](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return WrapSub(x, y); }, where);
  if (op == "Mul")
    return Binary(a, b, std::nullopt, std::multiplies<double>(),
                  [](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return WrapMul(x, y); }, where);
  if (op == "Div")
    return Binary(a, b, std::nullopt, [](double x, double y) { return x / y; },
                  [w](int64_t x, int64_t y) { return IntDiv(x, y, w); }, where);
  if (op == "Equal" || op == "Less" || op == "Greater") {
    const FloatFn f = op == "Equal"  ? FloatFn([](double x, double y) { return double(x == y); })
                      : op == "Less" ? FloatFn([](double x, double y) { return double(x < y); })
                                     : FloatFn([](double x, double y) { return double(x > y); });
    const IntFn i = op == "Equal" ? IntFn([](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return x == y; })
                    : op == "Less" ? IntFn([](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return x < y; })
                                   : IntFn([](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return x > y; });
    return Binary(a, b, Type::kBool, f, i, where);
  }
  if (op == "Min")
    return Binary(a, b, std::nullopt, [](double x, double y) { return std::isnan(x) || x < y ? x : y; },
                  [](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return std::min(x, y); }, where);
  if (op == "Max")
    return Binary(a, b, std::nullopt, [](double x, double y) { return std::isnan(x) || x > y ? x : y; },
                  [](int64_t x, int64_t y) -> absl::StatusOr<int64_t> { return std::max(x, y); }, where);
  return absl::UnimplementedError(absl::StrCat(where.node, ": cannot fold ", op));
}

// Mod(A, B): with fmod=0 the integer remainder with the divisor's sign (Python's %), with
// fmod=1 C's fmod (the dividend's sign), the only form ONNX defines for floats.
absl::StatusOr<OnnxConstant> Mod(const OnnxConstant& a, const OnnxConstant& b, bool fmod,
                                 const Site& where) {
  if (!fmod && (a.type == Type::kFloat || b.type == Type::kFloat))
    return Error(where, "fmod=0 on floats; ONNX's Mod of floats needs fmod=1");
  const std::string w(where.node);
  return Binary(a, b, std::nullopt, [](double x, double y) { return std::fmod(x, y); },
                [w, fmod](int64_t x, int64_t y) -> absl::StatusOr<int64_t> {
                  if (y == 0) return Error(w, "an integer modulo by zero");
                  if (y == -1) return 0;  // INT64_MIN % -1 overflows in C++
                  int64_t r = x % y;
                  if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
                  return r;
                },
                where);
}

// Pow(X, Y): X's type; Y may be of another (ONNX's T1).
absl::StatusOr<OnnxConstant> Pow(const OnnxConstant& x, const OnnxConstant& y,
                                 const Site& where) {
  if (x.type == Type::kBool || y.type == Type::kBool)
    return Error(where, "bool inputs; expected numbers");
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(x.shape, y.shape, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, shape, where));
  for (int64_t i = 0; i < r.size(); ++i) {
    const int64_t ix = BroadcastIndex(i, shape, x.shape), iy = BroadcastIndex(i, shape, y.shape);
    if (x.type == Type::kFloat) {
      r.floats[i] = static_cast<float>(std::pow(Get(x, ix), Get(y, iy)));
      continue;
    }
    // An integer power by repeated squaring (numpy's, wrapping), for an integer exponent.
    if (y.type != Type::kInt64 || y.ints[iy] < 0)
      return Error(where, "an integer base with a negative or non-integer exponent; expected "
                          "an exponent >= 0");
    int64_t base = x.ints[ix], result = 1;
    for (int64_t e = y.ints[iy]; e > 0; e >>= 1) {
      if (e & 1) result = WrapMul(result, base);
      base = WrapMul(base, base);
    }
    r.ints[i] = result;
  }
  return r;
}

absl::StatusOr<OnnxConstant> Where(const OnnxConstant& cond, const OnnxConstant& x,
                                   const OnnxConstant& y, const Site& where) {
  if (cond.type != Type::kBool) return Error(where, "a condition that is not bool");
  if (x.type != y.type)
    return Error(where, absl::StrCat("X of type ", TypeName(x.type), " and Y of type ",
                                     TypeName(y.type), "; expected one type"));
  ASSIGN_OR_RETURN(Shape xy, BroadcastShapes(x.shape, y.shape, where));
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(cond.shape, xy, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, shape, where));
  for (int64_t i = 0; i < r.size(); ++i) {
    const bool take_x = cond.ints[BroadcastIndex(i, shape, cond.shape)] != 0;
    const OnnxConstant& from = take_x ? x : y;
    const int64_t j = BroadcastIndex(i, shape, from.shape);
    if (r.type == Type::kFloat)
      r.floats[i] = from.floats[j];
    else
      r.ints[i] = from.ints[j];
  }
  return r;
}

absl::StatusOr<OnnxConstant> Unary(const std::string& op, const OnnxConstant& x,
                                   absl::string_view where) {
  OnnxConstant r = x;
  if (op == "Not") {
    if (x.type != Type::kBool) return Error(where, "an input that is not bool");
    for (int64_t& v : r.ints) v = !v;
    return r;
  }
  if (x.type == Type::kBool) return Error(where, "a bool input; expected numbers");
  if (x.type == Type::kInt64) {
    if (op == "Neg" || op == "Abs") {
      for (int64_t& v : r.ints) v = op == "Abs" && v >= 0 ? v : WrapSub(0, v);
      return r;
    }
    if (op == "Floor" || op == "Ceil" || op == "Sqrt")
      return Error(where, "an integer input; expected float");
  }
  double (*fn)(double) = op == "Floor"  ? static_cast<double (*)(double)>(std::floor)
                         : op == "Ceil" ? static_cast<double (*)(double)>(std::ceil)
                         : op == "Sqrt" ? static_cast<double (*)(double)>(std::sqrt)
                         : op == "Abs"  ? static_cast<double (*)(double)>(std::fabs)
                                        : nullptr;
  for (float& v : r.floats) v = op == "Neg" ? -v : static_cast<float>(fn(v));
  return r;
}

// ONNX TensorProto.DataType values the folds read and make.
constexpr int kOnnxFloat = 1, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxBool = 9;

absl::StatusOr<OnnxConstant> Cast(const OnnxConstant& x, int64_t to, absl::string_view where) {
  OnnxConstant r;
  r.shape = x.shape;
  if (to == kOnnxFloat) {
    r.type = Type::kFloat;
    for (int64_t i = 0; i < x.size(); ++i) r.floats.push_back(static_cast<float>(Get(x, i)));
    return r;
  }
  if (to == kOnnxBool) {
    r.type = Type::kBool;
    for (int64_t i = 0; i < x.size(); ++i) r.ints.push_back(Get(x, i) != 0.0);
    return r;
  }
  // The integer types, as (bits, signed): their values are kept as int64.
  static const std::map<int64_t, std::pair<int, bool>> kIntegers = {
      {2, {8, false}}, {3, {8, true}}, {4, {16, false}}, {5, {16, true}},
      {kOnnxInt32, {32, true}}, {kOnnxInt64, {64, true}}, {12, {32, false}}};
  const auto it = kIntegers.find(to);
  if (it == kIntegers.end())
    return Error(where, absl::StrCat("a cast to data type ", to,
                                     "; fuselage folds casts to FLOAT, BOOL and the integer "
                                     "types up to INT64"));
  const auto [bits, is_signed] = it->second;
  r.type = Type::kInt64;
  for (int64_t i = 0; i < x.size(); ++i) {
    uint64_t v;
    if (x.type != Type::kFloat) {
      v = static_cast<uint64_t>(x.ints[i]);
    } else {
      const double t = std::trunc(static_cast<double>(x.floats[i]));  // numpy's astype
      if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0))
        return Error(where, absl::StrCat("a cast of ", x.floats[i], " to an integer type that "
                                         "cannot hold it"));
      v = static_cast<uint64_t>(static_cast<int64_t>(t));
    }
    // Narrowed to `bits` as numpy's astype wraps, then sign-extended if signed.
    if (bits < 64) {
      v &= (uint64_t{1} << bits) - 1;
      if (is_signed && (v >> (bits - 1)) != 0) v |= ~((uint64_t{1} << bits) - 1);
    }
    r.ints.push_back(Wrap(v));
  }
  return r;
}

// `axis` in [0, rank) from ONNX's [-rank, rank).
absl::StatusOr<int64_t> Axis(int64_t axis, int64_t rank, absl::string_view where,
                             absl::string_view what = "axis") {
  if (axis < -rank || axis >= rank)
    return Error(where, absl::StrCat(what, " ", axis, " for an input of rank ", rank,
                                     "; expected one in [", -rank, ", ", rank - 1, "]"));
  return axis < 0 ? axis + rank : axis;
}

const AttributeProto* FindAttribute(const NodeProto& node, absl::string_view name) {
  for (const AttributeProto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t IntAttribute(const NodeProto& node, absl::string_view name, int64_t fallback) {
  const AttributeProto* a = FindAttribute(node, name);
  return a == nullptr ? fallback : a->i();
}

absl::StatusOr<std::vector<int64_t>> Ints(const OnnxConstant* c, absl::string_view where,
                                          absl::string_view what) {
  if (c == nullptr) return std::vector<int64_t>();
  if (c->type != Type::kInt64)
    return Error(where, absl::StrCat("its ", what, " is ", TypeName(c->type),
                                     "; expected integers"));
  return c->ints;
}

// Copies element `from` of `src` to element `to` of `dst` (one type).
void CopyElement(const OnnxConstant& src, int64_t from, OnnxConstant& dst, int64_t to) {
  if (src.type == Type::kFloat)
    dst.floats[to] = src.floats[from];
  else
    dst.ints[to] = src.ints[from];
}

absl::StatusOr<OnnxConstant> Gather(const OnnxConstant& data, const OnnxConstant& indices,
                                    int64_t axis_attr, const Site& where) {
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (rank == 0) return Error(where, "a 0-d data input; expected rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, Axis(axis_attr, rank, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> index, Ints(&indices, where, "indices"));
  const int64_t dim = data.shape[axis];
  for (int64_t& i : index) {
    if (i < -dim || i >= dim)
      return Error(where, absl::StrCat("index ", i, " for an axis of size ", dim,
                                       "; expected one in [", -dim, ", ", dim - 1, "]"));
    if (i < 0) i += dim;
  }
  Shape shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  ASSIGN_OR_RETURN(OnnxConstant r, Make(data.type, shape, where));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= data.shape[d];
  int64_t to = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : index)
      for (int64_t k = 0; k < inner; ++k) CopyElement(data, (o * dim + i) * inner + k, r, to++);
  return r;
}

absl::StatusOr<OnnxConstant> Range(const OnnxConstant& start, const OnnxConstant& limit,
                                   const OnnxConstant& delta, const Site& where) {
  for (const OnnxConstant* c : {&start, &limit, &delta})
    if (c->size() != 1 || c->type != start.type || c->type == Type::kBool)
      return Error(where, "start, limit and delta of other than one number each of one type");
  Shape shape = {0};
  if (start.type == Type::kInt64) {
    const int64_t s = start.ints[0], l = limit.ints[0], d = delta.ints[0];
    if (d == 0) return Error(where, "delta 0; expected a non-zero step");
    // ceil((l - s) / d) in 128 bits: no overflow for any int64 inputs.
    const __int128 span = static_cast<__int128>(l) - s;
    __int128 count = span / d + ((span % d != 0) && ((span > 0) == (d > 0)) ? 1 : 0);
    if (count < 0) count = 0;
    if (count > where.max_elements)
      return TooLarge(where, absl::StrCat("a range of more than ", where.max_elements, " elements"));
    shape[0] = static_cast<int64_t>(count);
    ASSIGN_OR_RETURN(OnnxConstant r, Make(Type::kInt64, shape, where));
    for (int64_t i = 0; i < shape[0]; ++i) r.ints[i] = WrapAdd(s, WrapMul(i, d));
    return r;
  }
  const double s = start.floats[0], l = limit.floats[0], d = delta.floats[0];
  const double count = d != 0.0 ? std::ceil((l - s) / d) : INFINITY;
  if (!std::isfinite(count) || count > static_cast<double>(where.max_elements))
    return TooLarge(where, absl::StrCat("a range of ", count, " elements"));
  shape[0] = std::max<int64_t>(0, static_cast<int64_t>(count));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(Type::kFloat, shape, where));
  for (int64_t i = 0; i < shape[0]; ++i) r.floats[i] = static_cast<float>(s + i * d);
  return r;
}

// The one element of ConstantOfShape's `value` attribute (float 0 if absent).
absl::StatusOr<OnnxConstant> ScalarAttribute(const NodeProto& node, absl::string_view where) {
  const AttributeProto* a = FindAttribute(node, "value");
  if (a == nullptr) {
    OnnxConstant zero;
    zero.shape = {1};
    zero.floats = {0.0f};
    return zero;
  }
  ASSIGN_OR_RETURN(OnnxConstant v, ReadOnnxTensor(a->t(), absl::StrCat(where, ": its value")));
  if (v.size() != 1) return Error(where, "a value of other than one element");
  return v;
}

absl::StatusOr<OnnxConstant> ConstantOfShape(const NodeProto& node, const OnnxConstant& shape,
                                             const Site& where) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, Ints(&shape, where, "shape (input 0)"));
  ASSIGN_OR_RETURN(OnnxConstant value, ScalarAttribute(node, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(value.type, dims, where));
  if (r.type == Type::kFloat)
    std::fill(r.floats.begin(), r.floats.end(), value.floats[0]);
  else
    std::fill(r.ints.begin(), r.ints.end(), value.ints[0]);
  return r;
}

absl::StatusOr<OnnxConstant> Expand(const OnnxConstant& x, const OnnxConstant& shape,
                                    const Site& where) {
  ASSIGN_OR_RETURN(std::vector<int64_t> target, Ints(&shape, where, "shape (input 1)"));
  for (int64_t d : target)
    if (d < 0) return Error(where, absl::StrCat("a shape ", ShapeText(target), " with a negative entry"));
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(x.shape, target, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, out, where, "an expanded constant"));
  for (int64_t i = 0; i < r.size(); ++i) CopyElement(x, BroadcastIndex(i, out, x.shape), r, i);
  return r;
}

absl::StatusOr<OnnxConstant> Tile(const OnnxConstant& x, const OnnxConstant& repeats,
                                  const Site& where) {
  ASSIGN_OR_RETURN(std::vector<int64_t> reps, Ints(&repeats, where, "repeats (input 1)"));
  if (reps.size() != x.shape.size())
    return Error(where, absl::StrCat(reps.size(), " repeats for an input of rank ", x.shape.size()));
  Shape out = x.shape;
  for (size_t d = 0; d < out.size(); ++d) {
    if (reps[d] < 0) return Error(where, absl::StrCat("a negative repeat ", reps[d]));
    if (out[d] > 0 && reps[d] > where.max_elements / out[d])
      return TooLarge(where, absl::StrCat("a tiled constant of more than ", where.max_elements,
                                          " elements"));
    out[d] *= reps[d];
  }
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, out, where, "a tiled constant"));
  const Shape in_strides = Strides(x.shape);
  for (int64_t i = 0; i < r.size(); ++i) {
    int64_t rest = i, from = 0;
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      from += (rest % out[d]) % x.shape[d] * in_strides[d];
      rest /= out[d];
    }
    CopyElement(x, from, r, i);
  }
  return r;
}

// ReduceSum / ReduceProd over `axes` (all if empty, unless noop_with_empty_axes).
absl::StatusOr<OnnxConstant> Reduce(const NodeProto& node, const OnnxConstant& x,
                                    const OnnxConstant* axes_input, const Site& where) {
  if (x.type == Type::kBool) return Error(where, "a bool input; expected numbers");
  std::vector<int64_t> axes;
  if (axes_input != nullptr) {
    ASSIGN_OR_RETURN(axes, Ints(axes_input, where, "axes (input 1)"));
  } else if (const AttributeProto* a = FindAttribute(node, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axes.empty()) {
    if (IntAttribute(node, "noop_with_empty_axes", 0) != 0) return x;
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(a, rank, where, "axes entry"));
    reduced[axis] = true;
  }
  const bool keepdims = IntAttribute(node, "keepdims", 1) != 0;
  const bool product = node.op_type() == "ReduceProd";
  Shape kept;  // the output shape with every reduced axis as 1
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
    if (!reduced[d] || keepdims) out.push_back(kept.back());
  }
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, out, where));
  std::vector<double> acc(r.size(), product ? 1.0 : 0.0);
  std::vector<int64_t> iacc(r.size(), product ? 1 : 0);
  const Shape kept_strides = Strides(kept);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t rest = i, to = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (!reduced[d]) to += (rest % x.shape[d]) * kept_strides[d];
      rest /= x.shape[d];
    }
    if (x.type == Type::kFloat)
      acc[to] = product ? acc[to] * x.floats[i] : acc[to] + x.floats[i];
    else
      iacc[to] = product ? WrapMul(iacc[to], x.ints[i]) : WrapAdd(iacc[to], x.ints[i]);
  }
  for (int64_t i = 0; i < r.size(); ++i) {
    if (x.type == Type::kFloat)
      r.floats[i] = static_cast<float>(acc[i]);
    else
      r.ints[i] = iacc[i];
  }
  return r;
}

absl::StatusOr<OnnxConstant> Concat(const NodeProto& node,
                                    const std::vector<const OnnxConstant*>& inputs,
                                    const Site& where) {
  if (inputs.empty()) return Error(where, "no inputs; expected at least one");
  const AttributeProto* axis_attr = FindAttribute(node, "axis");
  if (axis_attr == nullptr) return Error(where, "no axis; expected one");
  const OnnxConstant& first = *inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Axis(axis_attr->i(), rank, where));
  Shape shape = first.shape;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const OnnxConstant& in = *inputs[i];
    bool ok = static_cast<int64_t>(in.shape.size()) == rank && in.type == first.type;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || in.shape[d] == shape[d];
    if (!ok)
      return Error(where, absl::StrCat("input ", i, " (", TypeName(in.type), ", shape ",
                                       ShapeText(in.shape), ") does not concatenate with input 0 (",
                                       TypeName(first.type), ", shape ", ShapeText(first.shape),
                                       ") on axis ", axis));
    shape[axis] += in.shape[axis];
  }
  ASSIGN_OR_RETURN(OnnxConstant r, Make(first.type, shape, where));
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  int64_t to = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const OnnxConstant* in : inputs) {
      const int64_t block = outer == 0 ? 0 : in->size() / outer;
      for (int64_t k = 0; k < block; ++k) CopyElement(*in, o * block + k, r, to++);
    }
  return r;
}

absl::StatusOr<OnnxConstant> Transpose(const NodeProto& node, const OnnxConstant& x,
                                       const Site& where) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> perm;
  if (const AttributeProto* a = FindAttribute(node, "perm")) {
    perm.assign(a->ints().begin(), a->ints().end());
  } else {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  ASSIGN_OR_RETURN(const Shape out, TransposedShape(x.shape, perm, where));
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, out, where));
  const Shape in_strides = Strides(x.shape);
  for (int64_t i = 0; i < r.size(); ++i) {
    int64_t rest = i, from = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      from += (rest % out[d]) * in_strides[perm[d]];
      rest /= out[d];
    }
    CopyElement(x, from, r, i);
  }
  return r;
}

absl::StatusOr<OnnxConstant> Slice(const OnnxConstant& x,
                                   const std::vector<const OnnxConstant*>& inputs,
                                   const Site& where) {
  const auto input = [&](size_t i) { return i < inputs.size() ? inputs[i] : nullptr; };
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, Ints(input(1), where, "starts (input 1)"));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, Ints(input(2), where, "ends (input 2)"));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, Ints(input(3), where, "axes (input 3)"));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, Ints(input(4), where, "steps (input 4)"));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (input(3) == nullptr)
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (input(4) == nullptr) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Error(where, "starts, ends, axes and steps of different lengths; expected one each "
                        "per sliced axis");
  std::vector<SliceRange> ranges;
  for (int64_t d = 0; d < rank; ++d) ranges.push_back({0, x.shape[d], 1});
  for (size_t i = 0; i < starts.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(axes[i], rank, where, "axes entry"));
    if (steps[i] == 0) return Error(where, "a step of 0");
    ranges[axis] = SliceIndices(starts[i], ends[i], steps[i], x.shape[axis]);
  }
  Shape out;
  for (const SliceRange& r : ranges) out.push_back(r.count());
  ASSIGN_OR_RETURN(OnnxConstant r, Make(x.type, out, where));
  const Shape in_strides = Strides(x.shape);
  for (int64_t i = 0; i < r.size(); ++i) {
    int64_t rest = i, from = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      from += (ranges[d].begin + (rest % out[d]) * ranges[d].step) * in_strides[d];
      rest /= out[d];
    }
    CopyElement(x, from, r, i);
  }
  return r;
}

absl::StatusOr<OnnxConstant> MatMul(const OnnxConstant& a, const OnnxConstant& b,
                                    const Site& where) {
  if (a.type != Type::kFloat || b.type != Type::kFloat || a.shape.empty() || b.shape.empty() ||
      a.shape.size() > 2 || b.shape.size() > 2)
    return absl::UnimplementedError(absl::StrCat(
        where.node, ": a product of constants of shapes ", ShapeText(a.shape), " and ",
        ShapeText(b.shape), "; fuselage folds float matrices and vectors"));
  const int64_t m = a.shape.size() == 2 ? a.shape[0] : 1, k = a.shape.back();
  const int64_t kb = b.shape[0], n = b.shape.size() == 2 ? b.shape[1] : 1;
  if (k != kb)
    return Error(where, absl::StrCat("shapes ", ShapeText(a.shape), " and ", ShapeText(b.shape),
                                     " do not multiply"));
  // Shape arithmetic multiplies small matrices: a product of more work is refused, not run.
  constexpr double kMaxMultiplies = double{int64_t{1} << 32};
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) > kMaxMultiplies)
    return absl::UnimplementedError(absl::StrCat(
        where.node, ": a product of constants of shapes ", ShapeText(a.shape), " and ",
        ShapeText(b.shape), "; fuselage folds products of at most 2^32 multiplications"));
  Shape out;
  if (a.shape.size() == 2) out.push_back(m);
  if (b.shape.size() == 2) out.push_back(n);
  ASSIGN_OR_RETURN(OnnxConstant r, Make(Type::kFloat, out, where));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t t = 0; t < k; ++t)
        sum += static_cast<double>(a.floats[i * k + t]) * b.floats[t * n + j];
      r.floats[i * n + j] = static_cast<float>(sum);
    }
  return r;
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t OnnxConstant::size() const { return ElementCount(shape); }

absl::StatusOr<OnnxConstant> ReadOnnxTensor(const TensorProto& t, absl::string_view where,
                                            absl::string_view* raw_floats) {
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parts...));
  };
  if (t.data_location() == TensorProto::EXTERNAL) {
    std::string location;
    for (const auto& e : t.external_data())
      if (e.key() == "location") location = e.value();
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": its data is external ('", location,
        "') and the model was given without its path; read the ONNX file by its path so "
        "that the data beside it is found"));
  }
  if (static_cast<size_t>(t.dims_size()) > kMaxFoldRank)
    return invalid("rank ", t.dims_size(), "; expected at most ", kMaxFoldRank);
  OnnxConstant v;
  for (int64_t d : t.dims()) {
    if (d < 0) return invalid("a negative dimension ", d);
    if (d > kMaxFoldElements)
      return invalid("a dimension of ", d, "; fuselage reads tensors of <= ", kMaxFoldElements,
                     " elements");
    v.shape.push_back(d);
    if (ElementCount(v.shape) > kMaxFoldElements)
      return invalid("more than ", kMaxFoldElements, " elements; fuselage reads smaller tensors");
  }
  const int64_t n = ElementCount(v.shape);
  const std::string& raw = t.raw_data();
  const bool has_raw = t.has_raw_data();
  // The data's size in values of `width` bytes (raw_data) or its typed field's, against n.
  auto check_size = [&](int64_t width, int typed_size, absl::string_view field) -> absl::Status {
    const int64_t have = has_raw ? static_cast<int64_t>(raw.size()) / width : typed_size;
    if ((has_raw && static_cast<int64_t>(raw.size()) != n * width) || (!has_raw && have != n))
      return invalid("its ", has_raw ? "raw_data" : field, " holds ", have,
                     " values; its shape ", ShapeText(v.shape), " needs ", n);
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case kOnnxFloat:
      v.type = Type::kFloat;
      RETURN_IF_ERROR(check_size(4, t.float_data_size(), "float_data"));
      if (!has_raw) {
        v.floats.assign(t.float_data().begin(), t.float_data().end());
      } else if (raw_floats != nullptr) {
        *raw_floats = raw;
      } else {
        v.floats.resize(n);
        if (n > 0) std::memcpy(v.floats.data(), raw.data(), n * 4);
      }
      return v;
    case kOnnxInt64:
      v.type = Type::kInt64;
      RETURN_IF_ERROR(check_size(8, t.int64_data_size(), "int64_data"));
      if (has_raw) {
        v.ints.resize(n);
        if (n > 0) std::memcpy(v.ints.data(), raw.data(), n * 8);
      } else {
        v.ints.assign(t.int64_data().begin(), t.int64_data().end());
      }
      return v;
    case kOnnxInt32: {
      v.type = Type::kInt64;
      RETURN_IF_ERROR(check_size(4, t.int32_data_size(), "int32_data"));
      if (has_raw) {
        std::vector<int32_t> values(n);
        if (n > 0) std::memcpy(values.data(), raw.data(), n * 4);
        v.ints.assign(values.begin(), values.end());
      } else {
        v.ints.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return v;
    }
    case kOnnxBool:
      v.type = Type::kBool;
      RETURN_IF_ERROR(check_size(1, t.int32_data_size(), "int32_data"));
      if (has_raw) {
        for (char c : raw) v.ints.push_back(c != 0);
      } else {
        for (int32_t b : t.int32_data()) v.ints.push_back(b != 0);
      }
      return v;
    default:
      return absl::UnimplementedError(absl::StrCat(
          where, ": data type ", t.data_type(),
          "; fuselage reads FLOAT, INT64, INT32 and BOOL tensors"));
  }
}

const std::vector<std::string>& FoldOnlyOps() {
  static const auto* ops = new std::vector<std::string>{
      "Abs",  "Cast",  "Ceil", "ConstantOfShape", "Equal",      "Expand",    "Floor",
      "Gather", "Greater", "Less", "Max",          "Min",        "Mod",       "Neg",  "Not",
      "Pow",  "Range", "ReduceProd", "ReduceSum", "Size",       "Sqrt",      "Tile",
      "Where"};
  return *ops;
}

bool IsFoldOnlyOp(absl::string_view op_type) {
  const auto& ops = FoldOnlyOps();
  return std::find(ops.begin(), ops.end(), op_type) != ops.end();
}

int64_t SliceRange::count() const {
  // In 128 bits: a step of INT64_MAX or INT64_MIN cannot overflow.
  const __int128 span = step > 0 ? __int128{end} - begin : __int128{begin} - end;
  const __int128 stride = step > 0 ? __int128{step} : -__int128{step};
  return span > 0 ? static_cast<int64_t>((span - 1) / stride + 1) : 0;
}

SliceRange SliceIndices(int64_t start, int64_t end, int64_t step, int64_t dim) {
  // CPython's PySlice_AdjustIndices, in 128 bits so that INT64_MIN / INT64_MAX bounds
  // (what torch.onnx writes for "to the end") cannot overflow.
  const auto adjust = [&](int64_t v) -> int64_t {
    __int128 i = v;
    if (i < 0) {
      i += dim;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= dim) {
      i = step < 0 ? dim - 1 : dim;
    }
    return static_cast<int64_t>(i);
  };
  return {adjust(start), adjust(end), step};
}

absl::StatusOr<Shape> SqueezeShape(const Shape& shape, const std::vector<int64_t>& axes,
                                   absl::string_view where) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> drop(rank, false);
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) drop[d] = shape[d] == 1;
  }
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(a, rank, where, "axes entry"));
    if (shape[axis] != 1)
      return Error(where, absl::StrCat("axis ", axis, " of an input of shape ", ShapeText(shape),
                                       " is not of size 1; expected squeezed axes of size 1"));
    drop[axis] = true;
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d]) out.push_back(shape[d]);
  return out;
}

absl::StatusOr<Shape> UnsqueezeShape(const Shape& shape, const std::vector<int64_t>& axes,
                                     absl::string_view where) {
  if (shape.size() + axes.size() > kMaxFoldRank)
    return Error(where, absl::StrCat(axes.size(), " axes inserted into a shape of rank ",
                                     shape.size(), "; fuselage makes tensors of rank <= ",
                                     kMaxFoldRank));
  const int64_t rank = static_cast<int64_t>(shape.size() + axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(a, rank, where, "axes entry"));
    if (inserted[axis]) return Error(where, absl::StrCat("axis ", axis, " repeated in axes"));
    inserted[axis] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) out.push_back(inserted[d] ? 1 : shape[next++]);
  return out;
}

namespace {

absl::StatusOr<std::vector<OnnxConstant>> FoldNode(const NodeProto& node,
                                                   const std::vector<const OnnxConstant*>& inputs,
                                                   const Site& where) {
  const std::string& op = node.op_type();
  const auto input = [&](size_t i) { return i < inputs.size() ? inputs[i] : nullptr; };
  // The inputs an op needs, present.
  const auto need = [&](size_t count) -> absl::Status {
    for (size_t i = 0; i < count; ++i)
      if (input(i) == nullptr) return Error(where, absl::StrCat("input ", i, " is missing"));
    return absl::OkStatus();
  };
  const auto one = [](absl::StatusOr<OnnxConstant> c) -> absl::StatusOr<std::vector<OnnxConstant>> {
    if (!c.ok()) return c.status();
    std::vector<OnnxConstant> out;
    out.push_back(*std::move(c));
    return out;
  };
  if (op == "Identity") {
    RETURN_IF_ERROR(need(1));
    return one(*input(0));
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" || op == "Less" ||
      op == "Greater") {
    RETURN_IF_ERROR(need(2));
    return one(Arithmetic(op, *input(0), *input(1), where));
  }
  if (op == "Min" || op == "Max") {
    if (inputs.empty()) return Error(where, "no inputs; expected at least one");
    RETURN_IF_ERROR(need(inputs.size()));
    OnnxConstant acc = *inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) {
      ASSIGN_OR_RETURN(acc, Arithmetic(op, acc, *inputs[i], where));
    }
    return one(std::move(acc));
  }
  if (op == "Mod") {
    RETURN_IF_ERROR(need(2));
    return one(Mod(*input(0), *input(1), IntAttribute(node, "fmod", 0) != 0, where));
  }
  if (op == "Pow") {
    RETURN_IF_ERROR(need(2));
    return one(Pow(*input(0), *input(1), where));
  }
  if (op == "Where") {
    RETURN_IF_ERROR(need(3));
    return one(Where(*input(0), *input(1), *input(2), where));
  }
  if (op == "Not" || op == "Neg" || op == "Abs" || op == "Floor" || op == "Ceil" || op == "Sqrt") {
    RETURN_IF_ERROR(need(1));
    return one(Unary(op, *input(0), where));
  }
  if (op == "Cast") {
    RETURN_IF_ERROR(need(1));
    const AttributeProto* to = FindAttribute(node, "to");
    if (to == nullptr) return Error(where, "no 'to' attribute; expected one");
    return one(Cast(*input(0), to->i(), where));
  }
  if (op == "Gather") {
    RETURN_IF_ERROR(need(2));
    return one(Gather(*input(0), *input(1), IntAttribute(node, "axis", 0), where));
  }
  if (op == "Range") {
    RETURN_IF_ERROR(need(3));
    return one(Range(*input(0), *input(1), *input(2), where));
  }
  if (op == "ConstantOfShape") {
    RETURN_IF_ERROR(need(1));
    return one(ConstantOfShape(node, *input(0), where));
  }
  if (op == "Expand") {
    RETURN_IF_ERROR(need(2));
    return one(Expand(*input(0), *input(1), where));
  }
  if (op == "Tile") {
    RETURN_IF_ERROR(need(2));
    return one(Tile(*input(0), *input(1), where));
  }
  if (op == "Size") {
    RETURN_IF_ERROR(need(1));
    OnnxConstant n;
    n.type = Type::kInt64;
    n.ints = {input(0)->size()};
    return one(std::move(n));
  }
  if (op == "ReduceSum" || op == "ReduceProd") {
    RETURN_IF_ERROR(need(1));
    return one(Reduce(node, *input(0), input(1), where));
  }
  if (op == "Concat") {
    RETURN_IF_ERROR(need(inputs.size()));
    return one(Concat(node, inputs, where));
  }
  if (op == "Transpose") {
    RETURN_IF_ERROR(need(1));
    return one(Transpose(node, *input(0), where));
  }
  if (op == "Slice") {
    RETURN_IF_ERROR(need(3));
    return one(Slice(*input(0), inputs, where));
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    RETURN_IF_ERROR(need(1));
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, Ints(input(1), where, "axes (input 1)"));
    OnnxConstant r = *input(0);
    if (op == "Squeeze") {
      ASSIGN_OR_RETURN(r.shape, SqueezeShape(r.shape, axes, where));
    } else {
      if (input(1) == nullptr) return Error(where, "no axes (input 1); expected them");
      ASSIGN_OR_RETURN(r.shape, UnsqueezeShape(r.shape, axes, where));
    }
    return one(std::move(r));
  }
  if (op == "MatMul") {
    RETURN_IF_ERROR(need(2));
    return one(MatMul(*input(0), *input(1), where));
  }
  return absl::UnimplementedError(absl::StrCat(where.node, ": fuselage does not fold ", op,
                                               " on constants"));
}

}  // namespace

absl::StatusOr<std::vector<OnnxConstant>> FoldOnnxNode(
    const NodeProto& node, const std::vector<const OnnxConstant*>& inputs,
    absl::string_view node_name, int64_t max_elements) {
  const Site where{node_name, std::min(max_elements, kMaxFoldElements)};
  ASSIGN_OR_RETURN(std::vector<OnnxConstant> outputs, FoldNode(node, inputs, where));
  // The folds that copy an input (Neg, Cast, Identity, Squeeze, ...) make no more than it
  // holds, so they are checked here, after: the budget still bounds the model's work.
  for (const OnnxConstant& c : outputs)
    if (c.size() > where.max_elements)
      return TooLarge(where, absl::StrCat("a constant of shape ", ShapeText(c.shape)));
  return outputs;
}

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b,
                                                     absl::string_view where) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return Error(where, absl::StrCat("shapes ", ShapeText(a), " and ", ShapeText(b),
                                       " do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> TransposedShape(const std::vector<int64_t>& shape,
                                                     const std::vector<int64_t>& perm,
                                                     absl::string_view where) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t d = 0; ok && d < rank; ++d) ok = sorted[d] == d;
  if (!ok)
    return Error(where, absl::StrCat("perm ", ShapeText(perm), " is not a permutation of the ",
                                     rank, " axes"));
  std::vector<int64_t> out;
  for (int64_t p : perm) out.push_back(shape[p]);
  return out;
}

}  // namespace fuselage
