#include "tools/examples.h"

#include <cmath>
#include <random>
#include <vector>

#include "graph/module.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"

namespace fuselage {
namespace {

// Uniform floats in [lo, hi) from mt19937's raw output. std::uniform_real_distribution
// is left out on purpose: its algorithm differs between standard libraries, and the
// example must be identical everywhere.
class UniformSource {
 public:
  explicit UniformSource(uint32_t seed) : engine_(seed) {}
  std::vector<float> Draw(size_t count, float lo, float hi) {
    std::vector<float> values(count);
    for (float& v : values) {
      const float unit = static_cast<float>(engine_() >> 8) * (1.0f / 16777216.0f);
      v = lo + (hi - lo) * unit;
    }
    return values;
  }

 private:
  std::mt19937 engine_;
};

constexpr int64_t kChannels = 4;
constexpr int64_t kKernel = 3;

std::unique_ptr<Module> MakeConv(UniformSource& random) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  const int64_t fan_in = kChannels * kKernel * kKernel;
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  conv->SetTensor("weight", Tensor::FromFloats({kChannels, kChannels, kKernel, kKernel},
                                               random.Draw(kChannels * fan_in, -bound, bound)));
  conv->SetTensor("bias", Tensor::FromFloats({kChannels}, random.Draw(kChannels, -bound, bound)));
  conv->SetAttribute("in_channels", Argument::Int(kChannels));
  conv->SetAttribute("out_channels", Argument::Int(kChannels));
  conv->SetAttribute("kernel_size", Argument::Ints({kKernel, kKernel}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({1, 1}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

std::unique_ptr<Module> MakeBatchNorm(UniformSource& random) {
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Tensor::FromFloats({kChannels}, random.Draw(kChannels, 0.5f, 1.5f)));
  bn->SetTensor("bias", Tensor::FromFloats({kChannels}, random.Draw(kChannels, -0.5f, 0.5f)));
  bn->SetTensor("running_mean",
                Tensor::FromFloats({kChannels}, random.Draw(kChannels, -0.5f, 0.5f)));
  bn->SetTensor("running_var",
                Tensor::FromFloats({kChannels}, random.Draw(kChannels, 0.5f, 2.0f)));
  bn->SetAttribute("num_features", Argument::Int(kChannels));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  bn->SetAttribute("momentum", Argument::Float(0.1));
  bn->SetAttribute("affine", Argument::Bool(true));
  bn->SetAttribute("track_running_stats", Argument::Bool(true));
  return bn;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphModule>> BuildResidualExample(uint32_t seed) {
  UniformSource random(seed);
  auto gm = std::make_unique<GraphModule>();
  RETURN_IF_ERROR(gm->SetModule("identity", std::make_unique<Module>("nn.Identity")));
  RETURN_IF_ERROR(gm->SetModule("conv", MakeConv(random)));
  RETURN_IF_ERROR(gm->SetModule("bn", MakeBatchNorm(random)));
  RETURN_IF_ERROR(gm->SetModule("relu", std::make_unique<Module>("nn.ReLU")));

  Graph& g = gm->graph();
  ASSIGN_OR_RETURN(Node * x, g.AddPlaceholder("x"));
  // The input shape travels with the model so `quantize` needs no --input-shape for it.
  RETURN_IF_ERROR(g.SetMeta(x, "shape", Argument::Ints({1, kChannels, 8, 8})));
  ASSIGN_OR_RETURN(Node * identity, g.AddCallModule("identity", {x}));
  ASSIGN_OR_RETURN(Node * conv, g.AddCallModule("conv", {x}));
  ASSIGN_OR_RETURN(Node * bn, g.AddCallModule("bn", {conv}));
  ASSIGN_OR_RETURN(Node * add, g.AddCallFunction("operator.add", {bn, identity}));
  ASSIGN_OR_RETURN(Node * relu, g.AddCallModule("relu", {add}));
  RETURN_IF_ERROR(g.SetOutput(relu).status());
  RETURN_IF_ERROR(gm->Verify());
  return gm;
}

}  // namespace fuselage
