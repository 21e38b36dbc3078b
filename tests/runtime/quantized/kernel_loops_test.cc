// The quantized add's two forms (runtime/quantized/kernel_loops.h): computed per element
// with FMA lanes where the CPU has them, looked up in tables elsewhere. Both must give the
// same byte for every pair of stored bytes, scales and zero points of resnet-like adds
// included; elementwise_test checks the result against PyTorch's.
#include "runtime/quantized/kernel_loops.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace quantized {
namespace {

struct AddCase {
  float a_scale, b_scale;
  int32_t a_zp, b_zp;
  float out_scale;
  int64_t out_zp;
};

TEST(KernelLoopsTest, AddGivesTheTablesBytesForEveryPairOfBytes) {
  const AddCase cases[] = {
      {0.0149f, 0.0188f, 0, 0, 0.0328f, 0},      // a residual add_relu in resnet50
      {0.05f, 0.02f, 128, 3, 0.07f, 64},
      {1e-3f, 2.5f, 255, 0, 0.9f, 255},
      {0.1f, 0.1f, 7, 250, 0.11f, 1},
  };
  std::vector<uint8_t> a(256 * 256), b(256 * 256);
  for (int i = 0; i < 256 * 256; ++i) {
    a[i] = static_cast<uint8_t>(i / 256);
    b[i] = static_cast<uint8_t>(i % 256);
  }
  for (DType dtype : {DType::kQUInt8, DType::kQInt8}) {
    for (const AddCase& c : cases) {
      for (bool relu : {false, true}) {
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " scales " << c.a_scale << ", "
                                        << c.b_scale << " relu " << relu);
        const bool is_signed = dtype == DType::kQInt8;
        // Signed zero points in range for qint8.
        const int32_t a_zp = is_signed ? c.a_zp - 128 : c.a_zp;
        const int32_t b_zp = is_signed ? c.b_zp - 128 : c.b_zp;
        const int64_t out_zp = is_signed ? c.out_zp - 128 : c.out_zp;
        const float a_premul = c.a_scale * -static_cast<float>(a_zp);
        const float b_premul = c.b_scale * -static_cast<float>(b_zp);
        float table_a[256], table_b[256];
        for (int v = 0; v < 256; ++v) {
          const int32_t q = is_signed ? static_cast<int8_t>(v) : v;
          table_a[v] = std::fma(c.a_scale, static_cast<float>(q), a_premul);
          table_b[v] = std::fma(c.b_scale, static_cast<float>(q), b_premul);
        }
        const Dequantize8Bit dq_a{c.a_scale, a_premul, table_a};
        const Dequantize8Bit dq_b{c.b_scale, b_premul, table_b};
        const float inv_scale = 1.0f / c.out_scale;
        std::vector<uint8_t> computed(a.size()), looked_up(a.size());
        AddDequantized8Bit(a.data(), b.data(), static_cast<int64_t>(a.size()), dq_a, dq_b, relu,
                           inv_scale, out_zp, dtype, computed.data());
        AddDequantized8BitByTable(a.data(), b.data(), static_cast<int64_t>(a.size()), table_a,
                                  table_b, relu, inv_scale, out_zp, dtype, looked_up.data());
        EXPECT_EQ(computed, looked_up);
        // And one value by hand: a = b = zero point gives 0, which quantizes to out_zp.
        const int zero_pair = (a_zp & 0xff) * 256 + (b_zp & 0xff);
        EXPECT_EQ(computed[zero_pair], static_cast<uint8_t>(out_zp & 0xff));
      }
    }
  }
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
