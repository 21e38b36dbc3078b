#include "runtime/quantized/matmul.h"

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_ops.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {
namespace quantized {
namespace {

constexpr absl::string_view kOp = "quantized matmul";

}  // namespace

absl::StatusOr<Tensor> QuantizedMatMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                       int64_t output_zero_point) {
  RETURN_IF_ERROR(ExpectPerTensorEightBit(qa, kOp, "first operand"));
  RETURN_IF_ERROR(ExpectPerTensorEightBit(qb, kOp, "second operand"));
  if (qa.dtype() != qb.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": second operand has dtype ", DTypeName(qb.dtype()),
        "; expected the first operand's, ", DTypeName(qa.dtype())));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, kOp, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qa.dtype(), kOp, "output zero_point"));
  ASSIGN_OR_RETURN(Tensor a, Dequantize(qa));
  ASSIGN_OR_RETURN(Tensor b, Dequantize(qb));
  absl::StatusOr<Tensor> product = MatMul(a, b);
  if (!product.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", product.status().message()));
  }
  return QuantizePerTensor(*product, output_scale, output_zero_point, qa.dtype());
}

}  // namespace quantized
}  // namespace fuselage
