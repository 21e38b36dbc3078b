// Runs every PyTorch 1.13 golden of tests/runtime/testdata/float (written by
// gen_float_goldens.py: a one-op graph, its inputs and PyTorch's outputs) through the
// interpreter with the built-in kernels and checks the outputs agree within 1e-5 relative.
// Each case must also pass what `fuselage verify` checks: the graph's invariants and
// module schemas, and every call_function target known to the function registry.
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "backend_configs/known_functions.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

constexpr char kDir[] = "tests/runtime/testdata/float/";

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  std::ifstream manifest(std::string(kDir) + "MANIFEST.txt");
  for (std::string line; std::getline(manifest, line);) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

// |actual - expected| <= 1e-5 * |expected| + 1e-5 * scale: relative per element, plus an
// absolute floor of 1e-5 times the output's largest magnitude (at least 1), so values near
// zero (cancellation in a sum) are judged against the output's scale, as allclose's atol.
void ExpectClose(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), DType::kFloat32) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const float* a = actual.data<float>();
  const float* e = expected.data<float>();
  double scale = 1.0;
  for (int64_t i = 0; i < expected.numel(); ++i) scale = std::max(scale, std::fabs(double{e[i]}));
  int failures = 0;
  for (int64_t i = 0; i < expected.numel() && failures < 5; ++i) {
    const double tolerance = 1e-5 * std::fabs(double{e[i]}) + 1e-5 * scale;
    if (!(std::fabs(double{a[i]} - double{e[i]}) <= tolerance)) {
      ADD_FAILURE() << what << " element " << i << ": got " << a[i] << ", PyTorch gives "
                    << e[i];
      ++failures;
    }
  }
}

TEST(FloatGoldenTest, ManifestListsAllCases) {
  // Guards against a test that passes because it found nothing to run.
  EXPECT_GE(CaseNames().size(), 160u);
}

TEST(FloatGoldenTest, EveryCaseMatchesPyTorch) {
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    auto gm = LoadModel(absl::StrCat(kDir, name, ".pb"));
    ASSERT_TRUE(gm.ok()) << gm.status();
    ASSERT_TRUE((*gm)->Verify().ok()) << (*gm)->Verify();
    ASSERT_TRUE(VerifyFunctionTargets(**gm).ok()) << VerifyFunctionTargets(**gm);
    std::vector<Value> inputs;
    for (int i = 0;; ++i) {
      const Tensor* t = (*gm)->root().FindTensor(absl::StrCat("input_", i));
      if (t == nullptr) break;
      inputs.push_back(*t);
    }
    ASSERT_FALSE(inputs.empty());
    auto outputs = fuselage::Run(**gm, inputs, **kernels);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    size_t expected_count = 0;
    for (;; ++expected_count) {
      if ((*gm)->root().FindTensor(absl::StrCat("expected_", expected_count)) == nullptr) break;
    }
    ASSERT_EQ(outputs->size(), expected_count);
    for (size_t i = 0; i < expected_count; ++i) {
      ASSERT_TRUE((*outputs)[i].is_tensor()) << (*outputs)[i].ToString();
      ExpectClose((*outputs)[i].as_tensor(),
                  *(*gm)->root().FindTensor(absl::StrCat("expected_", i)),
                  absl::StrCat(name, " output ", i));
    }
  }
}

}  // namespace
}  // namespace fuselage
