// Writes a synthetic network (synthetic_network.h) as a model file, so PyTorch and
// fuselage can be timed on identical graphs (bench/compare_pytorch.py).
//
//   write_synthetic NODES OUT [SEED]     (OUT: .fsl binary, .textproto text)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/synthetic_network.h"
#include "graph/serialization.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: write_synthetic NODES OUT [SEED]\n");
    return 2;
  }
  fuselage::SyntheticNetworkOptions options;
  options.target_nodes = std::atoll(argv[1]);
  if (argc == 4) options.seed = static_cast<uint32_t>(std::atoll(argv[3]));
  auto gm = fuselage::BuildSyntheticNetwork(options);
  if (!gm.ok()) {
    std::fprintf(stderr, "write_synthetic: %s\n", std::string(gm.status().message()).c_str());
    return 1;
  }
  absl::Status saved = fuselage::SaveModel(**gm, argv[2]);
  if (!saved.ok()) {
    std::fprintf(stderr, "write_synthetic: %s\n", std::string(saved.message()).c_str());
    return 1;
  }
  std::printf("%s: %zu nodes\n", argv[2], (*gm)->graph().size());
  return 0;
}
