// .npy reading (files written by NumPy itself, see gen_float_goldens.py), writing, and
// hostile input.
#include "runtime/npy.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/graph/test_devices.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kDir[] = "tests/runtime/testdata/npy/";

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

absl::StatusOr<Tensor> ReadFixture(const std::string& name) {
  return ReadNpy(std::string(kDir) + name);
}

TEST(NpyTest, ReadsWhatNumPyWrites) {
  auto f = ReadFixture("f32_2x3.npy");  // arange(6).reshape(2, 3) / 4
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dtype(), DType::kFloat32);
  EXPECT_EQ(f->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Values<float>(*f), ElementsAre(0, 0.25, 0.5, 0.75, 1, 1.25));

  auto i = ReadFixture("i64_3.npy");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->dtype(), DType::kInt64);
  EXPECT_THAT(Values<int64_t>(*i), ElementsAre(-1, int64_t{1} << 40, 7));

  auto u = ReadFixture("u8_2x2.npy");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->dtype(), DType::kUInt8);
  EXPECT_THAT(Values<uint8_t>(*u), ElementsAre(0, 255, 128, 1));

  auto s = ReadFixture("i8_4.npy");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dtype(), DType::kInt8);
  EXPECT_THAT(Values<int8_t>(*s), ElementsAre(-128, -1, 0, 127));

  auto scalar = ReadFixture("f32_scalar.npy");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->dim(), 0);
  EXPECT_THAT(Values<float>(*scalar), ElementsAre(1.5));

  auto v2 = ReadFixture("f32_v2.npy");  // format version 2.0
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_THAT(Values<float>(*v2), ElementsAre(1, -2));
}

TEST(NpyTest, RejectsUnsupportedLayoutsAndTypes) {
  EXPECT_THAT(ReadFixture("f32_fortran.npy").status().message(), HasSubstr("fortran_order"));
  EXPECT_THAT(ReadFixture("f64_2.npy").status().message(), HasSubstr("unsupported descr '<f8'"));
  EXPECT_THAT(ReadFixture("f32_bigendian.npy").status().message(),
              HasSubstr("unsupported descr '>f4'"));
  EXPECT_EQ(ReadFixture("missing.npy").status().code(), absl::StatusCode::kNotFound);
}

TEST(NpyTest, RoundTripsEverySupportedDtype) {
  const std::vector<Tensor> tensors = {
      Tensor::FromFloats({2, 2}, {1, -2, 3.5, 0}),
      Tensor::FromInt64s({3}, {5, -6, 7}),
      *Tensor::FromBytes(DType::kUInt8, {1, 3}, std::string("\x00\x7f\xff", 3)),
      *Tensor::FromBytes(DType::kInt8, {2}, std::string("\x80\x01", 2)),
      Tensor::FromFloats({0, 4}, {}),
  };
  for (const Tensor& t : tensors) {
    auto bytes = SerializeNpy(t);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // Data starts 64-byte aligned, as NumPy writes it.
    EXPECT_EQ((bytes->size() - t.nbytes()) % 64, 0u);
    auto back = ParseNpy(*bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, t);
  }
  const std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                           "/npy_test_roundtrip.npy";
  ASSERT_TRUE(WriteNpy(tensors[0], path).ok());
  auto read = ReadNpy(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tensors[0]);
  auto q = Tensor::Zeros(DType::kQUInt8, {1}, QuantParams::PerTensor(1, 0));
  EXPECT_EQ(SerializeNpy(*q).status().code(), absl::StatusCode::kInvalidArgument);
}

// A version 1.0 file with `header` (padded by nothing) and `data`.
std::string NpyBytes(const std::string& header, const std::string& data) {
  std::string out = "\x93NUMPY\x01";
  out.push_back('\0');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

TEST(NpyTest, HostileInputIsAnErrorNeverACrash) {
  const std::string ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  ASSERT_TRUE(ParseNpy(NpyBytes(ok_header, std::string(8, '\0'))).ok());
  struct Case {
    std::string bytes;
    std::string message;
  } cases[] = {
      {"", "bad magic"},
      {"\x93NUMPX\x01\x00\x00\x00", "bad magic"},
      {NpyBytes(ok_header, std::string(7, '\0')), "data has 7 bytes"},
      {NpyBytes(ok_header, std::string(9, '\0')), "data has 9 bytes"},
      {NpyBytes(ok_header, "").substr(0, 30), "truncated header"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", ""),
       "bad shape entry"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""),
       "more than"},
      // 2^40 elements: refused from the header alone, nothing allocated for it.
      {NpyBytes("{'descr': '|i1', 'fortran_order': False, 'shape': (1099511627776,), }",
                std::string(16, '\0')),
       "more than"},
      {NpyBytes("{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0')), "no 'fortran_order'"},
      {NpyBytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                std::string(8, '\0')),
       "repeats 'descr'"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", ""),
       "unterminated shape"},
      {NpyBytes("not a dict", ""), "not a dict"},
  };
  for (const Case& c : cases) {
    auto t = ParseNpy(c.bytes);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message));
  }
  // A declared header longer than the limit is refused before it is read.
  std::string huge = "\x93NUMPY\x02";
  huge += std::string("\0\xff\xff\xff\x7f", 5);
  EXPECT_THAT(ParseNpy(huge).status().message(), HasSubstr("exceeds the limit"));
}

// The file forms go through graph/file_io: /dev/zero is refused on its first bytes (it was
// sized by tellg as 0 bytes and parsed as "bad magic", then read to the limit, 2 GiB by
// default), a full device is a write error naming it, and a failed write into a missing
// folder leaves nothing behind.
TEST(NpyTest, FileFormsAreBoundedAndReportWriteErrors) {
  auto zero = ReadNpy("/dev/zero", int64_t{1} << 40);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("'/dev/zero': npy: not a .npy file (bad magic)"));

  auto t = Tensor::Zeros(DType::kFloat32, {4});
  ASSERT_TRUE(t.ok());
  const std::string device = FullDeviceForTest();
  const absl::Status full = WriteNpy(*t, device);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr(device));
  EXPECT_THAT(full.message(), HasSubstr("No space left on device"));

  const std::string folder =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/npy_no_such_dir";
  const absl::Status missing = WriteNpy(*t, folder + "/y.npy");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(folder + "/y.npy"));
}

}  // namespace
}  // namespace fuselage
