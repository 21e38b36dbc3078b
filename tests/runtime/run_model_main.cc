// run_model: loads a model file, runs it on .npy inputs with the built-in kernels, and
// reports the wall time of each run; with --expected, compares the first output with a
// .npy of PyTorch's result. Used by resnet50_float_check.py for bench/RESULTS.md.
//
//   run_model <model> <input.npy>... [--expected=<out.npy>] [--repeat=N] [--output=<out.npy>]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "graph/serialization.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"

namespace fuselage {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "run_model: %s\n", std::string(status.ToString()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  std::string model_path, expected_path, output_path;
  std::vector<std::string> input_paths;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--expected=")) {
      expected_path = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--output=")) {
      output_path = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--repeat=")) {
      if (!absl::SimpleAtoi(arg, &repeat) || repeat < 1) return Fail(absl::InvalidArgumentError("bad --repeat"));
    } else if (model_path.empty()) {
      model_path = std::string(arg);
    } else {
      input_paths.push_back(std::string(arg));
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: run_model <model> <input.npy>... [--expected=out.npy] [--repeat=N]\n");
    return 2;
  }
  auto gm = LoadModel(model_path);
  if (!gm.ok()) return Fail(gm.status());
  std::vector<Value> inputs;
  for (const std::string& path : input_paths) {
    auto t = ReadNpy(path);
    if (!t.ok()) return Fail(t.status());
    inputs.push_back(*t);
  }
  auto kernels = BuiltinKernels();
  if (!kernels.ok()) return Fail(kernels.status());
  absl::StatusOr<std::vector<Value>> outputs;
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    outputs = Run(**gm, inputs, **kernels);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!outputs.ok()) return Fail(outputs.status());
    best = std::min(best, seconds);
    std::printf("run %d: %.3f s\n", r + 1, seconds);
  }
  std::printf("best of %d: %.3f s\n", repeat, best);
  if (outputs->empty() || !(*outputs)[0].is_tensor()) {
    return Fail(absl::InvalidArgumentError("first output is not a tensor"));
  }
  const Tensor& out = (*outputs)[0].as_tensor();
  if (!output_path.empty()) {
    const absl::Status written = WriteNpy(out, output_path);
    if (!written.ok()) return Fail(written);
  }
  if (!expected_path.empty()) {
    auto expected = ReadNpy(expected_path);
    if (!expected.ok()) return Fail(expected.status());
    if (expected->shape() != out.shape() || expected->dtype() != DType::kFloat32 ||
        out.dtype() != DType::kFloat32) {
      return Fail(absl::InvalidArgumentError("output and expected differ in shape or dtype"));
    }
    double max_abs = 0, max_ref = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double{out.data<float>()[i]} -
                                            double{expected->data<float>()[i]}));
      max_ref = std::max(max_ref, std::fabs(double{expected->data<float>()[i]}));
    }
    std::printf("max |fuselage - pytorch| = %.3g (max |pytorch| = %.3g, relative %.3g)\n",
                max_abs, max_ref, max_ref > 0 ? max_abs / max_ref : max_abs);
  }
  return 0;
}

}  // namespace
}  // namespace fuselage

int main(int argc, char** argv) { return fuselage::Main(argc, argv); }
