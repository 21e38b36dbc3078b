// The C++ ONNX reader (onnx/onnx_reader.h) against ONNX Runtime and the former Python
// importer: tests/onnx/testdata/{all_ops,more_ops,names,fold_ops,shape_ops}.onnx (every op the
// reader reads, the shape arithmetic it folds, and names torch.fx renames, built with
// onnx.helper by tests/onnx/make_testdata.py) read in C++ gives exactly the model file the
// Python importer wrote for it (same nodes, names, targets, args, meta, module types,
// attributes and tensor bytes), and runs on fuselage's float runtime to ONNX Runtime's
// output. Each new op also on a hand-built model with hand-computed values; bad input
// (truncated file, unknown op or domain, opset, external data, dynamic input, hostile
// shapes) is an error naming the node or tensor.
#include "onnx/onnx_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
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
  const std::string error = ErrorOf(OneOp("Einsum"));
  EXPECT_NE(error.find("node 'the_node' (Einsum)"), std::string::npos) << error;
  EXPECT_NE(error.find("op 'Einsum' is not one"), std::string::npos) << error;
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


// ---- the ops of static shapes and the folding of shape arithmetic, on hand-built models
// whose expected values are computed by hand ----------------------------------------------

// A hand-built ONNX graph at opset 17: inputs, initializers, nodes, outputs.
class Builder {
 public:
  Builder() {
    onnx_.set_ir_version(8);
    auto* id = onnx_.add_opset_import();
    id->set_domain("");
    id->set_version(17);
  }
  Builder& Input(const std::string& name, std::vector<int64_t> dims) {
    auto* input = graph()->add_input();
    input->set_name(name);
    auto* type = input->mutable_type()->mutable_tensor_type();
    type->set_elem_type(TensorProto::FLOAT);
    for (int64_t d : dims) type->mutable_shape()->add_dim()->set_dim_value(d);
    return *this;
  }
  Builder& Ints(const std::string& name, std::vector<int64_t> values,
                std::vector<int64_t> dims = {-1}) {
    TensorProto* t = Initializer(name, TensorProto::INT64, values.size(), dims);
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  Builder& Floats(const std::string& name, std::vector<float> values,
                  std::vector<int64_t> dims = {-1}) {
    TensorProto* t = Initializer(name, TensorProto::FLOAT, values.size(), dims);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  // An initializer `name` of `data_type` shaped `dims` ({-1}: one axis of `count`), its
  // values for the caller to add.
  TensorProto* Initializer(const std::string& name, int data_type, size_t count,
                           std::vector<int64_t> dims) {
    TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(data_type);
    if (dims == std::vector<int64_t>{-1}) dims = {static_cast<int64_t>(count)};
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  // A node named `name` of `op` reading `inputs` ("" for an absent one), writing `outputs`.
  NodeProto& Node(const std::string& op, const std::string& name,
                  std::vector<std::string> inputs, std::vector<std::string> outputs) {
    NodeProto* node = graph()->add_node();
    node->set_op_type(op);
    node->set_name(name);
    for (const auto& i : inputs) node->add_input(i);
    for (const auto& o : outputs) node->add_output(o);
    return *node;
  }
  Builder& Output(const std::string& name) {
    graph()->add_output()->set_name(name);
    return *this;
  }
  const ModelProto& onnx() const { return onnx_; }

 private:
  onnx_subset::GraphProto* graph() { return onnx_.mutable_graph(); }
  ModelProto onnx_;
};

void IntAttr(NodeProto& node, const std::string& name, int64_t v) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx_subset::AttributeProto::INT);
  a->set_i(v);
}
void IntsAttr(NodeProto& node, const std::string& name, std::vector<int64_t> v) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx_subset::AttributeProto::INTS);
  for (int64_t i : v) a->add_ints(i);
}
void StringAttr(NodeProto& node, const std::string& name, const std::string& v) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx_subset::AttributeProto::STRING);
  a->set_s(v);
}

// The outputs of the reader's model of `onnx` run on `inputs`, as (shape, floats) each.
struct Out {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::vector<Out> RunOnnx(const ModelProto& onnx, const std::vector<Tensor>& inputs) {
  std::vector<Out> outs;
  auto gm = ParseOnnxModel(onnx.SerializeAsString());
  EXPECT_TRUE(gm.ok()) << gm.status();
  if (!gm.ok()) return outs;
  auto kernels = BuiltinKernels();
  EXPECT_TRUE(kernels.ok());
  std::vector<Value> args;
  for (const Tensor& t : inputs) args.push_back(Value(t));
  auto out = fuselage::Run(**gm, args, **kernels);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return outs;
  for (const Value& v : *out) {
    const Tensor& t = v.as_tensor();
    Out o;
    o.shape.assign(t.shape().begin(), t.shape().end());
    o.values.assign(t.data<float>(), t.data<float>() + t.numel());
    outs.push_back(std::move(o));
  }
  return outs;
}

// The call_function targets of the reader's model of `onnx`, in graph order.
std::vector<std::string> Targets(const ModelProto& onnx) {
  std::vector<std::string> targets;
  auto model = OnnxToModelProto(onnx);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return targets;
  for (const auto& node : model->graph().nodes())
    if (node.op() == proto::CALL_FUNCTION) targets.push_back(node.target());
  return targets;
}

std::vector<float> Iota(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

using Floats = std::vector<float>;
using Dims = std::vector<int64_t>;

TEST(OnnxReaderOpsTest, PadWithAValueIsFPadAndPadsEachSide) {
  Builder b;
  b.Input("x", {1, 1, 2, 2}).Ints("pads", {0, 0, 1, 0, 0, 0, 0, 1}).Floats("nine", {9.0f}, {});
  b.Node("Pad", "pad", {"x", "pads", "nine"}, {"y"});
  b.Output("y");
  EXPECT_EQ(Targets(b.onnx()), std::vector<std::string>{"torch.nn.functional.pad"});
  // One row of 9 above, one column of 9 to the right.
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 1, 2, 2}, Floats{1, 2, 3, 4})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{1, 1, 3, 3}));
  EXPECT_EQ(out[0].values, (Floats{9, 9, 9, 1, 2, 9, 3, 4, 9}));
}

TEST(OnnxReaderOpsTest, PadErrorsNameTheNodeAndTheExpectation) {
  Builder reflect;
  reflect.Input("x", {1, 2}).Ints("pads", {0, 1, 0, 1});
  StringAttr(reflect.Node("Pad", "pad", {"x", "pads"}, {"y"}), "mode", "reflect");
  reflect.Output("y");
  EXPECT_NE(ErrorOf(reflect.onnx()).find("node 'pad' (Pad): mode 'reflect'; fuselage reads "
                                         "constant padding"),
            std::string::npos);
  Builder short_pads;
  short_pads.Input("x", {1, 2}).Ints("pads", {1, 1});
  short_pads.Node("Pad", "pad", {"x", "pads"}, {"y"});
  short_pads.Output("y");
  EXPECT_NE(ErrorOf(short_pads.onnx()).find("2 pads for an input of rank 2; expected 4"),
            std::string::npos);
  Builder huge;
  huge.Input("x", {1, 2}).Ints("pads", {0, 0, int64_t{1} << 40, 0});
  huge.Node("Pad", "pad", {"x", "pads"}, {"y"});
  huge.Output("y");
  EXPECT_NE(ErrorOf(huge.onnx()).find("node 'pad' (Pad): a padded tensor"), std::string::npos)
      << ErrorOf(huge.onnx());
}

TEST(OnnxReaderOpsTest, SliceIsANarrowPerAxisNotTakenWhole) {
  Builder b;
  // Rows 1..2 of 3, columns from -3 to past the end of 4 (1..3), the batch axis whole.
  b.Input("x", {1, 1, 3, 4}).Ints("starts", {1, -3, 0}).Ints("ends", {3, 100, 1});
  b.Ints("axes", {2, 3, 0});
  b.Node("Slice", "slice", {"x", "starts", "ends", "axes"}, {"y"});
  b.Output("y");
  EXPECT_EQ(Targets(b.onnx()), (std::vector<std::string>{"torch.narrow", "torch.narrow"}));
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 1, 3, 4}, Iota(12))});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{1, 1, 2, 3}));
  EXPECT_EQ(out[0].values, (Floats{5, 6, 7, 9, 10, 11}));
  Builder two;
  two.Input("x", {1, 4}).Ints("starts", {0}).Ints("ends", {4}).Ints("axes", {1}).Ints("steps", {2});
  two.Node("Slice", "slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  two.Output("y");
  EXPECT_NE(ErrorOf(two.onnx()).find("node 'slice' (Slice): step 2 on axis 1; fuselage reads "
                                     "slices of step 1"),
            std::string::npos);
}

TEST(OnnxReaderOpsTest, SplitIsTorchSplitAndAGetitemPerOutput) {
  Builder b;
  b.Input("x", {1, 4}).Ints("sizes", {1, 3});
  IntAttr(b.Node("Split", "split", {"x", "sizes"}, {"a", "b"}), "axis", 1);
  b.Output("a").Output("b");
  EXPECT_EQ(Targets(b.onnx()), (std::vector<std::string>{"torch.functional.split",
                                                         "operator.getitem", "operator.getitem"}));
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 4}, Floats{10, 20, 30, 40})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].values, (Floats{10}));
  EXPECT_EQ(out[1].shape, (Dims{1, 3}));
  EXPECT_EQ(out[1].values, (Floats{20, 30, 40}));
  // Equal parts without sizes; sizes that do not sum to the axis are an error.
  Builder equal;
  equal.Input("x", {1, 4});
  IntAttr(equal.Node("Split", "split", {"x"}, {"a", "b"}), "axis", 1);
  equal.Output("b");
  out = RunOnnx(equal.onnx(), {Tensor::FromFloats({1, 4}, Floats{10, 20, 30, 40})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].values, (Floats{30, 40}));
  Builder bad;
  bad.Input("x", {1, 4}).Ints("sizes", {1, 2});
  IntAttr(bad.Node("Split", "split", {"x", "sizes"}, {"a", "b"}), "axis", 1);
  bad.Output("a");
  EXPECT_NE(ErrorOf(bad.onnx()).find("node 'split' (Split): split sizes [1, 2] for 2 outputs of "
                                     "an axis of 4; expected one size per output, summing to "
                                     "the axis"),
            std::string::npos);
}

TEST(OnnxReaderOpsTest, ResizeIsInterpolateNearestOrLinear) {
  Builder nearest;
  nearest.Input("x", {1, 1, 2, 2}).Floats("scales", {1, 1, 2, 2});
  NodeProto& n = nearest.Node("Resize", "resize", {"x", "", "scales"}, {"y"});
  StringAttr(n, "mode", "nearest");
  StringAttr(n, "coordinate_transformation_mode", "asymmetric");
  StringAttr(n, "nearest_mode", "floor");
  nearest.Output("y");
  EXPECT_EQ(Targets(nearest.onnx()), std::vector<std::string>{"torch.nn.functional.interpolate"});
  auto out = RunOnnx(nearest.onnx(), {Tensor::FromFloats({1, 1, 2, 2}, Floats{1, 2, 3, 4})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{1, 1, 4, 4}));
  EXPECT_EQ(out[0].values, (Floats{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  // Linear with align_corners from 2 to 4 columns: the corners kept, 1/3 steps between.
  Builder linear;
  linear.Input("x", {1, 1, 2, 2}).Ints("sizes", {1, 1, 2, 4});
  NodeProto& l = linear.Node("Resize", "resize", {"x", "", "", "sizes"}, {"y"});
  StringAttr(l, "mode", "linear");
  StringAttr(l, "coordinate_transformation_mode", "align_corners");
  linear.Output("y");
  out = RunOnnx(linear.onnx(), {Tensor::FromFloats({1, 1, 2, 2}, Floats{0, 3, 6, 9})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{1, 1, 2, 4}));
  const Floats expected = {0, 1, 2, 3, 6, 7, 8, 9};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(out[0].values[i], expected[i], 1e-5) << i;
  Builder cubic;
  cubic.Input("x", {1, 1, 2, 2}).Floats("scales", {1, 1, 2, 2});
  StringAttr(cubic.Node("Resize", "resize", {"x", "", "scales"}, {"y"}), "mode", "cubic");
  cubic.Output("y");
  EXPECT_NE(ErrorOf(cubic.onnx()).find("node 'resize' (Resize): mode 'cubic'"), std::string::npos)
      << ErrorOf(cubic.onnx());
  Builder channels;
  channels.Input("x", {1, 1, 2, 2}).Floats("scales", {1, 2, 1, 1});
  channels.Node("Resize", "resize", {"x", "", "scales"}, {"y"});
  channels.Output("y");
  EXPECT_NE(ErrorOf(channels.onnx()).find("resizes the batch or channel axis"), std::string::npos);
}

// Scales that are not out / in (15 columns at 0.5 make 7): ONNX Runtime maps each output
// column back by the given scale, src = (i + 0.5) / 0.5 - 0.5 = 2i + 0.5 (half_pixel), so a
// linear ramp 0..14 resizes to 0.5, 2.5, ..., 12.5. Through a size of 7 PyTorch would map
// by 15 / 7 instead (0.57, 2.71, ...).
TEST(OnnxReaderOpsTest, ResizeByAScaleThatIsNotOutOverInMapsByTheScale) {
  Builder b;
  b.Input("x", {1, 1, 2, 15}).Floats("scales", {1, 1, 1, 0.5f});
  NodeProto& n = b.Node("Resize", "resize", {"x", "", "scales"}, {"y"});
  StringAttr(n, "mode", "linear");
  b.Output("y");
  Floats x;
  for (int row = 0; row < 2; ++row) {
    for (int j = 0; j < 15; ++j) x.push_back(static_cast<float>(100 * row + j));
  }
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 1, 2, 15}, x)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{1, 1, 2, 7}));
  for (int row = 0; row < 2; ++row) {
    for (int i = 0; i < 7; ++i) {
      EXPECT_NEAR(out[0].values[row * 7 + i], 100 * row + 2 * i + 0.5f, 1e-4)
          << "row " << row << " column " << i;
    }
  }
}

TEST(OnnxReaderOpsTest, SqueezeAndUnsqueezeOfATensorAreReshapes) {
  Builder b;
  b.Input("x", {1, 3}).Ints("zero", {0}).Ints("last", {-1});
  b.Node("Squeeze", "squeeze", {"x", "zero"}, {"s"});
  b.Node("Unsqueeze", "unsqueeze", {"s", "last"}, {"y"});
  b.Output("y");
  EXPECT_EQ(Targets(b.onnx()), (std::vector<std::string>{"torch.reshape", "torch.reshape"}));
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 3}, Floats{1, 2, 3})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{3, 1}));
  Builder bad;
  bad.Input("x", {2, 3}).Ints("zero", {0});
  bad.Node("Squeeze", "squeeze", {"x", "zero"}, {"y"});
  bad.Output("y");
  EXPECT_NE(ErrorOf(bad.onnx()).find("node 'squeeze' (Squeeze): axis 0 of an input of shape "
                                     "[2, 3] is not of size 1"),
            std::string::npos);
}

// x [1, 2, 4, 4] -> Shape(start=-2) [4, 4] -> ReduceProd 16 -> Range(1, 16, 5) [1, 6, 11]
// -> Cast float: the graph output is that constant, folded whole.
TEST(OnnxReaderOpsTest, ShapeArithmeticFoldsToItsConstant) {
  Builder b;
  b.Input("x", {1, 2, 4, 4}).Ints("one", {1}, {}).Ints("five", {5}, {});
  IntAttr(b.Node("Shape", "shape", {"x"}, {"hw"}), "start", -2);
  IntAttr(b.Node("ReduceProd", "prod", {"hw"}, {"n"}), "keepdims", 0);
  b.Node("Range", "range", {"one", "n", "five"}, {"r"});
  IntAttr(b.Node("Cast", "cast", {"r"}, {"y"}), "to", TensorProto::FLOAT);
  b.Output("y");
  EXPECT_TRUE(Targets(b.onnx()).empty());  // no node computes it: a constant
  auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 2, 4, 4}, Iota(32))});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{3}));
  EXPECT_EQ(out[0].values, (Floats{1, 6, 11}));
}

// Integer arithmetic as numpy / onnx.reference: division truncates toward zero; Where picks
// by a bool from Equal; Gather takes negative indices; Concat of 2-d constants.
TEST(OnnxReaderOpsTest, FoldsComputeAsTheReferenceImplementation) {
  Builder b;
  b.Input("x", {1, 1});
  b.Ints("m7", {-7}, {}).Ints("two", {2}, {}).Ints("v", {3, 5, 7}).Ints("idx", {-1, 0});
  b.Ints("a", {1, 2}, {1, 2}).Ints("c", {3, 4}, {1, 2});
  b.Node("Div", "div", {"m7", "two"}, {"q"});            // -3 (not -4)
  b.Node("Gather", "gather", {"v", "idx"}, {"g"});       // [7, 3]
  b.Node("Equal", "equal", {"g", "two"}, {"is_two"});    // [false, false]
  b.Node("Where", "where", {"is_two", "v", "g"}, {"w"}); // shapes [2] vs [3]: an error below
  IntAttr(b.Node("Concat", "concat", {"a", "c"}, {"ac"}), "axis", 0);  // [[1, 2], [3, 4]]
  b.Node("Mul", "mul", {"ac", "q"}, {"acq"});            // [[-3, -6], [-9, -12]]
  IntAttr(b.Node("Cast", "cast", {"acq"}, {"y"}), "to", TensorProto::FLOAT);
  b.Output("y");
  // Where's inputs [2] and [3] do not broadcast: named, with the shapes.
  EXPECT_NE(ErrorOf(b.onnx()).find("node 'where' (Where): shapes [3] and [2] do not broadcast"),
            std::string::npos)
      << ErrorOf(b.onnx());
  ModelProto fixed = b.onnx();
  fixed.mutable_graph()->mutable_node(3)->set_input(1, "g");  // Where(is_two, g, g)
  auto out = RunOnnx(fixed, {Tensor::FromFloats({1, 1}, Floats{0})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (Dims{2, 2}));
  EXPECT_EQ(out[0].values, (Floats{-3, -6, -9, -12}));
}

// Mod as ONNX defines it (swin_t's window shifts): fmod=0 takes the divisor's sign, as
// Python's % (-7 % 3 = 2, 7 % -3 = -2); fmod=1 the dividend's, as C's fmod (-7 -> -1,
// and floats); fmod=0 on floats, or an integer modulo by zero, is an error naming the node.
TEST(OnnxReaderOpsTest, ModFoldsWithTheSignItsFmodAttributeSays) {
  for (const int fmod : {0, 1}) {
    SCOPED_TRACE(fmod);
    Builder b;
    b.Input("x", {1, 1}).Ints("a", {-7, 7, 6, -6}).Ints("d", {3, -3, 4, 4});
    IntAttr(b.Node("Mod", "mod", {"a", "d"}, {"r"}), "fmod", fmod);
    IntAttr(b.Node("Cast", "cast", {"r"}, {"y"}), "to", TensorProto::FLOAT);
    b.Output("y");
    auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 1}, Floats{0})});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].values, fmod == 0 ? (Floats{2, -2, 2, 2}) : (Floats{-1, 1, 2, -2}));
  }
  Builder floats;
  floats.Input("x", {1, 1}).Floats("a", {-7.5f}, {}).Floats("d", {2.0f}, {});
  floats.Node("Mod", "mod", {"a", "d"}, {"y"});
  floats.Output("y");
  EXPECT_NE(ErrorOf(floats.onnx()).find("node 'mod' (Mod): fmod=0 on floats"), std::string::npos)
      << ErrorOf(floats.onnx());
  Builder by_zero;
  by_zero.Input("x", {1, 1}).Ints("one", {1}, {}).Ints("zero", {0}, {});
  by_zero.Node("Mod", "mod", {"one", "zero"}, {"y"});
  by_zero.Output("y");
  EXPECT_NE(ErrorOf(by_zero.onnx()).find("node 'mod' (Mod): an integer modulo by zero"),
            std::string::npos)
      << ErrorOf(by_zero.onnx());
}

// ConstantOfShape's value attribute, in each encoding a TensorProto allows (the typed field or
// raw_data), fills its shape as ONNX defines (float 0 when absent); a value of two elements,
// of a data type fuselage does not read, or whose data does not fit its dims is an error
// naming the node.
TEST(OnnxReaderOpsTest, ConstantOfShapeReadsItsValueInEveryEncoding) {
  struct Case {
    std::string name;
    int data_type;
    std::string raw;  // raw_data, or empty for the typed field below
    std::vector<int64_t> typed_ints;
    std::vector<float> typed_floats;
    float filled;  // the value of every element, cast to float
  };
  const int64_t seven = 7;
  const float two_and_a_half = 2.5f;
  const std::vector<Case> cases = {
      {"absent", -1, "", {}, {}, 0.0f},
      {"int64 raw", TensorProto::INT64, std::string(reinterpret_cast<const char*>(&seven), 8),
       {}, {}, 7.0f},
      {"int64 typed", TensorProto::INT64, "", {-3}, {}, -3.0f},
      {"int32 typed", TensorProto::INT32, "", {-2}, {}, -2.0f},
      {"bool raw", TensorProto::BOOL, std::string(1, '\x05'), {}, {}, 1.0f},
      {"float raw", TensorProto::FLOAT,
       std::string(reinterpret_cast<const char*>(&two_and_a_half), 4), {}, {}, 2.5f},
      {"float typed", TensorProto::FLOAT, "", {}, {0.25f}, 0.25f}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Builder b;
    b.Input("x", {1, 1}).Ints("shape", {2, 3});
    NodeProto& fill = b.Node("ConstantOfShape", "fill", {"shape"}, {"c"});
    if (c.data_type >= 0) {
      auto* a = fill.add_attribute();
      a->set_name("value");
      a->set_type(onnx_subset::AttributeProto::TENSOR);
      TensorProto* t = a->mutable_t();
      t->set_data_type(c.data_type);
      t->add_dims(1);
      if (!c.raw.empty()) t->set_raw_data(c.raw);
      for (int64_t v : c.typed_ints) {
        if (c.data_type == TensorProto::INT64)
          t->add_int64_data(v);
        else
          t->add_int32_data(static_cast<int32_t>(v));
      }
      for (float v : c.typed_floats) t->add_float_data(v);
    }
    IntAttr(b.Node("Cast", "cast", {"c"}, {"y"}), "to", TensorProto::FLOAT);
    b.Output("y");
    auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 1}, Floats{0})});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape, (Dims{2, 3}));
    EXPECT_EQ(out[0].values, Floats(6, c.filled));
  }
  // What the value attribute may not be: each an error naming the node and what is wrong.
  for (const auto& [data_type, values, expected] :
       std::vector<std::tuple<int, int, std::string>>{
           {TensorProto::INT64, 2, "a value of other than one element"},
           {11, 1, "data type 11; fuselage reads FLOAT, INT64, INT32 and BOOL"},
           {TensorProto::INT64, 0, "its int64_data holds 0 values; its shape [1] needs 1"}}) {
    SCOPED_TRACE(expected);
    Builder b;
    b.Input("x", {1, 1}).Ints("shape", {2});
    NodeProto& fill = b.Node("ConstantOfShape", "fill", {"shape"}, {"y"});
    auto* a = fill.add_attribute();
    a->set_name("value");
    a->set_type(onnx_subset::AttributeProto::TENSOR);
    TensorProto* t = a->mutable_t();
    t->set_data_type(data_type);
    t->add_dims(values == 2 ? 2 : 1);
    for (int i = 0; i < values; ++i) t->add_int64_data(i);
    b.Output("y");
    const std::string error = ErrorOf(b.onnx());
    EXPECT_NE(error.find("node 'fill' (ConstantOfShape)"), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
}

// Flatten's axis is in [-rank, rank], a negative one counted from rank (ONNX's Flatten):
// on [2, 3, 4, 5], -1 gives [24, 5], -2 [6, 20], -4 and 0 [1, 120], 4 [120, 1].
TEST(OnnxReaderOpsTest, FlattenCountsANegativeAxisFromTheRank) {
  for (const auto& [axis, dims] : std::vector<std::pair<int64_t, Dims>>{
           {-1, {24, 5}}, {-2, {6, 20}}, {-4, {1, 120}}, {0, {1, 120}}, {1, {2, 60}},
           {4, {120, 1}}}) {
    SCOPED_TRACE(axis);
    Builder b;
    b.Input("x", {2, 3, 4, 5});
    IntAttr(b.Node("Flatten", "flatten", {"x"}, {"y"}), "axis", axis);
    b.Output("y");
    auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({2, 3, 4, 5}, Iota(120))});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape, dims);
    EXPECT_EQ(out[0].values, Iota(120));
  }
  for (const int64_t axis : {-5, 5}) {
    Builder b;
    b.Input("x", {2, 3, 4, 5});
    IntAttr(b.Node("Flatten", "flatten", {"x"}, {"y"}), "axis", axis);
    b.Output("y");
    EXPECT_NE(ErrorOf(b.onnx()).find(absl::StrCat("node 'flatten' (Flatten): axis ", axis,
                                                  " for an input of rank 4; expected one in "
                                                  "[-4, 4]")),
              std::string::npos)
        << ErrorOf(b.onnx());
  }
}

// Clip as ONNX defines it: without bounds it clips nothing; with min >= max every element
// is max (min(max(x, min), max)).
TEST(OnnxReaderOpsTest, ClipWithoutBoundsOrWithMinAtLeastMax) {
  const Floats x = {-2.0f, -0.5f, 0.5f, 2.0f};
  struct Case {
    std::string name;
    std::vector<std::string> inputs;
    Floats expected;
  };
  for (const Case& c : std::vector<Case>{{"no bounds", {"x"}, x},
                                         {"min > max", {"x", "one", "minus_one"}, Floats(4, -1)},
                                         {"min == max", {"x", "half", "half"}, Floats(4, 0.5f)},
                                         {"max only", {"x", "", "half"}, {-2, -0.5f, 0.5f, 0.5f}}}) {
    SCOPED_TRACE(c.name);
    Builder b;
    b.Input("x", {1, 4}).Floats("one", {1.0f}, {}).Floats("minus_one", {-1.0f}, {});
    b.Floats("half", {0.5f}, {});
    b.Node("Clip", "clip", c.inputs, {"y"});
    b.Output("y");
    auto out = RunOnnx(b.onnx(), {Tensor::FromFloats({1, 4}, x)});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].values, c.expected);
  }
}

// A node named as a Python keyword gives its module another name: torch.fx's code would
// call `self.class(x)`, which does not compile.
TEST(OnnxReaderOpsTest, AModuleIsNeverNamedAsAPythonKeyword) {
  Builder b;
  b.Input("x", {1, 4});
  b.Node("Relu", "class", {"x"}, {"r"});
  b.Node("Relu", "def", {"r"}, {"y"});
  b.Output("y");
  auto model = OnnxToModelProto(b.onnx());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> modules;
  for (const auto& node : model->graph().nodes())
    if (node.op() == proto::CALL_MODULE) modules.push_back(node.target());
  EXPECT_EQ(modules, (std::vector<std::string>{"class_1", "def_1"}));
}

TEST(OnnxReaderOpsTest, FoldErrorsNameTheNode) {
  Builder on_tensor;
  on_tensor.Input("x", {1, 4});
  on_tensor.Node("Floor", "floor", {"x"}, {"y"});
  on_tensor.Output("y");
  EXPECT_NE(ErrorOf(on_tensor.onnx()).find("node 'floor' (Floor): fuselage reads Floor only on "
                                           "constants (shape arithmetic); an input here is a "
                                           "computed tensor"),
            std::string::npos);
  Builder by_zero;
  by_zero.Input("x", {1, 1}).Ints("one", {1}, {}).Ints("zero", {0}, {});
  by_zero.Node("Div", "div", {"one", "zero"}, {"q"});
  by_zero.Output("q");
  EXPECT_NE(ErrorOf(by_zero.onnx()).find("node 'div' (Div): an integer division by zero"),
            std::string::npos);
  Builder cast;
  cast.Input("x", {1, 1}).Floats("big", {1e30f}, {});
  IntAttr(cast.Node("Cast", "cast", {"big"}, {"y"}), "to", TensorProto::INT64);
  cast.Output("y");
  EXPECT_NE(ErrorOf(cast.onnx()).find("node 'cast' (Cast): a cast of 1e+30 to an integer type"),
            std::string::npos)
      << ErrorOf(cast.onnx());
}

// A hostile shape in shape arithmetic is an error before anything is allocated.
TEST(OnnxReaderOpsTest, HostileShapesAreErrorsNotAllocations) {
  const int64_t huge = int64_t{1} << 20;
  struct Case {
    std::string op;
    std::vector<std::string> inputs;
  };
  for (const Case& c : std::vector<Case>{{"ConstantOfShape", {"shape"}},
                                         {"Expand", {"one", "shape"}},
                                         {"Tile", {"one_2d", "shape"}},
                                         {"Range", {"zero", "big", "step"}}}) {
    SCOPED_TRACE(c.op);
    Builder b;
    b.Input("x", {1, 1}).Ints("shape", {huge, huge}).Floats("one", {1.0f}, {});
    b.Floats("one_2d", {1.0f}, {1, 1}).Ints("zero", {0}, {}).Ints("big", {huge * huge}, {});
    b.Ints("step", {1}, {});
    b.Node(c.op, "hostile", c.inputs, {"y"});
    b.Output("y");
    const std::string error = ErrorOf(b.onnx());
    EXPECT_NE(error.find(absl::StrCat("node 'hostile' (", c.op, ")")), std::string::npos) << error;
    EXPECT_NE(error.find("elements"), std::string::npos) << error;
  }
}

// The constants folds make are bounded per model (kFoldBudget beyond the file's own): a
// chain of large folds from a small file is an error at the fold that passes the budget,
// before it allocates, as a single too-large fold is.
TEST(OnnxReaderOpsTest, FoldsMakeAtMostTheModelsBudget) {
  Builder b;
  b.Input("x", {1, 1}).Ints("shape", {int64_t{1} << 23});
  b.Node("ConstantOfShape", "c", {"shape"}, {"c"});
  b.Node("Neg", "n1", {"c"}, {"n1"});
  b.Node("Neg", "n2", {"n1"}, {"n2"});
  b.Output("n2");
  const std::string error = ErrorOf(b.onnx());
  EXPECT_NE(error.find("node 'n2' (Neg): a constant of shape [8388608]; fuselage folds constants "
                       "of <= 1 elements here"),
            std::string::npos)
      << error;
  Builder tile;
  tile.Input("x", {1, 1}).Floats("pm", {1, -1}, {1, 2}).Ints("reps", {1, 16777218});
  tile.Node("Tile", "tile", {"pm", "reps"}, {"y"});
  tile.Output("y");
  EXPECT_NE(ErrorOf(tile.onnx()).find("node 'tile' (Tile): a tiled constant of more than"),
            std::string::npos)
      << ErrorOf(tile.onnx());
}

// External data beside the model file is read; missing, or outside its folder, is an
// error naming the initializer and the file.
TEST(OnnxReaderOpsTest, ExternalDataIsReadFromTheModelsFolder) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/external");
  ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  Builder b;
  b.Input("x", {1, 3});
  b.Node("Add", "add", {"x", "w"}, {"y"});
  b.Output("y");
  ModelProto onnx = b.onnx();
  TensorProto* w = onnx.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(3);
  w->set_data_location(TensorProto::EXTERNAL);
  auto* location = w->add_external_data();
  location->set_key("location");
  location->set_value("w.bin");
  auto* offset = w->add_external_data();
  offset->set_key("offset");
  offset->set_value("4");
  const float data[4] = {99, 10, 20, 30};  // the tensor from byte 4
  std::ofstream(absl::StrCat(dir, "/w.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(data), sizeof(data));
  std::ofstream(absl::StrCat(dir, "/m.onnx"), std::ios::binary) << onnx.SerializeAsString();
  auto gm = LoadOnnxModel(absl::StrCat(dir, "/m.onnx"));
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok());
  auto out = fuselage::Run(**gm, {Value(Tensor::FromFloats({1, 3}, Floats{1, 2, 3}))}, **kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0].as_tensor();
  EXPECT_EQ(Floats(y.data<float>(), y.data<float>() + 3), (Floats{11, 22, 33}));

  // The model again, its initializer's data at `where`.
  auto load_with_location = [&](const std::string& where) {
    location->set_value(where);
    std::ofstream(absl::StrCat(dir, "/m.onnx"), std::ios::binary | std::ios::trunc)
        << onnx.SerializeAsString();
    return LoadOnnxModel(absl::StrCat(dir, "/m.onnx"));
  };
  auto missing = load_with_location("gone.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("initializer 'w': its external data file 'gone.bin' "
                                            "is missing"),
            std::string::npos)
      << missing.status();
  auto outside = load_with_location("../w.bin");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("initializer 'w': external data location '../w.bin' "
                                            "is outside the model's folder"),
            std::string::npos)
      << outside.status();
}

}  // namespace
}  // namespace fuselage
