// Graph-level benchmarks: building, verifying, saving and loading synthetic networks of
// 10^3 to 10^6 nodes, and the memory the in-memory graph takes per node.
//
//   bazel run -c opt //bench:graph_bench
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "bench/alloc_counter.h"
#include "bench/bench_common.h"
#include "graph/check.h"
#include "graph/serialization.h"

namespace fuselage {
namespace {

std::unique_ptr<GraphModule> Network(int64_t nodes, bool create_modules = true) {
  return SyntheticNetwork(nodes, create_modules);
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

// Removing every other module of a network with `nodes` nodes whose call_module nodes
// are gone (what the fusion pass does for the modules a fusion frees): one by one with
// RemoveModule (a graph scan and a parent pass per removal: quadratic), and in one batch
// with RemoveModules. items_per_second = modules removed per second.
std::unique_ptr<GraphModule> ModulesOnly(int64_t nodes, std::vector<std::string>* every_other) {
  auto gm = Network(nodes);
  std::vector<std::string> paths;
  for (const auto& entry : gm->root().children()) paths.push_back(entry.first);
  // A graph of the same size whose nodes call none of those modules.
  auto result = std::make_unique<GraphModule>();
  Node* x = *result->graph().AddPlaceholder("x");
  for (int64_t i = 1; i + 1 < nodes; ++i) {
    x = *result->graph().AddCallFunction("torch.relu", {x});
  }
  FUSELAGE_CHECK(result->graph().SetOutput(x).ok());
  for (size_t i = 0; i < paths.size(); ++i) {
    FUSELAGE_CHECK(result->SetModule(paths[i], gm->root().FindChild(paths[i])->Clone()).ok());
    if (i % 2 == 0) every_other->push_back(paths[i]);
  }
  return result;
}

void BM_RemoveModulesOneByOne(benchmark::State& state) {
  size_t removed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::string> paths;
    auto gm = ModulesOnly(state.range(0), &paths);
    state.ResumeTiming();
    for (const std::string& path : paths) FUSELAGE_CHECK(gm->RemoveModule(path).ok());
    state.PauseTiming();
    removed = paths.size();
    gm.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(removed));
}

void BM_RemoveModulesBatch(benchmark::State& state) {
  size_t removed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::string> paths;
    auto gm = ModulesOnly(state.range(0), &paths);
    state.ResumeTiming();
    FUSELAGE_CHECK(gm->RemoveModules(paths).ok());
    state.PauseTiming();
    removed = paths.size();
    gm.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(removed));
}

BENCHMARK(BM_RemoveModulesOneByOne)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RemoveModulesBatch)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildNetwork)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Verify)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SaveModel)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadModel)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemoryPerNode)->Arg(1000)->Arg(1000000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
