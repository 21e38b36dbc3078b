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

// The cells' polynomial sigmoid and tanh against libm's, over gate values from -100 to 100
// (both ranges of TanhPoly, the clamp of ExpPoly), within a few ulp (PyTorch's vectorized
// sigmoid and tanh are within 1 ulp of the exact values, so two implementations can differ
// by about 2e-7 relative; 1e-6 of the terms bounds ours).
TEST(RecurrentCellRowTest, LstmAndGruMatchTheLibmFormulas) {
  std::vector<float> values;
  for (int i = -20000; i <= 20000; ++i) values.push_back(static_cast<float>(i) * 0.005f);
  for (float v : {-100.0f, -60.0f, -0.625f, -0.6249f, 0.6249f, 0.625f, 60.0f, 100.0f, 0.0f}) {
    values.push_back(v);
  }
  const int64_t hidden = static_cast<int64_t>(values.size());
  auto sigmoid = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  // LSTM: gates i, f, g, o all from `values` (shifted per gate), cell state 0.5.
  std::vector<float> gh(4 * hidden), gi(4 * hidden, 0.0f);
  for (int64_t g = 0; g < 4; ++g) {
    for (int64_t j = 0; j < hidden; ++j) gh[g * hidden + j] = values[(j + 7 * g) % hidden];
  }
  std::vector<float> c(hidden, 0.5f), h(hidden), out(hidden);
  LstmCellRow(gh.data(), gi.data(), hidden, c.data(), h.data(), out.data());
  for (int64_t j = 0; j < hidden; ++j) {
    const float in_gate = sigmoid(gh[j]), forget_gate = sigmoid(gh[hidden + j]);
    const float cell_gate = std::tanh(gh[2 * hidden + j]);
    const float out_gate = sigmoid(gh[3 * hidden + j]);
    const float kept = forget_gate * 0.5f;
    const float added = in_gate * cell_gate;
    const float want_c = kept + added;
    const float want_h = out_gate * std::tanh(want_c);
    // Relative to the terms: c = kept + added may cancel.
    const float c_tolerance = 1e-6f * (std::abs(kept) + std::abs(added)) + 1e-30f;
    ASSERT_LE(std::abs(c[j] - want_c), c_tolerance)
        << "gate value " << gh[j] << ": c " << c[j] << " vs " << want_c;
    ASSERT_LE(std::abs(h[j] - want_h), 2e-6f * std::abs(want_h) + c_tolerance)
        << "h " << h[j] << " vs " << want_h;
    ASSERT_EQ(out[j], h[j]);
  }
  // GRU: tanh over the whole range through the new gate (reset gate ~1: gh_r large).
  std::vector<float> gru_gh(3 * hidden, 0.0f), gru_gi(3 * hidden, 0.0f);
  for (int64_t j = 0; j < hidden; ++j) {
    gru_gh[j] = 100.0f;               // r = 1
    gru_gh[hidden + j] = values[j];   // z over the range
    gru_gi[2 * hidden + j] = values[(j + 11) % hidden];
  }
  std::vector<float> gru_h(hidden, 0.0f);
  GruCellRow(gru_gh.data(), gru_gi.data(), hidden, gru_h.data(), out.data());
  for (int64_t j = 0; j < hidden; ++j) {
    const float new_gate = std::tanh(gru_gi[2 * hidden + j] + 0.0f * sigmoid(100.0f));
    const float update_gate = sigmoid(values[j]);
    const float want = (0.0f - new_gate) * update_gate + new_gate;
    ASSERT_TRUE(std::abs(gru_h[j] - want) <= 2e-6f * std::abs(new_gate) + 1e-30f)
        << "x " << gru_gi[2 * hidden + j] << ", z " << values[j] << ": " << gru_h[j] << " vs "
        << want;
  }
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
