#include "runtime/npy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "graph/file_io.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";

struct NpyDescr {
  absl::string_view descr;
  DType dtype;
};
// Byte order '|' (not applicable) is what NumPy writes for one-byte types.
constexpr NpyDescr kDescrs[] = {
    {"<f4", DType::kFloat32}, {"<i8", DType::kInt64}, {"|u1", DType::kUInt8},
    {"|i1", DType::kInt8},    {"<u1", DType::kUInt8}, {"<i1", DType::kInt8},
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("npy: ", what));
}

uint32_t ReadLittleEndian(absl::string_view bytes, size_t offset, int width) {
  uint32_t v = 0;
  for (int i = width - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return v;
}

// Returns the text of the value of `'key':` in a Python dict literal (up to the next
// top-level comma or the closing brace).
absl::StatusOr<absl::string_view> DictValue(absl::string_view dict, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  const size_t at = dict.find(quoted);
  if (at == absl::string_view::npos) return Bad(absl::StrCat("header has no '", key, "'"));
  if (dict.find(quoted, at + 1) != absl::string_view::npos) {
    return Bad(absl::StrCat("header repeats '", key, "'"));
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(dict.substr(at + quoted.size()));
  if (!absl::ConsumePrefix(&rest, ":")) return Bad(absl::StrCat("no ':' after '", key, "'"));
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t end = 0;
  if (!rest.empty() && rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos) return Bad("unterminated shape tuple");
    ++end;
  } else {
    end = rest.find_first_of(",}");
    if (end == absl::string_view::npos) return Bad(absl::StrCat("unterminated '", key, "'"));
  }
  return absl::StripTrailingAsciiWhitespace(rest.substr(0, end));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Bad("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0;
  size_t header_start = 0;
  if (major == 1) {
    header_len = ReadLittleEndian(bytes, 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated header length");
    header_len = ReadLittleEndian(bytes, 8, 4);
    header_start = 12;
  } else {
    return Bad(absl::StrCat("unsupported format version ", major));
  }
  if (header_len > static_cast<size_t>(kMaxNpyHeaderBytes)) {
    return Bad(absl::StrCat("header of ", header_len, " bytes exceeds the limit of ",
                            kMaxNpyHeaderBytes));
  }
  if (bytes.size() - header_start < header_len) return Bad("truncated header");
  const absl::string_view header =
      absl::StripAsciiWhitespace(bytes.substr(header_start, header_len));
  if (header.empty() || header.front() != '{' || header.back() != '}') {
    return Bad("header is not a dict literal");
  }

  ASSIGN_OR_RETURN(absl::string_view descr_text, DictValue(header, "descr"));
  ASSIGN_OR_RETURN(absl::string_view fortran_text, DictValue(header, "fortran_order"));
  ASSIGN_OR_RETURN(absl::string_view shape_text, DictValue(header, "shape"));

  const NpyDescr* descr = nullptr;
  for (const NpyDescr& d : kDescrs) {
    if (descr_text == absl::StrCat("'", d.descr, "'")) descr = &d;
  }
  if (descr == nullptr) {
    return Bad(absl::StrCat("unsupported descr ", descr_text,
                            "; expected '<f4', '<i8', '|u1' or '|i1' (little-endian)"));
  }
  if (fortran_text != "False") {
    return Bad(absl::StrCat("fortran_order is ", fortran_text, "; only C order is supported"));
  }
  if (shape_text.size() < 2 || shape_text.front() != '(') return Bad("shape is not a tuple");
  std::vector<int64_t> shape;
  for (absl::string_view part :
       absl::StrSplit(shape_text.substr(1, shape_text.size() - 2), ',', absl::SkipWhitespace())) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0) {
      return Bad(absl::StrCat("bad shape entry '", part, "' in ", shape_text));
    }
    shape.push_back(dim);
    if (shape.size() > 32) return Bad("shape has more than 32 dimensions");
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(shape);
  if (!numel.ok()) return Bad(numel.status().message());
  const size_t data_start = header_start + header_len;
  const size_t expected = static_cast<size_t>(*numel) * DTypeSize(descr->dtype);
  const size_t actual = bytes.size() - data_start;
  if (actual != expected) {
    return Bad(absl::StrCat("data has ", actual, " bytes; shape ", shape_text, " of ",
                            descr->descr, " needs ", expected));
  }
  return Tensor::CopyFromBytes(descr->dtype, std::move(shape), bytes.substr(data_start));
}

absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor) {
  absl::string_view descr;
  for (const NpyDescr& d : kDescrs) {
    if (d.dtype == tensor.dtype()) {
      descr = d.descr;
      break;
    }
  }
  if (descr.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: cannot write a ", DTypeName(tensor.dtype()),
        " tensor; supported: float32, int64, uint8, int8"));
  }
  std::string shape = absl::StrJoin(tensor.shape(), ", ");
  if (tensor.dim() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    shape, "), }");
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends in '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out += header;
  out.append(tensor.bytes().data(), tensor.bytes().size());
  return out;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path, int64_t max_bytes) {
  // The magic is checked on the first bytes: /dev/zero is refused there, not at the limit.
  auto check_magic = [](absl::string_view head) -> absl::Status {
    const size_t n = std::min(head.size(), kMagic.size());
    if (head.substr(0, n) == kMagic.substr(0, n)) return absl::OkStatus();
    return Bad("not a .npy file (bad magic)");
  };
  ASSIGN_OR_RETURN(std::string bytes,
                   ReadFileBounded(path, static_cast<size_t>(std::max<int64_t>(max_bytes, 0)),
                                   check_magic));
  absl::StatusOr<Tensor> tensor = ParseNpy(bytes);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat("'", path, "': ", tensor.status().message()));
  }
  return tensor;
}

absl::Status WriteNpy(const Tensor& tensor, const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeNpy(tensor));
  return WriteFileAtomically(path, bytes);
}

}  // namespace fuselage
