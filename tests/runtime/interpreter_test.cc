// The interpreter: input binding, get_attr, dispatch, nested outputs, the observer hook,
// user kernels, and errors that name the node.
#include "runtime/interpreter.h"

#include <omp.h>
#include <sys/resource.h>

#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "graph/check.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "runtime/builtin_kernels.h"
#include "runtime/float_kernels.h"
#include "runtime/kernel_args.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Floats(const Value& v) {
  const Tensor& t = v.as_tensor();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::unique_ptr<KernelRegistry> Kernels() {
  auto kernels = BuiltinKernels();
  FUSELAGE_CHECK(kernels.ok());
  return *std::move(kernels);
}

// x, y -> (x + y, (relu(x), x.size(1)))
std::unique_ptr<GraphModule> NestedOutputModule() {
  auto gm = std::make_unique<GraphModule>();
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddPlaceholder("y");
  Node* add = *g.AddCallFunction("operator.add", {x, y});
  Node* relu = *g.AddCallMethod("relu", {x});
  Node* size = *g.AddCallMethod("size", {x, Argument::Int(1)});
  FUSELAGE_CHECK(g.SetOutput(Argument::Tuple({add, Argument::Tuple({relu, size})})).ok());
  return gm;
}

TEST(InterpreterTest, RunsAndKeepsOrFlattensTheOutputStructure) {
  auto gm = NestedOutputModule();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  auto kernels = Kernels();
  const Tensor x = Tensor::FromFloats({1, 3}, {-1, 2, -3});
  const Tensor y = Tensor::FromFloats({1, 3}, {10, 20, 30});

  auto structured = RunStructured(*gm, {x, y}, *kernels);
  ASSERT_TRUE(structured.ok()) << structured.status();
  ASSERT_TRUE(structured->is_tuple());
  ASSERT_EQ(structured->items().size(), 2u);
  EXPECT_THAT(Floats(structured->items()[0]), ElementsAre(9, 22, 27));
  const Value& inner = structured->items()[1];
  ASSERT_TRUE(inner.is_tuple());
  EXPECT_THAT(Floats(inner.items()[0]), ElementsAre(0, 2, 0));
  EXPECT_EQ(inner.items()[1].as_int(), 3);

  auto flat = fuselage::Run(*gm, {x, y}, *kernels);
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_EQ(flat->size(), 3u);
  EXPECT_THAT(Floats((*flat)[0]), ElementsAre(9, 22, 27));
  EXPECT_THAT(Floats((*flat)[1]), ElementsAre(0, 2, 0));
  EXPECT_EQ((*flat)[2].as_int(), 3);
}

TEST(InterpreterTest, ObserverSeesEveryNodeInOrder) {
  auto gm = NestedOutputModule();
  auto kernels = Kernels();
  std::vector<std::string> seen;
  RunOptions options;
  options.observer = [&](const Node& node, const Value& value) {
    seen.push_back(absl::StrCat(node.name(), ":", value.KindName()));
    return absl::OkStatus();
  };
  auto out = fuselage::Run(*gm, {Tensor::FromFloats({1, 1}, {1}), Tensor::FromFloats({1, 1}, {2})},
                           *kernels, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(seen, ElementsAre("x:Tensor", "y:Tensor", "add:Tensor", "relu:Tensor", "size:int"));
}

TEST(InterpreterTest, ObserverErrorStopsTheRunNamingTheNode) {
  auto gm = NestedOutputModule();
  auto kernels = Kernels();
  RunOptions options;
  options.observer = [](const Node& node, const Value&) {
    return node.name() == "add" ? absl::FailedPreconditionError("observer full")
                                : absl::OkStatus();
  };
  auto out = fuselage::Run(*gm, {Tensor::FromFloats({1}, {1}), Tensor::FromFloats({1}, {2})},
                           *kernels, options);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), HasSubstr("node 'add'"));
  EXPECT_THAT(out.status().message(), HasSubstr("observer full"));
}

TEST(InterpreterTest, WrongInputCountIsAnError) {
  auto gm = NestedOutputModule();
  auto out = fuselage::Run(*gm, {Tensor::FromFloats({1}, {1})}, *Kernels());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("takes 2 inputs; got 1"));
}

TEST(InterpreterTest, GetAttrYieldsTensorsAndRejectsModules) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("sub", std::make_unique<Module>("nn.Module")).ok());
  ASSERT_TRUE(gm.SetTensor("sub.scale", Tensor::FromFloats({2}, {2, 3})).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* scale = *gm.graph().AddGetAttr("sub.scale");
  Node* mul = *gm.graph().AddCallFunction("torch.mul", {x, scale});
  ASSERT_TRUE(gm.graph().SetOutput(mul).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto kernels = Kernels();
  auto out = fuselage::Run(gm, {Tensor::FromFloats({2}, {5, 7})}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats((*out)[0]), ElementsAre(10, 21));

  GraphModule bad;
  ASSERT_TRUE(bad.SetModule("sub", std::make_unique<Module>("nn.Module")).ok());
  Node* attr = *bad.graph().AddGetAttr("sub", "sub_attr");
  ASSERT_TRUE(bad.graph().SetOutput(attr).ok());
  auto error = fuselage::Run(bad, {}, *kernels);
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(error.status().message(), HasSubstr("node 'sub_attr'"));
  EXPECT_THAT(error.status().message(), HasSubstr("is a module"));
}

TEST(InterpreterTest, MissingKernelIsUnimplementedNamingNodeAndTarget) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* op = *gm.graph().AddCallFunction("torch.erfinv", {x}, {}, "mystery");
  ASSERT_TRUE(gm.graph().SetOutput(op).ok());
  auto out = fuselage::Run(gm, {Tensor::FromFloats({1}, {0})}, *Kernels());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(out.status().message(), HasSubstr("node 'mystery'"));
  EXPECT_THAT(out.status().message(), HasSubstr("torch.erfinv"));

  // A module type with a schema but no kernel.
  GraphModule gm2;
  ASSERT_TRUE(gm2.SetModule("act", std::make_unique<Module>("nn.MaxPool3d")).ok());
  Node* y = *gm2.graph().AddPlaceholder("y");
  Node* call = *gm2.graph().AddCallModule("act", {y});
  ASSERT_TRUE(gm2.graph().SetOutput(call).ok());
  ASSERT_TRUE(gm2.Verify().ok()) << gm2.Verify();
  auto out2 = fuselage::Run(gm2, {Tensor::FromFloats({1}, {0})}, *Kernels());
  EXPECT_EQ(out2.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(out2.status().message(), HasSubstr("node 'act'"));
  EXPECT_THAT(out2.status().message(), HasSubstr("nn.MaxPool3d"));
}

// An opaque node (a PyTorch model's own function, graph/node.h kOpaqueMeta) has no kernel
// by design: the run is refused before any node runs, naming it, even where a kernel of
// the same name exists (the function is the model's, not the kernel's).
TEST(InterpreterTest, OpaqueNodeIsRefusedBeforeAnyNodeRuns) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* relu = *gm.graph().AddCallFunction("torch.relu", {x});
  Node* eq = *gm.graph().AddCallFunction("operator.eq", {relu, Argument::Int(1)}, {}, "eq");
  ASSERT_TRUE(gm.graph().SetMeta(eq, kOpaqueMeta, Argument::Bool(true)).ok());
  ASSERT_TRUE(gm.graph().SetOutput(relu).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  int nodes_run = 0;
  RunOptions options;
  options.observer = [&](const Node&, const Value&) {
    ++nodes_run;
    return absl::OkStatus();
  };
  auto out = fuselage::Run(gm, {Tensor::FromFloats({1}, {1})}, *Kernels(), options);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), HasSubstr("node 'eq' (call_function operator.eq)"));
  EXPECT_THAT(out.status().message(), HasSubstr("an opaque node"));
  EXPECT_EQ(nodes_run, 0);

  // Without it, the rest runs.
  ASSERT_TRUE(gm.graph().Erase(eq).ok());
  auto ran = fuselage::Run(gm, {Tensor::FromFloats({1}, {-2})}, *Kernels());
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_THAT(Floats((*ran)[0]), ElementsAre(0));
}

TEST(InterpreterTest, KernelErrorsNameTheNode) {
  // A conv with 3 input channels fed 2 channels.
  GraphModule gm;
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 3, 1, 1}, {1, 1, 1}));
  ASSERT_TRUE(gm.SetModule("features.conv", std::move(conv)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* call = *gm.graph().AddCallModule("features.conv", {x});
  ASSERT_TRUE(gm.graph().SetOutput(call).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Tensor::FromFloats({1, 2, 1, 1}, {1, 2})}, *Kernels());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("node 'features_conv' (call_module features.conv)"));
  EXPECT_THAT(out.status().message(), HasSubstr("expects 3 input channels"));
}

// A kernel whose allocation fails is that node's error (ResourceExhausted, naming it),
// not an uncaught std::bad_alloc that aborts the process.
TEST(InterpreterTest, KernelOutOfMemoryIsAStatusNamingTheNode) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* call = *gm.graph().AddCallFunction("test.hungry", {x});
  ASSERT_TRUE(gm.graph().SetOutput(call).ok());
  auto kernels = Kernels();
  ASSERT_TRUE(kernels
                  ->RegisterFunction(OpKind::kCallFunction, "test.hungry",
                                     [](const KernelContext&, absl::Span<const Value>,
                                        const ValueKwargs&) -> absl::StatusOr<Value> {
                                       throw std::bad_alloc();
                                     })
                  .ok());
  auto out = fuselage::Run(gm, {Tensor::FromFloats({1}, {1})}, *kernels);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(out.status().message(),
            "node 'hungry' (call_function test.hungry): out of memory running its kernel");
}

TEST(InterpreterTest, UserModuleTypeWithItsOwnSchemaAndKernel) {
  ASSERT_TRUE(ModuleSchemaRegistry::Global().Register({"test.Scale", 1, 1, {}}).ok());
  GraphModule gm;
  auto scale = std::make_unique<Module>("test.Scale");
  scale->SetAttribute("factor", Argument::Float(2.5));
  ASSERT_TRUE(gm.SetModule("scale", std::move(scale)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* call = *gm.graph().AddCallModule("scale", {x});
  Node* relu = *gm.graph().AddCallFunction("torch.relu", {call});
  ASSERT_TRUE(gm.graph().SetOutput(relu).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  auto kernels = Kernels();
  ASSERT_TRUE(kernels
                  ->RegisterModule("test.Scale",
                                   [](const KernelContext&, const Module& m,
                                      absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
                                     ArgReader r(args, kwargs);
                                     ASSIGN_OR_RETURN(const Tensor* t, r.GetFloatTensor(0, "x"));
                                     ASSIGN_OR_RETURN(double f, m.GetFloat("factor"));
                                     Tensor out = *t;
                                     for (int64_t i = 0; i < out.numel(); ++i) {
                                       out.mutable_data<float>()[i] *= static_cast<float>(f);
                                     }
                                     return Value(out);
                                   })
                  .ok());
  const Tensor input = Tensor::FromFloats({3}, {-2, 0, 4});
  auto out = fuselage::Run(gm, {input}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats((*out)[0]), ElementsAre(0, 0, 10));
  // The caller's input is untouched (copy on write).
  EXPECT_EQ(input.data<float>()[0], -2);
}

TEST(InterpreterTest, GraphWithoutOutputIsAnError) {
  GraphModule gm;
  ASSERT_TRUE(gm.graph().AddPlaceholder("x").ok());
  EXPECT_EQ(fuselage::Run(gm, {Value::None()}, *Kernels()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InterpreterTest, IntermediateValuesAreFreedAfterTheirLastUser) {
  // 1000 chained adds of a 1 MiB tensor: 1 GiB if every value were kept; a few MiB when
  // each is freed after its only user ran. Peak RSS of the whole test process tells.
  GraphModule gm;
  Node* last = *gm.graph().AddPlaceholder("x");
  for (int i = 0; i < 1000; ++i) {
    last = *gm.graph().AddCallFunction("operator.add", {last, Argument::Float(1.0)});
  }
  ASSERT_TRUE(gm.graph().SetOutput(last).ok());
  std::vector<float> zeros(256 * 1024, 0.0f);
  auto out = fuselage::Run(gm, {Tensor::FromFloats({256 * 1024}, zeros)}, *Kernels());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].as_tensor().data<float>()[12345], 1000.0f);
  struct rusage usage;
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 400 * 1024) << "peak RSS in KiB";
}

// x [2, 16, 20, 20] -> conv 3x3 (16 -> 32, padding 1) -> relu -> conv 3x3 (32 -> 32):
// enough work per conv that oneDNN splits it over every thread it is given. Seeded weights.
std::unique_ptr<GraphModule> TwoConvModule() {
  auto gm = std::make_unique<GraphModule>();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto conv = [&](const std::string& name, int64_t in, int64_t out) {
    std::vector<float> w(static_cast<size_t>(out * in * 9));
    for (float& f : w) f = u(rng);
    std::vector<float> b(static_cast<size_t>(out));
    for (float& f : b) f = u(rng);
    auto m = std::make_unique<Module>("nn.Conv2d");
    m->SetTensor("weight", Tensor::FromFloats({out, in, 3, 3}, w));
    m->SetTensor("bias", Tensor::FromFloats({out}, b));
    m->SetAttribute("in_channels", Argument::Int(in));
    m->SetAttribute("out_channels", Argument::Int(out));
    m->SetAttribute("kernel_size", Argument::Ints({3, 3}));
    m->SetAttribute("stride", Argument::Ints({1, 1}));
    m->SetAttribute("padding", Argument::Ints({1, 1}));
    m->SetAttribute("dilation", Argument::Ints({1, 1}));
    m->SetAttribute("groups", Argument::Int(1));
    m->SetAttribute("padding_mode", Argument::String("zeros"));
    FUSELAGE_CHECK(gm->SetModule(name, std::move(m)).ok());
  };
  conv("conv1", 16, 32);
  conv("conv2", 32, 32);
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* c1 = *g.AddCallModule("conv1", {x});
  Node* r = *g.AddCallMethod("relu", {c1});
  Node* c2 = *g.AddCallModule("conv2", {r});
  FUSELAGE_CHECK(g.SetOutput(c2).ok());
  return gm;
}

Tensor SeededInput(const std::vector<int64_t>& shape, int64_t numel) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(numel));
  for (float& f : v) f = u(rng);
  return Tensor::FromFloats(shape, v);
}

TEST(InterpreterTest, ThreadsReachTheKernelsAndAreRestoredAfterTheRun) {
  auto gm = TwoConvModule();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  auto kernels = Kernels();
  const Tensor x = SeededInput({2, 16, 20, 20}, 2 * 16 * 20 * 20);
  const int before = omp_get_max_threads();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    // OpenMP's count as a kernel running on this thread sees it (what oneDNN reads).
    std::vector<int> seen;
    RunOptions options;
    options.threads = threads;
    options.observer = [&](const Node&, const Value&) {
      seen.push_back(omp_get_max_threads());
      return absl::OkStatus();
    };
    ASSERT_TRUE(fuselage::Run(*gm, {x}, *kernels, options).ok());
    EXPECT_THAT(seen, ::testing::Each(threads));
    EXPECT_EQ(omp_get_max_threads(), before);
  }
  // 0 leaves OpenMP's own default in place.
  std::vector<int> seen;
  RunOptions defaults;
  defaults.observer = [&](const Node&, const Value&) {
    seen.push_back(omp_get_max_threads());
    return absl::OkStatus();
  };
  ASSERT_TRUE(fuselage::Run(*gm, {x}, *kernels, defaults).ok());
  EXPECT_THAT(seen, ::testing::Each(before));
}

TEST(InterpreterTest, ConvResultsAreBitIdenticalForEveryThreadCount) {
  auto gm = TwoConvModule();
  auto kernels = Kernels();
  const Tensor x = SeededInput({2, 16, 20, 20}, 2 * 16 * 20 * 20);
  std::vector<Tensor> results;
  for (int threads : {1, 2, 4, 0}) {
    RunOptions options;
    options.threads = threads;
    auto out = fuselage::Run(*gm, {x}, *kernels, options);
    ASSERT_TRUE(out.ok()) << out.status();
    results.push_back((*out)[0].as_tensor());
  }
  const Tensor& one = results[0];
  ASSERT_EQ(one.shape(), (std::vector<int64_t>{2, 32, 20, 20}));
  for (size_t i = 1; i < results.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(results[i].shape(), one.shape());
    EXPECT_EQ(std::memcmp(results[i].data<float>(), one.data<float>(),
                          sizeof(float) * static_cast<size_t>(one.numel())),
              0);
  }
}

TEST(InterpreterTest, ThreadCountOutOfRangeIsRefusedBeforeAnyNodeRuns) {
  auto gm = TwoConvModule();
  auto kernels = Kernels();
  const Tensor x = SeededInput({1, 16, 4, 4}, 16 * 4 * 4);
  for (int threads : {-1, kMaxThreads + 1}) {
    int nodes_run = 0;
    RunOptions options;
    options.threads = threads;
    options.observer = [&](const Node&, const Value&) {
      ++nodes_run;
      return absl::OkStatus();
    };
    auto out = fuselage::Run(*gm, {x}, *kernels, options);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(),
                HasSubstr(absl::StrCat("threads is ", threads, "; expected 1 to 1024")));
    EXPECT_EQ(nodes_run, 0);
  }
}

}  // namespace
}  // namespace fuselage
