// Matcher-only benchmarks (PatternMatcher::FindMatches, read-only): the fusion patterns of
// a built-in backend config, and of native plus 100 generated patterns, over synthetic
// networks of 10^3 to 10^6 nodes. items_per_second = graph nodes scanned per second.
// PyTorch's counterpart is fuse_fx's `_find_matches` (bench/compare_pytorch.py).
//
// The matcher reads each call_module node's module type from GraphModule's cache on the
// node (GraphModule::ModuleTypeOf). BM_Match* time scans of a graph whose types are
// cached (any scan after the first, until the model is edited). The first scan after an
// edit re-resolves them (graph/module_binding.h): BM_MatchNativeCold after an edit of the
// module tree, which walks every module path by its text (what every scan cost before the
// cache); BM_MatchNativeAfterNodeEdit after a call_module node was created or retargeted,
// which reads each node's module from the path -> module table the tree edit did not void.
//
//   bazel run -c opt //bench:matcher_bench
#include "bench/bench_common.h"
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "graph/module_binding.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"

namespace fuselage {
namespace {

// What happens to the model before each timed scan.
enum class EditBeforeScan { kNone, kModuleTree, kNode };

void RunMatcher(benchmark::State& state, const PatternMatcher& matcher,
                EditBeforeScan edit = EditBeforeScan::kNone) {
  auto gm = SyntheticNetwork(state.range(0));
  gm->ResolveModuleTypes();
  size_t matches = 0;
  for (auto _ : state) {
    if (edit != EditBeforeScan::kNone) {
      state.PauseTiming();
      // What an edit of the module tree / of a call_module node signals.
      if (edit == EditBeforeScan::kModuleTree) {
        gm->graph().module_bindings().InvalidateTree();
      } else {
        gm->graph().module_bindings().InvalidateBindings();
      }
      state.ResumeTiming();
    }
    std::vector<PatternMatch> found = matcher.FindMatches(*gm);
    matches = found.size();
    benchmark::DoNotOptimize(found);
  }
  SetNodesPerSecond(state, static_cast<int64_t>(gm->graph().size()));
  state.counters["matches"] = static_cast<double>(matches);
  state.counters["patterns"] = static_cast<double>(matcher.rules().size());
}

void BM_MatchNative(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("native"));
}

void BM_MatchNativeCold(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("native"), EditBeforeScan::kModuleTree);
}

void BM_MatchNativeAfterNodeEdit(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("native"), EditBeforeScan::kNode);
}

void BM_MatchOnednn(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("onednn"));
}

// The native rules plus issue 21's constructs: predicates, alternatives, an optional
// position, named captures used twice (DAG patterns), a constant leaf and a relation.
const PatternMatcher& NativePlusPatternLanguageV2Matcher() {
  static const PatternMatcher* const matcher = [] {
    std::vector<FusionRule> rules = BuiltinFusionMatcher("native").rules();
    const std::pair<const char*, const char*> extra[] = {
        {"v2_depthwise", "(ReLU | ReLU6, (BatchNorm2d, Conv2d[groups == in_channels, groups > 1]))"},
        {"v2_conv_bn_act", "(ReLU | ReLU6 | Hardswish, (BatchNorm2d?, Conv2d[bias]))"},
        {"v2_silu", "(mul, $x, (sigmoid | Sigmoid, $x))"},
        {"v2_hardswish",
         "(operator.truediv | method:div, (mul, $x, (F.relu6 | ReLU6, (add, $x, 3))), 6)"},
        {"v2_conv_residual", "(add[users == 1], Conv2d@c, (ReLU, $c))"},
        {"v2_same_shape", "(add[shape == @c.shape], (BatchNorm2d, Conv2d@c), MatchAllNode)"},
    };
    for (const auto& [name, pattern] : extra) {
      absl::StatusOr<FusionRule> rule = MakeFusionRule(
          name, pattern, PatternFormat::kComplex, "nn.SiLU", FuserKind::kWrapInSequence);
      if (!rule.ok()) {
        std::fprintf(stderr, "%s\n", rule.status().ToString().c_str());
        std::abort();
      }
      rules.push_back(*std::move(rule));
    }
    absl::StatusOr<PatternMatcher> built = PatternMatcher::Create(std::move(rules));
    if (!built.ok()) {
      std::fprintf(stderr, "%s\n", built.status().ToString().c_str());
      std::abort();
    }
    return new PatternMatcher(*std::move(built));
  }();
  return *matcher;
}

void BM_MatchNativePlusPatternLanguageV2(benchmark::State& state) {
  RunMatcher(state, NativePlusPatternLanguageV2Matcher());
}

void BM_MatchNativePlus100(benchmark::State& state) {
  RunMatcher(state, NativePlusGeneratedMatcher(100));
}

BENCHMARK(BM_MatchNative)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchNativeCold)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchNativeAfterNodeEdit)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchOnednn)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchNativePlusPatternLanguageV2)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchNativePlus100)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
