// Helpers shared by the benchmark binaries: the synthetic network of a given size (which
// must build: a failure is a bug in the generator, so it is a CHECK), the items-per-second
// convention (one item = one node of the input graph), and the matchers benchmarked.
#ifndef FUSELAGE_BENCH_BENCH_COMMON_H_
#define FUSELAGE_BENCH_BENCH_COMMON_H_

#include <cstdint>
#include <memory>

#include "benchmark/benchmark.h"
#include "graph/graph_module.h"
#include "patterns/matcher.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"

namespace fuselage {

// BuildSyntheticNetwork with the default seed and channels.
std::unique_ptr<GraphModule> SyntheticNetwork(int64_t nodes, bool create_modules = true);

// items_per_second = nodes per second; also records "nodes" as a counter.
void SetNodesPerSecond(benchmark::State& state, int64_t nodes);

// The fusion matcher of the built-in config `backend` ("native", ...).
const PatternMatcher& BuiltinFusionMatcher(const char* backend);

// The native fusion rules plus `extra` generated rules whose outermost op is one the
// synthetic networks contain (nn.ReLU, operator.add, nn.BatchNorm2d,
// torch.nn.functional.relu, nn.MaxPool2d) and whose inner ops never line up there, so each
// is really tried at many nodes and fails: the worst case for a large config. The
// generated rules are longer than the native ones, so they are tried first.
const PatternMatcher& NativePlusGeneratedMatcher(int extra);

// For the benchmarks of convert's graph rewriting alone (BM_Convert, model_file_bench's
// convert), which used to convert uncalibrated observers: convert now refuses an observer
// that saw no value, so these prepare with `backend`'s default qconfig but MinMax
// activation observers (whose parameters cost a few operations, where the histograms'
// search is BM_ConvertCalibrated's subject), and StandInCalibration gives every observer
// the range [-1, 1] untimed. CHECKs that `backend` is a built-in one.
QConfigMapping MinMaxActivationMapping(const char* backend);
void StandInCalibration(PreparedModel& prepared);

}  // namespace fuselage

#endif  // FUSELAGE_BENCH_BENCH_COMMON_H_
