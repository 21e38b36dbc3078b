// PrintCode renders what torch.fx's codegen renders. The goldens under testdata/ were
// written by PyTorch 1.13 itself (make_fx_goldens.py); these tests build the same graphs
// with the C++ API and compare.
#include "graph/printer.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace {

std::string ReadGolden(const std::string& name) {
  std::ifstream in("tests/graph/testdata/" + name);
  std::stringstream contents;
  contents << in.rdbuf();
  EXPECT_TRUE(in.good() || in.eof()) << "cannot read golden " << name;
  return contents.str();
}

TEST(PrinterTest, ConvBnAddReluMatchesTorchFx) {
  auto gm = testing::MakeConvBnAddRelu();
  EXPECT_EQ(PrintCode(*gm), ReadGolden("fx_code_residual.txt"));
}

// Mixed.forward of make_fx_goldens.py, node for node as symbolic_trace records it.
TEST(PrinterTest, EveryKindOfStatementMatchesTorchFx) {
  GraphModule gm;
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {1.0f}));  // a 1x1 conv
  ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
  ASSERT_TRUE(gm.SetModule("layer1.0", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddPlaceholder("y");
  Node* c = *g.AddCallModule("conv", {x});
  Node* l = *g.AddCallModule("layer1.0", {c});
  Node* flatten = *g.AddCallFunction("torch.flatten", {l}, {{Symbol::Intern("start_dim"), Argument::Int(1)}});
  Node* view = *g.AddCallMethod("view", {flatten, Argument::Int(1), Argument::Int(-1)});
  Node* dq = *g.AddCallMethod("dequantize", {view});
  Node* w = *g.AddGetAttr("conv.weight");
  Node* item = *g.AddCallFunction("operator.getitem", {y, Argument::Int(0)});
  Node* neg = *g.AddCallFunction("operator.neg", {item});
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {dq, Argument::Float(0.1), Argument::Int(3), Argument::Dtype(DType::kQUInt8)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple(
                              {c, q, w, neg, Argument::Float(1e-5),
                               Argument::List({Argument::Float(0.5), Argument::String("a"),
                                               Argument::None(), Argument::Bool(true)})}))
                  .ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(PrintCode(gm), ReadGolden("fx_code_mixed.txt"));
}

TEST(PrinterTest, ReadableFormAnnotatesModuleTypes) {
  auto gm = testing::MakeConvBnAddRelu();
  EXPECT_EQ(PrintReadable(*gm),
            "class GraphModule(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        identity = self.identity(x)  # nn.Identity\n"
            "        conv = self.conv(x)  # nn.Conv2d\n"
            "        bn = self.bn(conv)  # nn.BatchNorm2d\n"
            "        add = bn + identity\n"
            "        relu = self.relu(add)  # nn.ReLU\n"
            "        return relu\n");
}

TEST(PrinterTest, OperatorsWithTheWrongArityPrintAsCalls) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  ASSERT_TRUE(gm.graph().AddCallFunction("operator.add", {x}).ok());
  ASSERT_TRUE(gm.graph().AddCallFunction("operator.add", {x, x}, {{Symbol::Intern("k"), x}}).ok());
  ASSERT_TRUE(gm.graph().AddCallFunction("getattr", {x, Argument::String("shape")}, {}, "shape").ok());
  ASSERT_TRUE(gm.graph().SetOutput(x).ok());
  EXPECT_EQ(PrintCode(gm),
            "def forward(self, x):\n"
            "    add = operator.add(x)\n"
            "    add_1 = operator.add(x, x, k = x)\n"
            "    shape = x.shape\n"
            "    return x\n");
}

// The expectations are Python's own repr() of the same values.
TEST(PrinterTest, ConstantsPrintAsPythonRepr) {
  EXPECT_EQ(PythonRepr(Argument::Float(0.1)), "0.1");
  EXPECT_EQ(PythonRepr(Argument::Float(1e-05)), "1e-05");
  EXPECT_EQ(PythonRepr(Argument::Float(1e16)), "1e+16");
  EXPECT_EQ(PythonRepr(Argument::Float(2.0)), "2.0");
  EXPECT_EQ(PythonRepr(Argument::Float(123456789.0)), "123456789.0");
  EXPECT_EQ(PythonRepr(Argument::Float(-0.5)), "-0.5");
  EXPECT_EQ(PythonRepr(Argument::Float(1.5e-07)), "1.5e-07");
  EXPECT_EQ(PythonRepr(Argument::Float(0.0001)), "0.0001");
  EXPECT_EQ(PythonRepr(Argument::Float(0.0001234)), "0.0001234");
  EXPECT_EQ(PythonRepr(Argument::Float(1234567890123456.0)), "1234567890123456.0");
  EXPECT_EQ(PythonRepr(Argument::Float(3e20)), "3e+20");
  EXPECT_EQ(PythonRepr(Argument::Float(5e-324)), "5e-324");
  EXPECT_EQ(PythonRepr(Argument::Float(1.0 / 3.0)), "0.3333333333333333");
  EXPECT_EQ(PythonRepr(Argument::Float(std::numeric_limits<double>::infinity())), "inf");
  EXPECT_EQ(PythonRepr(Argument::String("it's")), "\"it's\"");
  EXPECT_EQ(PythonRepr(Argument::String("a\"b")), "'a\"b'");
  EXPECT_EQ(PythonRepr(Argument::String("x\ny")), "'x\\ny'");
  EXPECT_EQ(PythonRepr(Argument::String("both'\"")), "'both\\'\"'");
  EXPECT_EQ(PythonRepr(Argument::Tuple({Argument::Int(1)})), "(1,)");
  EXPECT_EQ(PythonRepr(Argument::Tuple({})), "()");
  EXPECT_EQ(PythonRepr(Argument::Dtype(DType::kQInt8)), "torch.qint8");
}

}  // namespace
}  // namespace fuselage
