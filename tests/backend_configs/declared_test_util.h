// What the declared-type tests (declared_type_test, declared_composition_test) share:
// seeded calibration samples for the residual example, one interpreter run, and the
// call_module nodes of a module type.
#ifndef FUSELAGE_TESTS_BACKEND_CONFIGS_DECLARED_TEST_UTIL_H_
#define FUSELAGE_TESTS_BACKEND_CONFIGS_DECLARED_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"
#include "quantize/calibrate.h"
#include "runtime/quantized_engine.h"

namespace fuselage {

// `count` samples of one [2, 4, 8, 8] tensor, uniform in [-1, 1), from mt19937(seed).
std::vector<CalibrationSample> RandomSamples(int count, uint32_t seed);

// The single tensor output of running `gm` on `x` with the built-in kernels (on `engine`
// when given); a failed run is a test failure and returns an empty tensor.
Tensor RunOne(const GraphModule& gm, const Tensor& x,
              std::optional<QuantizedEngine> engine = std::nullopt);

// The call_module nodes of `gm` whose module has type `type`, in graph order.
std::vector<const Node*> CallsOfType(const GraphModule& gm, absl::string_view type);

}  // namespace fuselage

#endif  // FUSELAGE_TESTS_BACKEND_CONFIGS_DECLARED_TEST_UTIL_H_
