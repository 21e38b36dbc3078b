// The CLI on ONNX files (tools/command.h's LoadModelArg reads MODEL.onnx with
// onnx/onnx_reader.h): `fuselage run model.onnx` gives ONNX Runtime's outputs (saved by
// tests/onnx/make_testdata.py), `fuselage quantize model.onnx -o out.fsl` writes a quantized
// model that loads, `-o out.qdq.onnx` writes ONNX QDQ (onnx/onnx_writer.h), `export-onnx` of
// the float model reads back to ORT's outputs, a failed write leaves the old file, and a
// truncated file is exit 1 naming the problem.
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "graph/tensor.h"
#include "onnx/onnx_subset.pb.h"
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

TEST(OnnxCliTest, QuantizeToOnnxWritesQdqWithInt8Weights) {
  const std::string out = TempPath("onnx_quantized.qdq.onnx");
  CliResult quantize = RunFuselage({"quantize", kModel, "--backend=fbgemm", "--samples=2",
                                    "--threads=1", "--quiet", "-o", out});
  ASSERT_EQ(quantize.code, kExitOk) << quantize.err;
  onnx_subset::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(FileContents(out)));
  std::map<std::string, int> initializer_type;
  for (const auto& t : model.graph().initializer()) initializer_type[t.name()] = t.data_type();
  std::map<std::string, const onnx_subset::NodeProto*> producer;
  int quantize_nodes = 0, convs = 0;
  for (const auto& n : model.graph().node()) {
    for (const auto& o : n.output()) producer[o] = &n;
    quantize_nodes += n.op_type() == "QuantizeLinear";
  }
  for (const auto& n : model.graph().node()) {
    if (n.op_type() != "Conv") continue;
    ++convs;
    // The weight: int8 integers through a DequantizeLinear.
    const onnx_subset::NodeProto* weight = producer.at(n.input(1));
    EXPECT_EQ(weight->op_type(), "DequantizeLinear") << n.name();
    EXPECT_EQ(initializer_type[weight->input(0)], onnx_subset::TensorProto::INT8) << n.name();
  }
  EXPECT_GT(convs, 0);
  EXPECT_GT(quantize_nodes, 0);
}

TEST(OnnxCliTest, ExportOnnxOfAFloatModelRunsToOnnxRuntimesOutputs) {
  // all_ops.onnx written back by the ONNX writer, read by the ONNX reader, run: ORT's outputs
  // on the original file.
  const std::string written = TempPath("onnx_float.onnx");
  CliResult exported = RunFuselage({"export-onnx", kModel, "-o", written});
  ASSERT_EQ(exported.code, kExitOk) << exported.err;
  const std::string x = TempPath("onnx_fx.npy"), y = TempPath("onnx_fy.npy");
  ASSERT_TRUE(WriteNpy(Tensor::FromFloats({1, 3, 8, 8},
                                          Floats("tests/onnx/testdata/all_ops.input.f32")),
                       x)
                  .ok());
  CliResult run = RunFuselage({"run", written, "--input=" + x, "--output=" + y, "--threads=1"});
  ASSERT_EQ(run.code, kExitOk) << run.err;
  auto out = ReadNpy(y);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> expected = Floats("tests/onnx/testdata/all_ops.ort_output.f32");
  ASSERT_EQ(out->numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(out->data<float>()[i], expected[i], 1e-4 * (1 + std::abs(expected[i])));
}

TEST(OnnxCliTest, AFailedOnnxWriteLeavesTheOldFile) {
  const std::string out = TempPath("onnx_kept.onnx");
  ASSERT_TRUE(WriteFileAtomically(out, "old").ok());
  // A prepared model has observers, which have no ONNX form (nor a kernel to run).
  const std::string prepared = TempPath("onnx_prepared.fsl");
  ASSERT_EQ(RunFuselage({"prepare", kModel, "--backend=fbgemm", "-o", prepared}).code, kExitOk);
  CliResult exported = RunFuselage({"export-onnx", prepared, "-o", out});
  EXPECT_EQ(exported.code, kExitFailure);
  EXPECT_NE(exported.err.find("activation_post_process_0"), std::string::npos) << exported.err;
  EXPECT_EQ(FileContents(out), "old");
  CliResult not_onnx = RunFuselage({"export-onnx", kModel, "-o", TempPath("onnx_model.fsl")});
  EXPECT_EQ(not_onnx.code, kExitUsage);
  EXPECT_NE(not_onnx.err.find("expected a path ending in .onnx"), std::string::npos) << not_onnx.err;
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
