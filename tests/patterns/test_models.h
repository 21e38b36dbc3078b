// Builders for the small models the patterns tests fuse: modules with the contents
// NAMING.md prescribes, filled with seeded random numbers (non-trivial batch-norm
// statistics), and a helper that unwraps node creation.
#ifndef FUSELAGE_TESTS_PATTERNS_TEST_MODELS_H_
#define FUSELAGE_TESTS_PATTERNS_TEST_MODELS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/node.h"
#include "graph/tensor.h"

namespace fuselage::testing {

// The node, or a test failure (CHECK) if creating it failed: test graphs are well formed.
Node* Must(absl::StatusOr<Node*> node);

// Uniform random floats in [lo, hi).
std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo, float hi);
Tensor RandomTensor(std::mt19937& rng, std::vector<int64_t> shape, float lo = -1,
                    float hi = 1);

// nn.Conv2d with a k x k kernel, stride 1, padding k / 2, random weight and bias.
std::unique_ptr<Module> Conv2dModule(std::mt19937& rng, int64_t in_channels,
                                     int64_t out_channels, int64_t kernel, bool bias = true);
// nn.BatchNorm2d with random gamma, beta, running mean and running var in [0.5, 2).
std::unique_ptr<Module> BatchNorm2dModule(std::mt19937& rng, int64_t channels,
                                          double eps = 1e-5);
// A module of `type` with no contents (nn.ReLU, nn.Identity, ...).
std::unique_ptr<Module> PlainModule(const char* type);

}  // namespace fuselage::testing

#endif  // FUSELAGE_TESTS_PATTERNS_TEST_MODELS_H_
