// Element types of tensors and `dtype` args, named as PyTorch names them.
#ifndef FUSELAGE_GRAPH_DTYPE_H_
#define FUSELAGE_GRAPH_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace fuselage {

// The values are part of the model file format (graph/model.proto): append, never renumber.
enum class DType : uint8_t {
  kFloat32 = 1,
  kInt8 = 2,
  kUInt8 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kQInt8 = 6,    // torch.qint8: int8 storage with quantization parameters.
  kQUInt8 = 7,   // torch.quint8
  kQInt32 = 8,   // torch.qint32
  kBool = 9,
  kFloat16 = 10, // only as a dtype arg / config value; tensors of it are not stored.
  kQUInt4x2 = 11, // torch.quint4x2 (two 4-bit values per byte): config value only, not stored.
};

// "torch.float32", "torch.quint8", ...
absl::string_view DTypeName(DType dtype);
// Accepts "torch.float32", "float32", "torch.float" and the other names PyTorch prints.
std::optional<DType> DTypeFromName(absl::string_view name);
// Bytes per element of a stored tensor; 0 for dtypes tensors cannot have.
size_t DTypeSize(DType dtype);
bool IsQuantized(DType dtype);
// The storage dtype of a quantized dtype (kQUInt8 -> kUInt8), else `dtype` itself.
DType StorageDType(DType dtype);
// The integer range of a quantized or integer dtype: qint8 [-128, 127], quint8 [0, 255]...
int64_t DTypeMin(DType dtype);
int64_t DTypeMax(DType dtype);
bool IsValidDType(int value);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_DTYPE_H_
