// Float convolution and linear layers, the compute-heavy kernels, on oneDNN's f32
// convolution and matmul primitives (see runtime/onednn/onednn.h for primitive reuse).
#ifndef FUSELAGE_RUNTIME_FLOAT_CONV_H_
#define FUSELAGE_RUNTIME_FLOAT_CONV_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {

struct Conv2dParams {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};  // symmetric, zeros
  std::vector<int64_t> dilation = {1, 1};
  int64_t groups = 1;
};

// PyTorch's conv2d: input [N, C, H, W] (or unbatched [C, H, W]), weight
// [O, C / groups, KH, KW], optional bias [O]; all float32. Groups include depthwise
// (groups == C). Channel, group, bias and size mismatches are InvalidArgument naming the
// shapes.
absl::StatusOr<Tensor> Conv2d(const Tensor& input, const Tensor& weight, const Tensor* bias,
                              const Conv2dParams& params);

// PyTorch's linear: input [..., in], weight [out, in], optional bias [out] -> [..., out].
absl::StatusOr<Tensor> Linear(const Tensor& input, const Tensor& weight, const Tensor* bias);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_CONV_H_
