// Tensor micro-benchmarks (issue 7, session 5): what the passes do to tensors per node --
// create a conv weight or a 1-D bias, copy one (a module clone), write a shared copy
// (copy-on-write detach, as fusion's conv-bn folding does), create a per-tensor quantized
// tensor (convert's scale / zero_point, lower's int8 weight). Every case also reports
// `blocks`: heap blocks allocated per iteration, counted by the operator new of
// bench/alloc_counter.cc.
// items_per_second = operations per CPU second.
//
//   bazel build //bench:tensor_bench && bazel-bin/bench/tensor_bench
#include <cstdint>
#include <vector>

#include "bench/alloc_counter.h"
#include "benchmark/benchmark.h"
#include "graph/check.h"
#include "graph/tensor.h"

namespace fuselage {
namespace {

// Runs `body` once per iteration and reports heap blocks allocated per iteration.
template <typename Body>
void RunCountingBlocks(benchmark::State& state, Body body) {
  const int64_t blocks_before = HeapBlocksAllocated();
  for (auto _ : state) body();
  const int64_t blocks = HeapBlocksAllocated() - blocks_before;
  state.counters["blocks"] = static_cast<double>(blocks) / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
}

// A ResNet-like 3x3 conv weight: 64 x 64 x 3 x 3 floats (147 KB).
const std::vector<int64_t> kWeightShape = {64, 64, 3, 3};
// A 1-D bias / batch-norm statistic of 64 channels.
const std::vector<int64_t> kBiasShape = {64};

void BM_CreateWeight(benchmark::State& state) {
  RunCountingBlocks(state, [] {
    auto t = Tensor::Zeros(DType::kFloat32, kWeightShape);
    benchmark::DoNotOptimize(t);
  });
}
BENCHMARK(BM_CreateWeight);

void BM_CreateBias(benchmark::State& state) {
  RunCountingBlocks(state, [] {
    auto t = Tensor::Zeros(DType::kFloat32, kBiasShape);
    benchmark::DoNotOptimize(t);
  });
}
BENCHMARK(BM_CreateBias);

// A module clone copies every tensor: the copy shares the bytes.
void BM_CopyWeight(benchmark::State& state) {
  const Tensor weight = *Tensor::Zeros(DType::kFloat32, kWeightShape);
  RunCountingBlocks(state, [&] {
    Tensor copy = weight;
    benchmark::DoNotOptimize(copy);
  });
}
BENCHMARK(BM_CopyWeight);

void BM_CopyBias(benchmark::State& state) {
  const Tensor bias = *Tensor::Zeros(DType::kFloat32, kBiasShape);
  RunCountingBlocks(state, [&] {
    Tensor copy = bias;
    benchmark::DoNotOptimize(copy);
  });
}
BENCHMARK(BM_CopyBias);

// Copy, then write one element: the copy detaches (copies the 147 KB once).
void BM_CopyThenWriteWeight(benchmark::State& state) {
  const Tensor weight = *Tensor::Zeros(DType::kFloat32, kWeightShape);
  RunCountingBlocks(state, [&] {
    Tensor copy = weight;
    copy.mutable_data<float>()[0] = 1.0f;
    benchmark::DoNotOptimize(copy);
  });
}
BENCHMARK(BM_CopyThenWriteWeight);

// A per-tensor quantized scalar, as convert builds for a quantize node's scale.
void BM_CreateQuantizedScalar(benchmark::State& state) {
  RunCountingBlocks(state, [] {
    auto t = Tensor::Zeros(DType::kQInt8, {1}, QuantParams::PerTensor(0.05, 3));
    benchmark::DoNotOptimize(t);
  });
}
BENCHMARK(BM_CreateQuantizedScalar);

// A module clone of a lowered module copies its per-tensor quantized int8 weight.
void BM_CopyQuantizedWeight(benchmark::State& state) {
  const Tensor weight =
      *Tensor::Zeros(DType::kQInt8, kWeightShape, QuantParams::PerTensor(0.05, 3));
  RunCountingBlocks(state, [&] {
    Tensor copy = weight;
    benchmark::DoNotOptimize(copy);
  });
}
BENCHMARK(BM_CopyQuantizedWeight);

// Reshaping shares the bytes; only the shape is new.
void BM_ReshapeWeight(benchmark::State& state) {
  const Tensor weight = *Tensor::Zeros(DType::kFloat32, kWeightShape);
  RunCountingBlocks(state, [&] {
    auto t = weight.Reshaped({64, 576});
    benchmark::DoNotOptimize(t);
  });
}
BENCHMARK(BM_ReshapeWeight);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
