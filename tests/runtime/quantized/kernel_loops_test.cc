// The quantized add's two forms (runtime/quantized/kernel_loops.h): computed per element
// with FMA lanes where the CPU has them, looked up in tables elsewhere. Both must give the
// same byte for every pair of stored bytes, scales and zero points of resnet-like adds
// included; elementwise_test checks the result against PyTorch's.
#include "runtime/quantized/kernel_loops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

extern "C" {  // Debian's libsleef-dev: the scalar FMA builds
float Sleef_expf1_u10purecfma(float x);
float Sleef_tanhf1_u10purecfma(float x);
}

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

// The cells against ATen's formulas written out per element with Sleef's scalar FMA
// functions (a separate build of the same algorithms from the vector ones the cells call):
// bit for bit, over gate values from -100 to 100. 50 gates per row: whole vector blocks
// (Sleef's exp) and a tail (libm's) in each sigmoid.
// conv2d_add's plane loop (vectorized where the CPU allows) against its formula written
// out element by element in the reference op order: double conv term, float cast, plus the
// dequantized extra value, relu, for every extra byte of both dtypes.
TEST(KernelLoopsTest, ConvAddPlaneSumsAreTheElementwiseFormulaBitForBit) {
  constexpr int64_t kN = 256 * 3;
  std::vector<int32_t> acc(kN);
  std::vector<uint8_t> extra(kN);
  for (int64_t i = 0; i < kN; ++i) {
    acc[i] = static_cast<int32_t>((i * 7919) % 200003) - 100000;
    extra[i] = static_cast<uint8_t>(i % 256);
  }
  for (DType dtype : {DType::kQUInt8, DType::kQInt8}) {
    for (bool relu : {false, true}) {
      for (double bias : {0.0, -0.3125}) {
        const double x_scale = 0.0173, w_scale = 0.00211;
        const float e_scale = 0.041f;
        const int32_t e_zp = dtype == DType::kQInt8 ? -3 : 131;
        std::vector<float> got(kN);
        ConvAddPlaneSums(acc.data(), extra.data(), kN, x_scale, w_scale, bias, e_scale, e_zp,
                         dtype, relu, got.data());
        for (int64_t i = 0; i < kN; ++i) {
          const int32_t stored = dtype == DType::kQInt8 ? static_cast<int8_t>(extra[i])
                                                        : static_cast<int32_t>(extra[i]);
          double conv = static_cast<double>(acc[i]) * x_scale * w_scale;
          conv += bias;
          float want = static_cast<float>(conv) +
                       e_scale * static_cast<float>(static_cast<int64_t>(stored) - e_zp);
          if (relu) want = std::max(want, 0.0f);
          ASSERT_EQ(got[i], want) << "element " << i << " relu " << relu << " bias " << bias;
        }
      }
    }
  }
}

TEST(RecurrentCellRowTest, LstmAndGruAreATensFormulasBitForBit) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "the FMA variants of Sleef need AVX2 and FMA";
  }
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const int64_t hidden = 50, vector_end = hidden - hidden % (avx512 ? 32 : 16);
  auto sigmoid = [&](float v, int64_t j) {
    return j < vector_end ? 1.0f / (Sleef_expf1_u10purecfma(-v) + 1.0f)
                          : 1.0f / (1.0f + std::exp(-v));
  };
  auto tanh = [](float v) { return Sleef_tanhf1_u10purecfma(v); };
  for (int round = 0; round < 200; ++round) {
    std::vector<float> gh(4 * hidden), gi(4 * hidden), c(hidden);
    for (int64_t k = 0; k < 4 * hidden; ++k) {
      gh[k] = static_cast<float>((round * 4 * hidden + k) % 4001 - 2000) * 0.05f;
      gi[k] = static_cast<float>((k * 37 + round) % 101) * 0.0137f;
    }
    for (int64_t j = 0; j < hidden; ++j) c[j] = static_cast<float>(j % 9) * 0.3f - 1.2f;
    std::vector<float> want_c(hidden), want_h(hidden);
    for (int64_t j = 0; j < hidden; ++j) {
      const float in_gate = sigmoid(gh[j] + gi[j], j);
      const float forget_gate = sigmoid(gh[hidden + j] + gi[hidden + j], j);
      const float cell_gate = tanh(gh[2 * hidden + j] + gi[2 * hidden + j]);
      const float out_gate = sigmoid(gh[3 * hidden + j] + gi[3 * hidden + j], j);
      const float kept = forget_gate * c[j];
      const float added = in_gate * cell_gate;
      want_c[j] = kept + added;
      want_h[j] = out_gate * tanh(want_c[j]);
    }
    std::vector<float> h(hidden), out(hidden), scratch(5 * hidden);
    LstmCellRow(gh.data(), gi.data(), hidden, c.data(), h.data(), out.data(), scratch.data());
    ASSERT_EQ(c, want_c) << "round " << round;
    ASSERT_EQ(h, want_h) << "round " << round;
    ASSERT_EQ(out, h);
    // GRU over the first 3 * hidden of the same values, h starting at c.
    std::vector<float> gru_h(want_c), want(hidden);
    for (int64_t j = 0; j < hidden; ++j) {
      const float reset_gate = sigmoid(gh[j] + gi[j], j);
      const float update_gate = sigmoid(gh[hidden + j] + gi[hidden + j], j);
      const float scaled = gh[2 * hidden + j] * reset_gate;
      const float new_gate = tanh(gi[2 * hidden + j] + scaled);
      const float diff = gru_h[j] - new_gate;
      const float mixed = diff * update_gate;
      want[j] = mixed + new_gate;
    }
    GruCellRow(gh.data(), gi.data(), hidden, gru_h.data(), out.data(), scratch.data());
    ASSERT_EQ(gru_h, want) << "round " << round;
  }
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
