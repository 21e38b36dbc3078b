// The C++ ONNX reader (onnx/onnx_reader.h) against the Python importer and ONNX Runtime:
// tests/onnx/testdata/{all_ops,more_ops,names}.onnx (every op the reader reads, and names torch.fx
// renames, built with onnx.helper
// by tests/onnx/make_testdata.py) read in C++ gives exactly the model file that
// fuselage.from_onnx + fuselage.export write for it (same nodes, names, targets, args,
// meta, module types, attributes and tensor bytes), and runs on fuselage's float runtime
// to ONNX Runtime's output. Bad input (truncated file, unknown op or domain, opset,
// external data, dynamic input) is an error naming the node or tensor.
#include "onnx/onnx_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/serialization.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

using onnx_subset::ModelProto;
using onnx_subset::NodeProto;
using onnx_subset::TensorProto;

constexpr char kDir[] = "tests/onnx/testdata/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

// The testdata models (make_testdata.py) and their input shapes.
struct TestModel {
  std::string name;
  std::vector<int64_t> input_shape;
};
const std::vector<TestModel>& TestModels() {
  static const auto* models = new std::vector<TestModel>{{"all_ops", {1, 3, 8, 8}},
                                                         {"more_ops", {1, 2, 5, 5}},
                                                         {"names", {1, 4}},
                                                         {"fold_ops", {1, 4}},
                                                         {"shape_ops", {1, 2, 6, 6}}};
  return *models;
}

ModelProto ReadOnnx(const std::string& name) {
  ModelProto onnx;
  EXPECT_TRUE(onnx.ParseFromString(ReadAll(absl::StrCat(kDir, name, ".onnx"))));
  return onnx;
}

TEST(OnnxReaderTest, GivesThePythonImportersModelFile) {
  for (const TestModel& test : TestModels()) {
    SCOPED_TRACE(test.name);
    auto model = OnnxToModelProto(ReadOnnx(test.name));
    ASSERT_TRUE(model.ok()) << model.status();
    proto::Model golden;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        ReadAll(absl::StrCat(kDir, test.name, ".python.textproto")), &golden));
    golden.clear_producer();
    model->clear_producer();
    // Node by node and module by module first, so a difference names the node.
    ASSERT_EQ(model->graph().nodes_size(), golden.graph().nodes_size());
    for (int i = 0; i < golden.graph().nodes_size(); ++i) {
      std::string diff;
      google::protobuf::util::MessageDifferencer differ;
      differ.ReportDifferencesToString(&diff);
      EXPECT_TRUE(differ.Compare(golden.graph().nodes(i), model->graph().nodes(i)))
          << "node " << golden.graph().nodes(i).name() << ": " << diff;
    }
    ASSERT_EQ(model->root().children_size(), golden.root().children_size());
    for (int i = 0; i < golden.root().children_size(); ++i) {
      std::string diff;
      google::protobuf::util::MessageDifferencer differ;
      differ.ReportDifferencesToString(&diff);
      EXPECT_TRUE(differ.Compare(golden.root().children(i), model->root().children(i)))
          << "module " << golden.root().children(i).name() << ": " << diff.substr(0, 2000);
    }
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(golden, *model));
  }
}

TEST(OnnxReaderTest, FloatRunMatchesOnnxRuntime) {
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  for (const TestModel& test : TestModels()) {
    SCOPED_TRACE(test.name);
    auto gm = ParseOnnxModel(ReadAll(absl::StrCat(kDir, test.name, ".onnx")), test.name);
    ASSERT_TRUE(gm.ok()) << gm.status();
    const std::vector<float> x = ReadFloats(absl::StrCat(kDir, test.name, ".input.f32"));
    const std::vector<float> expected =
        ReadFloats(absl::StrCat(kDir, test.name, ".ort_output.f32"));
    auto out = fuselage::Run(**gm, {Value(Tensor::FromFloats(test.input_shape, x))}, **kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    const Tensor& y = (*out)[0].as_tensor();
    ASSERT_EQ(y.numel(), static_cast<int64_t>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(y.data<float>()[i], expected[i], 1e-4 * (1 + std::abs(expected[i]))) << i;
  }
}

// A model of one op on a [1, 2, 4, 4] input, for the error cases.
ModelProto OneOp(const std::string& op_type, const std::string& domain = "", int opset = 17) {
  ModelProto onnx;
  onnx.set_ir_version(8);
  auto* id = onnx.add_opset_import();
  id->set_domain("");
  id->set_version(opset);
  auto* graph = onnx.mutable_graph();
  auto* input = graph->add_input();
  input->set_name("x");
  auto* type = input->mutable_type()->mutable_tensor_type();
  type->set_elem_type(TensorProto::FLOAT);
  for (int d : {1, 2, 4, 4}) type->mutable_shape()->add_dim()->set_dim_value(d);
  NodeProto* node = graph->add_node();
  node->set_name("the_node");
  node->set_op_type(op_type);
  node->set_domain(domain);
  node->add_input("x");
  node->add_output("y");
  graph->add_output()->set_name("y");
  return onnx;
}

std::string ErrorOf(const ModelProto& onnx) {
  auto model = OnnxToModelProto(onnx);
  EXPECT_FALSE(model.ok());
  return model.ok() ? "" : std::string(model.status().message());
}

// x [1, C, 6, 6] -> Conv(w1) -> Conv(shared) -> Conv(shared) -> y, where `shared` is
// Identity(w2): w1 is read by one node, w2 by the Identity only, whose output two convs
// read (the reader of a model given away moves each once at most).
ModelProto ConvChain() {
  ModelProto onnx = OneOp("Conv");
  onnx_subset::GraphProto* graph = onnx.mutable_graph();
  graph->clear_node();
  graph->clear_output();
  // [4, 4, 3, 3] weights (the test sets their sizes and values).
  for (const char* name : {"w1", "w2"}) {
    TensorProto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    for (int d : {4, 4, 3, 3}) t->add_dims(d);
  }
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y) {
    NodeProto* node = graph->add_node();
    node->set_op_type("Conv");
    node->set_name(y);
    node->add_input(x);
    node->add_input(w);
    node->add_output(y);
    auto* pads = node->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx_subset::AttributeProto::INTS);
    for (int p : {1, 1, 1, 1}) pads->add_ints(p);
  };
  NodeProto* identity = graph->add_node();
  identity->set_op_type("Identity");
  identity->set_name("shared");
  identity->add_input("w2");
  identity->add_output("shared");
  conv("x", "w1", "c1");
  conv("c1", "shared", "c2");
  conv("c2", "shared", "y");
  graph->add_output()->set_name("y");
  return onnx;
}

// OnnxToModelProto of a model given away takes its initializers' bytes instead of copying
// them, and gives the same model as of a model kept (an initializer passed on by Identity
// to two readers included), which runs as the kept one does.
TEST(OnnxReaderTest, AModelGivenAwayGivesTheSameModel) {
  for (int channels : {4, 64}) {  // 576-byte weights (copied), 147456-byte ones (moved)
    SCOPED_TRACE(channels);
    ModelProto onnx = ConvChain();
    auto* input = onnx.mutable_graph()->mutable_input(0);
    input->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(
        channels);
    for (TensorProto& t : *onnx.mutable_graph()->mutable_initializer()) {
      t.set_dims(0, channels);
      t.set_dims(1, channels);
      std::vector<float> values(static_cast<size_t>(channels * channels * 9));
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = (t.name() == "w1" ? 0.5f : -0.25f) * std::sin(static_cast<float>(i));
      }
      t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float)));
    }
    auto kept = OnnxToModelProto(onnx);
    ASSERT_TRUE(kept.ok()) << kept.status();
    ModelProto given = onnx;
    const char* w1_bytes = given.graph().initializer(0).raw_data().data();
    auto taken = OnnxToModelProto(std::move(given));
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*kept, *taken));
    bool moved = false;
    for (const auto& child : taken->root().children()) {
      for (const auto& t : child.module().tensors()) moved |= t.tensor().data().data() == w1_bytes;
    }
    EXPECT_EQ(moved, channels == 64);
    auto gm = ParseOnnxModel(onnx.SerializeAsString());
    ASSERT_TRUE(gm.ok()) << gm.status();
    auto kernels = BuiltinKernels();
    ASSERT_TRUE(kernels.ok());
    std::vector<float> x(static_cast<size_t>(channels * 36));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(i));
    auto out = fuselage::Run(**gm, {Value(Tensor::FromFloats({1, channels, 6, 6}, x))},
                             **kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    auto reference = ModelFromProto(*kept);
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto expected = fuselage::Run(**reference, {Value(Tensor::FromFloats({1, channels, 6, 6}, x))},
                                  **kernels);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ((*out)[0].as_tensor().bytes(), (*expected)[0].as_tensor().bytes());
  }
}

TEST(OnnxReaderTest, ReadsAOneOpModel) {
  auto gm = ParseOnnxModel(OneOp("Relu").SerializeAsString());
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok());
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 16;
  auto out = fuselage::Run(**gm, {Value(Tensor::FromFloats({1, 2, 4, 4}, x))}, **kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 32; ++i) EXPECT_EQ((*out)[0].as_tensor().template data<float>()[i], std::max(0.0f, x[i]));
}

TEST(OnnxReaderTest, UnknownOpNamesTheNodeAndTheOpsItReads) {
  const std::string error = ErrorOf(OneOp("Erf"));
  EXPECT_NE(error.find("node 'the_node' (Erf)"), std::string::npos) << error;
  EXPECT_NE(error.find("op 'Erf' is not one"), std::string::npos) << error;
  EXPECT_NE(error.find("Conv"), std::string::npos) << error;
}

TEST(OnnxReaderTest, UnknownDomainNamesTheNode) {
  const std::string error = ErrorOf(OneOp("Relu", "com.microsoft"));
  EXPECT_NE(error.find("node 'the_node' (Relu): domain 'com.microsoft'"), std::string::npos)
      << error;
}

TEST(OnnxReaderTest, UnsupportedOpsetIsUnimplemented) {
  auto model = OnnxToModelProto(OneOp("Relu", "", 11));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("opset is 11; fuselage reads opsets 13 to 18"),
            std::string::npos)
      << model.status();
}

TEST(OnnxReaderTest, TruncatedFileIsAnError) {
  const std::string bytes = ReadAll(absl::StrCat(kDir, "all_ops.onnx"));
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3, size_t{5}, size_t{0}}) {
    auto gm = ParseOnnxModel(absl::string_view(bytes).substr(0, cut), "cut.onnx");
    ASSERT_FALSE(gm.ok()) << cut;
    EXPECT_NE(gm.status().message().find("'cut.onnx'"), std::string::npos) << gm.status();
  }
  auto missing = LoadOnnxModel("no/such/model.onnx");
  EXPECT_FALSE(missing.ok());
}

TEST(OnnxReaderTest, ExternalDataIsRefusedNamingTheInitializer) {
  ModelProto onnx = OneOp("Conv");
  NodeProto* conv = onnx.mutable_graph()->mutable_node(0);
  conv->add_input("w");
  TensorProto* w = onnx.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  for (int d : {3, 2, 1, 1}) w->add_dims(d);
  w->set_data_location(TensorProto::EXTERNAL);
  auto* location = w->add_external_data();
  location->set_key("location");
  location->set_value("weights.bin");
  auto model = OnnxToModelProto(onnx);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("initializer 'w': its data is external ('weights.bin')"),
            std::string::npos)
      << model.status();
}

TEST(OnnxReaderTest, RuntimeWeightAndBadDataSizeNameTheNodeOrTensor) {
  ModelProto onnx = OneOp("Conv");
  onnx.mutable_graph()->mutable_node(0)->add_input("x");
  EXPECT_NE(ErrorOf(onnx).find("node 'the_node' (Conv): its weight (input 1) is computed at run time"),
            std::string::npos)
      << ErrorOf(onnx);
  ModelProto short_data = OneOp("Conv");
  short_data.mutable_graph()->mutable_node(0)->add_input("w");
  TensorProto* w = short_data.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  for (int d : {3, 2, 1, 1}) w->add_dims(d);
  w->add_float_data(1.0f);
  EXPECT_NE(ErrorOf(short_data).find("initializer 'w': its float_data holds 1 values; its shape "
                                     "[3, 2, 1, 1] needs 6"),
            std::string::npos)
      << ErrorOf(short_data);
}

TEST(OnnxReaderTest, DynamicInputShapeIsAnError) {
  ModelProto onnx = OneOp("Relu");
  auto* dim = onnx.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
                  ->mutable_shape()->mutable_dim(0);
  dim->set_dim_param("batch");
  EXPECT_NE(ErrorOf(onnx).find("graph input 'x': its shape is not static (['batch', 2, 4, 4])"),
            std::string::npos)
      << ErrorOf(onnx);
}

TEST(OnnxReaderTest, UnsupportedAttributeValueNamesTheNode) {
  ModelProto onnx = OneOp("HardSigmoid");
  auto* alpha = onnx.mutable_graph()->mutable_node(0)->add_attribute();
  alpha->set_name("alpha");
  alpha->set_type(onnx_subset::AttributeProto::FLOAT);
  alpha->set_f(0.2f);
  EXPECT_NE(ErrorOf(onnx).find("node 'the_node' (HardSigmoid): alpha=0.2"), std::string::npos)
      << ErrorOf(onnx);
}

}  // namespace
}  // namespace fuselage
