// Reads the golden files written by tests/runtime/gen_quantized_goldens.py (format in
// that script's docstring): each case is a name, named tensors and named scalars.
#ifndef FUSELAGE_TESTS_RUNTIME_QUANTIZED_GOLDEN_READER_H_
#define FUSELAGE_TESTS_RUNTIME_QUANTIZED_GOLDEN_READER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

struct GoldenCase {
  std::string name;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> scalars;  // as written; see the accessors

  const Tensor& tensor(const std::string& key) const;  // CHECKs presence
  const Tensor* find_tensor(const std::string& key) const;
  double number(const std::string& key) const;  // CHECKs presence
  const std::string& text(const std::string& key) const;
};

// `relative_path` from the workspace root, e.g. "tests/runtime/testdata/quantized/conv.txt".
absl::StatusOr<std::vector<GoldenCase>> ReadGoldenFile(const std::string& relative_path);

// Element i of an int-valued tensor (quantized, uint8, int64) as int64.
int64_t IntAt(const Tensor& tensor, int64_t i);

// Success iff `actual` has `expected`'s dtype, shape and qparams and the same stored
// integers, except that where `ambiguous` (a uint8 mask, or null) is 1 the two may
// differ by one step; the message lists the first mismatches.
::testing::AssertionResult SameQuantized(const Tensor& actual, const Tensor& expected,
                                         const Tensor* ambiguous = nullptr);

// What issue 18 asks of a kernel against PyTorch's: the same dtype, shape and qparams,
// at least `min_equal_fraction` of the stored integers equal and none more than one step
// apart. Prints how many are one step off, so a test log shows where bits differ.
::testing::AssertionResult MostlySameQuantized(const Tensor& actual, const Tensor& expected,
                                               double min_equal_fraction = 0.999);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_TESTS_RUNTIME_QUANTIZED_GOLDEN_READER_H_
