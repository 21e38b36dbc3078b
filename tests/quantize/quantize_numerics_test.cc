// Numerics of the whole flow on the residual example (tools/examples/residual.textproto)
// with the example conv-bn-add-relu config and qnnpack's default qconfigs, calibrated and
// tested on the inputs tests/quantize/gen_pytorch_residual_error.py wrote:
//  - the lowered graph (native nniq.ConvAddReLU2d, integer arithmetic) against the
//    reference graph (float ops between quantize / dequantize): at least 99.9% of the
//    output elements equal, none more than one quantization step apart;
//  - the lowered graph against the float model: no worse than PyTorch 2's own
//    quantized model of the same float model on the same inputs
//    (testdata/pytorch_residual_error.txt, written by that script).
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/config_loader.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"

namespace fuselage {
namespace {

constexpr char kTestData[] = "tests/quantize/testdata/";

// "key value" lines of the golden file; '#' lines are comments.
std::map<std::string, double> ReadFigures(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::map<std::string, double> figures;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    double value = 0;
    fields >> key >> value;
    figures[key] = value;
  }
  return figures;
}

Tensor Output(const GraphModule& gm, const Tensor& input, const KernelRegistry& kernels) {
  auto outputs = Run(gm, {Value(input)}, kernels);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->size(), 1u);
  const Tensor& y = (*outputs)[0].as_tensor();
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  return y;
}

TEST(QuantizeNumericsTest, ResidualLoweredMatchesReferenceAndPyTorchError) {
  auto model = LoadModel("tools/examples/residual.textproto");
  ASSERT_TRUE(model.ok()) << model.status();
  GraphModule& gm = **model;
  const std::unique_ptr<GraphModule> float_model = gm.Clone();
  auto config = LoadBackendConfigFile("backend_configs/examples/conv_bn_add_relu.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> calibration;
  for (int i = 0; i < 8; ++i) {
    calibration.push_back(absl::StrCat(kTestData, "residual_calibration_", i, ".npy"));
  }
  auto samples = NpyCalibrationSamples(gm, calibration);
  ASSERT_TRUE(samples.ok()) << samples.status();

  std::unique_ptr<GraphModule> reference;
  QuantizeFlowOptions options;
  options.on_stage = [&](absl::string_view stage, const GraphModule& g) {
    if (stage == "convert") reference = g.Clone();
    return absl::OkStatus();
  };
  auto report = RunQuantizeFlow(gm, *config, *DefaultQConfigMapping("qnnpack"), *samples,
                                options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_NE(reference, nullptr);

  // The output's quantization step: the parameters of the node the final dequantize reads.
  const Node* out_dq = gm.graph().output()->arg(0).as_node();
  ASSERT_EQ(out_dq->target().name(), "dequantize");
  const auto out_qparams = KnownOutputQParams(gm, out_dq->arg(0).as_node());
  ASSERT_TRUE(out_qparams.has_value());
  const double step = out_qparams->scale;

  auto input = ReadNpy(absl::StrCat(kTestData, "residual_test_input.npy"));
  ASSERT_TRUE(input.ok()) << input.status();
  auto kernels = *BuiltinKernels();
  const Tensor lowered = Output(gm, *input, *kernels);
  const Tensor ref = Output(*reference, *input, *kernels);
  const Tensor expected = Output(*float_model, *input, *kernels);
  ASSERT_EQ(lowered.shape(), ref.shape());
  ASSERT_EQ(lowered.shape(), expected.shape());

  int64_t equal = 0;
  double max_steps_apart = 0;
  double max_error = 0;
  double sum_error = 0;
  for (int64_t i = 0; i < lowered.numel(); ++i) {
    const double a = lowered.data<float>()[i];
    const double b = ref.data<float>()[i];
    equal += a == b;
    max_steps_apart = std::max(max_steps_apart, std::fabs(a - b) / step);
    const double e = std::fabs(a - expected.data<float>()[i]);
    max_error = std::max(max_error, e);
    sum_error += e;
  }
  const double n = static_cast<double>(lowered.numel());
  EXPECT_GE(static_cast<double>(equal) / n, 0.999)
      << equal << " of " << lowered.numel() << " equal";
  EXPECT_LE(max_steps_apart, 1.0 + 1e-6);

  const std::map<std::string, double> pytorch =
      ReadFigures(absl::StrCat(kTestData, "pytorch_residual_error.txt"));
  ASSERT_EQ(pytorch.count("max_abs_error"), 1u);
  ASSERT_EQ(pytorch.count("mean_abs_error"), 1u);
  // Both models clip the largest test outputs to the calibrated output range, so the two
  // maxima agree to float precision: the float outputs (up to max_abs_output) themselves
  // differ from PyTorch's by the last bit or two (their convs sum in a different order),
  // and the error moves with them, so allow two float steps at the output's magnitude.
  ASSERT_EQ(pytorch.count("max_abs_output"), 1u);
  EXPECT_LE(max_error, pytorch.at("max_abs_error") + 2 * std::numeric_limits<float>::epsilon() *
                                                         pytorch.at("max_abs_output"));
  EXPECT_LE(sum_error / n, pytorch.at("mean_abs_error"));
  std::printf("lowered vs reference: %lld of %lld equal, max %.3g steps apart (step %.6g)\n"
              "lowered vs float: max |error| %.6g (PyTorch %.6g), mean %.6g (PyTorch %.6g)\n",
              static_cast<long long>(equal), static_cast<long long>(lowered.numel()),
              max_steps_apart, step, max_error, pytorch.at("max_abs_error"), sum_error / n,
              pytorch.at("mean_abs_error"));
}

}  // namespace
}  // namespace fuselage
