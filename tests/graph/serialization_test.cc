// Model files: Save -> Load -> Save is byte-identical (binary and text), and every kind
// of bad file is rejected with an InvalidArgument error naming the node (or module,
// tensor) and the field, never a crash.
#include "graph/serialization.h"

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "graph/file_io.h"
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
  auto first = ReadFileBounded(path, 1 << 20);
  auto second = ReadFileBounded(again, 1 << 20);
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
  EXPECT_EQ(SerializeModelText(**loaded), *ReadFileBounded(path, 1 << 20));
  // The text form really is text.
  EXPECT_THAT(*ReadFileBounded(path, 1 << 20), HasSubstr("op: CALL_MODULE"));
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

// ---- Tensors handed over beside the structure (ParseModelWithTensors) ----------------

// The model's tensors in the order a structure lists them (each module's, then its
// children's, depth first), and the structure: the model's proto without tensor bytes.
void CollectTensors(const Module& module, std::vector<Tensor>& out) {
  for (const auto& [name, tensor] : module.tensors()) out.push_back(tensor);
  for (const auto& [name, child] : module.children()) CollectTensors(*child, out);
}
void DropTensorData(proto::Module& module) {
  for (proto::NamedTensor& t : *module.mutable_tensors()) t.mutable_tensor()->clear_data();
  for (proto::NamedModule& c : *module.mutable_children()) DropTensorData(*c.mutable_module());
}
std::string Structure(const GraphModule& gm) {
  proto::Model model = ModelToProto(gm);
  DropTensorData(*model.mutable_root());
  return model.SerializeAsString();
}

TEST(HandedTensorsTest, TheModelHoldsTheHandedTensorsThemselves) {
  auto gm = MakeRichModule();
  std::vector<Tensor> tensors;
  CollectTensors(gm->root(), tensors);
  ASSERT_GE(tensors.size(), 3u);
  const void* first = tensors[0].raw_data();
  auto loaded = ParseModelWithTensors(Structure(*gm), tensors);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(SerializeModel(**loaded), SerializeModel(*gm));  // every value and qparam kept
  std::vector<Tensor> held;
  CollectTensors((*loaded)->root(), held);
  ASSERT_EQ(held.size(), tensors.size());
  EXPECT_EQ(held[0].raw_data(), first);  // the same buffer: no copy
}

// ModelFromProto of a model given away (an rvalue): the same model as from a const one,
// its tensor holding the proto's own bytes (no copy).
TEST(HandedTensorsTest, AModelGivenAwayGivesItsBytes) {
  GraphModule gm;
  std::vector<float> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i);
  ASSERT_TRUE(gm.SetTensor("big", Tensor::FromFloats({4096}, values)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  ASSERT_TRUE(gm.graph().SetOutput(x).ok());
  const proto::Model model = ModelToProto(gm);
  auto copied = ModelFromProto(model);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(SerializeModel(**copied), SerializeModel(gm));
  proto::Model given = model;
  given.mutable_root()->mutable_tensors(0)->mutable_tensor()->mutable_data()->shrink_to_fit();
  const char* bytes = given.root().tensors(0).tensor().data().data();
  auto taken = ModelFromProto(std::move(given));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(SerializeModel(**taken), SerializeModel(gm));
  const Tensor* big = (*taken)->root().FindTensor("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->raw_data(), bytes);  // the proto's buffer itself
}

TEST(HandedTensorsTest, AWrongCountShapeOrDataIsRefusedByName) {
  auto gm = MakeRichModule();
  std::vector<Tensor> tensors;
  CollectTensors(gm->root(), tensors);
  const std::string structure = Structure(*gm);
  std::vector<Tensor> fewer(tensors.begin(), tensors.end() - 1);
  auto short_list = ParseModelWithTensors(structure, fewer);
  ASSERT_FALSE(short_list.ok());
  EXPECT_THAT(short_list.status().message(), ::testing::HasSubstr("tensors were handed over"));
  std::vector<Tensor> more = tensors;
  more.push_back(Tensor::FromFloats({1}, {1.0f}));
  auto long_list = ParseModelWithTensors(structure, more);
  ASSERT_FALSE(long_list.ok());
  EXPECT_THAT(long_list.status().message(), ::testing::HasSubstr("the structure lists"));
  std::vector<Tensor> reshaped = tensors;
  reshaped[0] = Tensor::FromFloats({1}, {1.0f});
  auto wrong_shape = ParseModelWithTensors(structure, reshaped);
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_THAT(wrong_shape.status().message(), ::testing::HasSubstr("the structure declares"));
  auto with_data = ParseModelWithTensors(SerializeModel(*gm), tensors);
  ASSERT_FALSE(with_data.ok());
  EXPECT_THAT(with_data.status().message(), ::testing::HasSubstr("carries none"));
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

// ---- Tensor data outside protobuf ----------------------------------------------------
//
// ParseModel leaves the tensors' bytes in the file and hands protobuf a skeleton in which
// each Tensor.data field of 8 bytes or more is an 8-byte token naming where its bytes lie.
// Whatever a file holds, the model must be the one protobuf's own parse of the same bytes
// gives (read by ModelFromProto), or both must be refused. The files below are written by
// hand, in the wire format.

std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

// `value` as a varint of exactly `width` bytes (continuation bits pad it).
std::string PaddedVarint(uint64_t value, int width) {
  std::string out;
  for (int i = 0; i < width; ++i) {
    const uint8_t bits = static_cast<uint8_t>((value >> (7 * i)) & 0x7f);
    out.push_back(static_cast<char>(i + 1 < width ? (bits | 0x80) : bits));
  }
  return out;
}

std::string Tag(int number, int wire_type) { return Varint(uint64_t(number) << 3 | wire_type); }
std::string Field(int number, const std::string& payload) {  // length-delimited
  return Tag(number, 2) + Varint(payload.size()) + payload;
}
std::string VarintField(int number, uint64_t value) { return Tag(number, 0) + Varint(value); }

// Field numbers (graph/model.proto). Model: 4 root. Module: 1 type, 2 tensors,
// 3 attributes, 4 children. NamedTensor / NamedModule: 1 name, 2 value. Tensor: 1 dtype,
// 2 shape, 3 data.
constexpr int kInt8 = 2;

// Tensor fields of an int8 tensor of shape [size] (packed shape) holding `data`.
std::string Int8Tensor(const std::string& data) {
  return VarintField(1, kInt8) + Field(2, Varint(data.size())) + Field(3, data);
}
std::string NamedTensorField(const std::string& name, const std::string& tensor_fields) {
  return Field(2, Field(1, name) + Field(2, tensor_fields));
}

// A valid model file with `root_fields` (fields of a Module) merged into its root module:
// a second root field, which protobuf merges into the first.
std::string WithRootFields(const std::string& root_fields) {
  return SerializeModel(*MakeConvBnAddRelu()) + Field(4, root_fields);
}

// Protobuf's own reading of `bytes`, as the loader reads a parsed proto.
absl::StatusOr<std::unique_ptr<GraphModule>> ProtobufsReading(const std::string& bytes) {
  proto::Model model;
  google::protobuf::LogSilencer quiet;
  if (!model.ParseFromString(bytes)) return absl::InvalidArgumentError("protobuf refuses it");
  return ModelFromProto(model);
}

// ParseModel(bytes) is protobuf's reading of `bytes`: the same model (compared by its saved
// bytes), or both refuse it with InvalidArgument.
void ExpectAsProtobufReadsIt(const std::string& bytes) {
  auto expected = ProtobufsReading(bytes);
  auto loaded = ParseModel(bytes);
  ASSERT_EQ(loaded.ok(), expected.ok())
      << "ParseModel: " << loaded.status() << "; protobuf: " << expected.status();
  if (loaded.ok()) {
    EXPECT_TRUE(SerializeModel(**loaded) == SerializeModel(**expected));
    EXPECT_TRUE((*loaded)->Verify().ok());
  } else {
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  }
}

// The bytes of root tensor `name` of ParseModel(bytes), which must load.
std::string LoadedBytes(const std::string& bytes, const std::string& name) {
  auto loaded = ParseModel(bytes);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return "<not loaded>";
  const Tensor* t = (*loaded)->FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  return t == nullptr ? "<no tensor>" : std::string(t->bytes());
}

TEST(TensorDataTest, KeepsProtobufsMeaning) {
  const std::string i8 = VarintField(1, kInt8);
  const std::string tensors =
      // data given twice: the last wins, token or not.
      NamedTensorField("a", i8 + VarintField(2, 8) + Field(3, "abcdefgh") + Field(3, "ABCDEFGH")) +
      NamedTensorField("b", i8 + VarintField(2, 3) + Field(3, std::string(100, 'x')) + Field(3, "xyz")) +
      NamedTensorField("c", i8 + VarintField(2, 100) + Field(3, "xyz") + Field(3, std::string(100, 'y'))) +
      // tensor given twice: merged (dtype and shape from the first, data from the second).
      Field(2, Field(1, "d") + Field(2, i8 + VarintField(2, 8) + Field(3, "12345678")) +
                   Field(2, Field(3, "87654321"))) +
      // unknown fields, one numbered 3 as a varint, one a long bytes field.
      NamedTensorField("e", i8 + VarintField(3, 9) + VarintField(2, 8) + Field(15, std::string(300, 'x')) +
                                Field(3, std::string(8, '\x7f'))) +
      // empty data, explicitly present, of a tensor of shape [0].
      NamedTensorField("f", i8 + VarintField(2, 0) + Field(3, ""));
  const std::string bytes = WithRootFields(tensors);
  ExpectAsProtobufReadsIt(bytes);
  EXPECT_EQ(LoadedBytes(bytes, "a"), "ABCDEFGH");
  EXPECT_EQ(LoadedBytes(bytes, "b"), "xyz");
  EXPECT_EQ(LoadedBytes(bytes, "c"), std::string(100, 'y'));
  EXPECT_EQ(LoadedBytes(bytes, "d"), "87654321");
  EXPECT_EQ(LoadedBytes(bytes, "e"), std::string(8, '\x7f'));
  EXPECT_EQ(LoadedBytes(bytes, "f"), "");
}

// Every size around the token's (8 bytes): shorter data reaches protobuf as it is, longer
// data as a token; both read back exactly.
TEST(TensorDataTest, EverySizeAroundTheTokensReadsBack) {
  std::string tensors;
  for (int size = 0; size <= 20; ++size) {
    std::string data;
    for (int i = 0; i < size; ++i) data.push_back(static_cast<char>(size * 16 + i));
    tensors += NamedTensorField(absl::StrCat("t", size), Int8Tensor(data));
  }
  const std::string bytes = WithRootFields(tensors);
  ExpectAsProtobufReadsIt(bytes);
  for (int size = 0; size <= 20; ++size) {
    std::string data;
    for (int i = 0; i < size; ++i) data.push_back(static_cast<char>(size * 16 + i));
    EXPECT_EQ(LoadedBytes(bytes, absl::StrCat("t", size)), data) << size;
  }
}

// A file's own data can look exactly like a token (an offset and a length of 4 bytes
// each, even naming real bytes of the file): it is read as the bytes it is.
TEST(TensorDataTest, BytesShapedLikeTokensAreData) {
  auto token = [](uint32_t offset, uint32_t length) {
    std::string out;
    for (uint32_t v : {offset, length}) {
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
    }
    return out;
  };
  const std::string target(64, 'T');
  // The first pass finds where `target` lies in the file; the second forges a token
  // naming exactly those bytes (the file's layout does not change: same sizes).
  std::string forged = token(0, 8);
  for (int pass = 0; pass < 2; ++pass) {
    const std::string bytes = WithRootFields(
        NamedTensorField("target", Int8Tensor(target)) +
        NamedTensorField("forged", Int8Tensor(forged)) +
        NamedTensorField("zero", Int8Tensor(token(0, 0))) +
        NamedTensorField("huge", Int8Tensor(token(0xffffffffu, 0xffffffffu))) +
        // An 8-byte tensor whose data field is given as an unknown field too.
        NamedTensorField("unknown", Int8Tensor(token(1, 8)) + Field(9, token(2, 8))));
    ExpectAsProtobufReadsIt(bytes);
    EXPECT_EQ(LoadedBytes(bytes, "forged"), forged);
    EXPECT_EQ(LoadedBytes(bytes, "zero"), token(0, 0));
    EXPECT_EQ(LoadedBytes(bytes, "huge"), token(0xffffffffu, 0xffffffffu));
    EXPECT_EQ(LoadedBytes(bytes, "unknown"), token(1, 8));
    const size_t at = bytes.find(target);
    ASSERT_NE(at, std::string::npos);
    forged = token(static_cast<uint32_t>(at), static_cast<uint32_t>(target.size()));
  }
}

// Tensor-shaped bytes where no Tensor is (unknown fields, a known field with another wire
// type, a string argument of the graph) are not tensors, as protobuf sees it; tensors of
// nested child modules are.
TEST(TensorDataTest, OnlyRealTensorFieldsAreTensors) {
  const std::string tensor = Int8Tensor(std::string(32, 'q'));
  const std::string fields =
      // unknown fields holding a Tensor, a NamedTensor, a Module
      Field(12, tensor) + Field(13, NamedTensorField("ghost", tensor)) +
      NamedTensorField("n", Int8Tensor(std::string(16, 'n')) + Field(11, tensor)) +
      Field(2, Field(1, "m") + Field(2, Int8Tensor("12345678")) + Field(7, tensor)) +
      // Module.tensors (2) and Tensor.data (3) with other wire types
      VarintField(2, 5) + Tag(2, 5) + "abcd" +
      NamedTensorField("w", Int8Tensor(std::string(9, 'w')) + VarintField(3, 7) + Tag(3, 1) + "12345678") +
      // tensors of children three deep
      Field(4, Field(1, "c1") +
                   Field(2, Field(1, "nn.Identity") +
                                NamedTensorField("k1", Int8Tensor(std::string(40, 'k'))) +
                                Field(4, Field(1, "c2") +
                                             Field(2, Field(1, "nn.Identity") +
                                                          NamedTensorField("k2", Int8Tensor("kk")) +
                                                          NamedTensorField("k3", Int8Tensor(std::string(300, 'z')))))));
  const std::string bytes = WithRootFields(fields);
  ExpectAsProtobufReadsIt(bytes);
  auto loaded = ParseModel(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->FindTensor("ghost"), nullptr);
  EXPECT_EQ((*loaded)->FindTensor("n")->bytes(), std::string(16, 'n'));
  EXPECT_EQ((*loaded)->FindTensor("m")->bytes(), "12345678");
  EXPECT_EQ((*loaded)->FindTensor("w")->bytes(), std::string(9, 'w'));
  ASSERT_NE((*loaded)->FindModule("c1.c2"), nullptr);
  EXPECT_EQ((*loaded)->FindModule("c1")->FindTensor("k1")->bytes(), std::string(40, 'k'));
  EXPECT_EQ((*loaded)->FindModule("c1.c2")->FindTensor("k2")->bytes(), "kk");
  EXPECT_EQ((*loaded)->FindModule("c1.c2")->FindTensor("k3")->bytes(), std::string(300, 'z'));

  // A string argument of the graph holding a serialized model's root: just a string.
  auto gm = MakeConvBnAddRelu();
  Node* relu = gm->graph().FindNode("relu");
  ASSERT_TRUE(gm->graph().SetMeta(relu, "note", Argument::String(Field(2, NamedTensorField("s", tensor)))).ok());
  ExpectAsProtobufReadsIt(SerializeModel(*gm));
}

TEST(TensorDataTest, PackedAndUnpackedShapes) {
  const std::string i8 = VarintField(1, kInt8);
  const std::string data = Field(3, std::string(24, 'p'));
  const std::string bytes = WithRootFields(
      NamedTensorField("packed", i8 + Field(2, Varint(2) + Varint(3) + Varint(4)) + data) +
      NamedTensorField("unpacked", i8 + VarintField(2, 2) + VarintField(2, 3) + VarintField(2, 4) + data) +
      NamedTensorField("mixed", i8 + Field(2, Varint(2)) + VarintField(2, 3) + Field(2, Varint(4)) + data) +
      NamedTensorField("after", i8 + data + Field(2, Varint(24))));
  ExpectAsProtobufReadsIt(bytes);
  auto loaded = ParseModel(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const char* name : {"packed", "unpacked", "mixed"}) {
    EXPECT_EQ((*loaded)->FindTensor(name)->ShapeString(), "[2, 3, 4]") << name;
    EXPECT_EQ((*loaded)->FindTensor(name)->bytes(), std::string(24, 'p')) << name;
  }
}

// Varints written longer than they need (protobuf reads up to 5 bytes for a length, the
// fifth below 8, and up to 5 for a tag): the same model; longer ones are refused as
// protobuf refuses them.
TEST(TensorDataTest, PaddedVarints) {
  const std::string data(20, 'v');
  const std::string i8_shape = VarintField(1, kInt8) + VarintField(2, data.size());
  for (int width = 1; width <= 7; ++width) {
    SCOPED_TRACE(width);
    // The data field's length, the Tensor's, the NamedTensor's, the root's.
    const std::string tensor = i8_shape + Tag(3, 2) + PaddedVarint(data.size(), width) + data;
    const std::string named = Field(1, "t") + Tag(2, 2) + PaddedVarint(tensor.size(), width) + tensor;
    const std::string root = Tag(2, 2) + PaddedVarint(named.size(), width) + named;
    const std::string bytes =
        SerializeModel(*MakeConvBnAddRelu()) + Tag(4, 2) + PaddedVarint(root.size(), width) + root;
    ExpectAsProtobufReadsIt(bytes);
    if (width <= 5) {
      EXPECT_EQ(LoadedBytes(bytes, "t"), data);
    }
    // The data field's tag padded too.
    const std::string padded_tag =
        i8_shape + PaddedVarint(3 << 3 | 2, width) + PaddedVarint(data.size(), 1) + data;
    ExpectAsProtobufReadsIt(WithRootFields(NamedTensorField("u", padded_tag)));
  }
  // A five-byte length whose fifth byte is 8 or more (2 GiB or more, or bits past 32).
  for (const std::string& length : {std::string("\x94\x80\x80\x80\x08", 5),
                                   std::string("\x94\x80\x80\x80\x10", 5)}) {
    const std::string bytes = WithRootFields(
        NamedTensorField("t", VarintField(1, kInt8) + VarintField(2, 20) + Tag(3, 2) + length + data));
    ExpectRejected(ParseModel(bytes), {"protobuf parse failed"});
    ExpectAsProtobufReadsIt(bytes);
  }
}

// Lengths past the end of their message or of the file, or that overflow 32 bits: refused
// as a corrupt file, before anything is allocated for them.
TEST(TensorDataTest, LengthsThatDoNotFitAreRefused) {
  const std::string i8 = VarintField(1, kInt8) + VarintField(2, 8);
  const std::string base = SerializeModel(*MakeConvBnAddRelu());
  for (const uint64_t length : {uint64_t{9}, uint64_t{1} << 20, uint64_t{0x7fffffff},
                                uint64_t{0x80000000}, uint64_t{0xffffffff},
                                uint64_t{0x100000008}, ~uint64_t{0}}) {
    SCOPED_TRACE(length);
    // The data field claims more than its Tensor holds (8 bytes follow).
    const std::string tensor = i8 + Tag(3, 2) + Varint(length) + "12345678";
    ExpectRejected(ParseModel(WithRootFields(NamedTensorField("t", tensor))), {"protobuf parse failed"});
    // The Tensor claims more than its NamedTensor holds.
    const std::string named = Field(1, "t") + Tag(2, 2) + Varint(length) + Int8Tensor("12345678");
    ExpectRejected(ParseModel(WithRootFields(Field(2, named))), {"protobuf parse failed"});
    // The root claims more than the file holds.
    ExpectRejected(ParseModel(base + Tag(4, 2) + Varint(length) + NamedTensorField("t", Int8Tensor("12345678"))),
                   {"protobuf parse failed"});
  }
}

// Files with the module tree's fields in long runs (a graph of thousands of nodes, a
// module attribute of many kilobytes, many tensors of every size, children): the skeleton
// keeps long runs in the file and copies short ones; the model is protobuf's reading and
// saves back to the same bytes, through memory and through a file.
TEST(TensorDataTest, LongRunsAndManyTensorsRoundTrip) {
  auto gm = MakeConvBnAddRelu();
  Graph& g = gm->graph();
  Node* last = g.FindNode("relu");
  for (int i = 0; i < 400; ++i) {
    last = *g.InsertAfter(last, {OpKind::kCallFunction, Symbol::Intern("torch.relu"), {last}, {}, ""});
  }
  ASSERT_TRUE(g.SetArg(g.output(), 0, last).ok());
  std::vector<int64_t> long_list(3000);
  for (size_t i = 0; i < long_list.size(); ++i) long_list[i] = static_cast<int64_t>(i * 977);
  for (int m = 0; m < 3; ++m) {
    auto module = std::make_unique<Module>("nn.Identity");
    module->SetAttribute("long", Argument::Ints(long_list));
    for (int size = 0; size < 40; size += 3) {
      auto t = Tensor::FromBytes(DType::kInt8, {size}, std::string(static_cast<size_t>(size), static_cast<char>('a' + m)));
      ASSERT_TRUE(t.ok());
      module->SetTensor(absl::StrCat("t", size), *t);
    }
    module->SetAttribute("after", Argument::String(std::string(4000, 's')));
    ASSERT_TRUE(gm->SetModule(absl::StrCat("holder.m", m), std::move(module)).ok());
  }
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  const std::string bytes = SerializeModel(*gm);
  ExpectAsProtobufReadsIt(bytes);
  auto loaded = ParseModel(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(SerializeModel(**loaded) == bytes);
  EXPECT_EQ(*(*loaded)->FindModule("holder.m2")->FindTensor("t39"),
            *gm->FindModule("holder.m2")->FindTensor("t39"));
  const std::string path = TempPath("long_runs.pb");
  ASSERT_TRUE(SaveModel(**loaded, path).ok());
  auto from_file = LoadModel(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE(SerializeModel(**from_file) == bytes);
}

// Random corruption of a file with tensors of every size around the token's: whatever
// ParseModel accepts is protobuf's reading of the same bytes, and a file it refuses after
// protobuf's parse (a bad tensor, name, reference...) gets the error protobuf's reading
// gets. (ParseModel refuses some files protobuf would take: groups, a truncated tag.)
TEST(TensorDataTest, CorruptedFilesReadAsProtobufReadsThem) {
  std::string tensors;
  for (int size = 0; size <= 12; ++size) {
    tensors += NamedTensorField(absl::StrCat("t", size), Int8Tensor(std::string(static_cast<size_t>(size), 'd')));
  }
  const std::string bytes = WithRootFields(tensors);
  std::mt19937 random(11);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string corrupt = bytes;
    const int flips = 1 + trial % 3;
    for (int f = 0; f < flips; ++f) {
      // Mostly in the tensors (the end of the file), where the rewrite works.
      const size_t at = trial % 4 == 0 ? random() % corrupt.size()
                                       : corrupt.size() - 1 - random() % tensors.size();
      corrupt[at] = static_cast<char>(random() & 0xff);
    }
    auto loaded = ParseModel(corrupt);
    auto expected = ProtobufsReading(corrupt);
    if (loaded.ok()) {
      ++accepted;
      ASSERT_TRUE(expected.ok()) << expected.status();
      ASSERT_TRUE(SerializeModel(**loaded) == SerializeModel(**expected)) << trial;
    } else {
      ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
      if (!absl::StrContains(loaded.status().message(), "protobuf parse failed")) {
        ASSERT_FALSE(expected.ok()) << trial;
        ASSERT_EQ(loaded.status(), expected.status());
      }
    }
  }
  EXPECT_GT(accepted, 100);
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
      {"tensor 't'", "field 'shape'", "more than 268435456 elements"});
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
  ASSERT_TRUE(WriteFileAtomically(path, "graph { nodes { name: 3").ok());
  auto bad = LoadModel(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), AllOf(HasSubstr("garbage.textproto"), HasSubstr("line 1")));
}

}  // namespace
}  // namespace fuselage
