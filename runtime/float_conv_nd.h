// Float convolutions over 1, 2 or 3 spatial dims, and transposed convolutions, as
// PyTorch's conv1d / conv3d / conv_transpose{1,2,3}d compute them (Conv2d is in
// float_conv.h; these serve nn.Conv1d / nn.Conv3d / nn.ConvTranspose*d).
//
// The forward conv runs on oneDNN's convolution primitive, as Conv2d does. The transposed
// conv is still GEMM (Eigen) plus col2im (a scatter-add of each column into the output
// window it came from); moving it to oneDNN's deconvolution is the next slice of issue 20.
#ifndef FUSELAGE_RUNTIME_FLOAT_CONV_ND_H_
#define FUSELAGE_RUNTIME_FLOAT_CONV_ND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {

// Per-spatial-dim parameters; each vector has one entry per spatial dim (1, 2 or 3).
struct ConvNdParams {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;         // symmetric, zeros
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_padding;  // transposed conv only; empty means all 0
  int64_t groups = 1;
};

// PyTorch's conv{1,2,3}d with `spatial_dims` = 1, 2, 3: input [N, C, *S] (or unbatched
// [C, *S]), weight [O, C / groups, *K], optional bias [O]; float32. InvalidArgument naming
// the shapes / parameters on any mismatch.
absl::StatusOr<Tensor> ConvNd(const Tensor& input, const Tensor& weight, const Tensor* bias,
                              const ConvNdParams& params, int spatial_dims);

// PyTorch's conv_transpose{1,2,3}d: input [N, C, *S] (or [C, *S]), weight
// [C, O / groups, *K], optional bias [O]. Output size per dim:
// (S - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1, and, as in
// PyTorch, output_padding must be smaller than stride or dilation.
absl::StatusOr<Tensor> ConvTransposeNd(const Tensor& input, const Tensor& weight,
                                       const Tensor* bias, const ConvNdParams& params,
                                       int spatial_dims);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_CONV_ND_H_
