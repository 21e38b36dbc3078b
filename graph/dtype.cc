#include "graph/dtype.h"

#include <limits>

#include "absl/strings/strip.h"

namespace fuselage {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "torch.float32";
    case DType::kInt8: return "torch.int8";
    case DType::kUInt8: return "torch.uint8";
    case DType::kInt32: return "torch.int32";
    case DType::kInt64: return "torch.int64";
    case DType::kQInt8: return "torch.qint8";
    case DType::kQUInt8: return "torch.quint8";
    case DType::kQInt32: return "torch.qint32";
    case DType::kBool: return "torch.bool";
    case DType::kFloat16: return "torch.float16";
    case DType::kQUInt4x2: return "torch.quint4x2";
  }
  return "torch.<invalid>";
}

std::optional<DType> DTypeFromName(absl::string_view name) {
  absl::ConsumePrefix(&name, "torch.");
  if (name == "float32" || name == "float") return DType::kFloat32;
  if (name == "int8") return DType::kInt8;
  if (name == "uint8") return DType::kUInt8;
  if (name == "int32" || name == "int") return DType::kInt32;
  if (name == "int64" || name == "long") return DType::kInt64;
  if (name == "qint8") return DType::kQInt8;
  if (name == "quint8") return DType::kQUInt8;
  if (name == "qint32") return DType::kQInt32;
  if (name == "bool") return DType::kBool;
  if (name == "float16" || name == "half") return DType::kFloat16;
  if (name == "quint4x2") return DType::kQUInt4x2;
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kQInt8: return 1;
    case DType::kQUInt8: return 1;
    case DType::kQInt32: return 4;
    case DType::kBool: return 1;
    case DType::kFloat16: return 0;
    case DType::kQUInt4x2: return 0;
  }
  return 0;
}

bool IsQuantized(DType dtype) {
  return dtype == DType::kQInt8 || dtype == DType::kQUInt8 || dtype == DType::kQInt32;
}

DType StorageDType(DType dtype) {
  switch (dtype) {
    case DType::kQInt8: return DType::kInt8;
    case DType::kQUInt8: return DType::kUInt8;
    case DType::kQInt32: return DType::kInt32;
    default: return dtype;
  }
}

int64_t DTypeMin(DType dtype) {
  switch (StorageDType(dtype)) {
    case DType::kInt8: return -128;
    case DType::kUInt8: return 0;
    case DType::kInt32: return std::numeric_limits<int32_t>::min();
    case DType::kInt64: return std::numeric_limits<int64_t>::min();
    case DType::kBool: return 0;
    default: return 0;
  }
}

int64_t DTypeMax(DType dtype) {
  switch (StorageDType(dtype)) {
    case DType::kInt8: return 127;
    case DType::kUInt8: return 255;
    case DType::kInt32: return std::numeric_limits<int32_t>::max();
    case DType::kInt64: return std::numeric_limits<int64_t>::max();
    case DType::kBool: return 1;
    default: return 0;
  }
}

bool IsValidDType(int value) { return value >= 1 && value <= 11; }

}  // namespace fuselage
