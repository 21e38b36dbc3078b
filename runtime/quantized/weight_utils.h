// Checks and per-output-channel views of the qint8 weight and float bias shared by the
// quantized conv and linear kernels.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_WEIGHT_UTILS_H_
#define FUSELAGE_RUNTIME_QUANTIZED_WEIGHT_UTILS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// `weight` is a qint8 tensor of `dims` dimensions, quantized per tensor or per channel
// along axis 0 (the output channel), with valid parameters.
absl::Status ExpectQInt8Weight(const Tensor& weight, absl::string_view op, int64_t dims);
// `bias` is null or a float32 tensor of shape [out_channels].
absl::Status ExpectBias(const Tensor* bias, int64_t out_channels, absl::string_view op);
// The exact int32 accumulator cannot overflow: `depth` products of two 8-bit
// differences (each at most 255 in magnitude) fit in int32.
absl::Status ExpectAccumulatorFits(int64_t depth, absl::string_view op);

// One weight scale / zero point per output channel (a per-tensor one repeated).
std::vector<double> PerOutputChannel(const std::vector<double>& scales, int64_t out_channels);
std::vector<int64_t> PerOutputChannelZeroPoints(const Tensor& weight, int64_t out_channels);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_WEIGHT_UTILS_H_
