// The float arithmetic (add / sub / mul / div on tensors or numbers, floordiv on ints),
// matmul / bmm and the reductions (mean, sum, amax): their kernels and their registration
// list (float_kernel_table.h; RegisterFloatKernels adds it).
#include <string>
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

// The four arithmetic ops of operator.* / torch.* / Tensor.*.
enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// Python arithmetic on two scalars: int op int stays int (true division excepted),
// otherwise float. `alpha` scales the second operand of add / sub.
absl::StatusOr<Value> ScalarArithmetic(const Value& a, const Value& b, BinaryOp op,
                                       const Value* alpha) {
  if (alpha != nullptr && !alpha->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                   alpha->ToString()));
  }
  if (a.is_int() && b.is_int() && (alpha == nullptr || alpha->is_int()) &&
      op != BinaryOp::kDiv) {
    const int64_t rhs = alpha == nullptr ? b.as_int() : b.as_int() * alpha->as_int();
    switch (op) {
      case BinaryOp::kAdd: return Value::Int(a.as_int() + rhs);
      case BinaryOp::kSub: return Value::Int(a.as_int() - rhs);
      default: return Value::Int(a.as_int() * b.as_int());
    }
  }
  const double scale = alpha == nullptr ? 1.0 : alpha->as_float();
  switch (op) {
    case BinaryOp::kAdd: return Value::Float(a.as_float() + scale * b.as_float());
    case BinaryOp::kSub: return Value::Float(a.as_float() - scale * b.as_float());
    case BinaryOp::kMul: return Value::Float(a.as_float() * b.as_float());
    case BinaryOp::kDiv:
      if (b.as_float() == 0.0) return absl::InvalidArgumentError("division by zero");
      return Value::Float(a.as_float() / b.as_float());
  }
  return absl::InternalError("unknown binary op");
}

// t op s for a tensor t and a number s; `tensor_first` says which side t is on.
Tensor TensorScalarArithmetic(const Tensor& t, float s, bool tensor_first, BinaryOp op,
                              float alpha) {
  switch (op) {
    case BinaryOp::kAdd:
      if (tensor_first) return AddScalar(t, alpha * s);
      return AddScalar(alpha == 1.0f ? t : MulScalar(t, alpha), s);  // s + alpha * t
    case BinaryOp::kSub:
      if (tensor_first) return AddScalar(t, -alpha * s);
      return AddScalar(MulScalar(t, -alpha), s);  // s - alpha * t
    case BinaryOp::kMul:
      return MulScalar(t, s);
    case BinaryOp::kDiv:
      return tensor_first ? DivScalar(t, s) : RDivScalar(s, t);
  }
  return t;
}

// add / sub / mul / div with tensors (broadcasting) or numbers on either side
// (operator.add, torch.add, Tensor.add, ...; add and sub take alpha, torch.div takes
// rounding_mode=None only).
FunctionKernel BinaryArithmetic(BinaryOp op) {
  return [op](const KernelContext&, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
    ASSIGN_OR_RETURN(Value a, r.Required(0, "input"));
    ASSIGN_OR_RETURN(Value b, r.Required(1, "other"));
    const bool has_alpha = op == BinaryOp::kAdd || op == BinaryOp::kSub;
    const Value* alpha_value = has_alpha ? r.Find(2, "alpha") : nullptr;
    if (alpha_value != nullptr && alpha_value->is_none()) alpha_value = nullptr;
    if (op == BinaryOp::kDiv) {
      const Value* rounding = r.Find(2, "rounding_mode");
      if (rounding != nullptr && !rounding->is_none()) {
        return absl::UnimplementedError(absl::StrCat("div: rounding_mode ", rounding->ToString(),
                                                     " (only true division runs)"));
      }
    }
    for (const Value* v : {&a, &b}) {
      if (v->is_tensor()) {
        RETURN_IF_ERROR(ExpectFloatTensor(v->as_tensor(), v == &a ? "arg 'input'" : "arg 'other'"));
      } else if (!v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            v == &a ? "arg 'input'" : "arg 'other'", ": expected a Tensor or a number; got ",
            v->KindName(), " ", v->ToString()));
      }
    }
    if (!a.is_tensor() && !b.is_tensor()) return ScalarArithmetic(a, b, op, alpha_value);
    if (alpha_value != nullptr && !alpha_value->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                     alpha_value->ToString()));
    }
    const float alpha = alpha_value == nullptr ? 1.0f : static_cast<float>(alpha_value->as_float());
    if (a.is_tensor() && b.is_tensor()) {
      const Tensor& x = a.as_tensor();
      const Tensor& y = b.as_tensor();
      absl::StatusOr<Tensor> out;
      switch (op) {
        case BinaryOp::kAdd: out = Add(x, y, alpha); break;
        case BinaryOp::kSub: out = Add(x, y, -alpha); break;  // x + (-alpha) y == x - alpha y
        case BinaryOp::kMul: out = Mul(x, y); break;
        case BinaryOp::kDiv: out = Div(x, y); break;
      }
      if (!out.ok()) return out.status();
      return Value(*std::move(out));
    }
    if (a.is_tensor()) {
      return Value(TensorScalarArithmetic(a.as_tensor(), static_cast<float>(b.as_float()),
                                          /*tensor_first=*/true, op, alpha));
    }
    return Value(TensorScalarArithmetic(b.as_tensor(), static_cast<float>(a.as_float()),
                                        /*tensor_first=*/false, op, alpha));
  };
}

// mean(input, dim=None, keepdim=False, dtype=None).
absl::StatusOr<Value> MeanKernel(const KernelContext&, absl::Span<const Value> args,
                                 const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.OptionalInts(1, "dim", 0, {}));
  ASSIGN_OR_RETURN(bool keepdim, r.OptionalBool(2, "keepdim", false));
  const Value* dtype = r.Find(3, "dtype");
  if (dtype != nullptr && !dtype->is_none() &&
      !(dtype->is_dtype() && dtype->as_dtype() == DType::kFloat32)) {
    return absl::UnimplementedError(absl::StrCat("mean: dtype ", dtype->ToString()));
  }
  ASSIGN_OR_RETURN(Tensor y, Mean(*x, std::move(dims), keepdim));
  return Value(std::move(y));
}

// operator.floordiv on ints (shape arithmetic: `h // 2`), rounding toward minus infinity
// as Python does.
absl::StatusOr<Value> FloorDivKernel(const KernelContext&, absl::Span<const Value> args,
                                     const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value a, r.Required(0, "a"));
  ASSIGN_OR_RETURN(Value b, r.Required(1, "b"));
  if (!a.is_int() || !b.is_int()) {
    return absl::UnimplementedError(absl::StrCat("floordiv: only ints are supported; got ",
                                                 a.KindName(), " and ", b.KindName()));
  }
  if (b.as_int() == 0) return absl::InvalidArgumentError("floordiv: integer division by zero");
  const int64_t q = a.as_int() / b.as_int();
  const bool inexact = q * b.as_int() != a.as_int();
  return Value::Int(inexact && ((a.as_int() < 0) != (b.as_int() < 0)) ? q - 1 : q);
}

// matmul(input, other); bmm additionally wants two 3-d inputs of one batch size.
FunctionKernel MatMulKernel(bool bmm) {
  return [bmm](const KernelContext&, absl::Span<const Value> args,
               const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
    ASSIGN_OR_RETURN(const Tensor* a, r.GetFloatTensor(0, "input"));
    const Value* other = r.Find(1, bmm ? "mat2" : "other");
    if (other == nullptr || !other->is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(bmm ? "bmm" : "matmul",
                                                     ": the second operand must be a Tensor"));
    }
    const Tensor& b = other->as_tensor();
    RETURN_IF_ERROR(ExpectFloatTensor(b, "second operand"));
    if (bmm && (a->dim() != 3 || b.dim() != 3 || a->shape()[0] != b.shape()[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bmm: expected two 3-d tensors with the same batch size; got ", a->ShapeString(),
          " and ", b.ShapeString()));
    }
    ASSIGN_OR_RETURN(Tensor y, MatMul(*a, b));
    return Value(std::move(y));
  };
}

// sum / amax(input, dim, keepdim=False[, dtype]): dim an int or a list; absent, None or
// empty reduces everything.
template <typename Reduction>
FunctionKernel ReductionKernel(Reduction reduce, absl::string_view what, bool takes_dtype) {
  return [reduce, what = std::string(what), takes_dtype](
             const KernelContext&, absl::Span<const Value> args,
             const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(takes_dtype ? 4 : 3));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.OptionalInts(1, "dim", 0, {}));
    ASSIGN_OR_RETURN(bool keepdim, r.OptionalBool(2, "keepdim", false));
    if (takes_dtype) {
      const Value* dtype = r.Find(3, "dtype");
      if (dtype != nullptr && !dtype->is_none() &&
          !(dtype->is_dtype() && dtype->as_dtype() == DType::kFloat32)) {
        return absl::UnimplementedError(absl::StrCat(what, ": dtype ", dtype->ToString()));
      }
    }
    ASSIGN_OR_RETURN(Tensor y, reduce(*x, std::move(dims), keepdim));
    return Value(std::move(y));
  };
}

}  // namespace

std::vector<NamedFunctionKernel> ArithmeticFunctionKernels() {
  const FunctionKernel add = BinaryArithmetic(BinaryOp::kAdd);
  const FunctionKernel sub = BinaryArithmetic(BinaryOp::kSub);
  const FunctionKernel mul = BinaryArithmetic(BinaryOp::kMul);
  const FunctionKernel div = BinaryArithmetic(BinaryOp::kDiv);
  return {
      {kFunction, "operator.add", add},
      {kFunction, "torch.add", add},
      {kMethod, "add", add},
      {kFunction, "operator.mul", mul},
      {kFunction, "torch.mul", mul},
      {kMethod, "mul", mul},
      {kFunction, "torch.mean", MeanKernel},
      {kMethod, "mean", MeanKernel},
      {kFunction, "operator.floordiv", FloorDivKernel},
      {kFunction, "operator.sub", sub},
      {kFunction, "torch.sub", sub},
      {kMethod, "sub", sub},
      {kFunction, "operator.truediv", div},
      {kFunction, "torch.div", div},
      {kMethod, "div", div},
      {kFunction, "torch.matmul", MatMulKernel(false)},
      {kFunction, "operator.matmul", MatMulKernel(false)},
      {kMethod, "matmul", MatMulKernel(false)},
      {kFunction, "torch.bmm", MatMulKernel(true)},
      {kMethod, "bmm", MatMulKernel(true)},
      {kFunction, "torch.sum", ReductionKernel(Sum, "sum", true)},
      {kMethod, "sum", ReductionKernel(Sum, "sum", true)},
      {kFunction, "torch.amax", ReductionKernel(Amax, "amax", false)},
      {kMethod, "amax", ReductionKernel(Amax, "amax", false)},
  };
}

}  // namespace float_kernels_internal
}  // namespace fuselage
