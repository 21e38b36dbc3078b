#include "tests/backend_configs/declared_test_util.h"

#include <random>

#include "gtest/gtest.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {

std::vector<CalibrationSample> RandomSamples(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, {2, 4, 8, 8});
    for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<float>()[k] = uniform(rng);
    samples.push_back({t});
  }
  return samples;
}

Tensor RunOne(const GraphModule& gm, const Tensor& x, std::optional<QuantizedEngine> engine) {
  auto kernels = BuiltinKernels();
  EXPECT_TRUE(kernels.ok()) << kernels.status();
  if (!kernels.ok()) return Tensor();
  RunOptions options;
  options.engine = engine;
  absl::StatusOr<std::vector<Value>> out = Run(gm, {Value(x)}, **kernels, options);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->size() != 1 || !(*out)[0].is_tensor()) return Tensor();
  return (*out)[0].as_tensor();
}

std::vector<const Node*> CallsOfType(const GraphModule& gm, absl::string_view type) {
  std::vector<const Node*> found;
  for (const Node* n : gm.graph().Nodes()) {
    if (n->op() != OpKind::kCallModule) continue;
    const Module* m = gm.FindModule(n->target().name());
    if (m != nullptr && m->type().name() == type) found.push_back(n);
  }
  return found;
}

}  // namespace fuselage
