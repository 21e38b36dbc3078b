// Forward time of one model in-process, without the file loading that `fuselage run`
// includes: loads MODEL and INPUT.npy once, runs the model once (the first call also
// builds oneDNN's primitives, which its primitive cache keeps), then REPS more times.
//
//   bazel build //bench:model_run_bench
//   OMP_NUM_THREADS=1 bazel-bin/bench/model_run_bench r18.fsl x.npy 20
//
// Prints the first call and the median / min of the others in ms, as wall time and as
// process CPU time (all threads; on a shared machine the CPU time is the steadier figure
// at one thread).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "graph/serialization.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"

namespace fuselage {
namespace {

int Main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: model_run_bench MODEL INPUT.npy [REPS]\n");
    return 2;
  }
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 10;
  auto model = LoadModel(argv[1]);
  auto input = ReadNpy(argv[2]);
  auto kernels = BuiltinKernels();
  for (const absl::Status& s : {model.status(), input.status(), kernels.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "model_run_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<double> ms, cpu_ms;
  for (int i = 0; i <= reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    auto out = Run(**model, {Value(*input)}, **kernels);
    const std::clock_t cpu_end = std::clock();
    const auto end = std::chrono::steady_clock::now();
    if (!out.ok()) {
      std::fprintf(stderr, "model_run_bench: %s\n", out.status().ToString().c_str());
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    cpu_ms.push_back(1000.0 * static_cast<double>(cpu_end - cpu_start) / CLOCKS_PER_SEC);
  }
  for (auto [what, v] : {std::pair<const char*, std::vector<double>*>{"wall", &ms},
                         {"cpu", &cpu_ms}}) {
    const double first = (*v)[0];
    v->erase(v->begin());
    std::sort(v->begin(), v->end());
    std::printf("%s %s: first %.1f ms, then median %.1f ms, min %.1f ms over %d runs\n",
                argv[1], what, first, (*v)[v->size() / 2], (*v)[0], reps);
  }
  return 0;
}

}  // namespace
}  // namespace fuselage

int main(int argc, char** argv) { return fuselage::Main(argc, argv); }
