// Reading and writing NumPy .npy files (format version 1.0 / 2.0 / 3.0) of float32,
// int64, uint8 and int8 arrays in little-endian C order: how `fuselage run --input=X.npy`
// and calibration get tensors in and out.
//
// The file is treated as hostile: the header length is capped (kMaxNpyHeaderBytes), the
// header dict must hold exactly 'descr', 'fortran_order' and 'shape' with supported
// values, the shape must be non-negative with at most Tensor::kMaxElements elements, and
// the data must be exactly shape * element size bytes. Every error says what was wrong.
#ifndef FUSELAGE_RUNTIME_NPY_H_
#define FUSELAGE_RUNTIME_NPY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/tensor.h"

namespace fuselage {

inline constexpr int64_t kMaxNpyHeaderBytes = 64 * 1024;

// Parses the bytes of a .npy file.
absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes);
// The .npy bytes (format 1.0) of a float32 / int64 / uint8 / int8 tensor; a quantized
// tensor is InvalidArgument (dequantize it first).
absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor);

// File forms; errors name the path. ReadNpy reads at most `max_bytes` (ReadFileBounded: a
// device or pipe that never ends is refused at the limit); WriteNpy replaces the file
// atomically (WriteFileAtomically).
absl::StatusOr<Tensor> ReadNpy(const std::string& path, int64_t max_bytes = int64_t{8} << 30);
absl::Status WriteNpy(const Tensor& tensor, const std::string& path);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_NPY_H_
