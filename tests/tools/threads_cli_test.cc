// `--threads` (run, calibrate, quantize) and `run --repeat=N --time`, through the CLI, on
// a float model with two convolutions (oneDNN's kernels, which use every thread they are
// given), a residual add and a max pool, its tensors large enough that the engine's own
// loops (observers, elementwise ops, pools, the int8 convs' layout moves) are cut into
// chunks for several threads: every thread count writes the same bytes, a timed repetition prints
// one `time run` line per run and writes the outputs of a single run, and a thread count
// or repetition count outside its range is a usage error naming the flag and the range.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Seeded(size_t n, uint32_t seed, float bound) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

std::unique_ptr<Module> Conv3x3(int64_t in, int64_t out, uint32_t seed) {
  auto m = std::make_unique<Module>("nn.Conv2d");
  m->SetTensor("weight", Tensor::FromFloats({out, in, 3, 3},
                                            Seeded(static_cast<size_t>(out * in * 9), seed, 0.3f)));
  m->SetTensor("bias", Tensor::FromFloats({out}, Seeded(static_cast<size_t>(out), seed + 1, 0.2f)));
  m->SetAttribute("in_channels", Argument::Int(in));
  m->SetAttribute("out_channels", Argument::Int(out));
  m->SetAttribute("kernel_size", Argument::Ints({3, 3}));
  m->SetAttribute("stride", Argument::Ints({1, 1}));
  m->SetAttribute("padding", Argument::Ints({1, 1}));
  m->SetAttribute("dilation", Argument::Ints({1, 1}));
  m->SetAttribute("groups", Argument::Int(1));
  m->SetAttribute("padding_mode", Argument::String("zeros"));
  return m;
}

// x [1, 16, 64, 64] -> conv (16 -> 32) -> relu -> conv (32 -> 32) -> add(., relu) ->
// max pool 2x2 -> [1, 32, 32, 32], saved to a scratch file; returns its path. The input,
// seeded, is written next to it (InputPath()).
std::string ConvModel() {
  GraphModule gm;
  EXPECT_TRUE(gm.SetModule("conv1", Conv3x3(16, 32, 1)).ok());
  EXPECT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  EXPECT_TRUE(gm.SetModule("conv2", Conv3x3(32, 32, 3)).ok());
  auto pool = std::make_unique<Module>("nn.MaxPool2d");
  pool->SetAttribute("kernel_size", Argument::Int(2));
  EXPECT_TRUE(gm.SetModule("pool", std::move(pool)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* c1 = *g.AddCallModule("conv1", {x});
  Node* r = *g.AddCallModule("relu", {c1});
  Node* c2 = *g.AddCallModule("conv2", {r});
  Node* sum = *g.AddCallFunction("operator.add", {c2, r});
  Node* pooled = *g.AddCallModule("pool", {sum});
  EXPECT_TRUE(g.SetOutput(pooled).ok());
  const std::string path = TempPath("two_convs.fsl");
  EXPECT_TRUE(SaveModel(gm, path).ok());
  EXPECT_TRUE(WriteNpy(Tensor::FromFloats({1, 16, 64, 64}, Seeded(16 * 64 * 64, 9, 1.0f)),
                       TempPath("two_convs_x.npy"))
                  .ok());
  return path;
}

std::string InputFlag() { return "--input=" + TempPath("two_convs_x.npy"); }

// The bytes `fuselage run MODEL --input=... --output=<fresh file> EXTRA...` writes.
std::string RunOutput(const std::string& model, const std::string& name,
                      const std::vector<std::string>& extra = {}) {
  const std::string out = TempPath(name);
  std::vector<std::string> args = {"run", model, InputFlag(), "--output=" + out};
  args.insert(args.end(), extra.begin(), extra.end());
  const CliResult r = RunFuselage(args);
  EXPECT_EQ(r.code, kExitOk) << r.err;
  return FileContents(out);
}

TEST(ThreadsCliTest, RunWritesTheSameBytesForEveryThreadCount) {
  const std::string model = ConvModel();
  const std::string one = RunOutput(model, "y1.npy", {"--threads=1"});
  ASSERT_GT(one.size(), 32u * 32 * 32 * 4);  // the float32 data of [1, 32, 32, 32]
  EXPECT_EQ(RunOutput(model, "y2.npy", {"--threads=2"}), one);
  EXPECT_EQ(RunOutput(model, "y3.npy", {"--threads", "3"}), one);
  EXPECT_EQ(RunOutput(model, "y_default.npy"), one);
}

TEST(ThreadsCliTest, QuantizeAndTheQuantizedRunAreTheSameForEveryThreadCount) {
  const std::string model = ConvModel();
  std::vector<std::string> quantized;
  for (const std::string threads : {"1", "2"}) {
    const std::string out = TempPath("q" + threads + ".fsl");
    const CliResult r = RunFuselage({"quantize", model, "--backend=fbgemm", "--samples=3",
                                     "--input-shape=1,16,64,64", "--threads=" + threads, "-o",
                                     out});
    ASSERT_EQ(r.code, kExitOk) << r.err;
    quantized.push_back(FileContents(out));
  }
  EXPECT_EQ(quantized[0], quantized[1]);
  const std::string q = TempPath("q1.fsl");
  EXPECT_EQ(RunOutput(q, "qy1.npy", {"--threads=1"}), RunOutput(q, "qy2.npy", {"--threads=2"}));
}

TEST(ThreadsCliTest, CalibrateTakesThreadsAndGivesTheSameStatistics) {
  const std::string model = ConvModel();
  const std::string prepared = TempPath("prepared.fsl");
  CliResult r = RunFuselage({"prepare", model, "--backend=fbgemm", "-o", prepared});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::vector<std::string> calibrated;
  for (const std::string threads : {"1", "2"}) {
    const std::string out = TempPath("calibrated" + threads + ".fsl");
    r = RunFuselage({"calibrate", prepared, "--samples=2", "--input-shape=1,16,64,64",
                     "--threads=" + threads, "-o", out});
    ASSERT_EQ(r.code, kExitOk) << r.err;
    calibrated.push_back(FileContents(out));
  }
  EXPECT_EQ(calibrated[0], calibrated[1]);
}

TEST(ThreadsCliTest, RepeatWithTimePrintsOneRunLinePerRepetitionAndWritesOneRunsOutputs) {
  const std::string model = ConvModel();
  const std::string single = RunOutput(model, "single.npy");
  const std::string out = TempPath("repeated.npy");
  const CliResult r = RunFuselage(
      {"run", model, InputFlag(), "--output=" + out, "--repeat=3", "--threads=2", "--time"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(TimedSteps(r.out), ElementsAre("run", "run", "run"));
  // The output is reported (and written) once, not once per repetition.
  EXPECT_EQ(r.out.find("output 0: "), r.out.rfind("output 0: ")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("output 0: torch.float32 [1, 32, 32, 32]\n"));
  EXPECT_EQ(FileContents(out), single);

  // Without --time nothing is timed; without --repeat, --time times the one run.
  const CliResult quiet = RunFuselage({"run", model, InputFlag(), "--repeat=2"});
  ASSERT_EQ(quiet.code, kExitOk) << quiet.err;
  EXPECT_THAT(TimedSteps(quiet.out), ElementsAre());
  const CliResult once = RunFuselage({"run", model, InputFlag(), "--time"});
  ASSERT_EQ(once.code, kExitOk) << once.err;
  EXPECT_THAT(TimedSteps(once.out), ElementsAre("run"));
}

TEST(ThreadsCliTest, ThreadsAndRepeatOutOfRangeOrJunkAreUsageErrors) {
  const std::string model = ConvModel();
  const std::string prepared = TempPath("prepared_for_errors.fsl");
  ASSERT_EQ(RunFuselage({"prepare", model, "--backend=fbgemm", "-o", prepared}).code, kExitOk);
  const std::vector<std::vector<std::string>> commands = {
      {"run", model, InputFlag()},
      {"calibrate", prepared, "--samples=1", "--input-shape=1,16,64,64", "-o",
       TempPath("never_c.fsl")},
      {"quantize", model, "--backend=fbgemm", "--samples=1", "--input-shape=1,16,64,64", "-o",
       TempPath("never_q.fsl")},
  };
  for (const std::vector<std::string>& command : commands) {
    for (const std::string bad : {"0", "-1", "1025", "2x", " 2", "+2", ""}) {
      SCOPED_TRACE(absl::StrCat(command[0], " --threads='", bad, "'"));
      std::vector<std::string> args = command;
      args.push_back("--threads=" + bad);
      const CliResult r = RunFuselage(args);
      EXPECT_EQ(r.code, kExitUsage) << r.err;
      EXPECT_EQ(r.err, absl::StrCat("fuselage: --threads is '", bad,
                                    "'; expected an integer in [1, 1024]\n"));
    }
  }
  for (const std::string bad : {"0", "-3", "1000001", "many"}) {
    SCOPED_TRACE(bad);
    const CliResult r = RunFuselage({"run", model, InputFlag(), "--repeat=" + bad});
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_EQ(r.err, absl::StrCat("fuselage: --repeat is '", bad,
                                  "'; expected an integer in [1, 1000000]\n"));
  }
}

// --engine picks the arithmetic (runtime/quantized_engine.h; its effect is asserted bit for
// bit by tests/runtime/quantized/qnnpack_engine_test and per layer against PyTorch's
// qnnpack engine by the conformance suite): the default is the engine the model records
// (a model quantized with the qnnpack config: qnnpack), and a name that is not an engine
// is a usage error naming the choices.
TEST(ThreadsCliTest, EngineDefaultsToTheRecordedOneAndRefusesOtherNames) {
  const std::string model = ConvModel();
  const std::string q = TempPath("q_engine.fsl");
  ASSERT_EQ(RunFuselage({"quantize", model, "--backend=qnnpack", "--samples=2",
                         "--input-shape=1,16,64,64", "-o", q})
                .code,
            kExitOk);
  EXPECT_EQ(RunOutput(q, "e_default.npy"), RunOutput(q, "e_qnnpack.npy", {"--engine=qnnpack"}));
  EXPECT_FALSE(RunOutput(q, "e_onednn.npy", {"--engine=onednn"}).empty());
  for (const std::string bad : {"fbgemm", "", "QNNPACK"}) {
    const CliResult r = RunFuselage({"run", q, InputFlag(), "--engine=" + bad});
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_EQ(r.err, absl::StrCat("fuselage: --engine is '", bad,
                                  "'; expected onednn, qnnpack or onnxruntime\n"));
  }
}

}  // namespace
}  // namespace fuselage
