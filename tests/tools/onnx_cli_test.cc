// The CLI on ONNX files (tools/command.h's LoadModelArg reads MODEL.onnx with
// onnx/onnx_reader.h): `fuselage run model.onnx` gives ONNX Runtime's outputs (saved by
// tests/onnx/make_testdata.py), `fuselage quantize model.onnx -o out.fsl` writes a quantized
// model that loads, `-o out.onnx` is refused before anything runs, and a truncated file or
// an unknown op is exit 1 naming the problem.
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

constexpr char kModel[] = "tests/onnx/testdata/all_ops.onnx";

std::vector<float> Floats(const std::string& path) {
  const std::string bytes = FileContents(path);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

TEST(OnnxCliTest, RunGivesOnnxRuntimesOutputs) {
  const std::string x = TempPath("onnx_x.npy"), y = TempPath("onnx_y.npy");
  ASSERT_TRUE(WriteNpy(Tensor::FromFloats({1, 3, 8, 8},
                                          Floats("tests/onnx/testdata/all_ops.input.f32")),
                       x)
                  .ok());
  CliResult run = RunFuselage({"run", kModel, "--input=" + x, "--output=" + y, "--threads=1"});
  ASSERT_EQ(run.code, kExitOk) << run.err;
  auto out = ReadNpy(y);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> expected = Floats("tests/onnx/testdata/all_ops.ort_output.f32");
  ASSERT_EQ(out->numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(out->data<float>()[i], expected[i], 1e-4 * (1 + std::abs(expected[i])));
}

TEST(OnnxCliTest, QuantizeWritesAModelThatLoads) {
  const std::string out = TempPath("onnx_quantized.fsl");
  CliResult quantize = RunFuselage({"quantize", kModel, "--backend=fbgemm", "--samples=2",
                                    "--threads=1", "--quiet", "-o", out});
  ASSERT_EQ(quantize.code, kExitOk) << quantize.err;
  auto gm = LoadModel(out);
  ASSERT_TRUE(gm.ok()) << gm.status();
  EXPECT_NE(RunFuselage({"print", out}).out.find("torch.quantize_per_tensor"), std::string::npos);
}

TEST(OnnxCliTest, OnnxOutputIsRefusedBeforeAnythingRuns) {
  const std::string out = TempPath("onnx_quantized.qdq.onnx");
  CliResult quantize = RunFuselage({"quantize", kModel, "--backend=fbgemm", "-o", out});
  EXPECT_EQ(quantize.code, kExitUsage);
  EXPECT_NE(quantize.err.find("writing ONNX from the C++ CLI is not implemented yet"),
            std::string::npos)
      << quantize.err;
  EXPECT_FALSE(std::ifstream(out).good()) << out << " was written";
}

TEST(OnnxCliTest, TruncatedFileIsExit1NamingIt) {
  const std::string cut = TempPath("cut.onnx");
  const std::string bytes = FileContents(kModel);
  ASSERT_TRUE(WriteFileAtomically(cut, bytes.substr(0, bytes.size() / 2)).ok());
  CliResult verify = RunFuselage({"verify", cut});
  EXPECT_EQ(verify.code, kExitFailure);
  EXPECT_NE(verify.err.find("is not an ONNX model"), std::string::npos) << verify.err;
}

}  // namespace
}  // namespace fuselage
