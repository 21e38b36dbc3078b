// Built-in example models: small GraphModules built with the graph API, for the `demo`
// command, tests and first-time users. Each is what torch.fx.symbolic_trace makes of the
// corresponding nn.Module, with deterministic pseudo-random weights.
#ifndef FUSELAGE_TOOLS_EXAMPLES_H_
#define FUSELAGE_TOOLS_EXAMPLES_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"

namespace fuselage {

// The seed of the checked-in tools/examples/residual.textproto.
inline constexpr uint32_t kResidualExampleSeed = 0;

// The residual block of the mission (conv -> bn -> add -> relu, with the block's input
// as the add's second operand):
//
//   def forward(self, x):
//       identity = self.identity(x)   # nn.Identity
//       conv = self.conv(x)           # nn.Conv2d(4, 4, 3, padding=1), with bias
//       bn = self.bn(conv)            # nn.BatchNorm2d(4), non-trivial running stats
//       add = bn + identity
//       relu = self.relu(add)         # nn.ReLU
//       return relu
//
// The input is [N, 4, H, W]. Weights follow PyTorch's default init ranges (uniform in
// +-1/sqrt(fan_in) for the conv); the batch norm's affine parameters and running
// statistics are drawn so that folding it into the conv is not a no-op. The same seed
// always gives the same module, bit for bit, on every platform.
absl::StatusOr<std::unique_ptr<GraphModule>> BuildResidualExample(uint32_t seed);

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_EXAMPLES_H_
