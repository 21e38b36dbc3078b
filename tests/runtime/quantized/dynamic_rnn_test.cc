// nnqd.LSTM / nnqd.GRU through the interpreter: a hand-computed step and the errors of bad
// modules and inputs. (Agreement with PyTorch's quantized LSTM / GRU on random data:
// tests/python/test_dynamic_rnn_fx.py.)
#include "runtime/quantized/dynamic_rnn.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// An nnqd module of `type` with input_size 1, hidden_size 1, one layer, all weights 0
// (qint8, scale 0.5): every gate is its bias_ih + bias_hh.
std::unique_ptr<Module> ZeroWeightRnn(const std::string& type, int gates,
                                      const std::vector<float>& bias_ih) {
  auto m = std::make_unique<Module>(type);
  for (const char* name : {"weight_ih_l0", "weight_hh_l0"}) {
    auto w = Tensor::FromBytes(DType::kQInt8, {gates, 1}, std::string(gates, '\0'),
                               QuantParams::PerTensor(0.5, 0));
    EXPECT_TRUE(w.ok());
    m->SetTensor(name, *w);
  }
  m->SetTensor("bias_ih_l0", Tensor::FromFloats({gates}, bias_ih));
  m->SetTensor("bias_hh_l0", Tensor::FromFloats({gates}, std::vector<float>(gates, 0.0f)));
  m->SetAttribute("input_size", Argument::Int(1));
  m->SetAttribute("hidden_size", Argument::Int(1));
  m->SetAttribute("num_layers", Argument::Int(1));
  m->SetAttribute("bias", Argument::Bool(true));
  m->SetAttribute("batch_first", Argument::Bool(false));
  m->SetAttribute("bidirectional", Argument::Bool(false));
  m->SetAttribute("dtype", Argument::Dtype(DType::kQInt8));
  return m;
}

// x -> rnn(x) -> output (the whole result tuple, flattened by Run).
std::unique_ptr<GraphModule> Wrap(std::unique_ptr<Module> rnn) {
  auto gm = std::make_unique<GraphModule>();
  EXPECT_TRUE(gm->SetModule("rnn", std::move(rnn)).ok());
  Node* x = *gm->graph().AddPlaceholder("x");
  Node* call = *gm->graph().AddCallModule("rnn", {x});
  EXPECT_TRUE(gm->graph().SetOutput(call).ok());
  return gm;
}

absl::StatusOr<std::vector<Value>> RunOn(const GraphModule& gm, Tensor x) {
  static const auto* kernels = BuiltinKernels()->release();
  return Run(gm, {Value(std::move(x))}, *kernels);
}

TEST(DynamicRnnTest, LstmStepFromBiases) {
  const std::vector<float> b = {0.5f, -1.0f, 0.25f, 2.0f};  // i, f, g, o
  auto gm = Wrap(ZeroWeightRnn("nnqd.LSTM", 4, b));
  auto out = RunOn(*gm, Tensor::FromFloats({2, 1, 1}, {3.0f, -7.0f}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);  // output, h_n, c_n
  // Step 1 from c = 0: c1 = i * g; h1 = o * tanh(c1). Step 2: c2 = f * c1 + i * g.
  const float i = Sigmoid(0.5f), f = Sigmoid(-1.0f), g = std::tanh(0.25f), o = Sigmoid(2.0f);
  const float c1 = i * g, c2 = f * c1 + i * g;
  const Tensor& y = (*out)[0].as_tensor();
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_NEAR(y.data<float>()[0], o * std::tanh(c1), 1e-6f);
  EXPECT_NEAR(y.data<float>()[1], o * std::tanh(c2), 1e-6f);
  EXPECT_NEAR((*out)[1].as_tensor().data<float>()[0], o * std::tanh(c2), 1e-6f);
  EXPECT_NEAR((*out)[2].as_tensor().data<float>()[0], c2, 1e-6f);
}

TEST(DynamicRnnTest, GruStepFromBiases) {
  const std::vector<float> b = {0.5f, -1.0f, 0.25f};  // r, z, n
  auto gm = Wrap(ZeroWeightRnn("nnqd.GRU", 3, b));
  auto out = RunOn(*gm, Tensor::FromFloats({1, 1, 1}, {3.0f}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);  // output, h_n
  // n = tanh(b_n + r * 0); h = (0 - n) * z + n.
  const float z = Sigmoid(-1.0f), n = std::tanh(0.25f);
  EXPECT_NEAR((*out)[0].as_tensor().data<float>()[0], (0.0f - n) * z + n, 1e-6f);
}

TEST(DynamicRnnTest, ErrorsNameTheField) {
  const std::vector<float> b = {0, 0, 0, 0};
  const Tensor x = Tensor::FromFloats({1, 1, 1}, {1.0f});
  auto message = [&](std::unique_ptr<Module> m, Tensor input) {
    auto gm = Wrap(std::move(m));
    auto out = RunOn(*gm, std::move(input));
    EXPECT_FALSE(out.ok());
    return out.ok() ? std::string() : std::string(out.status().message());
  };
  auto projected = ZeroWeightRnn("nnqd.LSTM", 4, b);
  projected->SetAttribute("proj_size", Argument::Int(2));
  EXPECT_NE(message(std::move(projected), x).find("proj_size 2"), std::string::npos);

  auto missing = ZeroWeightRnn("nnqd.LSTM", 4, b);
  missing->RemoveTensor("weight_hh_l0");
  EXPECT_NE(message(std::move(missing), x).find("tensor 'weight_hh_l0' is missing"),
            std::string::npos);

  auto two_layers = ZeroWeightRnn("nnqd.LSTM", 4, b);  // layer 1's weights absent
  two_layers->SetAttribute("num_layers", Argument::Int(2));
  EXPECT_NE(message(std::move(two_layers), x).find("weight_ih_l1"), std::string::npos);

  auto wrong_bias = ZeroWeightRnn("nnqd.LSTM", 4, b);
  wrong_bias->SetTensor("bias_hh_l0", Tensor::FromFloats({3}, {0, 0, 0}));
  EXPECT_NE(message(std::move(wrong_bias), x).find("expected torch.float32 [4]"),
            std::string::npos);

  EXPECT_NE(message(ZeroWeightRnn("nnqd.LSTM", 4, b), Tensor::FromFloats({1, 1}, {1.0f}))
                .find("expected [seq_len, batch, 1]"),
            std::string::npos);
  EXPECT_NE(message(ZeroWeightRnn("nnqd.GRU", 3, {0, 0, 0}),
                    Tensor::FromFloats({1, 1, 2}, {1.0f, 2.0f}))
                .find("input has shape [1, 1, 2]"),
            std::string::npos);

  auto bad_size = ZeroWeightRnn("nnqd.GRU", 3, {0, 0, 0});
  bad_size->SetAttribute("hidden_size", Argument::Int(0));
  EXPECT_NE(message(std::move(bad_size), x).find("expected each positive"), std::string::npos);
}

}  // namespace
}  // namespace fuselage
