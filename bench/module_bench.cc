// Module-tree micro-benchmarks (issue 7): the per-node module-tree operations every pass
// performs — resolving a dotted path, installing a module, removing a batch of modules,
// cloning a conv-like module, interning a name — on trees shaped like the synthetic
// networks (up to 10^6 modules directly under the root). items_per_second = operations
// per CPU second.
//
//   bazel build //bench:module_bench && bazel-bin/bench/module_bench
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "graph/check.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/symbol.h"

namespace fuselage {
namespace {

// Root child names as the synthetic network names them ("Conv2d17", "BatchNorm2d18", ...).
std::vector<std::string> FlatNames(int64_t n) {
  static const char* const kKinds[] = {"Conv2d", "BatchNorm2d", "ReLU", "Linear", "MaxPool2d"};
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) names.push_back(absl::StrCat(kKinds[i % 5], i));
  return names;
}

// `names` in a fixed pseudo-random order, so lookups do not walk memory in insertion order
// (a pass looks modules up in graph order, which after a few edits is not that order).
std::vector<std::string> Shuffled(std::vector<std::string> names) {
  std::mt19937 rng(7);
  std::shuffle(names.begin(), names.end(), rng);
  return names;
}

std::unique_ptr<GraphModule> FlatTree(const std::vector<std::string>& names) {
  auto gm = std::make_unique<GraphModule>();
  const Symbol relu = Symbol::Intern("nn.ReLU");
  for (const std::string& name : names) {
    FUSELAGE_CHECK(gm->SetModule(name, std::make_unique<Module>(relu)).ok());
  }
  return gm;
}

// A conv-like module: weight, bias and the 8 attributes nn.Conv2d carries.
std::unique_ptr<Module> ConvLike() {
  auto m = std::make_unique<Module>("nn.Conv2d");
  m->SetTensor("weight", Tensor::FromFloats({2, 2, 1, 1}, {1, 2, 3, 4}));
  m->SetTensor("bias", Tensor::FromFloats({2}, {0.5f, -0.5f}));
  m->SetAttribute("in_channels", Argument::Int(2));
  m->SetAttribute("out_channels", Argument::Int(2));
  m->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  m->SetAttribute("stride", Argument::Ints({1, 1}));
  m->SetAttribute("padding", Argument::Ints({0, 0}));
  m->SetAttribute("dilation", Argument::Ints({1, 1}));
  m->SetAttribute("groups", Argument::Int(1));
  m->SetAttribute("padding_mode", Argument::String("zeros"));
  return m;
}

// FindModule of single-component paths in a root with n children.
void BM_FindModuleFlat(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  auto gm = FlatTree(names);
  const std::vector<std::string> order = Shuffled(names);
  size_t i = 0;
  for (auto _ : state) {
    Module* m = gm->FindModule(order[i]);
    benchmark::DoNotOptimize(m);
    if (++i == order.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// The same lookups through the path's interned symbol (what ModuleTypeOf resolves: a
// call_module node's target).
void BM_FindModuleFlatSymbol(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  auto gm = FlatTree(names);
  std::vector<Symbol> order;
  for (const std::string& name : Shuffled(names)) order.push_back(Symbol::Intern(name));
  size_t i = 0;
  for (auto _ : state) {
    Module* m = gm->FindModule(order[i].name());
    benchmark::DoNotOptimize(m);
    if (++i == order.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// GraphModule::ModuleOf of call_module nodes calling n root children, in a shuffled order,
// after ResolveModuleTypes filled the path table (what a pass does after the matcher).
void BM_ModuleOfFlat(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  auto gm = FlatTree(names);
  // A chain (each node uses the previous one: one user per node, as in a network).
  Node* previous = *gm->graph().AddPlaceholder("x");
  std::vector<const Node*> nodes;
  for (const std::string& name : Shuffled(names)) {
    previous = *gm->graph().AddCallModule(name, {previous});
    nodes.push_back(previous);
  }
  gm->ResolveModuleTypes();
  size_t i = 0;
  for (auto _ : state) {
    Module* m = gm->ModuleOf(nodes[i]);
    benchmark::DoNotOptimize(m);
    if (++i == nodes.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// FindModule of nested paths ("layer3.1.conv2", ResNet-style) next to a flat root of n
// other children.
void BM_FindModuleNested(benchmark::State& state) {
  auto gm = FlatTree(FlatNames(state.range(0)));
  std::vector<std::string> paths;
  for (int layer = 1; layer <= 4; ++layer) {
    for (int block = 0; block < 6; ++block) {
      for (const char* leaf : {"conv1", "bn1", "conv2", "bn2", "relu", "downsample.0"}) {
        paths.push_back(absl::StrCat("layer", layer, ".", block, ".", leaf));
        FUSELAGE_CHECK(gm->SetModule(paths.back(), std::make_unique<Module>("nn.ReLU")).ok());
      }
    }
  }
  paths = Shuffled(paths);
  size_t i = 0;
  for (auto _ : state) {
    Module* m = gm->FindModule(paths[i]);
    benchmark::DoNotOptimize(m);
    if (++i == paths.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// SetModule of n new root children, then of the same n paths again (replacing each).
// items = SetModule calls. Destroying the tree is not timed.
void BM_SetModule(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  const Symbol relu = Symbol::Intern("nn.ReLU");
  for (auto _ : state) {
    auto gm = std::make_unique<GraphModule>();
    for (const std::string& name : names) {
      FUSELAGE_CHECK(gm->SetModule(name, std::make_unique<Module>(relu)).ok());
    }
    for (const std::string& name : names) {
      FUSELAGE_CHECK(gm->SetModule(name, std::make_unique<Module>(relu)).ok());
    }
    state.PauseTiming();
    gm.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * 2 * state.range(0));
}

// RemoveModules of every 4th of n root children (what a fusion pass frees at the end),
// in a GraphModule whose graph calls none of them, the paths given as `Path`: std::string
// or Symbol (interned beforehand, as a pass has them: the targets of the nodes it erased).
// items = modules removed.
template <typename Path>
void RemoveEveryFourthChild(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  std::vector<Path> removed;
  for (size_t i = 0; i < names.size(); i += 4) {
    if constexpr (std::is_same_v<Path, Symbol>) {
      removed.push_back(Symbol::Intern(names[i]));
    } else {
      removed.push_back(names[i]);
    }
  }
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = FlatTree(names);
    state.ResumeTiming();
    FUSELAGE_CHECK(gm->RemoveModules(removed).ok());
    state.PauseTiming();
    gm.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(removed.size()));
}

void BM_RemoveModules(benchmark::State& state) { RemoveEveryFourthChild<std::string>(state); }
void BM_RemoveModulesSymbol(benchmark::State& state) { RemoveEveryFourthChild<Symbol>(state); }

// A batch-norm-like module: the 5 tensors and 5 attributes nn.BatchNorm2d carries (what a
// fusion pass frees once it folded the batch norms).
std::unique_ptr<Module> BatchNormLike() {
  auto m = std::make_unique<Module>("nn.BatchNorm2d");
  m->SetTensor("weight", Tensor::FromFloats({2}, {1, 2}));
  m->SetTensor("bias", Tensor::FromFloats({2}, {0.5f, -0.5f}));
  m->SetTensor("running_mean", Tensor::FromFloats({2}, {0, 0}));
  m->SetTensor("running_var", Tensor::FromFloats({2}, {1, 1}));
  m->SetTensor("num_batches_tracked", Tensor::FromInt64s({}, {0}));
  m->SetAttribute("num_features", Argument::Int(2));
  m->SetAttribute("eps", Argument::Float(1e-5));
  m->SetAttribute("momentum", Argument::Float(0.1));
  m->SetAttribute("affine", Argument::Bool(true));
  m->SetAttribute("track_running_stats", Argument::Bool(true));
  return m;
}

// RemoveModules as the fusion pass does it: every 4th of n batch-norm-like root children,
// by symbol, in a GraphModule whose graph calls each of the others (n * 3/4 call_module
// nodes: the no-caller check reads the graph's caller counts, it walks none of them) and
// whose path table is current (ResolveModuleTypes ran, as the pass's match did).
// items = modules removed.
void BM_RemoveModulesResolved(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(state.range(0));
  std::vector<Symbol> removed;
  for (size_t i = 0; i < names.size(); i += 4) removed.push_back(Symbol::Intern(names[i]));
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = std::make_unique<GraphModule>();
    for (const std::string& name : names) {
      FUSELAGE_CHECK(gm->SetModule(name, BatchNormLike()).ok());
    }
    Node* last = *gm->graph().AddPlaceholder("x");
    for (size_t i = 0; i < names.size(); ++i) {
      if (i % 4 != 0) last = *gm->graph().AddCallModule(names[i], {last});
    }
    FUSELAGE_CHECK(gm->graph().SetOutput(last).ok());
    gm->ResolveModuleTypes();
    state.ResumeTiming();
    FUSELAGE_CHECK(gm->RemoveModules(absl::MakeConstSpan(removed)).ok());
    state.PauseTiming();
    gm.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(removed.size()));
}

// Clone (and destroy) a conv-like module; and a fused module holding one (nni.ConvReLU2d:
// children "0" conv, "1" relu).
void BM_CloneConv(benchmark::State& state) {
  const std::unique_ptr<Module> conv = ConvLike();
  for (auto _ : state) {
    std::unique_ptr<Module> copy = conv->Clone();
    benchmark::DoNotOptimize(copy);
  }
  state.SetItemsProcessed(state.iterations());
}

// Clone a conv-like module and add the fields convert adds to make a reference module
// (weight_scale, weight_zero_point, weight_axis, weight_qscheme, weight_dtype); arg 1:
// through Clone(3, 2), which leaves room for them; arg 0: through Clone().
void BM_CloneConvAddFields(benchmark::State& state) {
  const std::unique_ptr<Module> conv = ConvLike();
  const bool with_room = state.range(0) != 0;
  const Tensor scale = Tensor::FromFloats({1}, {0.1f});
  const Tensor zero_point = Tensor::FromInt64s({1}, {0});
  for (auto _ : state) {
    std::unique_ptr<Module> copy = with_room ? conv->Clone(3, 2) : conv->Clone();
    copy->SetTensor("weight_scale", scale);
    copy->SetTensor("weight_zero_point", zero_point);
    copy->SetTensor("weight_axis", zero_point);
    copy->SetAttribute("weight_qscheme", Argument::Int(0));
    copy->SetAttribute("weight_dtype", Argument::Int(1));
    benchmark::DoNotOptimize(copy);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_CloneFused(benchmark::State& state) {
  Module fused("nni.ConvReLU2d");
  fused.SetChild("0", ConvLike());
  fused.SetChild("1", std::make_unique<Module>("nn.ReLU"));
  for (auto _ : state) {
    std::unique_ptr<Module> copy = fused.Clone();
    benchmark::DoNotOptimize(copy);
  }
  state.SetItemsProcessed(state.iterations());
}

// Clone (and destroy) an observer module as prepare does for every activation: a
// MinMaxObserver prototype (8 attributes, two names past 15 characters; 2 scalar
// tensors); arg 1: after ShareFieldsWithClones (the clone shares both lists), arg 0: not.
void BM_CloneObserver(benchmark::State& state) {
  auto prototype = std::make_unique<Module>("MinMaxObserver");
  prototype->SetAttribute("dtype", Argument::Int(13));
  prototype->SetAttribute("qscheme", Argument::String("torch.per_tensor_affine"));
  prototype->SetAttribute("quant_min", Argument::Int(0));
  prototype->SetAttribute("quant_max", Argument::Int(255));
  prototype->SetAttribute("reduce_range", Argument::Bool(false));
  prototype->SetAttribute("eps", Argument::Float(1.1920928955078125e-07));
  prototype->SetAttribute("ch_axis", Argument::Int(-1));
  prototype->SetAttribute("has_customized_qrange", Argument::Bool(false));
  prototype->SetTensor("min_val", Tensor::FromFloats({}, {1.0f}));
  prototype->SetTensor("max_val", Tensor::FromFloats({}, {-1.0f}));
  if (state.range(0) != 0) prototype->ShareFieldsWithClones();
  for (auto _ : state) {
    std::unique_ptr<Module> copy = prototype->Clone();
    benchmark::DoNotOptimize(copy);
  }
  state.SetItemsProcessed(state.iterations());
}

// Symbol::Intern / Symbol::Lookup of already-interned names (1000 of them, in turn).
void BM_SymbolIntern(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(1000);
  for (const std::string& name : names) Symbol::Intern(name);
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Symbol::Intern(names[i]));
    if (++i == names.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// Symbol::Intern of new names, as prepare interns every observer path
// ("observers_<run>.activation_post_process_<i>": each run's prefix is new, so every name
// is). Fixed iterations: every name stays in the table for the life of the process.
void BM_SymbolInternNew(benchmark::State& state) {
  static int run = 0;
  const std::string prefix = absl::StrCat("observers_", run++, ".activation_post_process_");
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(state.max_iterations));
  for (int64_t i = 0; i < state.max_iterations; ++i) names.push_back(absl::StrCat(prefix, i));
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(Symbol::Intern(names[i++]));
  state.SetItemsProcessed(state.iterations());
}

void BM_SymbolLookup(benchmark::State& state) {
  const std::vector<std::string> names = FlatNames(1000);
  for (const std::string& name : names) Symbol::Intern(name);
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Symbol::Lookup(names[i]));
    if (++i == names.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_FindModuleFlat)->Arg(1000)->Arg(100000)->Arg(1000000);
BENCHMARK(BM_FindModuleFlatSymbol)->Arg(1000)->Arg(100000)->Arg(1000000);
BENCHMARK(BM_ModuleOfFlat)->Arg(1000)->Arg(100000)->Arg(1000000);
BENCHMARK(BM_FindModuleNested)->Arg(1000)->Arg(100000);
BENCHMARK(BM_SetModule)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RemoveModules)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RemoveModulesSymbol)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RemoveModulesResolved)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CloneConv);
BENCHMARK(BM_CloneFused);
BENCHMARK(BM_CloneConvAddFields)->Arg(0)->Arg(1);
BENCHMARK(BM_CloneObserver)->Arg(0)->Arg(1);
BENCHMARK(BM_SymbolIntern)->Threads(1)->Threads(2);
BENCHMARK(BM_SymbolLookup)->Threads(1)->Threads(2);
BENCHMARK(BM_SymbolInternNew)->Iterations(200000);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
