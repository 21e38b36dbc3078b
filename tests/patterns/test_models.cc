#include "tests/patterns/test_models.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace fuselage::testing {

Node* Must(absl::StatusOr<Node*> node) {
  if (!node.ok()) {
    std::fprintf(stderr, "test graph construction failed: %s\n",
                 std::string(node.status().message()).c_str());
    std::abort();
  }
  return *node;
}

std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

Tensor RandomTensor(std::mt19937& rng, std::vector<int64_t> shape, float lo, float hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::FromFloats(std::move(shape), RandomFloats(rng, n, lo, hi));
}

std::unique_ptr<Module> Conv2dModule(std::mt19937& rng, int64_t in_channels,
                                     int64_t out_channels, int64_t kernel, bool bias) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", RandomTensor(rng, {out_channels, in_channels, kernel, kernel}));
  if (bias) conv->SetTensor("bias", RandomTensor(rng, {out_channels}));
  conv->SetAttribute("in_channels", Argument::Int(in_channels));
  conv->SetAttribute("out_channels", Argument::Int(out_channels));
  conv->SetAttribute("kernel_size", Argument::Ints({kernel, kernel}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({kernel / 2, kernel / 2}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

std::unique_ptr<Module> BatchNorm2dModule(std::mt19937& rng, int64_t channels, double eps) {
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", RandomTensor(rng, {channels}, 0.5f, 1.5f));
  bn->SetTensor("bias", RandomTensor(rng, {channels}, -0.5f, 0.5f));
  bn->SetTensor("running_mean", RandomTensor(rng, {channels}, -0.5f, 0.5f));
  bn->SetTensor("running_var", RandomTensor(rng, {channels}, 0.5f, 2.0f));
  bn->SetAttribute("num_features", Argument::Int(channels));
  bn->SetAttribute("eps", Argument::Float(eps));
  bn->SetAttribute("momentum", Argument::Float(0.1));
  bn->SetAttribute("affine", Argument::Bool(true));
  bn->SetAttribute("track_running_stats", Argument::Bool(true));
  return bn;
}

std::unique_ptr<Module> PlainModule(const char* type) { return std::make_unique<Module>(type); }

}  // namespace fuselage::testing
