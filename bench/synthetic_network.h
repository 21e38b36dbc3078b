// Deterministic synthetic networks for benchmarks: repeated residual blocks of the shapes
// a fusion/quantization engine meets in practice, at any size.
//
// Block kinds, chosen per block from the seed:
//   conv-bn-relu         conv → bn → relu                        (fuses with conv-bn-relu)
//   residual             conv → bn → add(·, block input) → relu  (conv-bn-add-relu)
//   linear-relu          linear → F.relu                          (linear-relu)
//   pool                 max_pool(k=1)                            (no fusion)
//   shared-bn branch     conv → bn → {relu, mul(·, 2)} → add      (bn has two users: conv-bn
//                                                                  fuses, conv-bn-relu must not)
// Every tensor of one shape shares one copy-on-write buffer, so a million-node network
// costs little tensor memory and the graph itself dominates.
#ifndef FUSELAGE_BENCH_SYNTHETIC_NETWORK_H_
#define FUSELAGE_BENCH_SYNTHETIC_NETWORK_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"

namespace fuselage {

struct SyntheticNetworkOptions {
  int64_t target_nodes = 1000;  // the network has at least this many nodes, at most +6
  uint32_t seed = 1;
  int64_t channels = 8;
  // false: call_module nodes name modules that are never created. The graph alone is then
  // what is allocated (for bytes-per-node measurements); such a network fails Verify().
  bool create_modules = true;
};

absl::StatusOr<std::unique_ptr<GraphModule>> BuildSyntheticNetwork(
    const SyntheticNetworkOptions& options);

}  // namespace fuselage

#endif  // FUSELAGE_BENCH_SYNTHETIC_NETWORK_H_
