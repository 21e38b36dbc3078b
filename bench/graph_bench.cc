// Graph-level benchmarks: building, verifying, saving and loading synthetic networks of
// 10^3 to 10^6 nodes, and the memory the in-memory graph takes per node.
//
//   bazel run -c opt //bench:graph_bench
#include <memory>

#include "benchmark/benchmark.h"
#include "bench/alloc_counter.h"
#include "bench/synthetic_network.h"
#include "graph/check.h"
#include "graph/serialization.h"

namespace fuselage {
namespace {

std::unique_ptr<GraphModule> Network(int64_t nodes, bool create_modules = true) {
  SyntheticNetworkOptions options;
  options.target_nodes = nodes;
  options.create_modules = create_modules;
  auto gm = BuildSyntheticNetwork(options);
  FUSELAGE_CHECK(gm.ok());
  return *std::move(gm);
}

void SetNodesPerSecond(benchmark::State& state, int64_t nodes) {
  state.SetItemsProcessed(state.iterations() * nodes);
  state.counters["nodes"] = static_cast<double>(nodes);
}

void BM_BuildNetwork(benchmark::State& state) {
  int64_t nodes = 0;
  for (auto _ : state) {
    auto gm = Network(state.range(0));
    nodes = static_cast<int64_t>(gm->graph().size());
    benchmark::DoNotOptimize(gm);
  }
  SetNodesPerSecond(state, nodes);
}

void BM_Verify(benchmark::State& state) {
  auto gm = Network(state.range(0));
  for (auto _ : state) {
    absl::Status status = gm->Verify();
    FUSELAGE_CHECK(status.ok());
  }
  SetNodesPerSecond(state, static_cast<int64_t>(gm->graph().size()));
}

void BM_SaveModel(benchmark::State& state) {
  auto gm = Network(state.range(0));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string file = SerializeModel(*gm);
    bytes = file.size();
    benchmark::DoNotOptimize(file);
  }
  SetNodesPerSecond(state, static_cast<int64_t>(gm->graph().size()));
  state.counters["file_bytes"] = static_cast<double>(bytes);
}

void BM_LoadModel(benchmark::State& state) {
  auto gm = Network(state.range(0));
  const std::string file = SerializeModel(*gm);
  for (auto _ : state) {
    auto loaded = ParseModel(file);
    FUSELAGE_CHECK(loaded.ok());
    benchmark::DoNotOptimize(loaded);
  }
  SetNodesPerSecond(state, static_cast<int64_t>(gm->graph().size()));
}

// Heap bytes per node: of the Graph alone (nodes, args, use-lists, name index), and of the
// whole GraphModule including the module tree (tensor data shared, so nearly excluded).
void BM_MemoryPerNode(benchmark::State& state) {
  double graph_bytes = 0, module_bytes = 0;
  int64_t nodes = 0;
  Network(100);  // One-time allocations (symbol table chunks, statics) are not per node.
  for (auto _ : state) {
    const int64_t before = LiveHeapBytes();
    auto graph_only = Network(state.range(0), /*create_modules=*/false);
    const int64_t after_graph = LiveHeapBytes();
    nodes = static_cast<int64_t>(graph_only->graph().size());
    graph_only.reset();
    const int64_t before_full = LiveHeapBytes();
    auto full = Network(state.range(0));
    const int64_t after_full = LiveHeapBytes();
    graph_bytes = static_cast<double>(after_graph - before) / nodes;
    module_bytes = static_cast<double>(after_full - before_full) / nodes;
  }
  state.counters["graph_bytes_per_node"] = graph_bytes;
  state.counters["graph_module_bytes_per_node"] = module_bytes;
  state.counters["nodes"] = static_cast<double>(nodes);
}

BENCHMARK(BM_BuildNetwork)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Verify)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SaveModel)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadModel)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemoryPerNode)->Arg(1000)->Arg(1000000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
