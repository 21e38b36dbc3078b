// Model files: Save -> Load -> Save is byte-identical (binary and text), and every kind
// of bad file is rejected with an InvalidArgument error naming the node (or module,
// tensor) and the field, never a crash.
#include "graph/serialization.h"

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/printer.h"
#include "gtest/gtest.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace {

using ::fuselage::testing::MakeConvBnAddRelu;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Every arg kind, kwargs, meta, quantized per-tensor and per-channel tensors, nested
// modules with a digit path, attributes of each kind.
std::unique_ptr<GraphModule> MakeRichModule() {
  auto gm = MakeConvBnAddRelu();
  auto qconv = std::make_unique<Module>("nnq.Conv2d");
  auto weight = Tensor::FromBytes(DType::kQInt8, {2, 1, 1, 1}, std::string("\x01\xff", 2),
                                  QuantParams::PerChannel({0.5, 0.25}, {0, -3}, 0));
  EXPECT_TRUE(weight.ok());
  qconv->SetTensor("weight", *weight);
  qconv->SetAttribute("scale", Argument::Float(0.125));
  qconv->SetAttribute("zero_point", Argument::Int(3));
  qconv->SetAttribute("padding", Argument::Ints({1, 1}));
  qconv->SetAttribute("padding_mode", Argument::String("zeros"));
  qconv->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
  qconv->SetAttribute("bias_is_none", Argument::Bool(true));
  EXPECT_TRUE(gm->SetModule("layer1.0.qconv", std::move(qconv)).ok());
  auto scale = Tensor::FromBytes(DType::kQUInt8, {}, std::string("\x07", 1),
                                 QuantParams::PerTensor(0.1, 128));
  EXPECT_TRUE(scale.ok());
  EXPECT_TRUE(gm->SetTensor("_tensor_constant0", *scale).ok());

  Graph& g = gm->graph();
  Node* relu = g.FindNode("relu");
  Node* c = *g.InsertAfter(relu, {OpKind::kGetAttr, Symbol::Intern("_tensor_constant0"), {}, {}, ""});
  Node* q = *g.InsertAfter(c, {OpKind::kCallFunction, Symbol::Intern("torch.quantize_per_tensor"),
                               {relu, Argument::Float(0.1), Argument::Int(128),
                                Argument::Dtype(DType::kQUInt8)},
                               {{Symbol::Intern("extra"),
                                 Argument::List({Argument::None(), Argument::Bool(false),
                                                 Argument::Tuple({c, Argument::String("s'q")}),
                                                 Argument::List({})})}},
                               ""});
  Node* qc = *g.InsertAfter(q, {OpKind::kCallModule, Symbol::Intern("layer1.0.qconv"), {q}, {}, ""});
  Node* dq = *g.InsertAfter(qc, {OpKind::kCallMethod, Symbol::Intern("dequantize"), {qc}, {}, ""});
  EXPECT_TRUE(g.SetMeta(qc, "pattern", Argument::String("conv")).ok());
  EXPECT_TRUE(g.SetMeta(qc, "shape", Argument::Ints({1, 2, 3, 3})).ok());
  EXPECT_TRUE(g.SetArg(g.output(), 0, Argument::Tuple({relu, dq})).ok());
  EXPECT_TRUE(gm->Verify().ok()) << gm->Verify();
  return gm;
}

TEST(SerializationTest, BinarySaveLoadSaveIsByteIdentical) {
  auto gm = MakeRichModule();
  const std::string path = TempPath("rich.pb");
  ASSERT_TRUE(SaveModel(*gm, path).ok());
  auto loaded = LoadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->Verify().ok());
  const std::string again = TempPath("rich_again.pb");
  ASSERT_TRUE(SaveModel(**loaded, again).ok());
  auto first = ReadFile(path, 1 << 20);
  auto second = ReadFile(again, 1 << 20);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(first->empty());
  EXPECT_EQ(*first, *second);
}

TEST(SerializationTest, TextSaveLoadSaveIsByteIdentical) {
  auto gm = MakeRichModule();
  const std::string path = TempPath("rich.textproto");
  ASSERT_TRUE(SaveModel(*gm, path).ok());
  auto loaded = LoadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(SerializeModelText(**loaded), *ReadFile(path, 1 << 20));
  // The text form really is text.
  EXPECT_THAT(*ReadFile(path, 1 << 20), HasSubstr("op: CALL_MODULE"));
}

// Weights of every storage a buffer can have (small, medium in a shared region, large
// in a huge-page mapping; the loader hands the parsed bytes to the tensors): a file
// loaded (binary and text) and a model parsed from memory have the same bytes, and a
// second save is identical.
TEST(SerializationTest, LargeTensorsRoundTrip) {
  auto gm = MakeConvBnAddRelu();
  std::vector<int64_t> sizes = {3, 5000, int64_t{100} << 10, (int64_t{2} << 20) + 5};
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string bytes(static_cast<size_t>(sizes[i]) * sizeof(float), '\0');
    for (size_t b = 0; b < bytes.size(); b += 7) bytes[b] = static_cast<char>(b * 13 + i);
    auto t = Tensor::FromBytes(DType::kFloat32, {sizes[i]}, std::move(bytes));
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(gm->SetTensor(absl::StrCat("_tensor_constant", i), *t).ok());
  }
  const std::string serialized = SerializeModel(*gm);
  for (const std::string name : {"large.pb", "large.textproto", ""}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<GraphModule>> loaded;
    if (name.empty()) {
      loaded = ParseModel(serialized);
    } else {
      ASSERT_TRUE(SaveModel(*gm, TempPath(name)).ok());
      loaded = LoadModel(TempPath(name));
    }
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string tensor = absl::StrCat("_tensor_constant", i);
      ASSERT_NE((*loaded)->FindTensor(tensor), nullptr) << tensor;
      EXPECT_TRUE(*(*loaded)->FindTensor(tensor) == *gm->FindTensor(tensor)) << tensor;
    }
    EXPECT_TRUE(SerializeModel(**loaded) == serialized);
  }
}

TEST(SerializationTest, RoundTripKeepsEverything) {
  auto gm = MakeRichModule();
  auto loaded = ParseModel(SerializeModel(*gm));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const GraphModule& l = **loaded;
  EXPECT_EQ(PrintCode(l), PrintCode(*gm));
  const Node* qc = l.graph().FindNode("layer1_0_qconv");
  ASSERT_NE(qc, nullptr);
  EXPECT_EQ(qc->FindMeta("pattern")->as_string(), "conv");
  EXPECT_EQ(*qc->FindMeta("shape"), Argument::Ints({1, 2, 3, 3}));
  const Node* q = l.graph().FindNode("quantize_per_tensor");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->FindKwarg("extra")->ToString(),
            "[None, False, (_tensor_constant0, 's'q'), []]");
  EXPECT_EQ(q->arg(3).as_dtype(), DType::kQUInt8);
  const Module* qconv = l.FindModule("layer1.0.qconv");
  ASSERT_NE(qconv, nullptr);
  EXPECT_EQ(*qconv->FindTensor("weight"), *gm->FindModule("layer1.0.qconv")->FindTensor("weight"));
  EXPECT_EQ(qconv->FindTensor("weight")->qparams().zero_points, (std::vector<int64_t>{0, -3}));
  EXPECT_EQ(*l.FindTensor("_tensor_constant0"), *gm->FindTensor("_tensor_constant0"));
  EXPECT_EQ(*qconv->FindAttribute("weight_dtype"), Argument::Dtype(DType::kQInt8));
  // Use-lists are derived on load, not read from the file.
  EXPECT_EQ(testing::UseListMismatch(l.graph()), "");
  EXPECT_EQ(l.graph().FindNode("relu")->num_users(), 2u);
}

// ---- Bad files ----------------------------------------------------------------------

constexpr char kRoot[] = R"pb(
  root {
    type: "GraphModule"
    children { name: "relu" module { type: "nn.ReLU" } }
  }
)pb";

std::string Model(const std::string& nodes, const std::string& root = kRoot) {
  return absl::StrCat("format_version: 1\ngraph {\n", nodes, "}\n", root);
}

constexpr char kXAndOutput[] = R"pb(
  nodes { name: "x" op: PLACEHOLDER target: "x" }
  nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } }
)pb";

// A root holding one tensor `t` described by `tensor` (a proto::Tensor in text).
std::string WithTensor(const std::string& tensor) {
  return Model(kXAndOutput, absl::StrCat(R"pb(root { type: "GraphModule" tensors { name: "t" tensor { )pb",
                                         tensor, "} } }"));
}

// Expects InvalidArgument whose message contains every one of `parts`.
void ExpectRejected(const absl::StatusOr<std::unique_ptr<GraphModule>>& result,
                    std::initializer_list<const char*> parts) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  for (const char* part : parts) {
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(part));
  }
}

TEST(BadModelTest, TheBaseTextIsValid) {
  EXPECT_TRUE(ParseModelText(Model(kXAndOutput)).ok());
  EXPECT_TRUE(ParseModelText(WithTensor(R"pb(dtype: FLOAT32 shape: 2 data: "12345678")pb")).ok());
}

TEST(BadModelTest, EveryTruncationIsRejected) {
  const std::string bytes = SerializeModel(*MakeRichModule());
  for (size_t size = 0; size < bytes.size(); ++size) {
    auto result = ParseModel(absl::string_view(bytes.data(), size));
    ASSERT_FALSE(result.ok()) << "a prefix of " << size << " of " << bytes.size() << " bytes loaded";
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(BadModelTest, GarbageIsRejected) {
  ExpectRejected(ParseModel("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
                 {"protobuf parse failed"});
  ExpectRejected(ParseModelText("graph { nodes { name: "), {"does not parse", "line 1"});
}

// Random corruption must give an error or a model that verifies, never a crash.
TEST(BadModelTest, CorruptedBytesNeverCrash) {
  const std::string bytes = SerializeModel(*MakeRichModule());
  std::mt19937 random(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = bytes;
    const int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f) {
      corrupt[random() % corrupt.size()] = static_cast<char>(random() & 0xff);
    }
    auto result = ParseModel(corrupt);
    if (result.ok()) {
      EXPECT_TRUE((*result)->Verify().ok());
    } else {
      EXPECT_FALSE(result.status().message().empty());
    }
  }
}

TEST(BadModelTest, DanglingReference) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "r" op: CALL_FUNCTION target: "torch.relu" args { list { items { node: "ghost" } } } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "r" } }
  )pb")),
                 {"node 'r' args[0][0]", "'ghost'", "does not exist"});
}

TEST(BadModelTest, DanglingReferenceInKwargs) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "r" op: CALL_FUNCTION target: "torch.relu" args { node: "x" }
            kwargs { name: "out" value { node: "ghost" } } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "r" } }
  )pb")),
                 {"node 'r' kwargs['out']", "'ghost'"});
}

TEST(BadModelTest, ForwardReferenceAndCycle) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "a" op: CALL_FUNCTION target: "torch.relu" args { node: "b" } }
    nodes { name: "b" op: CALL_FUNCTION target: "torch.relu" args { node: "a" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "b" } }
  )pb")),
                 {"node 'a'", "'b'", "does not come before it"});
}

TEST(BadModelTest, DuplicateNames) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "x" op: CALL_FUNCTION target: "torch.relu" }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } }
  )pb")),
                 {"node #1 'x'", "field 'name'", "duplicates node #0"});
}

TEST(BadModelTest, EmptyNameAndTarget) {
  ExpectRejected(ParseModelText(Model(R"pb(nodes { op: PLACEHOLDER target: "x" })pb")),
                 {"node #0", "field 'name' is empty"});
  ExpectRejected(ParseModelText(Model(R"pb(nodes { name: "x" op: PLACEHOLDER })pb")),
                 {"node #0 'x'", "field 'target' is empty"});
}

TEST(BadModelTest, NamesMustBeIdentifiers) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x y" op: PLACEHOLDER target: "x" }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "x y" } }
  )pb")),
                 {"node #0", "field 'name' is 'x y'", "expected an identifier"});
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "1x" op: PLACEHOLDER target: "x" }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "1x" } }
  )pb")),
                 {"node #0", "field 'name' is '1x'"});
}

TEST(BadModelTest, UnknownOpKind) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "weird" op: 9 target: "torch.relu" args { node: "x" } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } }
  )pb")),
                 {"node #1 'weird'", "field 'op' is 9", "expected one of placeholder"});
  ExpectRejected(ParseModelText(Model(R"pb(nodes { name: "x" target: "x" })pb")),
                 {"node #0 'x'", "field 'op' is 0"});
}

TEST(BadModelTest, ArgWithoutValueOrUnknownDtype) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "r" op: CALL_FUNCTION target: "torch.relu" args { node: "x" } args { } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "r" } }
  )pb")),
                 {"node 'r' args[1]", "no value"});
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" }
    nodes { name: "r" op: CALL_FUNCTION target: "torch.relu" args { dtype_value: 77 } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "r" } }
  )pb")),
                 {"node 'r' args[0]", "field 'dtype_value' is 77"});
}

TEST(BadModelTest, NegativeShape) {
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: FLOAT32 shape: [ 2, -1 ] data: "")pb")),
                 {"tensor 't'", "field 'shape'", "dimension 1 is -1"});
}

// A shape of 10^18 elements with no data must be refused before anything is allocated.
TEST(BadModelTest, AbsurdShape) {
  ExpectRejected(
      ParseModelText(WithTensor(R"pb(dtype: FLOAT32 shape: [ 1000000, 1000000, 1000000 ])pb")),
      {"tensor 't'", "field 'shape'", "more than 2147483648 elements"});
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: FLOAT32 shape: [ 1, 1, 1, 1, 1, 1, 1, 1, 1 ])pb")),
                 {"tensor 't'", "rank 9"});
}

TEST(BadModelTest, TensorBytesDoNotMatchShapeAndDtype) {
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: FLOAT32 shape: [ 2, 2 ] data: "1234")pb")),
                 {"tensor 't'", "field 'data' has 4 bytes", "expected 16", "torch.float32"});
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: INT64 shape: 1 data: "1234")pb")),
                 {"tensor 't'", "field 'data'", "expected 8"});
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: FLOAT16 shape: 1 data: "12")pb")),
                 {"tensor 't'", "field 'dtype'"});
}

TEST(BadModelTest, BadQuantizationParameters) {
  ExpectRejected(ParseModelText(WithTensor(R"pb(dtype: QUINT8 shape: 1 data: "a")pb")),
                 {"tensor 't'", "field 'qscheme' is none"});
  ExpectRejected(ParseModelText(WithTensor(
                     R"pb(dtype: QUINT8 shape: 1 data: "a" qscheme: PER_TENSOR_AFFINE scales: 0 zero_points: 0)pb")),
                 {"tensor 't'", "field 'scales[0]' is 0"});
  ExpectRejected(ParseModelText(WithTensor(
                     R"pb(dtype: QINT8 shape: 1 data: "a" qscheme: PER_TENSOR_AFFINE scales: 1 zero_points: 300)pb")),
                 {"tensor 't'", "field 'zero_points[0]' is 300"});
  ExpectRejected(ParseModelText(WithTensor(
                     R"pb(dtype: QINT8 shape: [ 2 ] data: "ab" qscheme: PER_CHANNEL_AFFINE scales: 1 zero_points: 0)pb")),
                 {"tensor 't'", "per-channel", "needs 2 scales"});
  ExpectRejected(ParseModelText(WithTensor(
                     R"pb(dtype: FLOAT32 shape: 1 data: "abcd" qscheme: PER_TENSOR_AFFINE scales: 1 zero_points: 0)pb")),
                 {"tensor 't'", "not quantized"});
}

std::string NestedList(int depth) {
  std::string arg = R"pb(node: "x")pb";
  for (int i = 0; i < depth; ++i) arg = absl::StrCat("list { items { ", arg, " } }");
  return arg;
}

TEST(BadModelTest, ArgsNestedTooDeep) {
  const auto model = [](int depth) {
    return Model(absl::StrCat(R"pb(nodes { name: "x" op: PLACEHOLDER target: "x" }
      nodes { name: "deep" op: CALL_FUNCTION target: "torch.cat" args { )pb",
                              NestedList(depth), R"pb( } }
      nodes { name: "output" op: OUTPUT target: "output" args { node: "deep" } })pb"));
  };
  EXPECT_TRUE(ParseModelText(model(16)).ok());
  ExpectRejected(ParseModelText(model(17)), {"node 'deep' args[0]", "nest deeper than 16"});
  // Far deeper nesting stops in the protobuf parser, before any of it is built.
  ExpectRejected(ParseModelText(model(5000)), {"does not parse"});
}

TEST(BadModelTest, BinaryNestedTooDeepIsRejected) {
  proto::Model model = ModelToProto(*MakeConvBnAddRelu());
  proto::Arg* arg = model.mutable_graph()->mutable_nodes(1)->mutable_args(0);
  for (int i = 0; i < 10000; ++i) arg = arg->mutable_list()->add_items();
  arg->set_node("x");
  std::string bytes;
  ASSERT_TRUE(model.SerializeToString(&bytes));
  ExpectRejected(ParseModel(bytes), {"protobuf parse failed"});
}

TEST(BadModelTest, ModulesNestedTooDeep) {
  std::string module = R"pb(type: "nn.ReLU")pb";
  for (int i = 0; i < 200; ++i) {
    module = absl::StrCat(R"pb(type: "nn.Module" children { name: "m" module { )pb", module, " } }");
  }
  auto result = ParseModelText(Model(kXAndOutput, absl::StrCat(R"pb(root { type: "GraphModule" children { name: "m" module { )pb", module, " } } }")));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BadModelTest, ConstantsMustNotReferenceNodes) {
  ExpectRejected(ParseModelText(Model(R"pb(
    nodes { name: "x" op: PLACEHOLDER target: "x" meta { name: "src" value { node: "x" } } }
    nodes { name: "output" op: OUTPUT target: "output" args { node: "x" } }
  )pb")),
                 {"node 'x' meta['src']", "must not refer to a node"});
  ExpectRejected(ParseModelText(Model(kXAndOutput, R"pb(
    root { type: "GraphModule" attributes { name: "a" value { node: "x" } } }
  )pb")),
                 {"root module attribute 'a'", "must not refer to a node"});
}

TEST(BadModelTest, BadModuleTree) {
  ExpectRejected(ParseModelText(Model(kXAndOutput, R"pb(root { type: "nn.Module" })pb")),
                 {"root module", "field 'type'", "expected 'GraphModule'"});
  ExpectRejected(ParseModelText(Model(kXAndOutput, R"pb(
    root { type: "GraphModule" children { name: "a.b" module { type: "nn.ReLU" } } }
  )pb")),
                 {"root module", "'a.b'", "without '.'"});
  ExpectRejected(ParseModelText(Model(kXAndOutput, R"pb(
    root { type: "GraphModule" children { name: "r" module { type: "nn.ReLU" } }
                               children { name: "r" module { type: "nn.ReLU" } } }
  )pb")),
                 {"root module", "duplicate member name 'r'"});
  ExpectRejected(ParseModelText(Model(kXAndOutput, R"pb(
    root { type: "GraphModule" children { name: "r" module { } } }
  )pb")),
                 {"module 'r'", "field 'type' is empty"});
}

TEST(BadModelTest, OverlongStrings) {
  const std::string long_name(5000, 'n');
  ExpectRejected(ParseModelText(Model(absl::StrCat(R"pb(nodes { name: ")pb", long_name,
                                                   R"pb(" op: PLACEHOLDER target: "x" })pb"))),
                 {"node #0", "field 'name' is 5000 bytes", "limit is 4096"});
}

TEST(BadModelTest, WrongFormatVersion) {
  std::string text = Model(kXAndOutput);
  text.replace(text.find("format_version: 1"), 17, "format_version: 2");
  ExpectRejected(ParseModelText(text), {"format_version is 2", "expected 1"});
}

TEST(BadModelTest, LimitsAreEnforced) {
  ModelLimits limits;
  limits.max_nodes = 1;
  ExpectRejected(ParseModelText(Model(kXAndOutput), limits), {"2 nodes", "limit is 1"});
  limits = ModelLimits();
  limits.max_file_bytes = 10;
  ExpectRejected(ParseModel(SerializeModel(*MakeConvBnAddRelu()), limits), {"limit is 10"});
}

TEST(BadModelTest, FileErrorsNameThePath) {
  auto missing = LoadModel(TempPath("does_not_exist.pb"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("does_not_exist.pb"));
  const std::string path = TempPath("garbage.textproto");
  ASSERT_TRUE(WriteFile(path, "graph { nodes { name: 3").ok());
  auto bad = LoadModel(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), AllOf(HasSubstr("garbage.textproto"), HasSubstr("line 1")));
}

}  // namespace
}  // namespace fuselage
