// Fuzz target: custom backend configs through fusion and the rest of the flow (issue 22).
// The bytes are a config .textproto (backend_configs/config_loader.h); a config the loader
// accepts drives fuse → prepare → calibrate → convert-to-reference → lower-to-native on a
// fixed small model (tests/fuzz/pass_pipeline.h RunConfigPipeline), and after every pass:
// success ⇒ Verify() passes and the output saves and loads again (a written output must
// load: config strings over the model file's limits, fusions that nest too deep, fused
// modules of the wrong parts); failure ⇒ a non-empty error and the model unchanged.
//
// The model has something for most fusion patterns to match:
//
//   x [1, 4, 8, 8] ─ conv1 ─ bn1 ─ relu1 ─ conv2 ─ bn2 ─ add ─ relu2 ─ flatten ─ fc ─ relu3
//                                     └───────────────────┘
//
// Seeds: corpus/config_fusion_fuzz/, from backend_configs/examples and variations of it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/pass_pipeline.h"

namespace fuselage::fuzz {
namespace {

Tensor Random(std::mt19937& rng, std::vector<int64_t> shape, float lo, float hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return Tensor::FromFloats(std::move(shape), values);
}

std::unique_ptr<Module> Conv(std::mt19937& rng) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Random(rng, {4, 4, 3, 3}, -0.3f, 0.3f));
  conv->SetTensor("bias", Random(rng, {4}, -0.1f, 0.1f));
  conv->SetAttribute("in_channels", Argument::Int(4));
  conv->SetAttribute("out_channels", Argument::Int(4));
  conv->SetAttribute("kernel_size", Argument::Ints({3, 3}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({1, 1}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  return conv;
}

std::unique_ptr<Module> BatchNorm(std::mt19937& rng) {
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Random(rng, {4}, 0.5f, 2.0f));
  bn->SetTensor("bias", Random(rng, {4}, -0.5f, 0.5f));
  bn->SetTensor("running_mean", Random(rng, {4}, -0.5f, 0.5f));
  bn->SetTensor("running_var", Random(rng, {4}, 0.5f, 2.0f));
  bn->SetAttribute("num_features", Argument::Int(4));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  return bn;
}

std::unique_ptr<GraphModule> BuildModel() {
  std::mt19937 rng(11);
  auto gm = std::make_unique<GraphModule>();
  const auto set = [&](const char* path, std::unique_ptr<Module> module) {
    FUZZ_CHECK(gm->SetModule(path, std::move(module)).ok(), path);
  };
  set("conv1", Conv(rng));
  set("bn1", BatchNorm(rng));
  set("relu1", std::make_unique<Module>("nn.ReLU"));
  set("conv2", Conv(rng));
  set("bn2", BatchNorm(rng));
  set("relu2", std::make_unique<Module>("nn.ReLU"));
  auto fc = std::make_unique<Module>("nn.Linear");
  fc->SetTensor("weight", Random(rng, {8, 256}, -0.06f, 0.06f));
  fc->SetTensor("bias", Random(rng, {8}, -0.06f, 0.06f));
  fc->SetAttribute("in_features", Argument::Int(256));
  fc->SetAttribute("out_features", Argument::Int(8));
  set("fc", std::move(fc));
  set("relu3", std::make_unique<Module>("nn.ReLU"));
  Graph& g = gm->graph();
  const auto must = [](absl::StatusOr<Node*> node) {
    FUZZ_CHECK(node.ok(), node.status().ToString());
    return *node;
  };
  Node* x = must(g.AddPlaceholder("x"));
  FUZZ_CHECK(g.SetMeta(x, "shape", Argument::Ints({1, 4, 8, 8})).ok(), "shape meta");
  Node* c1 = must(g.AddCallModule("conv1", {x}));
  Node* b1 = must(g.AddCallModule("bn1", {c1}));
  Node* r1 = must(g.AddCallModule("relu1", {b1}));
  Node* c2 = must(g.AddCallModule("conv2", {r1}));
  Node* b2 = must(g.AddCallModule("bn2", {c2}));
  Node* add = must(g.AddCallFunction("operator.add", {b2, r1}));
  Node* r2 = must(g.AddCallModule("relu2", {add}));
  Node* flat = must(g.AddCallFunction("torch.flatten", {r2, Argument::Int(1)}));
  Node* f = must(g.AddCallModule("fc", {flat}));
  Node* r3 = must(g.AddCallModule("relu3", {f}));
  FUZZ_CHECK(g.SetOutput(r3).ok(), "output");
  const absl::Status verified = gm->Verify();
  FUZZ_CHECK(verified.ok(), verified.ToString());
  return gm;
}

const GraphModule& Model() {
  static const GraphModule* const model = BuildModel().release();
  return *model;
}

}  // namespace
}  // namespace fuselage::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselage::fuzz::RunConfigPipeline(
      absl::string_view(reinterpret_cast<const char*>(data), size), fuselage::fuzz::Model());
  return 0;
}
