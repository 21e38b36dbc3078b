// Graph-level benchmarks: building, verifying, saving and loading synthetic networks of
// 10^3 to 10^6 nodes, and the memory the in-memory graph takes per node.
//
//   bazel run -c opt //bench:graph_bench
#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
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

// ---- Graph mutations, one kind at a time (issue 7) -------------------------------------
// Each iteration makes `n` mutations of one kind on a graph of about n nodes (built with
// timing paused when the mutations consume it); items_per_second = mutations per second.
// Run under callgrind with --toggle-collect='fuselage::Graph::<Method>*' for instructions
// per mutation.

// x -> relu -> relu -> ... (n nodes) -> output: the graph the passes below rewrite.
std::unique_ptr<Graph> ReluChain(int64_t n, std::vector<Node*>* nodes) {
  auto g = std::make_unique<Graph>();
  Node* x = *g->AddPlaceholder("x");
  nodes->push_back(x);
  const Symbol relu = Symbol::Intern("torch.relu");
  for (int64_t i = 1; i + 1 < n; ++i) {
    x = *g->Append({OpKind::kCallFunction, relu, {x}, {}, ""});
    nodes->push_back(x);
  }
  FUSELAGE_CHECK(g->SetOutput(x).ok());
  return g;
}

// Inserts one node after every node of a chain, as convert inserts quantize and dequantize
// nodes and prepare inserts observers. range(1) picks the name:
//   0: default name of call_function torch.quantize_per_tensor ("quantize_per_tensor",
//      "quantize_per_tensor_1", ...: the same hint again and again),
//   1: default name of call_method dequantize (short: fits std::string's inline buffer),
//   2: an explicit free name ("activation_post_process_<i>", as prepare names observers),
//      given as a std::string (copied into the spec, as before NodeName),
//   3: the same names given as views (NodeName keeps a view: no copy).
void BM_InsertAfter(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int naming = static_cast<int>(state.range(1));
  const Symbol target = Symbol::Intern(naming == 1 ? "dequantize" : "torch.quantize_per_tensor");
  const OpKind op = naming == 1 ? OpKind::kCallMethod : OpKind::kCallFunction;
  std::vector<std::string> names;
  if (naming >= 2) {
    for (int64_t i = 0; i < n; ++i) names.push_back(absl::StrCat("activation_post_process_", i));
  }
  int64_t inserted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<Node*> nodes;
    auto g = ReluChain(n, &nodes);
    state.ResumeTiming();
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      NodeSpec spec{op, target, {nodes[i]}, {}, ""};
      if (naming == 2) spec.name = names[i];
      if (naming == 3) spec.name = absl::string_view(names[i]);
      benchmark::DoNotOptimize(*g->InsertAfter(nodes[i], std::move(spec)));
    }
    inserted += static_cast<int64_t>(nodes.size()) - 1;
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(inserted);
}

// Switches arg 1 of every add of a chain between two nodes that read the previous add, as
// prepare points an op's input at the observer it inserted:
//   prev -> {relu, neg} ; add(prev, relu)  <->  add(prev, neg).
// (Every input has one or two users: SetArg costs O(users) of the inputs it touches.)
void BM_SetArg(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Symbol relu = Symbol::Intern("torch.relu");
  const Symbol neg = Symbol::Intern("operator.neg");
  const Symbol add = Symbol::Intern("operator.add");
  Graph g;
  struct Flip { Node* add; Node* a; Node* b; };
  std::vector<Flip> flips;
  Node* prev = *g.AddPlaceholder("x");
  for (int64_t i = 0; i < n / 3; ++i) {
    Node* a = *g.Append({OpKind::kCallFunction, relu, {prev}, {}, ""});
    Node* b = *g.Append({OpKind::kCallFunction, neg, {prev}, {}, ""});
    prev = *g.Append({OpKind::kCallFunction, add, {prev, a}, {}, ""});
    flips.push_back({prev, a, b});
  }
  FUSELAGE_CHECK(g.SetOutput(prev).ok());
  int64_t done = 0;
  bool to_b = true;
  for (auto _ : state) {
    for (const Flip& f : flips) FUSELAGE_CHECK(g.SetArg(f.add, 1, to_b ? f.b : f.a).ok());
    to_b = !to_b;
    done += static_cast<int64_t>(flips.size());
  }
  state.SetItemsProcessed(done);
}

// Rewires the single user of each relu to its twin, as convert rewires an observer's
// users to the dequantize that replaces it: prev -> {relu, neg} ; add(relu, relu).
void BM_ReplaceAllUsesWith(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Symbol relu = Symbol::Intern("torch.relu");
  const Symbol neg = Symbol::Intern("operator.neg");
  const Symbol add = Symbol::Intern("operator.add");
  int64_t replaced = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Graph g;
    std::vector<std::pair<Node*, Node*>> pairs;
    Node* prev = *g.AddPlaceholder("x");
    for (int64_t i = 0; i < n / 3; ++i) {
      Node* r = *g.Append({OpKind::kCallFunction, relu, {prev}, {}, ""});
      Node* t = *g.Append({OpKind::kCallFunction, neg, {prev}, {}, ""});
      prev = *g.Append({OpKind::kCallFunction, add, {r, r}, {}, ""});
      pairs.emplace_back(r, t);
    }
    FUSELAGE_CHECK(g.SetOutput(prev).ok());
    state.ResumeTiming();
    for (const auto& [old_node, twin] : pairs) {
      FUSELAGE_CHECK(*g.ReplaceAllUsesWith(old_node, twin) == 1);
    }
    replaced += static_cast<int64_t>(pairs.size());
  }
  state.SetItemsProcessed(replaced);
}

// The two ways to erase a batch of dead nodes, out of line so that a profile can collect
// exactly them (callgrind --toggle-collect='*EraseDeadOneByOne*' / '*EraseDeadBatch*').
ABSL_ATTRIBUTE_NOINLINE void EraseDeadOneByOne(Graph& g, const std::vector<Node*>& dead) {
  for (Node* d : dead) FUSELAGE_CHECK(g.Erase(d).ok());
}
ABSL_ATTRIBUTE_NOINLINE void EraseDeadBatch(Graph& g, const std::vector<Node*>& dead) {
  FUSELAGE_CHECK(g.EraseAll(dead).ok());
}

// Erases, front to back, a dead relu hanging off every node of a chain (lowering erases
// the dequantize and quantize nodes it absorbed): one Erase each, or (`batch`) one
// EraseAll of them all. items_per_second = nodes erased per second.
void EraseDead(benchmark::State& state, bool batch) {
  const int64_t n = state.range(0);
  const Symbol relu = Symbol::Intern("torch.relu");
  int64_t erased = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<Node*> chain;
    auto g = ReluChain(n / 2, &chain);
    std::vector<Node*> dead;
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      dead.push_back(*g->InsertAfter(chain[i], {OpKind::kCallFunction, relu, {chain[i]}, {}, ""}));
    }
    state.ResumeTiming();
    if (batch) {
      EraseDeadBatch(*g, dead);
    } else {
      EraseDeadOneByOne(*g, dead);
    }
    erased += static_cast<int64_t>(dead.size());
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(erased);
}
void BM_Erase(benchmark::State& state) { EraseDead(state, /*batch=*/false); }
void BM_EraseAll(benchmark::State& state) { EraseDead(state, /*batch=*/true); }

// Sets meta "pattern" (replacing it after the first round) and "output_qparams" on every
// node: what fusion and lowering annotate.
void BM_SetMeta(benchmark::State& state) {
  std::vector<Node*> nodes;
  auto g = ReluChain(state.range(0), &nodes);
  const Argument pattern = Argument::String("conv_bn_relu");
  const Argument qparams =
      Argument::Tuple({Argument::Float(0.5), Argument::Int(3), Argument::Dtype(DType::kQUInt8)});
  int64_t set = 0;
  for (auto _ : state) {
    for (Node* node : nodes) {
      FUSELAGE_CHECK(g->SetMeta(node, "pattern", pattern).ok());
      FUSELAGE_CHECK(g->SetMeta(node, "output_qparams", qparams).ok());
    }
    set += 2 * static_cast<int64_t>(nodes.size());
  }
  state.SetItemsProcessed(set);
}

// Renames every node to a free name and back (fusion renames each fused node to the name
// of the root it replaced).
void BM_Rename(benchmark::State& state) {
  std::vector<Node*> nodes;
  auto g = ReluChain(state.range(0), &nodes);
  std::vector<std::string> original, fused;
  for (Node* node : nodes) {
    original.push_back(node->name());
    fused.push_back(absl::StrCat("fused_", node->name()));
  }
  int64_t renamed = 0;
  bool to_fused = true;
  for (auto _ : state) {
    const std::vector<std::string>& names = to_fused ? fused : original;
    for (size_t i = 0; i < nodes.size(); ++i) {
      benchmark::DoNotOptimize(g->Rename(nodes[i], names[i]));
    }
    to_fused = !to_fused;
    renamed += static_cast<int64_t>(nodes.size());
  }
  state.SetItemsProcessed(renamed);
}

// What fusion does per fused node, for a chain x -> conv_i -> relu_i -> ...: a node
// inserted before relu_i under a temporary name takes relu_i's users, relu_i is erased and
// conv_i erased with its name going to the new node. range(1): 0 = Erase(conv_i) then
// Rename(new, <conv_i's name>) with a SetMeta("pattern"); 1 = EraseAndPassName and the
// meta given at creation (a NodeMeta shared by all of them); 2 = as 1, but the new node is
// inserted unnamed (InsertBeforeUnnamed) instead of under the temporary name.
void BM_FuseStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool pass_name = state.range(1) >= 1;
  const bool unnamed = state.range(1) == 2;
  const Symbol conv = Symbol::Intern("torch.nn.functional.conv2d");
  const Symbol relu = Symbol::Intern("torch.relu");
  const Symbol fused_target = Symbol::Intern("layer1.0.conv_relu");
  const Symbol pattern_key = Symbol::Intern("pattern");
  const Argument pattern = Argument::String("conv_relu");
  const NodeMeta shared = *NodeMeta::Make({{pattern_key, pattern}});
  int64_t fused = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto g = std::make_unique<Graph>();
    Node* x = *g->AddPlaceholder("x");
    struct Pair { Node* conv; Node* relu; };
    std::vector<Pair> pairs;
    for (int64_t i = 0; i < n / 2; ++i) {
      // Names of fusion_bench's size: "layer1_0_conv1_<i>" (past std::string's inline 15).
      Node* c = *g->Append({OpKind::kCallFunction, conv, {x}, {}, "layer1_0_conv1_block"});
      x = *g->Append({OpKind::kCallFunction, relu, {c}, {}, ""});
      pairs.push_back({c, x});
    }
    FUSELAGE_CHECK(g->SetOutput(x).ok());
    state.ResumeTiming();
    for (const Pair& p : pairs) {
      NodeSpec spec{OpKind::kCallModule, fused_target, {p.conv->arg(0)}, {}, "_fusing"};
      if (pass_name) spec.meta = shared;
      if (unnamed) spec.name = "";
      Node* f = unnamed ? *g->InsertBeforeUnnamed(p.relu, std::move(spec))
                        : *g->InsertBefore(p.relu, std::move(spec));
      FUSELAGE_CHECK(g->ReplaceAllUsesWith(p.relu, f).ok());
      FUSELAGE_CHECK(g->Erase(p.relu).ok());
      if (pass_name) {
        FUSELAGE_CHECK(g->EraseAndPassName(p.conv, f).ok());
      } else {
        const std::string root_name = p.conv->name();
        FUSELAGE_CHECK(g->Erase(p.conv).ok());
        g->Rename(f, root_name);
        FUSELAGE_CHECK(g->SetMeta(f, pattern_key, pattern).ok());
      }
    }
    fused += static_cast<int64_t>(pairs.size());
    state.PauseTiming();
    FUSELAGE_CHECK(g->Verify().ok());
    g.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(fused);
}

BENCHMARK(BM_FuseStep)
    ->ArgsProduct({{10000, 100000}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InsertAfter)
    ->ArgsProduct({{1000, 100000, 1000000}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SetArg)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReplaceAllUsesWith)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Erase)->Arg(1000)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EraseAll)->Arg(1000)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SetMeta)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Rename)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
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
