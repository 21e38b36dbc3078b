// Prepare and ConvertToReference on small hand-built graphs: where observers go (own vs
// shared observers, reuse by several consumers), the report of ops kept float and why,
// errors that leave the graph unchanged, and the reference graph and modules convert
// makes, checked against hand-computed quantization parameters.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/prepared_model.h"
#include "runtime/builtin_kernels.h"

namespace fuselage {
namespace {

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) absl::StrAppend(&s, n->ToString(), "\n");
  return s;
}

// nn.Conv2d 1→1, 1x1 kernel, weight `w`, bias 0.
std::unique_ptr<Module> Conv1x1(float w) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {w}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {0.0f}));
  conv->SetAttribute("in_channels", Argument::Int(1));
  conv->SetAttribute("out_channels", Argument::Int(1));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({0, 0}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

std::unique_ptr<Module> MaxPool1x1() {
  auto m = std::make_unique<Module>("nn.MaxPool2d");
  m->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  m->SetAttribute("stride", Argument::Ints({1, 1}));
  m->SetAttribute("padding", Argument::Ints({0, 0}));
  m->SetAttribute("dilation", Argument::Ints({1, 1}));
  m->SetAttribute("ceil_mode", Argument::Bool(false));
  return m;
}

// MinMax quint8 activations (affine, full range), MinMax qint8 symmetric weights.
QConfigMapping MinMaxMapping() {
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.dtype = DType::kQUInt8;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  return mapping;
}

// Gives every observer of `prepared` the range [-1, 3], as one calibration sample
// would: convert refuses an observer that saw no value. For the tests of convert's
// structure, which need no real calibration.
void ObserveEveryObserver(PreparedModel& prepared) {
  const Tensor range = Tensor::FromFloats({2}, {-1.0f, 3.0f});
  for (auto& [path, observer] : prepared.observers) {
    ASSERT_TRUE(observer->Update(range).ok()) << path.name();
  }
}

bool IsObserverNode(const GraphModule& gm, const Node* n) {
  if (n == nullptr || n->op() != OpKind::kCallModule) return false;
  const Module* m = gm.FindModule(n->target().name());
  return m != nullptr && IsObserverModuleType(m->type());
}

// x → conv → pool → output, and x also feeds a float-only op (torch.sigmoid stays float:
// MinMaxMapping gives it no FixedQParamsObserver, and the report says so).
struct ConvPoolModel {
  GraphModule gm;
  Node* x;
  Node* conv;
  Node* pool;
  Node* sigmoid;
};
std::unique_ptr<ConvPoolModel> BuildConvPool() {
  auto model = std::make_unique<ConvPoolModel>();
  GraphModule& gm = model->gm;
  EXPECT_TRUE(gm.SetModule("conv", Conv1x1(0.5f)).ok());
  EXPECT_TRUE(gm.SetModule("pool", MaxPool1x1()).ok());
  Graph& g = gm.graph();
  model->x = *g.AddPlaceholder("x");
  model->conv = *g.AddCallModule("conv", {model->x});
  model->pool = *g.AddCallModule("pool", {model->conv});
  model->sigmoid = *g.AddCallFunction("torch.sigmoid", {model->x});
  EXPECT_TRUE(g.SetOutput(Argument::Tuple({model->pool, model->sigmoid})).ok());
  EXPECT_TRUE(gm.Verify().ok()) << gm.Verify();
  return model;
}

TEST(PrepareTest, ObserversFollowObservationTypes) {
  auto m = BuildConvPool();
  auto config = *GetBackendConfig("qnnpack");
  auto prepared = Prepare(m->gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify() << "\n" << Listing(m->gm.graph());

  // conv reads an observer of x; pool reads conv's output observer; pool's own output
  // observer calls the same module as its input's (OUTPUT_SHARE_OBSERVER_WITH_INPUT).
  const Node* x_obs = m->conv->arg(0).as_node();
  ASSERT_TRUE(IsObserverNode(m->gm, x_obs)) << Listing(m->gm.graph());
  EXPECT_EQ(x_obs->arg(0).as_node(), m->x);
  const Node* conv_obs = m->pool->arg(0).as_node();
  ASSERT_TRUE(IsObserverNode(m->gm, conv_obs));
  EXPECT_EQ(conv_obs->arg(0).as_node(), m->conv);
  EXPECT_NE(conv_obs->target(), x_obs->target());
  const Node* pool_obs = m->gm.graph().output()->arg(0).items()[0].as_node();
  ASSERT_TRUE(IsObserverNode(m->gm, pool_obs));
  EXPECT_EQ(pool_obs->arg(0).as_node(), m->pool);
  EXPECT_EQ(pool_obs->target(), conv_obs->target());
  // The float sigmoid still reads x itself.
  EXPECT_EQ(m->sigmoid->arg(0).as_node(), m->x);

  EXPECT_EQ(prepared->report.quantized_ops, 2);
  EXPECT_EQ(prepared->report.observer_nodes, 3);
  EXPECT_EQ(prepared->report.observer_modules, 2);
  EXPECT_EQ(prepared->observers.size(), 2u);
  ASSERT_EQ(prepared->report.kept_float.size(), 1u) << prepared->report.ToString();
  EXPECT_EQ(prepared->report.kept_float[0].node, "sigmoid");
  EXPECT_NE(prepared->report.kept_float[0].reason.find("fixed-qparams"), std::string::npos);
  // conv's plan: nn.Conv2d → nnqr.Conv2d with the qconfig's weight observer.
  const QuantizedOpPlan& plan = prepared->quantized_ops.at("conv");
  EXPECT_EQ(plan.root_module.name(), "nn.Conv2d");
  EXPECT_EQ(plan.reference_module.name(), "nnqr.Conv2d");
  ASSERT_NE(plan.weight_observer, nullptr);
  EXPECT_EQ(*plan.weight_observer, DefaultWeightObserver());
}

// INPUT_OUTPUT_NOT_OBSERVED (PyTorch 2's entries for shape and size): the op keeps float
// with no observer on its input or output, and the report says which config said so.
TEST(PrepareTest, InputOutputNotObservedKeepsTheOpFloatWithoutObservers) {
  auto m = BuildConvPool();
  auto config = *GetBackendConfig("qnnpack");
  const BackendPatternConfig* pool_entry = config.Find("nn.MaxPool2d");
  ASSERT_NE(pool_entry, nullptr);
  BackendPatternConfig not_observed = *pool_entry;
  not_observed.observation_type = ObservationType::kInputOutputNotObserved;
  ASSERT_TRUE(config.SetOrReplace(std::move(not_observed)).ok());

  auto prepared = Prepare(m->gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  // pool reads conv's output observer (conv's own output is observed), but nothing
  // observes pool's output: the graph output is pool itself.
  EXPECT_EQ(m->gm.graph().output()->arg(0).items()[0].as_node(), m->pool)
      << Listing(m->gm.graph());
  EXPECT_EQ(prepared->report.quantized_ops, 1);
  bool pool_kept_float = false;
  for (const auto& kept : prepared->report.kept_float) {
    if (kept.node != "pool") continue;
    pool_kept_float = true;
    EXPECT_NE(kept.reason.find("INPUT_OUTPUT_NOT_OBSERVED"), std::string::npos) << kept.reason;
  }
  EXPECT_TRUE(pool_kept_float) << prepared->report.ToString();
}

// The names Prepare gives, as PyTorch's prepare_fx does: modules
// observers.activation_post_process_<n> numbered in order of creation, each node named
// after its module; a shared output observer is a second node calling its input's
// module, named as FX names a second node of one target (the next free suffix). The
// plan carries the dtype config the qconfig satisfied.
TEST(PrepareTest, ObserverNamesAndPlanDTypeConfig) {
  auto m = BuildConvPool();
  auto config = *GetBackendConfig("qnnpack");
  auto prepared = Prepare(m->gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  EXPECT_EQ(prepared->observer_container, "observers");

  const Node* x_obs = m->conv->arg(0).as_node();
  const Node* conv_obs = m->pool->arg(0).as_node();
  const Node* pool_obs = m->gm.graph().output()->arg(0).items()[0].as_node();
  EXPECT_EQ(x_obs->target().name(), "observers.activation_post_process_0");
  EXPECT_EQ(x_obs->name(), "activation_post_process_0");
  EXPECT_EQ(conv_obs->target().name(), "observers.activation_post_process_1");
  EXPECT_EQ(conv_obs->name(), "activation_post_process_1");
  EXPECT_EQ(pool_obs->target().name(), "observers.activation_post_process_1");
  EXPECT_EQ(pool_obs->name(), "activation_post_process_2");
  for (const char* path :
       {"observers.activation_post_process_0", "observers.activation_post_process_1"}) {
    EXPECT_TRUE(prepared->observers.contains(Symbol::Intern(path))) << path;
    const Module* module = m->gm.FindModule(path);
    ASSERT_NE(module, nullptr) << path;
    EXPECT_EQ(module->type().name(), "MinMaxObserver");
  }

  // conv and pool: quint8 in and out; conv's weight qint8 (the qnnpack config's
  // default dtype config, which MinMax quint8 / qint8 satisfies).
  for (const char* op : {"conv", "pool"}) {
    const DTypeConfig& dtypes = *prepared->quantized_ops.at(op).dtype_config;
    EXPECT_EQ(dtypes.input.dtype, DType::kQUInt8) << op;
    EXPECT_EQ(dtypes.output.dtype, DType::kQUInt8) << op;
  }
  EXPECT_EQ(prepared->quantized_ops.at("conv").dtype_config->weight.dtype, DType::kQInt8);
}

// Observer modules are numbered 0, 1, ... in the order they are made, across every
// change of digit count (9 → 10, 99 → 100): a chain of 105 adds has x's observer and one
// per add's output, each add reading the one before it.
TEST(PrepareTest, ObserverNumbersCountOnPastEachPowerOfTen) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* value = *g.AddPlaceholder("x");
  constexpr int kAdds = 105;
  for (int i = 0; i < kAdds; ++i) value = *g.AddCallFunction("operator.add", {value, value});
  ASSERT_TRUE(g.SetOutput(value).ok());
  auto prepared = Prepare(gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(prepared->report.observer_modules, kAdds + 1);

  std::vector<std::string> observer_names;
  for (const Node* n : g.Nodes()) {
    if (!IsObserverNode(gm, n)) continue;
    EXPECT_EQ(n->target().name(), absl::StrCat("observers.", n->name()));
    EXPECT_TRUE(prepared->observers.contains(n->target())) << n->name();
    observer_names.push_back(n->name());
  }
  ASSERT_EQ(observer_names.size(), static_cast<size_t>(kAdds + 1)) << Listing(g);
  for (int i = 0; i <= kAdds; ++i) {
    EXPECT_EQ(observer_names[static_cast<size_t>(i)], absl::StrCat("activation_post_process_", i));
  }
}

// The observer modules of one spec start as clones of one prototype sharing its tensor
// and attribute lists; storing one observer's statistics changes that module alone, and
// a later Prepare still starts from +inf / -inf. Expected by hand: x in [-1, 3], conv
// (w = 0.5) in [-0.5, 1.5].
TEST(PrepareTest, ObserverModulesOfOneSpecAreIndependent) {
  auto m = BuildConvPool();
  auto config = *GetBackendConfig("qnnpack");
  auto prepared = Prepare(m->gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto kernels = *BuiltinKernels();
  ASSERT_TRUE(RegisterObserverKernels(*kernels).ok());
  const std::vector<CalibrationSample> samples = {
      {Tensor::FromFloats({1, 1, 1, 2}, {-1.0f, 3.0f})}};
  ASSERT_TRUE(Calibrate(m->gm, *prepared, samples, *kernels).ok());
  ASSERT_TRUE(StorePreparedModel(*prepared, m->gm).ok());
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  auto range = [](const Module* module) {
    return std::make_pair(module->FindTensor("min_val")->data<float>()[0],
                          module->FindTensor("max_val")->data<float>()[0]);
  };
  const Module* x_obs = m->gm.FindModule("observers.activation_post_process_0");
  const Module* conv_obs = m->gm.FindModule("observers.activation_post_process_1");
  ASSERT_NE(x_obs, nullptr);
  ASSERT_NE(conv_obs, nullptr);
  EXPECT_EQ(range(x_obs), std::make_pair(-1.0f, 3.0f));
  EXPECT_EQ(range(conv_obs), std::make_pair(-0.5f, 1.5f));
  EXPECT_EQ(x_obs->attributes(), conv_obs->attributes());

  auto fresh = BuildConvPool();
  auto fresh_prepared = Prepare(fresh->gm, MinMaxMapping(), config);
  ASSERT_TRUE(fresh_prepared.ok()) << fresh_prepared.status();
  const float inf = std::numeric_limits<float>::infinity();
  for (const char* path :
       {"observers.activation_post_process_0", "observers.activation_post_process_1"}) {
    const Module* module = fresh->gm.FindModule(path);
    ASSERT_NE(module, nullptr) << path;
    EXPECT_EQ(range(module), std::make_pair(inf, -inf)) << path;
    EXPECT_EQ(module->attributes(), x_obs->attributes()) << path;
  }
}

// Two quantized consumers of one value share one observer of it.
TEST(PrepareTest, ConsumersOfOneValueShareItsObserver) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("a", Conv1x1(0.5f)).ok());
  ASSERT_TRUE(gm.SetModule("b", Conv1x1(2.0f)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* a = *g.AddCallModule("a", {x});
  Node* b = *g.AddCallModule("b", {x});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({a, b})).ok());
  auto prepared = Prepare(gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(a->arg(0).as_node(), b->arg(0).as_node()) << Listing(g);
  EXPECT_TRUE(IsObserverNode(gm, a->arg(0).as_node()));
  EXPECT_EQ(prepared->report.observer_nodes, 3);  // x's, a's, b's
}

// The user lists after Prepare are those FX's re-registering gives (each rewired user
// moves to the end of its inputs' lists), also where Prepare skips rewiring an arg that
// already reads the observer. c's output observer O takes c's users in order (a,
// sigmoid, b); a's input arg is O already, but a is not O's last user, so it moves to the
// end (sigmoid, b, a); then b does (sigmoid, a, b). Not rewiring a would leave (a,
// sigmoid, b).
TEST(PrepareTest, UserListsAreFxsWhereArgsAlreadyReadTheObserver) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("c", Conv1x1(1.0f)).ok());
  ASSERT_TRUE(gm.SetModule("a", Conv1x1(0.5f)).ok());
  ASSERT_TRUE(gm.SetModule("b", Conv1x1(2.0f)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* c = *g.AddCallModule("c", {x});
  Node* a = *g.AddCallModule("a", {c});
  Node* sigmoid = *g.AddCallFunction("torch.sigmoid", {c});
  Node* b = *g.AddCallModule("b", {c});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({sigmoid, a, b})).ok());
  auto prepared = Prepare(gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  const Node* o = a->arg(0).as_node();
  ASSERT_TRUE(IsObserverNode(gm, o)) << Listing(g);
  EXPECT_EQ(b->arg(0).as_node(), o);
  EXPECT_EQ(sigmoid->arg(0).as_node(), o);
  EXPECT_EQ(std::vector<Node*>(o->users().begin(), o->users().end()),
            (std::vector<Node*>{sigmoid, a, b}))
      << Listing(g);
  ASSERT_EQ(c->num_users(), 1u);
  EXPECT_EQ(c->users()[0], o);
  // a's and b's output observers: each the only user of its op, read by the output.
  for (const Node* op : {a, b}) {
    ASSERT_EQ(op->num_users(), 1u) << op->name();
    const Node* out_obs = op->users()[0];
    EXPECT_TRUE(IsObserverNode(gm, out_obs)) << op->name();
    ASSERT_EQ(out_obs->num_users(), 1u) << op->name();
    EXPECT_EQ(out_obs->users()[0], g.output()) << op->name();
  }
}

// qnnpack's first conv dtype config wants qint8 activations with scale >= 2^-12 and the
// second wants quint8; a qint8 activation with a small eps satisfies neither, so the conv
// stays float and the report says why, config by config.
TEST(PrepareTest, UnsatisfiedDTypeConfigKeepsOpFloatAndSaysWhy) {
  auto m = BuildConvPool();
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.dtype = DType::kQInt8;
  activation.qscheme = ObserverQScheme::kPerTensorSymmetric;
  activation.eps = 1e-9;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  auto prepared = Prepare(m->gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(m->gm.Verify().ok());
  EXPECT_EQ(m->conv->arg(0).as_node(), m->x) << Listing(m->gm.graph());
  const PrepareReport::KeptFloat* conv_entry = nullptr;
  for (const auto& k : prepared->report.kept_float) {
    if (k.node == "conv") conv_entry = &k;
  }
  ASSERT_NE(conv_entry, nullptr) << prepared->report.ToString();
  EXPECT_EQ(conv_entry->op, "nn.Conv2d");
  EXPECT_NE(conv_entry->reason.find("[0] input needs scale >= 0.000244141"),
            std::string::npos) << conv_entry->reason;
  EXPECT_NE(conv_entry->reason.find("[1] input dtype torch.quint8 is not the observer's torch.qint8"),
            std::string::npos) << conv_entry->reason;
  EXPECT_NE(prepared->report.ToString().find("kept float: conv (nn.Conv2d)"), std::string::npos);
}

TEST(PrepareTest, QConfigNoneIsReported) {
  auto m = BuildConvPool();
  QConfigMapping mapping = MinMaxMapping();
  mapping.SetModuleName("conv", std::nullopt);
  auto prepared = Prepare(m->gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(m->conv->arg(0).as_node(), m->x);
  ASSERT_FALSE(prepared->report.kept_float.empty());
  EXPECT_EQ(prepared->report.kept_float[0].node, "conv");
  EXPECT_EQ(prepared->report.kept_float[0].reason, "its qconfig is None");
}

// An invalid observer spec is an error naming the node, and the graph is untouched.
TEST(PrepareTest, InvalidQConfigFailsWithoutChangingTheGraph) {
  auto m = BuildConvPool();
  const std::string before = SerializeModel(m->gm);
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.eps = -1;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  auto prepared = Prepare(m->gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prepared.status().message().find("node 'conv'"), std::string::npos)
      << prepared.status();
  EXPECT_EQ(SerializeModel(m->gm), before);
}

// Preparing a prepared model would observe its observers, and preparing a converted one
// would treat quantize / dequantize and reference modules as float ops: both refused,
// naming the node, with the graph unchanged.
TEST(PrepareTest, APreparedOrQuantizedModelIsRefused) {
  auto m = BuildConvPool();
  ASSERT_TRUE(Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack")).ok());
  const std::string prepared_bytes = SerializeModel(m->gm);
  auto again = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("is already prepared"), std::string::npos)
      << again.status();
  EXPECT_NE(again.status().message().find("node 'activation_post_process_0'"),
            std::string::npos) << again.status() << "\n" << Listing(m->gm.graph());
  EXPECT_EQ(SerializeModel(m->gm), prepared_bytes);

  auto converted = BuildConvPool();
  auto prepared = Prepare(converted->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ObserveEveryObserver(*prepared);
  ASSERT_TRUE(ConvertToReference(converted->gm, *prepared).ok());
  const std::string converted_bytes = SerializeModel(converted->gm);
  auto on_converted = Prepare(converted->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_FALSE(on_converted.ok());
  EXPECT_EQ(on_converted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(on_converted.status().message().find(
                "calls torch.quantize_per_tensor: the model is already quantized"),
            std::string::npos) << on_converted.status();
  EXPECT_EQ(SerializeModel(converted->gm), converted_bytes);
}

// Calibration on known values, then convert: hand-computed quantization parameters.
TEST(ConvertTest, ObserversBecomeQuantizeDequantizeWithCalibratedParameters) {
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto kernels = *BuiltinKernels();
  ASSERT_TRUE(RegisterObserverKernels(*kernels).ok());
  // x in [-1, 3]; conv (w = 0.5, bias 0) gives [-0.5, 1.5].
  const std::vector<CalibrationSample> samples = {
      {Tensor::FromFloats({1, 1, 1, 2}, {-1.0f, 3.0f})}};
  auto calibration = Calibrate(m->gm, *prepared, samples, *kernels);
  ASSERT_TRUE(calibration.ok()) << calibration.status();
  EXPECT_TRUE(calibration->unobserved.empty());

  auto report = ConvertToReference(m->gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify() << "\n" << Listing(m->gm.graph());
  EXPECT_EQ(report->observers_replaced, 3);
  EXPECT_EQ(report->reference_modules, 1);
  EXPECT_EQ(m->gm.FindModule("observers"), nullptr);

  // conv reads dequantize(quantize_per_tensor(x, 4/255, 64, quint8)):
  // scale = (3 - (-1)) / 255, zero point = 0 - round(-1 / scale) = round(63.75) = 64.
  const Node* dq = m->conv->arg(0).as_node();
  ASSERT_EQ(dq->target().name(), "dequantize") << Listing(m->gm.graph());
  const Node* q = dq->arg(0).as_node();
  ASSERT_EQ(q->target().name(), "torch.quantize_per_tensor");
  EXPECT_EQ(q->arg(0).as_node(), m->x);
  EXPECT_FLOAT_EQ(static_cast<float>(q->arg(1).as_float()), 4.0f / 255.0f);
  EXPECT_EQ(q->arg(2).as_int(), 64);
  EXPECT_EQ(q->arg(3).as_dtype(), DType::kQUInt8);
  // pool's input and output quantize share conv's parameters: 2/255, zero point 64.
  const Node* pool_in_q = m->pool->arg(0).as_node()->arg(0).as_node();
  const Node* out_dq = m->gm.graph().output()->arg(0).items()[0].as_node();
  ASSERT_EQ(out_dq->target().name(), "dequantize");
  const Node* pool_out_q = out_dq->arg(0).as_node();
  EXPECT_EQ(pool_out_q->arg(0).as_node(), m->pool);
  EXPECT_FLOAT_EQ(static_cast<float>(pool_in_q->arg(1).as_float()), 2.0f / 255.0f);
  EXPECT_EQ(pool_in_q->arg(2).as_int(), 64);
  EXPECT_EQ(pool_out_q->arg(1), pool_in_q->arg(1));
  EXPECT_EQ(pool_out_q->arg(2), pool_in_q->arg(2));

  // The reference conv: weight 0.5 with MinMax qint8 symmetric: scale = 0.5 / 127.5
  // (max(|min|, |max|) / ((127 - (-128)) / 2)), zero point 0.
  const Module* ref = m->gm.FindModule("conv");
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->type().name(), "nnqr.Conv2d");
  EXPECT_FLOAT_EQ(ref->FindTensor("weight_scale")->data<float>()[0], 0.5f / 127.5f);
  EXPECT_EQ(ref->FindTensor("weight_zero_point")->data<int64_t>()[0], 0);
  EXPECT_EQ(ref->FindAttribute("weight_qscheme")->as_string(), "torch.per_tensor_affine");
  EXPECT_EQ(ref->FindAttribute("weight_dtype")->as_dtype(), DType::kQInt8);
  EXPECT_EQ(*ref->FindTensor("weight"), Tensor::FromFloats({1, 1, 1, 1}, {0.5f}));
}

// A fused module keeps its type and structure; child "0" becomes the reference module.
TEST(ConvertTest, FusedModuleKeepsStructureWithReferenceChild) {
  GraphModule gm;
  auto fused = std::make_unique<Module>("nni.ConvReLU2d");
  fused->SetChild("0", Conv1x1(-0.25f));
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  ASSERT_TRUE(gm.SetModule("block", std::move(fused)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* block = *g.AddCallModule("block", {x});
  ASSERT_TRUE(g.SetOutput(block).ok());
  auto prepared = Prepare(gm, MinMaxMapping(), *GetBackendConfig("fbgemm"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  const Module* m = gm.FindModule("block");
  EXPECT_EQ(m->type().name(), "nni.ConvReLU2d");
  ASSERT_EQ(m->children().size(), 2u);
  EXPECT_EQ(m->FindChild("0")->type().name(), "nnqr.Conv2d");
  EXPECT_EQ(m->FindChild("1")->type().name(), "nn.ReLU");
  EXPECT_FLOAT_EQ(m->FindChild("0")->FindTensor("weight_scale")->data<float>()[0],
                  0.25f / 127.5f);
}

// Per-channel weight observers give per-channel weight parameters on axis 0.
TEST(ConvertTest, PerChannelWeightParameters) {
  auto conv = Conv1x1(1.0f);
  conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {0.5f, -2.0f}));
  conv->SetAttribute("out_channels", Argument::Int(2));
  auto ref = MakeReferenceModule(*conv, Symbol::Intern("nnqr.Conv2d"),
                                 DefaultPerChannelWeightObserver());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Tensor* scale = (*ref)->FindTensor("weight_scale");
  ASSERT_EQ(scale->shape(), std::vector<int64_t>({2}));
  EXPECT_FLOAT_EQ(scale->data<float>()[0], 0.5f / 127.5f);
  EXPECT_FLOAT_EQ(scale->data<float>()[1], 2.0f / 127.5f);
  EXPECT_EQ((*ref)->FindAttribute("weight_qscheme")->as_string(), "torch.per_channel_affine");
  EXPECT_EQ((*ref)->FindTensor("weight_axis")->data<int64_t>()[0], 0);
}

// Several weighted modules converted in one pass: the weight-independent parts
// (weight_axis, a per-tensor zero point, the qscheme attribute) are made once and shared
// by copy, and each module still gets its own hand-computed weight parameters, including
// an asymmetric scheme (non-zero zero point) and a per-channel module after per-tensor
// ones.
TEST(ConvertTest, ManyReferenceModulesEachGetTheirOwnParameters) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("a", Conv1x1(0.5f)).ok());
  ASSERT_TRUE(gm.SetModule("b", Conv1x1(-2.0f)).ok());
  auto wide = Conv1x1(1.0f);
  wide->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {0.5f, -2.0f}));
  wide->SetTensor("bias", Tensor::FromFloats({2}, {0.0f, 0.0f}));  // one per out channel
  wide->SetAttribute("in_channels", Argument::Int(1));
  wide->SetAttribute("out_channels", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("c", std::move(wide)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* a = *g.AddCallModule("a", {x});
  Node* b = *g.AddCallModule("b", {a});
  Node* c = *g.AddCallModule("c", {b});
  ASSERT_TRUE(g.SetOutput(c).ok());
  // a: MinMax qint8 symmetric; b (by module name): MinMax qint8 affine; c: per-channel
  // symmetric.
  ObserverSpec activation;
  ObserverSpec affine_qint8;
  affine_qint8.dtype = DType::kQInt8;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  mapping.SetModuleName("b", QConfig{activation, affine_qint8});
  mapping.SetModuleName("c", QConfig{activation, DefaultPerChannelWeightObserver()});
  auto prepared = Prepare(gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report->reference_modules, 3);
  // a, symmetric qint8: scale = max(|w|) / 127.5 = 0.5 / 127.5, zero point 0.
  // b, affine qint8 on [-2, 0] (the range always holds 0): scale 2 / 255, zero point
  // -128 - round(-2 / scale) = 127.
  struct Expected {
    const char* path;
    float scale;
    int64_t zero_point;
  };
  for (const Expected& e : {Expected{"a", 0.5f / 127.5f, 0}, Expected{"b", 2.0f / 255.0f, 127}}) {
    const Module* ref = gm.FindModule(e.path);
    ASSERT_NE(ref, nullptr) << e.path;
    EXPECT_EQ(ref->type().name(), "nnqr.Conv2d") << e.path;
    EXPECT_EQ(ref->FindTensor("weight_scale")->shape(), std::vector<int64_t>{}) << e.path;
    EXPECT_FLOAT_EQ(ref->FindTensor("weight_scale")->data<float>()[0], e.scale) << e.path;
    EXPECT_EQ(*ref->FindTensor("weight_zero_point"), Tensor::FromInt64s({}, {e.zero_point}))
        << e.path;
    EXPECT_EQ(*ref->FindTensor("weight_axis"), Tensor::FromInt64s({}, {0})) << e.path;
    EXPECT_EQ(ref->FindAttribute("weight_qscheme")->as_string(), "torch.per_tensor_affine");
  }
  const Module* ref_c = gm.FindModule("c");
  ASSERT_NE(ref_c, nullptr);
  EXPECT_EQ(*ref_c->FindTensor("weight_zero_point"), Tensor::FromInt64s({2}, {0, 0}));
  EXPECT_FLOAT_EQ(ref_c->FindTensor("weight_scale")->data<float>()[1], 2.0f / 127.5f);
  EXPECT_EQ(ref_c->FindAttribute("weight_qscheme")->as_string(), "torch.per_channel_affine");

  // An asymmetric per-tensor weight observer: weight 0.5 in quint8 affine gives
  // min 0 (the range always holds 0), max 0.5: scale 0.5 / 255, zero point 0; weight -2
  // gives scale 2 / 255, zero point 255 (0 - round(-2 / scale)).
  ObserverSpec affine;
  affine.dtype = DType::kQUInt8;
  auto ref_a = MakeReferenceModule(*Conv1x1(0.5f), Symbol::Intern("nnqr.Conv2d"), affine);
  auto ref_b = MakeReferenceModule(*Conv1x1(-2.0f), Symbol::Intern("nnqr.Conv2d"), affine);
  ASSERT_TRUE(ref_a.ok() && ref_b.ok());
  EXPECT_EQ(*(*ref_a)->FindTensor("weight_zero_point"), Tensor::FromInt64s({}, {0}));
  EXPECT_EQ(*(*ref_b)->FindTensor("weight_zero_point"), Tensor::FromInt64s({}, {255}));
  EXPECT_FLOAT_EQ((*ref_b)->FindTensor("weight_scale")->data<float>()[0], 2.0f / 255.0f);
}

// A plan for a weighted op whose node no longer calls a module, or calls an observer, is
// an error naming the node, and the graph is unchanged; a plan naming a node the graph
// does not have is ignored, as before.
TEST(ConvertTest, WeightedPlanAtANodeThatCallsNoModule) {
  for (const bool at_observer : {false, true}) {
    auto m = BuildConvPool();
    auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const QuantizedOpPlan conv_plan = prepared->quantized_ops.at("conv");
    const std::string node =
        at_observer ? m->conv->arg(0).as_node()->name() : std::string("sigmoid");
    prepared->quantized_ops.emplace(node, conv_plan);
    const std::string before = SerializeModel(m->gm);
    ObserveEveryObserver(*prepared);
    auto report = ConvertToReference(m->gm, *prepared);
    ASSERT_FALSE(report.ok()) << node;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find(absl::StrCat("node '", node, "'")),
              std::string::npos)
        << report.status();
    EXPECT_EQ(SerializeModel(m->gm), before);
  }
  {
    // A weighted plan without a weight observer (only a hand-made plan can be one).
    auto m = BuildConvPool();
    auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    prepared->quantized_ops.at("conv").weight_observer = nullptr;
    const std::string before = SerializeModel(m->gm);
    ObserveEveryObserver(*prepared);
    auto report = ConvertToReference(m->gm, *prepared);
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find("node 'conv'"), std::string::npos)
        << report.status();
    EXPECT_NE(report.status().message().find("no weight observer"), std::string::npos)
        << report.status();
    EXPECT_EQ(SerializeModel(m->gm), before);
  }
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  prepared->quantized_ops.emplace("no_such_node", prepared->quantized_ops.at("conv"));
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(m->gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->reference_modules, 1);
  EXPECT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
}

std::vector<std::string> NodeNames(const Graph& g) {
  std::vector<std::string> names;
  for (const Node* n : g.Nodes()) names.push_back(n->name());
  return names;
}

// The nodes of a ConvPoolModel after Prepare and convert, in graph order, named as FX
// names them: x → quantize_per_tensor → dequantize → conv → quantize_per_tensor_1 →
// dequantize_1 → pool → quantize_per_tensor_2 → dequantize_2 → output, and sigmoid.
std::vector<std::string> ConvertedConvPoolNames() {
  return {"x", "quantize_per_tensor", "dequantize", "conv",
          "quantize_per_tensor_1", "dequantize_1", "pool",
          "quantize_per_tensor_2", "dequantize_2", "sigmoid", "output"};
}

// Convert inserts each observer's quantize node before it and turns the observer node
// into the dequantize node, dropping any meta or kwargs the observer carries. With or
// without them the graph is the one FX's insert-both-and-erase gives: names as FX derives
// them from the targets, the same args, and the same user lists (the quantize node last
// among its input's users).
TEST(ConvertTest, ObserverNodesBecomeQuantizeNodesAsNewNodesWould) {
  std::vector<std::string> listings;
  for (const bool observers_with_meta : {false, true}) {
    auto m = BuildConvPool();
    auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    Graph& g = m->gm.graph();
    if (observers_with_meta) {
      for (Node* n : g.Nodes()) {
        if (IsObserverNode(m->gm, n)) {
          ASSERT_TRUE(g.SetMeta(n, "note", Argument::Int(1)).ok());
        }
      }
    }
    ObserveEveryObserver(*prepared);
    auto report = ConvertToReference(m->gm, *prepared);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify() << "\n" << Listing(g);
    EXPECT_EQ(report->observers_replaced, 3);
    // FX's names (ConvertedConvPoolNames); no observer node and no meta is left.
    for (const Node* n : g.Nodes()) EXPECT_TRUE(n->meta().empty()) << n->name();
    EXPECT_EQ(NodeNames(g), ConvertedConvPoolNames()) << Listing(g);
    // x's users: sigmoid (never rewired), then the quantize node that replaced conv's
    // input observer.
    const Node* q = g.FindNode("quantize_per_tensor");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->op(), OpKind::kCallFunction);
    EXPECT_EQ(q->arg(0).as_node(), m->x);
    EXPECT_EQ(std::vector<Node*>(m->x->users().begin(), m->x->users().end()),
              (std::vector<Node*>{m->sigmoid, const_cast<Node*>(q)}));
    // Each quantize node's only user is its dequantize node.
    for (const char* name : {"quantize_per_tensor", "quantize_per_tensor_1",
                             "quantize_per_tensor_2"}) {
      const Node* quantize = g.FindNode(name);
      ASSERT_NE(quantize, nullptr) << name;
      ASSERT_EQ(quantize->num_users(), 1u) << name;
      EXPECT_EQ(quantize->users()[0]->target().name(), "dequantize") << name;
    }
    listings.push_back(Listing(g));
  }
  EXPECT_EQ(listings[0], listings[1]);
}

// An observer node whose own name is one a dequantize node could take ("dequantize")
// frees it before the dequantize node is named, as erasing the observer would: the
// names are those of observers named by Prepare.
TEST(ConvertTest, ObserverNamedLikeADequantizeNodeGivesFxsNames) {
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  Graph& g = m->gm.graph();
  Node* x_obs = m->conv->arg(0).as_node();
  ASSERT_TRUE(IsObserverNode(m->gm, x_obs));
  EXPECT_EQ(g.Rename(x_obs, "dequantize"), "dequantize");
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(m->gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify() << "\n" << Listing(g);
  EXPECT_EQ(NodeNames(g), ConvertedConvPoolNames()) << Listing(g);
  const Node* dq = g.FindNode("dequantize");
  ASSERT_NE(dq, nullptr);
  EXPECT_EQ(dq->target().name(), "dequantize");
  EXPECT_EQ(dq->arg(0).as_node(), g.FindNode("quantize_per_tensor"));
  EXPECT_EQ(m->conv->arg(0).as_node(), dq);
}

// Two nodes calling one conv module: convert makes it a reference module once (changing
// it in place twice, the same way), with one set of weight parameters.
// Convert finds observers by their path, whether the paths' symbol ids are close
// together (Prepare's: a table indexed by id) or spread (a hash map), with the same
// graph; and it removes the observer container only if every child is an observer or a
// plan module.
TEST(ConvertTest, ObserversFoundByPathAndContainerRemovedOnlyIfAllObservers) {
  auto converted = [](bool spread_ids, bool foreign_child, std::string* listing,
                      bool* container_removed) {
    auto m = BuildConvPool();
    auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    if (spread_ids) {
      // One more observer, of a path interned thousands of symbols later (no node calls
      // it, no module is there): the ids now span far more than the observers.
      for (int k = 0; k < 5000; ++k) Symbol::Intern(absl::StrCat("spread_ids_filler_", k));
      const Symbol far = Symbol::Intern("observers.spread_ids_unused");
      prepared->observers.emplace(far, prepared->observers.begin()->second->Clone());
    }
    if (foreign_child) {
      ASSERT_TRUE(m->gm.SetModule("observers.not_an_observer", MaxPool1x1()).ok());
    }
    ObserveEveryObserver(*prepared);
    auto report = ConvertToReference(m->gm, *prepared);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->observers_replaced, 3);
    ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
    *listing = Listing(m->gm.graph());
    *container_removed = m->gm.FindModule("observers") == nullptr;
  };
  std::string dense, spread, with_foreign;
  bool dense_removed = false, spread_removed = false, foreign_removed = true;
  converted(/*spread_ids=*/false, /*foreign_child=*/false, &dense, &dense_removed);
  converted(/*spread_ids=*/true, /*foreign_child=*/false, &spread, &spread_removed);
  converted(/*spread_ids=*/false, /*foreign_child=*/true, &with_foreign, &foreign_removed);
  EXPECT_EQ(spread, dense);
  EXPECT_EQ(with_foreign, dense);
  EXPECT_TRUE(dense_removed);
  EXPECT_TRUE(spread_removed);
  EXPECT_FALSE(foreign_removed);
  EXPECT_NE(dense.find("quantize_per_tensor"), std::string::npos) << dense;
}

// x -> conv -> conv (the same module "conv" twice); `a`, `b`: the two calls.
void BuildConvCalledTwice(GraphModule& gm, Node** a, Node** b) {
  ASSERT_TRUE(gm.SetModule("conv", Conv1x1(0.5f)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  *a = *g.AddCallModule("conv", {x});
  *b = *g.AddCallModule("conv", {*a});
  ASSERT_TRUE(g.SetOutput(*b).ok());
}

// A module called twice gets a module per call at prepare (the second a clone under a new
// path), so that lowering can give each call the native module of its own output scale:
// before, one native module served both calls and the second ran it on float input.
TEST(ConvertTest, ModuleCalledTwiceBecomesAReferenceModulePerCall) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node *a = nullptr, *b = nullptr;
  ASSERT_NO_FATAL_FAILURE(BuildConvCalledTwice(gm, &a, &b));
  auto prepared = Prepare(gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(a->target().name(), "conv");
  EXPECT_NE(b->target().name(), "conv");
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << "\n" << Listing(g);
  EXPECT_EQ(report->reference_modules, 2);
  for (const Node* call : {a, b}) {
    const Module* ref = gm.FindModule(call->target().name());
    ASSERT_NE(ref, nullptr) << call->target().name();
    EXPECT_EQ(ref->type().name(), "nnqr.Conv2d");
    std::vector<std::string> tensors;
    for (const auto& [name, tensor] : ref->tensors()) tensors.push_back(name);
    EXPECT_EQ(tensors, (std::vector<std::string>{"weight", "bias", "weight_scale",
                                                 "weight_zero_point", "weight_axis"}));
    EXPECT_EQ(ref->attributes().size(), 10u);  // the conv's 8, weight_qscheme, weight_dtype
    // Symmetric qint8 MinMax on weight 0.5: scale 0.5 / 127.5, zero point 0.
    EXPECT_FLOAT_EQ(ref->FindTensor("weight_scale")->data<float>()[0], 0.5f / 127.5f);
    EXPECT_EQ(*ref->FindTensor("weight_zero_point"), Tensor::FromInt64s({}, {0}));
  }
}

// A module called by a quantized node and by one the mapping keeps float: the quantized
// call gets its own module, the float call keeps the float one.
TEST(PrepareTest, AQuantizedCallOfAModuleAFloatCallSharesGetsItsOwnModule) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node *a = nullptr, *b = nullptr;
  ASSERT_NO_FATAL_FAILURE(BuildConvCalledTwice(gm, &a, &b));
  QConfigMapping mapping = MinMaxMapping();
  // The second nn.Conv2d call (index 1) stays float.
  mapping.SetModuleNameObjectTypeOrder("", "nn.Conv2d", 1, std::nullopt);
  auto prepared = Prepare(gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_NE(a->target().name(), "conv");
  EXPECT_EQ(b->target().name(), "conv");
  ObserveEveryObserver(*prepared);
  auto report = ConvertToReference(gm, *prepared);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(gm.FindModule(a->target().name())->type().name(), "nnqr.Conv2d");
  EXPECT_EQ(gm.FindModule("conv")->type().name(), "nn.Conv2d");
}

TEST(CalibrateTest, RandomSamplesNeedAShape) {
  auto m = BuildConvPool();
  auto samples = RandomCalibrationSamples(m->gm, 2, 5);
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.status().message().find("placeholder 'x'"), std::string::npos);
  auto shaped = RandomCalibrationSamples(m->gm, 2, 5, {{"x", {1, 1, 2, 2}}});
  ASSERT_TRUE(shaped.ok()) << shaped.status();
  ASSERT_EQ(shaped->size(), 2u);
  EXPECT_EQ((*shaped)[0][0].shape(), std::vector<int64_t>({1, 1, 2, 2}));
  EXPECT_FALSE((*shaped)[0][0] == (*shaped)[1][0]);
  // The same seed gives the same inputs.
  EXPECT_TRUE((*shaped)[0][0] == (*RandomCalibrationSamples(m->gm, 1, 5, {{"x", {1, 1, 2, 2}}}))[0][0]);
  for (int64_t i = 0; i < 4; ++i) {
    const float v = (*shaped)[0][0].data<float>()[i];
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

// PyTorch converts an observer that saw nothing with scale 1.0 and zero point 0 (and a
// warning): a model quantized with parameters invented from nothing. Convert refuses it,
// naming the observer, and leaves the graph as it was.
TEST(ConvertTest, ObserverThatSawNoValueIsRefused) {
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  for (const auto& [path, observer] : prepared->observers) {
    EXPECT_TRUE(ObserverSawNoValue(*observer)) << path.name();
  }
  const std::string before = SerializeModel(m->gm);
  auto report = ConvertToReference(m->gm, *prepared);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find(
                "observer node 'activation_post_process_0' (observers.activation_post_process_0) "
                "saw no value"),
            std::string::npos)
      << report.status();
  EXPECT_EQ(SerializeModel(m->gm), before);
}

// With ConvertOptions::uncalibrated_as_pytorch (fuselage.quantize_fx's convert_fx), such an
// observer converts as PyTorch's does, scale 1.0 and zero point 0, and the report names it.
TEST(ConvertTest, ObserverThatSawNoValueTakesPyTorchsDefaultsWhenAsked) {
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ConvertOptions options;
  options.uncalibrated_as_pytorch = true;
  auto report = ConvertToReference(m->gm, *prepared, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->uncalibrated.size(), prepared->observers.size());
  EXPECT_NE(std::find(report->uncalibrated.begin(), report->uncalibrated.end(),
                      "observers.activation_post_process_0"),
            report->uncalibrated.end());
  int quantizes = 0;
  for (const Node* n = m->gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallFunction || n->target().name() != "torch.quantize_per_tensor") {
      continue;
    }
    ++quantizes;
    EXPECT_EQ(n->arg(1).ToString(), "1.0") << n->name();
    EXPECT_EQ(n->arg(2).ToString(), "0") << n->name();
  }
  EXPECT_GT(quantizes, 0);
  EXPECT_TRUE(m->gm.Verify().ok());
}

// A sample tensor without elements gives its observers no value: refused, naming the
// placeholder, before anything is observed (no observer module changes).
TEST(CalibrateTest, SampleWithoutElementsIsRefusedNamingThePlaceholder) {
  auto m = BuildConvPool();
  auto prepared = Prepare(m->gm, MinMaxMapping(), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto kernels = *BuiltinKernels();
  ASSERT_TRUE(RegisterObserverKernels(*kernels).ok());
  const std::string before = SerializeModel(m->gm);
  const std::vector<CalibrationSample> samples = {
      {Tensor::FromFloats({1, 1, 1, 2}, {-1.0f, 3.0f})},
      {*Tensor::Zeros(DType::kFloat32, {0, 1, 2, 2})}};
  auto calibration = Calibrate(m->gm, *prepared, samples, *kernels);
  ASSERT_FALSE(calibration.ok());
  EXPECT_EQ(calibration.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calibration.status().message(),
            "calibrate: sample 1 gives placeholder 'x' a tensor of shape [0, 1, 2, 2], which "
            "has no elements; expected at least one value to observe");
  EXPECT_EQ(SerializeModel(m->gm), before);
}

// Samples are made one at a time: a source of kMaxCalibrationSamples (10^9) samples costs
// nothing until they are asked for, and stopping after three has made three.
TEST(CalibrateTest, RandomSamplesAreMadeOneAtATime) {
  auto m = BuildConvPool();
  const absl::flat_hash_map<std::string, std::vector<int64_t>> shapes = {{"x", {1, 1, 2, 2}}};
  auto source = RandomCalibrationSource(m->gm, kMaxCalibrationSamples, 5, shapes);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->size(), 1000000000);
  std::vector<CalibrationSample> seen;
  const absl::Status stopped = source->ForEach([&](CalibrationSample sample) {
    seen.push_back(std::move(sample));
    return seen.size() == 3 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  EXPECT_EQ(stopped, absl::CancelledError("enough"));
  ASSERT_EQ(seen.size(), 3u);
  // The same inputs as the samples made all at once, from the same seed, and each pass
  // over the source makes them again.
  auto all = RandomCalibrationSamples(m->gm, 3, 5, shapes);
  ASSERT_TRUE(all.ok()) << all.status();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(seen[i][0] == (*all)[i][0]) << i;
  std::vector<CalibrationSample> again;
  (void)source->ForEach([&](CalibrationSample sample) {
    again.push_back(std::move(sample));
    return absl::CancelledError("one");
  });
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0][0] == seen[0][0]);

  for (int64_t count : {int64_t{0}, kMaxCalibrationSamples + 1}) {
    auto bad = RandomCalibrationSource(m->gm, count, 5, shapes);
    ASSERT_FALSE(bad.ok()) << count;
    EXPECT_NE(bad.status().message().find("expected 1 to 1000000000"), std::string::npos)
        << bad.status();
  }
}

// A placeholder shape past Tensor::kMaxElements (2^28), given or recorded in the model,
// is refused naming the placeholder before any sample is made (it used to abort on the
// failed allocation of the first sample).
TEST(CalibrateTest, ShapeOverTheTensorLimitIsRefusedBeforeAnySample) {
  auto m = BuildConvPool();
  auto given = RandomCalibrationSource(m->gm, 1, 5, {{"x", {int64_t{1} << 31}}});
  ASSERT_FALSE(given.ok());
  EXPECT_EQ(given.status().message(),
            "calibrate: placeholder 'x': shape [2147483648] has more than 268435456 elements");
  given = RandomCalibrationSource(m->gm, 1, 5, {{"x", {1, 4, 20000, 20000}}});
  ASSERT_FALSE(given.ok());
  EXPECT_NE(given.status().message().find("placeholder 'x'"), std::string::npos);

  ASSERT_TRUE(m->gm.graph().SetMeta(m->x, "shape", Argument::Ints({1 << 16, 1 << 15})).ok());
  auto recorded = RandomCalibrationSource(m->gm, 8, 5);
  ASSERT_FALSE(recorded.ok());
  EXPECT_EQ(recorded.status().message(),
            "calibrate: placeholder 'x': shape [65536, 32768] has more than 268435456 "
            "elements");
  // The limit itself is accepted (no sample is made yet, so nothing is allocated).
  ASSERT_TRUE(m->gm.graph().SetMeta(m->x, "shape", Argument::Ints({1 << 14, 1 << 14})).ok());
  EXPECT_TRUE(RandomCalibrationSource(m->gm, 8, 5).ok());
}

}  // namespace
}  // namespace fuselage
