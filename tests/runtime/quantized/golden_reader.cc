#include "tests/runtime/quantized/golden_reader.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/check.h"

namespace fuselage {
namespace quantized {
namespace {

std::string RunfilesPath(const std::string& relative_path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return relative_path;
  return absl::StrCat(srcdir, "/", workspace, "/", relative_path);
}

absl::StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "quint8") return DType::kQUInt8;
  if (name == "qint8") return DType::kQInt8;
  if (name == "qint32") return DType::kQInt32;
  if (name == "uint8") return DType::kUInt8;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", name));
}

template <typename T>
std::string PackInts(std::istringstream& values, int64_t n) {
  std::string bytes(static_cast<size_t>(n) * sizeof(T), '\0');
  T* out = reinterpret_cast<T*>(bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = 0;
    values >> v;
    out[i] = static_cast<T>(v);
  }
  return bytes;
}

absl::StatusOr<Tensor> ParseTensor(std::istringstream& head, const std::string& body) {
  std::string dtype_name;
  int64_t ndim = 0;
  head >> dtype_name >> ndim;
  auto dtype = ParseDType(dtype_name);
  if (!dtype.ok()) return dtype.status();
  std::vector<int64_t> shape(static_cast<size_t>(ndim));
  int64_t numel = 1;
  for (int64_t& d : shape) {
    head >> d;
    numel *= d;
  }
  std::string scheme;
  head >> scheme;
  QuantParams qparams;
  if (scheme == "pt") {
    double scale = 0;
    int64_t zero_point = 0;
    head >> scale >> zero_point;
    qparams = QuantParams::PerTensor(scale, zero_point);
  } else if (scheme == "pc") {
    int64_t axis = 0, n = 0;
    head >> axis >> n;
    std::vector<double> scales(static_cast<size_t>(n));
    std::vector<int64_t> zero_points(static_cast<size_t>(n));
    for (double& s : scales) head >> s;
    for (int64_t& z : zero_points) head >> z;
    qparams = QuantParams::PerChannel(std::move(scales), std::move(zero_points), axis);
  }
  std::istringstream values(body);
  std::string bytes;
  switch (*dtype) {
    case DType::kFloat32: {
      bytes.assign(static_cast<size_t>(numel) * sizeof(float), '\0');
      float* out = reinterpret_cast<float*>(bytes.data());
      std::string token;
      for (int64_t i = 0; i < numel; ++i) {
        values >> token;
        out[i] = std::strtof(token.c_str(), nullptr);  // handles inf / nan
      }
      break;
    }
    case DType::kQUInt8:
    case DType::kUInt8: bytes = PackInts<uint8_t>(values, numel); break;
    case DType::kQInt8: bytes = PackInts<int8_t>(values, numel); break;
    case DType::kQInt32: bytes = PackInts<int32_t>(values, numel); break;
    default: break;
  }
  if (!values) return absl::InvalidArgumentError("tensor body is too short");
  return Tensor::FromBytes(*dtype, std::move(shape), std::move(bytes), std::move(qparams));
}

}  // namespace

const Tensor& GoldenCase::tensor(const std::string& key) const {
  const Tensor* t = find_tensor(key);
  if (t == nullptr) std::fprintf(stderr, "golden case %s has no tensor %s\n", name.c_str(), key.c_str());
  FUSELAGE_CHECK(t != nullptr);
  return *t;
}

const Tensor* GoldenCase::find_tensor(const std::string& key) const {
  auto it = tensors.find(key);
  return it == tensors.end() ? nullptr : &it->second;
}

const std::string& GoldenCase::text(const std::string& key) const {
  auto it = scalars.find(key);
  if (it == scalars.end()) std::fprintf(stderr, "golden case %s has no scalar %s\n", name.c_str(), key.c_str());
  FUSELAGE_CHECK(it != scalars.end());
  return it->second;
}

double GoldenCase::number(const std::string& key) const {
  return std::strtod(text(key).c_str(), nullptr);
}

absl::StatusOr<std::vector<GoldenCase>> ReadGoldenFile(const std::string& relative_path) {
  const std::string path = RunfilesPath(relative_path);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open golden file ", path));
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string kind, key;
    head >> kind;
    if (kind == "case") {
      cases.emplace_back();
      head >> cases.back().name;
    } else if (kind == "end") {
      continue;
    } else if (cases.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": record before any case"));
    } else if (kind == "scalar") {
      std::string value;
      head >> key >> value;
      cases.back().scalars[key] = value;
    } else if (kind == "tensor") {
      head >> key;
      std::string body;
      std::getline(in, body);
      auto tensor = ParseTensor(head, body);
      if (!tensor.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor ", key, ": ", tensor.status().message()));
      }
      cases.back().tensors.emplace(key, *std::move(tensor));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unknown record ", kind));
    }
  }
  return cases;
}

int64_t IntAt(const Tensor& tensor, int64_t i) {
  switch (tensor.dtype()) {
    case DType::kQUInt8:
    case DType::kUInt8: return tensor.data<uint8_t>()[i];
    case DType::kQInt8:
    case DType::kInt8: return tensor.data<int8_t>()[i];
    case DType::kQInt32:
    case DType::kInt32: return tensor.data<int32_t>()[i];
    case DType::kInt64: return tensor.data<int64_t>()[i];
    default: FUSELAGE_CHECK(false && "not an int tensor");
  }
  return 0;
}

::testing::AssertionResult SameQuantized(const Tensor& actual, const Tensor& expected,
                                         const Tensor* ambiguous) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "got " << DTypeName(actual.dtype()) << " " << actual.ShapeString()
           << ", expected " << DTypeName(expected.dtype()) << " " << expected.ShapeString();
  }
  if (!(actual.qparams() == expected.qparams())) {
    return ::testing::AssertionFailure() << "quantization parameters differ";
  }
  int64_t mismatches = 0;
  std::string first;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const int64_t a = IntAt(actual, i), e = IntAt(expected, i);
    const bool allowed = ambiguous != nullptr && IntAt(*ambiguous, i) != 0 &&
                         (a - e <= 1 && e - a <= 1);
    if (a != e && !allowed) {
      if (++mismatches <= 5) absl::StrAppend(&first, " [", i, "]: ", a, " vs ", e, ";");
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << actual.numel()
                                       << " values differ (got vs expected):" << first;
}

}  // namespace quantized
}  // namespace fuselage

namespace fuselage {
namespace quantized {

::testing::AssertionResult MostlySameQuantized(const Tensor& actual, const Tensor& expected,
                                               double min_equal_fraction) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "got " << DTypeName(actual.dtype()) << " " << actual.ShapeString()
           << ", expected " << DTypeName(expected.dtype()) << " " << expected.ShapeString();
  }
  if (!(actual.qparams() == expected.qparams())) {
    return ::testing::AssertionFailure() << "quantization parameters differ";
  }
  int64_t off_by_one = 0, further = 0;
  std::string first;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const int64_t a = IntAt(actual, i), e = IntAt(expected, i);
    if (a == e) continue;
    if (a - e <= 1 && e - a <= 1) {
      ++off_by_one;
    } else {
      ++further;
    }
    if (off_by_one + further <= 5) absl::StrAppend(&first, " [", i, "]: ", a, " vs ", e, ";");
  }
  const double equal =
      actual.numel() == 0 ? 1.0
                          : 1.0 - static_cast<double>(off_by_one + further) / actual.numel();
  if (further == 0 && equal >= min_equal_fraction) {
    if (off_by_one > 0) {
      std::cout << "  (" << off_by_one << " of " << actual.numel()
                << " values one step from PyTorch's)\n";
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << off_by_one << " values one step off and " << further << " further, of "
         << actual.numel() << " (got vs expected):" << first;
}

}  // namespace quantized
}  // namespace fuselage
