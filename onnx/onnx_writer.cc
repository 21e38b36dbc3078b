// fuselage's one ONNX writer (fuselage.to_onnx runs it through the extension, the CLI's
// export-onnx and `-o x.onnx` directly): a record run, a walk over the graph that writes
// each node as the ONNX nodes computing it in float (quantized ones between
// DequantizeLinear and QuantizeLinear), then the QDQ tidying. Names follow the graph's
// (an fx node's name where it is free, so the ONNX graph reads like the fx code).
#include "onnx/onnx_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/file_io.h"
#include "graph/status_macros.h"
#include "lowering/lowering_rule.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

using onnx_subset::AttributeProto;
using onnx_subset::NodeProto;
using onnx_subset::TensorProto;
using onnx_subset::ValueInfoProto;
using Shape = std::vector<int64_t>;

// ONNX's element types (TensorProto.DataType), the ones the writer makes.
constexpr int kFloat = 1, kUInt8 = 2, kInt8 = 3, kInt32 = 6, kInt64 = 7, kBool = 9;
// The rounds of QDQ tidying: each only removes nodes; a few reach the fixed point.
constexpr int kMaxTidyRounds = 10;
constexpr size_t kSmallConstant = 16;  // constants this small are shared and tidy reads them

size_t ElementSize(int elem_type) {
  switch (elem_type) {
    case kFloat: case kInt32: return 4;
    case kInt64: return 8;
    default: return 1;
  }
}

std::optional<int> ElemTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return kFloat;
    case DType::kInt64: return kInt64;
    case DType::kInt32: return kInt32;
    case DType::kBool: return kBool;
    case DType::kUInt8: case DType::kQUInt8: return kUInt8;
    case DType::kInt8: case DType::kQInt8: return kInt8;
    default: return std::nullopt;
  }
}

// An initializer's contents: element type, shape, row-major bytes.
struct Array {
  int elem_type = kFloat;
  Shape shape;
  std::string bytes;

  int64_t size() const { return static_cast<int64_t>(bytes.size() / ElementSize(elem_type)); }
  double At(int64_t i) const {
    const char* p = bytes.data() + i * ElementSize(elem_type);
    switch (elem_type) {
      case kFloat: { float v; std::memcpy(&v, p, 4); return v; }
      case kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
      case kInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
      case kUInt8: return static_cast<uint8_t>(*p);
      case kInt8: return static_cast<int8_t>(*p);
      default: return *p != 0;
    }
  }
};

Array Floats(Shape shape, const std::vector<float>& values) {
  Array a{kFloat, std::move(shape), {}};
  a.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  return a;
}

// Integers of `elem_type` (values cast as numpy's astype does for in-range values).
Array Integers(int elem_type, Shape shape, const std::vector<int64_t>& values) {
  Array a{elem_type, std::move(shape), {}};
  a.bytes.resize(values.size() * ElementSize(elem_type));
  char* p = a.bytes.data();
  for (size_t i = 0; i < values.size(); ++i) {
    switch (elem_type) {
      case kInt64: std::memcpy(p + 8 * i, &values[i], 8); break;
      case kInt32: { const int32_t v = static_cast<int32_t>(values[i]); std::memcpy(p + 4 * i, &v, 4); break; }
      default: p[i] = static_cast<char>(values[i]);
    }
  }
  return a;
}

Array ScalarFloat(double v) { return Floats({}, {static_cast<float>(v)}); }

// An ONNX attribute value: int, float, string or ints (onnx.helper.make_attribute's).
struct Attr {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>> value;
};
Attr IntAttr(std::string n, int64_t v) { return {std::move(n), v}; }
Attr FloatAttr(std::string n, double v) { return {std::move(n), static_cast<float>(v)}; }
Attr StringAttr(std::string n, std::string v) { return {std::move(n), std::move(v)}; }
Attr IntsAttr(std::string n, std::vector<int64_t> v) { return {std::move(n), std::move(v)}; }

// ---- the ONNX graph under construction ---------------------------------------------------

// A value of the graph being written: a float (or integer) tensor named by one ONNX
// tensor; a quantized one, named by its integers (uint8 / int8) with its own scale and
// zero point; a dequantized one (what x.dequantize() gives), which has no ONNX tensor of
// its own: each reader gets its own DequantizeLinear, since ONNX Runtime's QDQ selectors
// take a group only if its DequantizeLinear nodes feed it alone; a Python value (shape
// arithmetic, a flag); or the parts of a multi-output op (split, chunk) getitem picks.
struct Operand {
  enum class Kind { kFloat, kQuantized, kDequantized, kConstant, kParts };
  Kind kind = Kind::kConstant;
  std::string name;  // the ONNX tensor (of the source, for kDequantized)
  double scale = 1.0;
  int64_t zero_point = 0;
  int elem_type = kUInt8;
  Value constant;    // kConstant: what the node gave on the record run
  Shape shape;       // a tensor's shape on the record run
  std::vector<Operand> parts;  // kParts: one operand per output

  bool is_tensor() const { return kind != Kind::kConstant && kind != Kind::kParts; }
  bool is_quantized_like() const { return kind == Kind::kQuantized || kind == Kind::kDequantized; }
  static Operand Float(std::string name, Shape shape) {
    Operand o;
    o.kind = Kind::kFloat;
    o.name = std::move(name);
    o.shape = std::move(shape);
    return o;
  }
  static Operand Quantized(std::string name, double scale, int64_t zero_point, int elem_type,
                           Shape shape) {
    Operand o;
    o.kind = Kind::kQuantized;
    o.name = std::move(name);
    o.scale = scale;
    o.zero_point = zero_point;
    o.elem_type = elem_type;
    o.shape = std::move(shape);
    return o;
  }
  Operand AsKind(Kind k) const {
    Operand o = *this;
    o.kind = k;
    return o;
  }
};

class OnnxGraph {
 public:
  std::vector<NodeProto*> nodes;
  std::vector<TensorProto> initializers;
  std::vector<ValueInfoProto> inputs, outputs;
  std::map<std::string, Array> small;  // the initializers of <= 16 elements

  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; used_.count(name) > 0; ++i) name = absl::StrCat(base, "_", i);
    used_.insert(name);
    return name;
  }

  // Appends one node; returns the name of its output.
  std::string Node(const std::string& op_type, const std::vector<std::string>& node_inputs,
                   const std::string& base, std::vector<Attr> attributes = {}) {
    const std::string output = Fresh(base);
    Append(op_type, node_inputs, {output}, std::move(attributes));
    return output;
  }

  // Appends one node of `count` outputs, named base_0, base_1, ... (the node takes the
  // first's name); returns their names.
  std::vector<std::string> MultiNode(const std::string& op_type,
                                     const std::vector<std::string>& node_inputs,
                                     const std::string& base, size_t count,
                                     std::vector<Attr> attributes = {}) {
    std::vector<std::string> outputs;
    for (size_t i = 0; i < count; ++i) outputs.push_back(Fresh(absl::StrCat(base, "_", i)));
    Append(op_type, node_inputs, outputs, std::move(attributes));
    return outputs;
  }

  // An initializer holding `array`; equal small constants (scales, zero points, shapes)
  // are shared.
  std::string Constant(const Array& array, const std::string& base) {
    const bool is_small = array.size() <= static_cast<int64_t>(kSmallConstant);
    std::tuple<std::string, int, Shape> key{array.bytes, array.elem_type, array.shape};
    if (is_small) {
      auto it = constants_.find(key);
      if (it != constants_.end()) return it->second;
    }
    const std::string name = Fresh(base);
    TensorProto& t = initializers.emplace_back();
    for (int64_t d : array.shape) t.add_dims(d);
    t.set_data_type(array.elem_type);
    t.set_name(name);
    t.set_raw_data(array.bytes);
    if (is_small) {
      constants_[key] = name;
      small[name] = array;
    }
    return name;
  }

  void DropUnreadInitializers() {
    std::set<std::string> read;
    for (const NodeProto* n : nodes) read.insert(n->input().begin(), n->input().end());
    for (const ValueInfoProto& o : outputs) read.insert(o.name());
    std::vector<TensorProto> kept;
    for (TensorProto& t : initializers)
      if (read.count(t.name()) > 0) kept.push_back(std::move(t));
    initializers = std::move(kept);
  }

  // Initializer names of a scale (float32) and zero point (of elem_type): scalars, or one
  // per channel (shape [n]) when per_channel.
  std::pair<std::string, std::string> QParams(const std::vector<double>& scales,
                                              const std::vector<int64_t>& zero_points,
                                              int elem_type, bool per_channel) {
    std::vector<float> s(scales.begin(), scales.end());
    Shape shape = per_channel ? Shape{static_cast<int64_t>(s.size())} : Shape{};
    const std::string scale = Constant(Floats(shape, s), "scale");
    const std::string zero_point = Constant(Integers(elem_type, shape, zero_points), "zero_point");
    return {scale, zero_point};
  }

  Operand Quantize(const std::string& float_name, double scale, int64_t zero_point,
                   int elem_type, const std::string& base, Shape shape) {
    auto [s, z] = QParams({scale}, {zero_point}, elem_type, false);
    const std::string name = Node("QuantizeLinear", {float_name, s, z}, base);
    return Operand::Quantized(name, scale, zero_point, elem_type, std::move(shape));
  }

  std::string Dequantize(const Operand& value, const std::string& base) {
    auto [s, z] = QParams({value.scale}, {value.zero_point}, value.elem_type, false);
    return Node("DequantizeLinear", {value.name, s, z}, base);
  }

  // A DequantizeLinear giving back `value` (as float32) exactly: the integer 1 (or, below
  // zero, -1 as int8 or 0 with zero point 1 as uint8) with scale |value|.
  std::string ExactScalar(double value, int elem_type, const std::string& base) {
    const float v = static_cast<float>(value);
    int64_t q = 0, zero_point = 0;
    float scale = 1.0f;
    if (v > 0) {
      q = 1, scale = v;
    } else if (v < 0 && elem_type == kInt8) {
      q = -1, scale = -v;
    } else if (v < 0) {
      q = 0, zero_point = 1, scale = -v;
    }
    auto [s, z] = QParams({scale}, {zero_point}, elem_type, false);
    const std::string integer = Constant(Integers(elem_type, {}, {q}), "scalar");
    return Node("DequantizeLinear", {integer, s, z}, base + "_dq");
  }

  // The ONNX tensor an op computing in float reads for `value`: its own for a float
  // value, a DequantizeLinear made for this reader otherwise (ORT's QDQ selectors take a
  // group only if its DequantizeLinear nodes feed it alone).
  std::string FloatInput(const Operand& value, const std::string& base) {
    if (value.kind == Operand::Kind::kFloat) return value.name;
    return Dequantize(value, base + "_dq");
  }

 private:
  void Append(const std::string& op_type, const std::vector<std::string>& node_inputs,
              const std::vector<std::string>& node_outputs, std::vector<Attr> attributes) {
    NodeProto& n = storage_.emplace_back();
    for (const std::string& i : node_inputs) n.add_input(i);
    for (const std::string& o : node_outputs) n.add_output(o);
    n.set_name(node_outputs[0]);
    n.set_op_type(op_type);
    std::sort(attributes.begin(), attributes.end(),
              [](const Attr& a, const Attr& b) { return a.name < b.name; });
    for (Attr& a : attributes) SetAttribute(n.add_attribute(), a);
    nodes.push_back(&n);
  }

  static void SetAttribute(AttributeProto* a, const Attr& attr) {
    a->set_name(attr.name);
    if (const auto* i = std::get_if<int64_t>(&attr.value)) {
      a->set_type(AttributeProto::INT);
      a->set_i(*i);
    } else if (const auto* f = std::get_if<float>(&attr.value)) {
      a->set_type(AttributeProto::FLOAT);
      a->set_f(*f);
    } else if (const auto* s = std::get_if<std::string>(&attr.value)) {
      a->set_type(AttributeProto::STRING);
      a->set_s(*s);
    } else {
      a->set_type(AttributeProto::INTS);
      for (int64_t v : std::get<std::vector<int64_t>>(attr.value)) a->add_ints(v);
    }
  }

  std::set<std::string> used_;
  std::map<std::tuple<std::string, int, Shape>, std::string> constants_;
  std::deque<NodeProto> storage_;
};

// ---- what each node gave on the record run -----------------------------------------------

struct Seen {
  bool is_tensor = false;
  Shape shape;
  DType dtype = DType::kFloat32;
  bool quantized = false;
  bool per_tensor = false;
  double scale = 1.0;
  int64_t zero_point = 0;
  Value python;  // a non-tensor result
};

bool HoldsTensor(const Value& v) {
  if (v.is_tensor() || v.is_channels_last()) return true;
  if (v.is_list())
    for (const Value& item : v.items())
      if (HoldsTensor(item)) return true;
  return false;
}

// The inputs of the record run: the given ones, or zeros of the recorded shapes.
absl::StatusOr<std::vector<Value>> RecordInputs(const GraphModule& gm,
                                                const OnnxWriterOptions& options) {
  std::vector<Value> inputs;
  const std::vector<Node*> placeholders = gm.graph().Placeholders();
  if (!options.inputs.empty()) {
    if (options.inputs.size() != placeholders.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "to ONNX: ", options.inputs.size(), " example inputs for a model of ",
          placeholders.size(), " placeholders"));
    for (const Tensor& t : options.inputs) inputs.emplace_back(t);
    return inputs;
  }
  for (const Node* p : placeholders) {
    const Argument* meta = p->FindMeta("shape");
    Shape shape;
    bool ok = meta != nullptr && meta->is_list();
    if (ok)
      for (const Argument& d : meta->items()) {
        ok = ok && d.is_int();
        if (ok) shape.push_back(d.as_int());
      }
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat(
          "to ONNX: placeholder '", p->name(),
          "' has no recorded shape (node meta 'shape', a list of ints); give example inputs "
          "(the ONNX graph's shapes are theirs)"));
    DType dtype = DType::kFloat32;
    if (const Argument* d = p->FindMeta("dtype"); d != nullptr && d->is_dtype()) dtype = d->as_dtype();
    ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(dtype, shape));
    inputs.emplace_back(std::move(zeros));
  }
  return inputs;
}

absl::StatusOr<absl::flat_hash_map<const Node*, Seen>> Record(const GraphModule& gm,
                                                               const OnnxWriterOptions& options) {
  ASSIGN_OR_RETURN(std::vector<Value> inputs, RecordInputs(gm, options));
  absl::flat_hash_map<const Node*, Seen> seen;
  RunOptions run;
  // One forward on zeros, whose values do not depend on the thread count: one thread, so
  // a save never takes the cores (OpenMP's idle threads spin on a shared machine).
  run.threads = 1;
  run.observer = [&seen](const Node& node, const Value& value) -> absl::Status {
    Seen s;
    if (value.is_tensor()) {
      const Tensor& t = value.as_tensor();
      s.is_tensor = true;
      s.shape = t.shape();
      s.dtype = t.dtype();
      s.quantized = t.is_quantized();
      if (s.quantized && t.qparams().scheme == QScheme::kPerTensorAffine) {
        s.per_tensor = true;
        s.scale = t.qparams().scales[0];
        s.zero_point = t.qparams().zero_points[0];
      }
    } else {
      s.python = value;
    }
    seen[&node] = std::move(s);
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());
  absl::Status ran = Run(gm, std::move(inputs), *kernels, run).status();
  if (!ran.ok())
    return absl::Status(ran.code(), absl::StrCat("to ONNX: running the model on ",
                                                 options.inputs.empty() ? "zeros of its recorded input shapes"
                                                                        : "the example inputs",
                                                 " failed: ", ran.message()));
  return seen;
}

// ---- the walk: each node as ONNX nodes -----------------------------------------------------

// What an emitter gives: a float ONNX tensor it computed (quantized afterwards if the
// node's result was), or a value it passes on as it is.
struct Emitted {
  std::optional<std::string> tensor;
  Operand value;
  static Emitted Tensor(std::string name) { return {std::move(name), {}}; }
  static Emitted Pass(Operand value) { return {std::nullopt, std::move(value)}; }
};

class Emitter {
 public:
  Emitter(const GraphModule& gm, absl::flat_hash_map<const Node*, Seen> seen)
      : gm_(gm), seen_(std::move(seen)) {}

  absl::Status Walk();
  OnnxGraph& graph() { return g_; }

 private:
  std::string Where(const Node& node) const {
    return absl::StrCat("node '", node.name(), "' (", OpKindName(node.op()), " ",
                        node.target().name(), ")");
  }
  absl::Status Error(const Node& node, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(node), ": ", what));
  }
  const Seen& SeenOf(const Node& node) const { return seen_.at(&node); }

  // The operand an argument gives: a node's value, or a literal.
  absl::StatusOr<Operand> Resolve(const Argument& arg) const {
    if (arg.is_node()) {
      auto it = values_.find(arg.as_node());
      if (it == values_.end())
        return absl::InternalError(absl::StrCat("to ONNX: node '", arg.as_node()->name(),
                                                "' has no value (it never ran)"));
      return it->second;
    }
    Operand o;
    if (arg.is_int()) o.constant = Value::Int(arg.as_int());
    else if (arg.is_float()) o.constant = Value::Float(arg.as_float());
    else if (arg.is_bool()) o.constant = Value::Bool(arg.as_bool());
    return o;
  }
  // The positional arg `index` or the kwarg `name`, or nullptr.
  static const Argument* ArgOf(const Node& node, size_t index, absl::string_view name) {
    if (index < node.num_args()) return &node.arg(index);
    return node.FindKwarg(name);
  }
  absl::StatusOr<Operand> TensorArg(const Node& node, size_t index, absl::string_view name) const {
    const Argument* a = ArgOf(node, index, name);
    if (a == nullptr) return Error(node, absl::StrCat("no argument '", name, "'"));
    ASSIGN_OR_RETURN(Operand o, Resolve(*a));
    if (!o.is_tensor())
      return Error(node, absl::StrCat("argument '", name, "' is not a tensor"));
    return o;
  }
  // An int or a list of ints (a literal, or what a node gave).
  absl::StatusOr<std::optional<std::vector<int64_t>>> IntsArg(const Node& node, size_t index,
                                                              absl::string_view name) const {
    const Argument* a = ArgOf(node, index, name);
    if (a == nullptr || a->is_none()) return std::optional<std::vector<int64_t>>();
    std::vector<int64_t> out;
    auto take = [&](const Argument& item) -> absl::Status {
      if (item.is_int()) {
        out.push_back(item.as_int());
        return absl::OkStatus();
      }
      if (item.is_node()) {
        auto it = seen_.find(item.as_node());
        if (it != seen_.end() && it->second.python.is_int()) {
          out.push_back(it->second.python.as_int());
          return absl::OkStatus();
        }
      }
      return Error(node, absl::StrCat("argument '", name, "' is ", item.ToString(),
                                      "; expected an int or ints"));
    };
    if (a->is_list()) {
      for (const Argument& item : a->items()) RETURN_IF_ERROR(take(item));
    } else {
      RETURN_IF_ERROR(take(*a));
    }
    return std::optional<std::vector<int64_t>>(std::move(out));
  }
  absl::StatusOr<std::vector<int64_t>> ModuleInts(const Node& node, const Module& m,
                                                  absl::string_view field, size_t n) const {
    auto v = m.GetInts(field, n);
    if (!v.ok()) return Error(node, v.status().message());
    return *v;
  }

  // An int or ints arg as `n` ints (one int repeated, as PyTorch's _pair does), or
  // `fallback` when absent or None.
  absl::StatusOr<std::vector<int64_t>> NIntsArg(const Node& node, size_t index, absl::string_view name,
                                                size_t n, std::vector<int64_t> fallback) const {
    ASSIGN_OR_RETURN(auto v, IntsArg(node, index, name));
    if (!v || v->empty()) return fallback;
    if (v->size() == 1 && n > 1) v->assign(n, (*v)[0]);
    if (v->size() != n)
      return Error(node, absl::StrCat("argument '", name, "' has ", v->size(), " values; expected ", n));
    return *v;
  }
  // A number arg (a literal, or what a node gave), or `fallback` when absent or None.
  absl::StatusOr<double> FloatArg(const Node& node, size_t index, absl::string_view name,
                                  double fallback) const {
    const Argument* a = ArgOf(node, index, name);
    if (a == nullptr || a->is_none()) return fallback;
    if (a->is_int() || a->is_float()) return a->as_float();
    if (a->is_node()) {
      auto it = seen_.find(a->as_node());
      if (it != seen_.end() && it->second.python.is_number()) return it->second.python.as_float();
    }
    return Error(node, absl::StrCat("argument '", name, "' is ", a->ToString(), "; expected a number"));
  }
  absl::StatusOr<bool> BoolArg(const Node& node, size_t index, absl::string_view name,
                               bool fallback) const {
    const Argument* a = ArgOf(node, index, name);
    if (a == nullptr || a->is_none()) return fallback;
    if (a->is_bool()) return a->as_bool();
    if (a->is_int()) return a->as_int() != 0;
    return Error(node, absl::StrCat("argument '", name, "' is ", a->ToString(), "; expected a bool"));
  }
  absl::StatusOr<std::string> StringArg(const Node& node, size_t index, absl::string_view name,
                                        std::string fallback) const {
    const Argument* a = ArgOf(node, index, name);
    if (a == nullptr || a->is_none()) return fallback;
    if (a->is_string()) return std::string(a->as_string());
    return Error(node, absl::StrCat("argument '", name, "' is ", a->ToString(), "; expected a string"));
  }
  absl::StatusOr<double> ModuleFloat(const Node& node, const Module& m, absl::string_view field,
                                     double fallback) const {
    if (m.FindAttribute(field) == nullptr) return fallback;
    auto v = m.GetFloat(field);
    if (!v.ok()) return Error(node, v.status().message());
    return *v;
  }

  std::string F(const Operand& v, const std::string& base) { return g_.FloatInput(v, base); }
  absl::StatusOr<std::string> FChecked(const Node& node, const Operand& v, const std::string& base) {
    if (!v.is_tensor())
      return Error(node, "an input is a constant where a tensor was expected");
    return F(v, base);
  }
  int Rank(const Operand& v) const { return static_cast<int>(v.shape.size()); }

  // (scale, zero point, elem type) of a node's quantized result, if it is one.
  absl::StatusOr<std::optional<std::tuple<double, int64_t, int>>> QParamsOf(const Node& node,
                                                                           bool required) const {
    const Seen& s = SeenOf(node);
    if (!s.quantized) {
      if (required) return Error(node, "its result is not quantized");
      return std::optional<std::tuple<double, int64_t, int>>();
    }
    if (!s.per_tensor || (s.dtype != DType::kQUInt8 && s.dtype != DType::kQInt8))
      return Error(node, absl::StrCat("its result is ", DTypeName(s.dtype),
                                      " quantized per channel or of another type; ONNX QDQ "
                                      "activations are torch.quint8 / torch.qint8 quantized "
                                      "per tensor"));
    return std::optional<std::tuple<double, int64_t, int>>(
        std::make_tuple(s.scale, s.zero_point, *ElemTypeOf(s.dtype)));
  }
  // The quantization its result has, or that of the quantize_per_tensor alone reading it.
  absl::StatusOr<std::optional<std::tuple<double, int64_t, int>>> OutputQParams(const Node& node) const {
    ASSIGN_OR_RETURN(auto own, QParamsOf(node, false));
    if (own) return own;
    if (node.num_users() == 1) {
      const Node* user = node.users()[0];
      if (user->op() == OpKind::kCallFunction && user->target().name() == "torch.quantize_per_tensor")
        return QParamsOf(*user, false);
    }
    return std::optional<std::tuple<double, int64_t, int>>();
  }
  absl::StatusOr<Operand> QuantizeResult(const std::string& float_name, const Node& node) {
    ASSIGN_OR_RETURN(auto q, QParamsOf(node, true));
    auto [scale, zero_point, elem_type] = *q;
    return g_.Quantize(float_name, scale, zero_point, elem_type, node.name(), SeenOf(node).shape);
  }
  std::string Reshape(const std::string& float_name, const Node& node, const std::string& base) {
    const Shape& shape = SeenOf(node).shape;
    return g_.Node("Reshape", {float_name, g_.Constant(Integers(kInt64, {static_cast<int64_t>(shape.size())}, shape), "shape")}, base);
  }

  absl::StatusOr<Emitted> Call(const Node& node);
  absl::StatusOr<Emitted> CallModule(const Node& node, const std::string& name, const Module& m,
                                     const std::vector<Operand>& inputs);
  absl::StatusOr<Emitted> CallFunction(const Node& node, absl::string_view target);
  absl::StatusOr<std::string> Conv(const Node& node, const Module& m, const Operand& input,
                                   const std::string& base);
  absl::StatusOr<std::string> Linear(const Node& node, const Module& m, const Operand& input,
                                     const std::string& base);
  absl::StatusOr<std::pair<std::string, std::vector<float>>> Weight(const Node& node,
                                                                    const Tensor& weight,
                                                                    const std::string& base);
  std::string Bias(const Tensor& bias, const Operand& input, std::vector<float> weight_scales,
                   const std::string& base);
  absl::StatusOr<std::string> ConvAdd(const Node& node, const Module& m, const Operand& input,
                                      const Operand& extra);
  absl::StatusOr<std::string> Clip(const Node& node, const Operand& input, double lo, double hi,
                                   const std::string& name);
  absl::StatusOr<std::string> BatchNorm(const Node& node, const Module& m, const Operand& input,
                                        const std::string& base);
  // A max or average pool's parameters, from a module's attributes or a call's args.
  struct PoolParams {
    std::vector<int64_t> kernel, stride, padding, dilation;
    bool ceil_mode = false;
    bool count_include_pad = true;
  };
  absl::StatusOr<PoolParams> ModulePoolParams(const Node& node, const Module& m, size_t nd,
                                              bool max) const;
  absl::StatusOr<PoolParams> CallPoolParams(const Node& node, size_t nd, bool max) const;
  absl::StatusOr<std::string> Pool(const Node& node, const PoolParams& p, const Operand& input,
                                   const std::string& name, bool max);
  absl::StatusOr<std::string> AdaptiveAvgPool(const Node& node, const Operand& input,
                                              const Argument* output_size,
                                              const std::string& name);
  absl::StatusOr<std::string> LayerNorm(const Node& node, const Operand& input,
                                        std::vector<int64_t> normalized_shape,
                                        const Operand* weight, const Operand* bias,
                                        const Module* module, double eps);
  absl::StatusOr<std::string> Gelu(const Node& node, const Operand& input,
                                   const std::string& approximate);
  absl::StatusOr<std::string> Silu(const Node& node, const Operand& input);
  absl::StatusOr<Emitted> Split(const Node& node, const Operand& input,
                                const std::vector<int64_t>& sizes, int64_t dim);
  absl::StatusOr<Emitted> Narrow(const Node& node);
  absl::StatusOr<Emitted> Interpolate(const Node& node);
  absl::StatusOr<Emitted> GetItem(const Node& node);
  absl::StatusOr<std::string> Binary(const Node& node, const std::string& op_type, bool relu,
                                     bool native);
  absl::StatusOr<std::string> Operand_(const Node& node, const Operand& v, const std::string& base,
                                       const Operand* like);
  absl::Status Outputs(const Node& node);

  const GraphModule& gm_;
  absl::flat_hash_map<const Node*, Seen> seen_;
  absl::flat_hash_map<const Node*, Operand> values_;
  OnnxGraph g_;
};

// (weight, bias) of a conv or linear module of any form: a quantized weight for nnq /
// nniq (their own) and nnqr modules (quantized as lowering would: BuildNativeWeightedModule),
// a float one for nn modules; the bias float or absent.
absl::StatusOr<std::pair<Tensor, std::optional<Tensor>>> WeightAndBias(const Module& m) {
  std::unique_ptr<Module> native;
  const Module* from = &m;
  if (absl::StartsWith(m.type().name(), "nnqr.")) {
    ASSIGN_OR_RETURN(native, BuildNativeWeightedModule("nnq.Weighted", m, OutputQParams{}));
    from = native.get();
  }
  ASSIGN_OR_RETURN(const Tensor* weight, from->GetTensor("weight"));
  std::optional<Tensor> bias;
  if (const Tensor* b = from->FindTensor("bias")) bias = *b;
  return std::make_pair(*weight, bias);
}

absl::StatusOr<std::pair<std::string, std::vector<float>>> Emitter::Weight(
    const Node& node, const Tensor& weight, const std::string& base) {
  if (!weight.is_quantized()) {
    if (weight.dtype() != DType::kFloat32)
      return Error(node, absl::StrCat("its weight is ", DTypeName(weight.dtype()), "; expected float32"));
    std::string bytes(weight.bytes());
    return std::make_pair(g_.Constant(Array{kFloat, weight.shape(), std::move(bytes)}, base),
                          std::vector<float>());
  }
  if (weight.dtype() != DType::kQInt8 && weight.dtype() != DType::kQUInt8)
    return Error(node, absl::StrCat("its weight is ", DTypeName(weight.dtype()),
                                    "; ONNX QDQ takes torch.qint8 or torch.quint8 weights"));
  const int elem_type = *ElemTypeOf(weight.dtype());
  const QuantParams& q = weight.qparams();
  const bool per_channel = q.scheme == QScheme::kPerChannelAffine;
  std::vector<double> scales(q.scales.begin(), q.scales.end());
  std::vector<int64_t> zero_points(q.zero_points.begin(), q.zero_points.end());
  const std::string integers =
      g_.Constant(Array{elem_type, weight.shape(), std::string(weight.bytes())}, base + "_quantized");
  auto [s, z] = g_.QParams(scales, zero_points, elem_type, per_channel);
  std::vector<Attr> attributes;
  if (per_channel) attributes.push_back(IntAttr("axis", q.axis));
  const std::string name = g_.Node("DequantizeLinear", {integers, s, z}, base, attributes);
  return std::make_pair(name, std::vector<float>(scales.begin(), scales.end()));
}

// int32 through a DequantizeLinear when both the input and the weight are quantized, with
// scale float32(input_scale) * float32(weight_scale): the product ONNX Runtime's
// QLinearConv assumes when it takes the int32 values as they are. A value beyond int32
// saturates. Otherwise a float initializer.
std::string Emitter::Bias(const Tensor& bias, const Operand& input, std::vector<float> weight_scales,
                          const std::string& base) {
  const int64_t n = bias.numel();
  const float* b = bias.data<float>();
  if (weight_scales.size() == 1) weight_scales.assign(n, weight_scales[0]);
  if (!input.is_quantized_like() || weight_scales.empty() ||
      static_cast<int64_t>(weight_scales.size()) != n || bias.dim() != 1)
    return g_.Constant(Array{kFloat, bias.shape(), std::string(bias.bytes())}, base);
  std::vector<double> scales(n);
  std::vector<int64_t> integers(n);
  const float input_scale = static_cast<float>(input.scale);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = input_scale * weight_scales[i];
    scales[i] = scale;
    const double q = std::nearbyint(static_cast<double>(b[i]) / static_cast<double>(scale));
    integers[i] = static_cast<int64_t>(std::clamp(q, double{std::numeric_limits<int32_t>::min()},
                                                  double{std::numeric_limits<int32_t>::max()}));
  }
  auto [s, z] = g_.QParams(scales, std::vector<int64_t>(n, 0), kInt32, true);
  return g_.Node("DequantizeLinear", {g_.Constant(Integers(kInt32, {n}, integers), base + "_quantized"), s, z},
                 base, {IntAttr("axis", 0)});
}

absl::StatusOr<std::string> Emitter::Conv(const Node& node, const Module& m, const Operand& input,
                                          const std::string& base) {
  ASSIGN_OR_RETURN(auto wb, WeightAndBias(m));
  const Tensor& weight = wb.first;
  const size_t nd = static_cast<size_t>(weight.dim() - 2);
  const Argument* transposed_attr = m.FindAttribute("transposed");
  const bool transposed = transposed_attr != nullptr && transposed_attr->is_bool() &&
                          transposed_attr->as_bool();
  if (const Argument* mode = m.FindAttribute("padding_mode");
      mode != nullptr && mode->is_string() && mode->as_string() != "zeros")
    return Error(node, absl::StrCat("padding_mode '", mode->as_string(),
                                    "' has no ONNX Conv form (only 'zeros')"));
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ModuleInts(node, m, "kernel_size", nd));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, ModuleInts(node, m, "stride", nd));
  ASSIGN_OR_RETURN(std::vector<int64_t> dilation, ModuleInts(node, m, "dilation", nd));
  ASSIGN_OR_RETURN(int64_t groups, [&]() -> absl::StatusOr<int64_t> {
    auto v = m.GetInt("groups");
    if (!v.ok()) return Error(node, v.status().message());
    return *v;
  }());
  std::vector<int64_t> pads;
  const Argument* padding = m.FindAttribute("padding");
  if (padding != nullptr && padding->is_string()) {
    if (padding->as_string() == "valid") {
      pads.assign(2 * nd, 0);
    } else if (padding->as_string() == "same") {
      // PyTorch puts the odd pixel at the end, as SAME_UPPER does.
      std::vector<int64_t> begin, end;
      for (size_t i = 0; i < nd; ++i) {
        const int64_t total = dilation[i] * (kernel[i] - 1);
        begin.push_back(total / 2);
        end.push_back(total - total / 2);
      }
      pads = begin;
      pads.insert(pads.end(), end.begin(), end.end());
    } else {
      return Error(node, absl::StrCat("padding '", padding->as_string(), "' has no ONNX form"));
    }
  } else {
    ASSIGN_OR_RETURN(std::vector<int64_t> p, ModuleInts(node, m, "padding", nd));
    pads = p;
    pads.insert(pads.end(), p.begin(), p.end());
  }
  const std::string x = F(input, base);
  ASSIGN_OR_RETURN(auto w, Weight(node, weight, base + "_weight"));
  std::vector<std::string> inputs = {x, w.first};
  if (wb.second) inputs.push_back(Bias(*wb.second, input, w.second, base + "_bias"));
  std::vector<Attr> attributes = {IntsAttr("kernel_shape", kernel), IntsAttr("strides", stride),
                                  IntsAttr("dilations", dilation), IntsAttr("pads", pads),
                                  IntAttr("group", groups)};
  if (transposed) {
    ASSIGN_OR_RETURN(std::vector<int64_t> output_padding, ModuleInts(node, m, "output_padding", nd));
    attributes.push_back(IntsAttr("output_padding", output_padding));
  }
  return g_.Node(transposed ? "ConvTranspose" : "Conv", inputs, base, std::move(attributes));
}

// A Gemm for an input of rank 2; else a MatMul and an Add (which ONNX Runtime does not
// fuse into a quantized op).
absl::StatusOr<std::string> Emitter::Linear(const Node& node, const Module& m, const Operand& input,
                                            const std::string& base) {
  ASSIGN_OR_RETURN(auto wb, WeightAndBias(m));
  const std::string x = F(input, base);
  ASSIGN_OR_RETURN(auto w, Weight(node, wb.first, base + "_weight"));
  if (Rank(input) == 2) {
    std::vector<std::string> inputs = {x, w.first};
    if (wb.second) inputs.push_back(Bias(*wb.second, input, w.second, base + "_bias"));
    return g_.Node("Gemm", inputs, base, {IntAttr("transB", 1)});
  }
  const std::string t = g_.Node("Transpose", {w.first}, base + "_weight_t", {IntsAttr("perm", {1, 0})});
  const std::string out = g_.Node("MatMul", {x, t}, wb.second ? base + "_matmul" : base);
  if (!wb.second) return out;
  return g_.Node("Add", {out, g_.Constant(Array{kFloat, wb.second->shape(), std::string(wb.second->bytes())},
                                          base + "_bias")}, base);
}

// The scale and zero point the conv's result of a quantized conv-add(-relu) is quantized
// with: they cover [out_lo - extra_hi, out_hi - extra_lo], out_* and extra_* the float
// ranges the output and the extra input can represent. A conv value outside that range
// gives an output the output's quantization clamps anyway (below it, the sum is below
// out_lo even with the largest extra; above it, above out_hi), so no result fuselage's
// kernel gives is cut; what the extra step costs is its rounding, at most half of
// (out_scale + extra_scale). One level is spare and the zero point rounded up, so the
// grid reaches both ends.
std::tuple<double, int64_t, int> ConvAddMidQParams(double out_scale, int64_t out_zp, int elem_type,
                                                   const Operand& extra) {
  auto range = [](int t) {
    return t == kUInt8 ? std::make_pair<int64_t, int64_t>(0, 255)
                       : std::make_pair<int64_t, int64_t>(-128, 127);
  };
  const auto [qmin, qmax] = range(elem_type);
  const auto [emin, emax] = range(extra.elem_type);
  const double out_lo = static_cast<double>(qmin - out_zp) * out_scale;
  const double out_hi = static_cast<double>(qmax - out_zp) * out_scale;
  const double e_lo = static_cast<double>(emin - extra.zero_point) * extra.scale;
  const double e_hi = static_cast<double>(emax - extra.zero_point) * extra.scale;
  const double lo = std::min(0.0, out_lo - e_hi), hi = std::max(0.0, out_hi - e_lo);
  const double scale = (hi - lo) / static_cast<double>(qmax - qmin - 1);
  const double zp = std::ceil(static_cast<double>(qmin) - lo / scale);
  const int64_t zero_point = static_cast<int64_t>(
      std::min<double>(static_cast<double>(qmax), std::max<double>(static_cast<double>(qmin), zp)));
  return {scale, zero_point, elem_type};
}

// conv(input) + extra (then relu): ONNX Runtime has no conv-add kernel, so the conv's
// result is quantized on its own (QLinearConv) and the add reads it and `extra`
// dequantized (QLinearAdd).
absl::StatusOr<std::string> Emitter::ConvAdd(const Node& node, const Module& m, const Operand& input,
                                             const Operand& extra) {
  const std::string type(m.type().name());
  const bool quantized = absl::StartsWith(type, "nniq.");
  const Module* conv_part = &m;
  if (!quantized) {
    conv_part = m.FindChild("0");
    if (conv_part == nullptr) return Error(node, "a fused conv-add without its conv (child '0')");
  }
  const bool relu = absl::EndsWith(type, "ReLU2d");
  ASSIGN_OR_RETURN(std::string y, Conv(node, *conv_part, input, node.name() + "_conv"));
  ASSIGN_OR_RETURN(auto out, OutputQParams(node));
  if (out && input.is_quantized_like() && extra.is_quantized_like()) {
    auto [scale, zero_point, elem_type] = ConvAddMidQParams(std::get<0>(*out), std::get<1>(*out),
                                                            std::get<2>(*out), extra);
    Operand q = g_.Quantize(y, scale, zero_point, elem_type, node.name() + "_conv_q", {});
    y = g_.Dequantize(q, node.name() + "_conv_dq");
  }
  const std::string total = g_.Node("Add", {y, F(extra, node.name() + "_extra")},
                                    relu ? node.name() + "_add" : node.name());
  return relu ? g_.Node("Relu", {total}, node.name()) : total;
}

absl::StatusOr<std::string> Emitter::Clip(const Node& node, const Operand& input, double lo,
                                          double hi, const std::string& name) {
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
  const std::string min = g_.Constant(ScalarFloat(lo), "min");
  const std::string max = g_.Constant(ScalarFloat(hi), "max");
  return g_.Node("Clip", {x, min, max}, name);
}

absl::StatusOr<std::string> Emitter::BatchNorm(const Node& node, const Module& m, const Operand& input,
                                               const std::string& base) {
  const std::string x = F(input, base);
  std::vector<std::string> inputs = {x};
  auto mean = m.GetTensor("running_mean");
  if (!mean.ok()) return Error(node, mean.status().message());
  const int64_t c = (*mean)->numel();
  for (const char* what : {"weight", "bias", "running_mean", "running_var"}) {
    const Tensor* t = m.FindTensor(what);
    Array a;
    if (t != nullptr) {
      a = Array{kFloat, t->shape(), std::string(t->bytes())};
    } else {
      a = Floats({c}, std::vector<float>(c, std::string(what) == "weight" ? 1.0f : 0.0f));
    }
    const std::string suffix = std::string(what) == "running_mean" ? "mean"
                               : std::string(what) == "running_var" ? "var" : what;
    inputs.push_back(g_.Constant(a, absl::StrCat(base, "_", suffix)));
  }
  double eps = 1e-5;
  if (auto e = m.GetFloat("eps"); e.ok()) eps = *e;
  return g_.Node("BatchNormalization", inputs, base, {FloatAttr("epsilon", eps)});
}

absl::StatusOr<Emitter::PoolParams> Emitter::ModulePoolParams(const Node& node, const Module& m,
                                                               size_t nd, bool max) const {
  PoolParams p;
  ASSIGN_OR_RETURN(p.kernel, ModuleInts(node, m, "kernel_size", nd));
  p.stride = p.kernel;
  if (const Argument* s = m.FindAttribute("stride"); s != nullptr && !s->is_none() &&
                                                     !(s->is_list() && s->items().empty())) {
    ASSIGN_OR_RETURN(p.stride, ModuleInts(node, m, "stride", nd));
  }
  ASSIGN_OR_RETURN(p.padding, ModuleInts(node, m, "padding", nd));
  p.dilation.assign(nd, 1);
  if (max) {
    ASSIGN_OR_RETURN(p.dilation, ModuleInts(node, m, "dilation", nd));
    if (const Argument* r = m.FindAttribute("return_indices"); r != nullptr && r->is_bool() && r->as_bool())
      return Error(node, "return_indices=True is not exported");
  } else if (const Argument* d = m.FindAttribute("divisor_override"); d != nullptr && !d->is_none()) {
    return Error(node, "divisor_override has no ONNX AveragePool form");
  }
  if (auto c = m.GetBool("ceil_mode"); c.ok()) p.ceil_mode = *c;
  if (auto c = m.GetBool("count_include_pad"); c.ok()) p.count_include_pad = *c;
  return p;
}

// F.max_pool*d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
// return_indices=False) and F.avg_pool*d(input, kernel_size, stride=None, padding=0,
// ceil_mode=False, count_include_pad=True, divisor_override=None).
absl::StatusOr<Emitter::PoolParams> Emitter::CallPoolParams(const Node& node, size_t nd,
                                                             bool max) const {
  PoolParams p;
  ASSIGN_OR_RETURN(p.kernel, NIntsArg(node, 1, "kernel_size", nd, {}));
  if (p.kernel.empty()) return Error(node, "no argument 'kernel_size'");
  ASSIGN_OR_RETURN(p.stride, NIntsArg(node, 2, "stride", nd, p.kernel));
  ASSIGN_OR_RETURN(p.padding, NIntsArg(node, 3, "padding", nd, std::vector<int64_t>(nd, 0)));
  if (max) {
    ASSIGN_OR_RETURN(p.dilation, NIntsArg(node, 4, "dilation", nd, std::vector<int64_t>(nd, 1)));
    ASSIGN_OR_RETURN(p.ceil_mode, BoolArg(node, 5, "ceil_mode", false));
    ASSIGN_OR_RETURN(bool return_indices, BoolArg(node, 6, "return_indices", false));
    if (return_indices) return Error(node, "return_indices=True is not exported");
  } else {
    p.dilation.assign(nd, 1);
    ASSIGN_OR_RETURN(p.ceil_mode, BoolArg(node, 4, "ceil_mode", false));
    ASSIGN_OR_RETURN(p.count_include_pad, BoolArg(node, 5, "count_include_pad", true));
    if (const Argument* d = ArgOf(node, 6, "divisor_override"); d != nullptr && !d->is_none())
      return Error(node, "divisor_override has no ONNX AveragePool form");
  }
  return p;
}

std::string ShapeString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::StatusOr<std::string> Emitter::Pool(const Node& node, const PoolParams& p, const Operand& input,
                                          const std::string& name, bool max) {
  const size_t nd = p.kernel.size();
  if (p.ceil_mode) {
    // PyTorch drops a last window that would start in the padding; ONNX keeps it.
    const Shape& out = SeenOf(node).shape;
    const std::vector<int64_t> wanted(out.begin() + 2, out.end());
    std::vector<int64_t> onnx_sizes;
    for (size_t i = 0; i < nd; ++i) {
      const int64_t n = input.shape[2 + i];
      const int64_t span = n + 2 * p.padding[i] - p.dilation[i] * (p.kernel[i] - 1) - 1;
      onnx_sizes.push_back((span + p.stride[i] - 1) / p.stride[i] + 1);
    }
    if (onnx_sizes != wanted)
      return Error(node, absl::StrCat("ceil_mode gives ", ShapeString(wanted),
                                      " in PyTorch, which drops a last window that starts in "
                                      "the padding, and ", ShapeString(onnx_sizes), " in ONNX"));
  }
  std::vector<int64_t> pads = p.padding;
  pads.insert(pads.end(), p.padding.begin(), p.padding.end());
  std::vector<Attr> attributes = {IntsAttr("kernel_shape", p.kernel), IntsAttr("strides", p.stride),
                                  IntsAttr("pads", pads), IntAttr("ceil_mode", p.ceil_mode ? 1 : 0)};
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
  if (max) {
    attributes.push_back(IntsAttr("dilations", p.dilation));
    return g_.Node("MaxPool", {x}, name, std::move(attributes));
  }
  attributes.push_back(IntAttr("count_include_pad", p.count_include_pad ? 1 : 0));
  return g_.Node("AveragePool", {x}, name, std::move(attributes));
}

// A global average pool when every output size is 1; an AveragePool of even windows
// otherwise (a size of None keeps the input's).
absl::StatusOr<std::string> Emitter::AdaptiveAvgPool(const Node& node, const Operand& input,
                                                     const Argument* output_size,
                                                     const std::string& name) {
  const size_t nd = input.shape.size() - 2;
  std::vector<int64_t> wanted;
  for (size_t i = 0; i < nd; ++i) {
    const Argument* d = output_size == nullptr ? nullptr
                        : output_size->is_list() ? (i < output_size->items().size() ? &output_size->items()[i] : nullptr)
                                                 : output_size;
    if (d != nullptr && !d->is_none() && !d->is_int())
      return Error(node, absl::StrCat("output_size is ", output_size->ToString(), "; expected ints or None"));
    wanted.push_back(d == nullptr || d->is_none() ? input.shape[2 + i] : d->as_int());
  }
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
  if (std::all_of(wanted.begin(), wanted.end(), [](int64_t o) { return o == 1; }))
    return g_.Node("GlobalAveragePool", {x}, name);
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < nd; ++i) {
    if (wanted[i] <= 0 || input.shape[2 + i] % wanted[i] != 0) {
      const std::vector<int64_t> spatial(input.shape.begin() + 2, input.shape.end());
      return Error(node, absl::StrCat("adaptive average pooling from ", ShapeString(spatial), " to ",
                                      ShapeString(wanted), " has uneven windows, which no ONNX pool computes"));
    }
    kernel.push_back(input.shape[2 + i] / wanted[i]);
  }
  return g_.Node("AveragePool", {x}, name, {IntsAttr("kernel_shape", kernel), IntsAttr("strides", kernel)});
}

// LayerNormalization over the last len(normalized_shape) dims. The weight and bias: the
// call's tensors (`weight`, `bias`), or the module's as constants named node_weight /
// node_bias, or, absent, ones and zeros.
absl::StatusOr<std::string> Emitter::LayerNorm(const Node& node, const Operand& input,
                                               std::vector<int64_t> normalized_shape,
                                               const Operand* weight, const Operand* bias,
                                               const Module* module, double eps) {
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, node.name()));
  int64_t count = 1;
  for (int64_t d : normalized_shape) count *= d;
  std::vector<std::string> inputs = {x};
  const std::pair<const Operand*, float> affine[2] = {{weight, 1.0f}, {bias, 0.0f}};
  const char* what[2] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    const Operand* given = affine[i].first;
    const Tensor* own = module != nullptr ? module->FindTensor(what[i]) : nullptr;
    if (given != nullptr && given->is_tensor()) {
      inputs.push_back(F(*given, absl::StrCat(node.name(), "_", what[i])));
    } else if (own != nullptr) {
      if (own->dtype() != DType::kFloat32)
        return Error(node, absl::StrCat("its ", what[i], " is ", DTypeName(own->dtype()), "; expected float32"));
      inputs.push_back(g_.Constant(Array{kFloat, own->shape(), std::string(own->bytes())},
                                   absl::StrCat(node.name(), "_", what[i])));
    } else {
      inputs.push_back(g_.Constant(Floats(normalized_shape, std::vector<float>(count, affine[i].second)),
                                   absl::StrCat(node.name(), "_", what[i])));
    }
  }
  return g_.Node("LayerNormalization", inputs, node.name(),
                 {IntAttr("axis", -static_cast<int64_t>(normalized_shape.size())), FloatAttr("epsilon", eps)});
}

constexpr double kPi = 3.14159265358979323846;

// ONNX's Gelu is opset 20: written out as PyTorch defines it, x * 0.5 * (1 + erf(x / sqrt 2))
// or, approximate='tanh', x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
absl::StatusOr<std::string> Emitter::Gelu(const Node& node, const Operand& input,
                                          const std::string& approximate) {
  if (approximate != "none" && approximate != "tanh")
    return Error(node, absl::StrCat("approximate='", approximate, "' is not a GELU form ('none' or 'tanh')"));
  const std::string& name = node.name();
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
  std::string t;
  if (approximate == "tanh") {
    const std::string square = g_.Node("Mul", {x, x}, name + "_sq");
    const std::string cube = g_.Node("Mul", {x, square}, name + "_cube");
    const std::string k = g_.Constant(ScalarFloat(0.044715), "k");
    const std::string scaled_cube = g_.Node("Mul", {cube, k}, name + "_k");
    const std::string inner = g_.Node("Add", {x, scaled_cube}, name + "_inner");
    const std::string root = g_.Constant(ScalarFloat(std::sqrt(2.0 / kPi)), "k");
    const std::string scaled = g_.Node("Mul", {inner, root}, name + "_scaled");
    t = g_.Node("Tanh", {scaled}, name + "_tanh");
  } else {
    const std::string scaled = g_.Node("Mul", {x, g_.Constant(ScalarFloat(1.0 / std::sqrt(2.0)), "k")},
                                       name + "_scaled");
    t = g_.Node("Erf", {scaled}, name + "_erf");
  }
  const std::string half = g_.Node("Mul", {x, g_.Constant(ScalarFloat(0.5), "half")}, name + "_half");
  const std::string one_plus = g_.Node("Add", {t, g_.Constant(ScalarFloat(1.0), "one")}, name + "_1p");
  return g_.Node("Mul", {half, one_plus}, name);
}

// x * sigmoid(x): ONNX has no SiLU before opset 24.
absl::StatusOr<std::string> Emitter::Silu(const Node& node, const Operand& input) {
  ASSIGN_OR_RETURN(std::string x, FChecked(node, input, node.name()));
  const std::string sigmoid = g_.Node("Sigmoid", {x}, node.name() + "_sigmoid");
  return g_.Node("Mul", {x, sigmoid}, node.name());
}

// The parts of `input` along `dim`: a Split of the tensor's own integers when it is
// quantized (each part keeps its scale and zero point, as PyTorch's do), else of the
// float tensor. Each part's shape is what the record run gave.
absl::StatusOr<Emitted> Emitter::Split(const Node& node, const Operand& input,
                                       const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t rank = Rank(input);
  const bool quantized = input.is_quantized_like();
  const std::string whole = quantized ? input.name : F(input, node.name());
  const std::string split = g_.Constant(Integers(kInt64, {static_cast<int64_t>(sizes.size())}, sizes), "split");
  const std::vector<std::string> names =
      g_.MultiNode("Split", {whole, split}, node.name(), sizes.size(), {IntAttr("axis", ((dim % rank) + rank) % rank)});
  const Seen& s = SeenOf(node);
  if (!s.python.is_list() || s.python.items().size() != names.size())
    return Error(node, absl::StrCat("the record run gave ", s.python.KindName(), "; expected ",
                                    names.size(), " tensors"));
  Operand parts;
  parts.kind = Operand::Kind::kParts;
  for (size_t i = 0; i < names.size(); ++i) {
    const Value& v = s.python.items()[i];
    Shape shape;
    if (v.is_tensor()) shape.assign(v.as_tensor().shape().begin(), v.as_tensor().shape().end());
    parts.parts.push_back(quantized ? Operand::Quantized(names[i], input.scale, input.zero_point,
                                                         input.elem_type, shape)
                                    : Operand::Float(names[i], shape));
  }
  return Emitted::Pass(std::move(parts));
}

// narrow(input, dim, start, length): a Slice, of the tensor's own integers when it is
// quantized (the part keeps its scale and zero point), else of the float tensor.
absl::StatusOr<Emitted> Emitter::Narrow(const Node& node) {
  ASSIGN_OR_RETURN(Operand x, TensorArg(node, 0, "input"));
  ASSIGN_OR_RETURN(auto dim, IntsArg(node, 1, "dim"));
  ASSIGN_OR_RETURN(auto start, IntsArg(node, 2, "start"));
  ASSIGN_OR_RETURN(auto length, IntsArg(node, 3, "length"));
  if (!dim || !start || !length) return Error(node, "expects dim, start and length");
  const int64_t rank = Rank(x);
  const int64_t axis = (((*dim)[0] % rank) + rank) % rank;
  int64_t begin = (*start)[0];
  if (begin < 0) begin = ((begin % x.shape[axis]) + x.shape[axis]) % x.shape[axis];
  const bool quantized = x.is_quantized_like();
  const std::string whole = quantized ? x.name : F(x, node.name());
  const std::string starts = g_.Constant(Integers(kInt64, {1}, {begin}), "starts");
  const std::string ends = g_.Constant(Integers(kInt64, {1}, {begin + (*length)[0]}), "ends");
  const std::string axes = g_.Constant(Integers(kInt64, {1}, {axis}), "axes");
  const std::string name = g_.Node("Slice", {whole, starts, ends, axes}, node.name());
  if (!quantized) return Emitted::Tensor(name);
  return Emitted::Pass(Operand::Quantized(name, x.scale, x.zero_point, x.elem_type, SeenOf(node).shape));
}

// F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
// recompute_scale_factor=None, antialias=False): a Resize to the recorded output size.
absl::StatusOr<Emitted> Emitter::Interpolate(const Node& node) {
  ASSIGN_OR_RETURN(Operand x, TensorArg(node, 0, "input"));
  ASSIGN_OR_RETURN(std::string mode, StringArg(node, 3, "mode", "nearest"));
  ASSIGN_OR_RETURN(bool align_corners, BoolArg(node, 4, "align_corners", false));
  ASSIGN_OR_RETURN(bool antialias, BoolArg(node, 6, "antialias", false));
  if (antialias) return Error(node, "interpolate with antialias has no ONNX mapping here");
  std::vector<Attr> attributes;
  if (mode == "nearest") {
    attributes = {StringAttr("mode", "nearest"), StringAttr("coordinate_transformation_mode", "asymmetric"),
                  StringAttr("nearest_mode", "floor")};
  } else if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
    attributes = {StringAttr("mode", "linear"),
                  StringAttr("coordinate_transformation_mode",
                             align_corners ? "align_corners" : "pytorch_half_pixel")};
  } else {
    return Error(node, absl::StrCat("interpolate mode '", mode,
                                    "' has no ONNX mapping here (nearest, linear, bilinear, trilinear)"));
  }
  const std::string input = F(x, node.name());
  const Shape& out = SeenOf(node).shape;
  const std::string sizes = g_.Constant(Integers(kInt64, {static_cast<int64_t>(out.size())}, out), "sizes");
  return Emitted::Tensor(g_.Node("Resize", {input, "", "", sizes}, node.name(), std::move(attributes)));
}

// One result of a multi-output op (split, chunk); indexing a tensor is not mapped.
absl::StatusOr<Emitted> Emitter::GetItem(const Node& node) {
  if (node.num_args() != 2) return Error(node, "expects a container and an index");
  ASSIGN_OR_RETURN(Operand container, Resolve(node.arg(0)));
  if (container.kind != Operand::Kind::kParts)
    return Error(node, "indexing a tensor has no ONNX mapping here");
  ASSIGN_OR_RETURN(auto index, IntsArg(node, 1, "index"));
  const int64_t n = static_cast<int64_t>(container.parts.size());
  if (!index || index->size() != 1 || (*index)[0] < -n || (*index)[0] >= n)
    return Error(node, absl::StrCat("index ", node.arg(1).ToString(), " is not one of the ", n, " parts"));
  return Emitted::Pass(container.parts[((*index)[0] + n) % n]);
}

// One operand of a binary op: a tensor's, or a number's as a constant; with `like` (a
// quantized operand), a number goes in quantized through a DequantizeLinear that gives it
// back exactly, so DQ, DQ -> Add / Mul -> Q is the group ORT's selector takes.
absl::StatusOr<std::string> Emitter::Operand_(const Node& node, const Operand& v,
                                              const std::string& base, const Operand* like) {
  if (v.is_tensor()) return F(v, base);
  if (!v.constant.is_number() && !v.constant.is_bool())
    return Error(node, absl::StrCat("an operand is a ", v.constant.KindName(),
                                    "; expected a tensor or a number"));
  const double number = v.constant.is_bool() ? (v.constant.as_bool() ? 1.0 : 0.0) : v.constant.as_float();
  if (like != nullptr) return g_.ExactScalar(number, like->elem_type, base);
  const Seen& s = SeenOf(node);
  if (s.dtype == DType::kInt64) return g_.Constant(Integers(kInt64, {}, {static_cast<int64_t>(number)}), "const");
  return g_.Constant(ScalarFloat(number), "const");
}

absl::StatusOr<std::string> Emitter::Binary(const Node& node, const std::string& op_type, bool relu,
                                            bool native) {
  if (node.num_args() < 2) return Error(node, "expects two operands");
  ASSIGN_OR_RETURN(Operand a, Resolve(node.arg(0)));
  ASSIGN_OR_RETURN(Operand b, Resolve(node.arg(1)));
  std::optional<Operand> like;
  for (const Operand* v : {&a, &b})
    if (!like && v->is_quantized_like()) like = *v;
  if (!native) {
    double alpha = 1.0;
    if (const Argument* al = node.FindKwarg("alpha"); al != nullptr && (al->is_int() || al->is_float()))
      alpha = al->as_float();
    ASSIGN_OR_RETURN(auto out, OutputQParams(node));
    if (!(like && (op_type == "Add" || op_type == "Mul") && alpha == 1.0 && out)) like.reset();
    ASSIGN_OR_RETURN(std::string x, Operand_(node, a, node.name() + "_a", like ? &*like : nullptr));
    ASSIGN_OR_RETURN(std::string y, Operand_(node, b, node.name() + "_b", like ? &*like : nullptr));
    if (alpha != 1.0)
      y = g_.Node("Mul", {y, g_.Constant(ScalarFloat(alpha), "alpha")}, node.name() + "_alpha");
    return g_.Node(op_type, {x, y}, node.name());
  }
  ASSIGN_OR_RETURN(std::string x, Operand_(node, a, node.name() + "_a", like ? &*like : nullptr));
  ASSIGN_OR_RETURN(std::string y, Operand_(node, b, node.name() + "_b", like ? &*like : nullptr));
  std::string lower = op_type;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const std::string out = g_.Node(op_type, {x, y}, relu ? node.name() + "_" + lower : node.name());
  return relu ? g_.Node("Relu", {out}, node.name()) : out;
}

absl::StatusOr<Emitted> Emitter::CallModule(const Node& node, const std::string& name, const Module& m,
                                            const std::vector<Operand>& inputs) {
  const std::string type(m.type().name());
  auto is = [&type](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (type == n) return true;
    return false;
  };
  auto strip_nd = [&type](absl::string_view prefix) {
    return absl::StartsWith(type, prefix) && type.size() == prefix.size() + 2 &&
           (type[prefix.size()] >= '1' && type[prefix.size()] <= '3') && type.back() == 'd';
  };
  if (inputs.empty()) return Error(node, "no input");
  const Operand& input = inputs[0];
  if (is({"nn.Identity", "nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d", "nnq.Dropout",
          "torch.ao.quantization.QuantStub"}))
    return Emitted::Pass(input);
  if (is({"torch.ao.quantization.DeQuantStub"}))
    return Emitted::Pass(input.is_quantized_like() ? input.AsKind(Operand::Kind::kDequantized) : input);
  if (is({"nnq.Quantize"})) {
    ASSIGN_OR_RETURN(Operand q, QuantizeResult(F(input, name), node));
    return Emitted::Pass(q);
  }
  if (is({"nnq.DeQuantize"})) {
    if (!input.is_quantized_like()) return Error(node, "expects a quantized tensor; its input is float");
    return Emitted::Pass(input.AsKind(Operand::Kind::kDequantized));
  }
  if (strip_nd("nn.Conv") || strip_nd("nnqr.Conv") || strip_nd("nnq.Conv") ||
      strip_nd("nn.ConvTranspose")) {
    ASSIGN_OR_RETURN(std::string y, Conv(node, m, input, name));
    return Emitted::Tensor(y);
  }
  if (strip_nd("nniq.ConvReLU")) {
    ASSIGN_OR_RETURN(std::string y, Conv(node, m, input, name + "_conv"));
    return Emitted::Tensor(g_.Node("Relu", {y}, name));
  }
  if (is({"nn.Linear", "nnqr.Linear", "nnq.Linear"})) {
    ASSIGN_OR_RETURN(std::string y, Linear(node, m, input, name));
    return Emitted::Tensor(y);
  }
  if (is({"nniq.LinearReLU"})) {
    ASSIGN_OR_RETURN(std::string y, Linear(node, m, input, name + "_linear"));
    return Emitted::Tensor(g_.Node("Relu", {y}, name));
  }
  if (strip_nd("nni.ConvReLU") || strip_nd("nni.ConvBn") || strip_nd("nni.ConvBnReLU") ||
      is({"nni.LinearReLU", "nni.BNReLU2d", "nni.BNReLU3d", "nni.ConvAct2d"})) {
    // A fused float or reference module: its children in order (conv, bn, relu...), the
    // last under the node's name, the others under name_i.
    Operand value = input;
    const auto& children = m.children();
    for (size_t i = 0; i < children.size(); ++i) {
      const std::string base = i + 1 == children.size() ? name : absl::StrCat(name, "_", i);
      ASSIGN_OR_RETURN(Emitted part, CallModule(node, base, *children[i].second, {value}));
      value = part.tensor ? Operand::Float(*part.tensor, {}) : part.value;
      // The parts after the first (bn, relu) read only ranks, which they keep.
      value.shape = input.shape;
    }
    return Emitted::Tensor(value.name);
  }
  if (is({"nni.ConvAdd2d", "nni.ConvAddReLU2d", "nniq.ConvAdd2d", "nniq.ConvAddReLU2d"})) {
    if (inputs.size() != 2) return Error(node, "expects two inputs (the conv's and the residual)");
    ASSIGN_OR_RETURN(std::string y, ConvAdd(node, m, input, inputs[1]));
    return Emitted::Tensor(y);
  }
  if (strip_nd("nn.BatchNorm") || is({"nnq.BatchNorm2d", "nnq.BatchNorm3d"})) {
    if (m.FindTensor("running_mean") == nullptr)
      return Error(node, "a batch norm without running statistics (track_running_stats=False) "
                         "has no inference form");
    ASSIGN_OR_RETURN(std::string y, BatchNorm(node, m, input, name));
    return Emitted::Tensor(y);
  }
  if (is({"nniq.BNReLU2d", "nniq.BNReLU3d"})) {
    ASSIGN_OR_RETURN(std::string y, BatchNorm(node, m, input, name + "_bn"));
    return Emitted::Tensor(g_.Node("Relu", {y}, name));
  }
  const std::map<std::string, std::string> unary = {
      {"nn.ReLU", "Relu"}, {"nn.Sigmoid", "Sigmoid"}, {"nnq.Sigmoid", "Sigmoid"},
      {"nn.Tanh", "Tanh"}, {"nn.Hardswish", "HardSwish"}, {"nnq.Hardswish", "HardSwish"}};
  if (auto it = unary.find(type); it != unary.end()) {
    ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
    return Emitted::Tensor(g_.Node(it->second, {x}, name));
  }
  if (is({"nn.ReLU6", "nnq.ReLU6"})) {
    ASSIGN_OR_RETURN(std::string y, Clip(node, input, 0.0, 6.0, name));
    return Emitted::Tensor(y);
  }
  if (is({"nn.Hardtanh"})) {
    auto lo = m.GetFloat("min_val"), hi = m.GetFloat("max_val");
    if (!lo.ok() || !hi.ok()) return Error(node, "nn.Hardtanh without min_val / max_val");
    ASSIGN_OR_RETURN(std::string y, Clip(node, input, *lo, *hi, name));
    return Emitted::Tensor(y);
  }
  if (is({"nn.Hardsigmoid"})) {
    ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
    return Emitted::Tensor(g_.Node("HardSigmoid", {x}, name,
                                   {FloatAttr("alpha", 1.0 / 6), FloatAttr("beta", 0.5)}));
  }
  if (strip_nd("nn.MaxPool") || is({"nnq.MaxPool2d"}) || strip_nd("nn.AvgPool")) {
    const bool max = !strip_nd("nn.AvgPool");
    ASSIGN_OR_RETURN(PoolParams p, ModulePoolParams(node, m, input.shape.size() - 2, max));
    ASSIGN_OR_RETURN(std::string y, Pool(node, p, input, name, max));
    return Emitted::Tensor(y);
  }
  if (strip_nd("nn.AdaptiveAvgPool")) {
    ASSIGN_OR_RETURN(std::string y, AdaptiveAvgPool(node, input, m.FindAttribute("output_size"), name));
    return Emitted::Tensor(y);
  }
  if (is({"nn.GELU"})) {
    std::string approximate = "none";
    if (const Argument* a = m.FindAttribute("approximate"); a != nullptr && a->is_string())
      approximate = std::string(a->as_string());
    ASSIGN_OR_RETURN(std::string y, Gelu(node, input, approximate));
    return Emitted::Tensor(y);
  }
  if (is({"nn.SiLU"})) {
    ASSIGN_OR_RETURN(std::string y, Silu(node, input));
    return Emitted::Tensor(y);
  }
  if (is({"nn.ELU", "nnq.ELU"}) || is({"nn.LeakyReLU", "nnq.LeakyReLU"})) {
    const bool elu = is({"nn.ELU", "nnq.ELU"});
    ASSIGN_OR_RETURN(double alpha, ModuleFloat(node, m, elu ? "alpha" : "negative_slope", elu ? 1.0 : 0.01));
    ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
    return Emitted::Tensor(g_.Node(elu ? "Elu" : "LeakyRelu", {x}, name, {FloatAttr("alpha", alpha)}));
  }
  if (is({"nn.Softmax", "nnq.Softmax"})) {
    const Argument* dim = m.FindAttribute("dim");
    if (dim == nullptr || !dim->is_int()) return Error(node, "softmax needs an explicit dim");
    ASSIGN_OR_RETURN(std::string x, FChecked(node, input, name));
    return Emitted::Tensor(g_.Node("Softmax", {x}, name, {IntAttr("axis", dim->as_int())}));
  }
  if (is({"nn.LayerNorm", "nnq.LayerNorm"})) {
    const Argument* shape = m.FindAttribute("normalized_shape");
    const size_t rank = shape != nullptr && shape->is_list() ? shape->items().size() : 1;
    ASSIGN_OR_RETURN(std::vector<int64_t> normalized, ModuleInts(node, m, "normalized_shape", rank));
    ASSIGN_OR_RETURN(double eps, ModuleFloat(node, m, "eps", 1e-5));
    ASSIGN_OR_RETURN(std::string y, LayerNorm(node, input, normalized, nullptr, nullptr, &m, eps));
    return Emitted::Tensor(y);
  }
  if (is({"nn.Flatten"})) {
    ASSIGN_OR_RETURN(int64_t start, m.GetInt("start_dim"));
    ASSIGN_OR_RETURN(int64_t end, m.GetInt("end_dim"));
    const int64_t rank = Rank(input);
    const std::string x = F(input, name);
    if (((start % rank) + rank) % rank == 1 && ((end % rank) + rank) % rank == rank - 1)
      return Emitted::Tensor(g_.Node("Flatten", {x}, name, {IntAttr("axis", 1)}));
    return Emitted::Tensor(Reshape(x, node, name));
  }
  return Error(node, absl::StrCat("module type ", type,
                                  " has no ONNX mapping (onnx/onnx_writer.cc "
                                  "lists those that have)"));
}

absl::StatusOr<Emitted> Emitter::CallFunction(const Node& node, absl::string_view target) {
  const std::string name = node.name();
  auto first = [&]() { return TensorArg(node, 0, "input"); };
  auto modded = [](int64_t v, int64_t rank) { return ((v % rank) + rank) % rank; };
  if (target == "torch.quantize_per_tensor") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(Operand q, QuantizeResult(F(x, name), node));
    return Emitted::Pass(q);
  }
  if (target == "torch.dequantize" || target == "dequantize") {
    ASSIGN_OR_RETURN(Operand x, first());
    if (!x.is_quantized_like()) return Error(node, "expects a quantized tensor; its input is float");
    return Emitted::Pass(x.AsKind(Operand::Kind::kDequantized));
  }
  if (target == "contiguous" || target == "detach" || target == "clone" ||
      target == "torch.nn.functional.dropout" || target == "torch.ops.quantized.dropout") {
    ASSIGN_OR_RETURN(Operand x, first());
    return Emitted::Pass(x);
  }
  const std::map<std::string, std::string> unary = {
      {"torch.relu", "Relu"}, {"torch.nn.functional.relu", "Relu"}, {"relu", "Relu"},
      {"torch.sigmoid", "Sigmoid"}, {"torch.nn.functional.sigmoid", "Sigmoid"}, {"sigmoid", "Sigmoid"},
      {"torch.tanh", "Tanh"}, {"torch.nn.functional.tanh", "Tanh"}, {"tanh", "Tanh"},
      {"torch.erf", "Erf"},
      {"torch.nn.functional.hardswish", "HardSwish"}, {"torch.ops.quantized.sigmoid", "Sigmoid"},
      {"torch.ops.quantized.hardswish", "HardSwish"}};
  if (auto it = unary.find(std::string(target)); it != unary.end()) {
    ASSIGN_OR_RETURN(Operand x, first());
    return Emitted::Tensor(g_.Node(it->second, {F(x, name)}, name));
  }
  if (target == "torch.nn.functional.relu6") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(std::string y, Clip(node, x, 0.0, 6.0, name));
    return Emitted::Tensor(y);
  }
  if (target == "torch.clamp" || target == "clamp") {
    ASSIGN_OR_RETURN(Operand x, first());
    double bounds[2] = {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    const char* names[2] = {"min", "max"};
    for (int i = 0; i < 2; ++i) {
      const Argument* a = ArgOf(node, 1 + i, names[i]);
      if (a == nullptr || a->is_none()) continue;
      if (!a->is_int() && !a->is_float()) return Error(node, "min / max must be numbers");
      bounds[i] = a->as_float();
    }
    ASSIGN_OR_RETURN(std::string y, Clip(node, x, bounds[0], bounds[1], name));
    return Emitted::Tensor(y);
  }
  const std::map<std::string, std::string> binary = {
      {"operator.add", "Add"}, {"torch.add", "Add"}, {"add", "Add"},
      {"operator.sub", "Sub"}, {"torch.sub", "Sub"}, {"sub", "Sub"},
      {"operator.mul", "Mul"}, {"torch.mul", "Mul"}, {"mul", "Mul"},
      {"operator.truediv", "Div"}, {"torch.div", "Div"}, {"div", "Div"},
      {"operator.matmul", "MatMul"}, {"torch.matmul", "MatMul"}, {"matmul", "MatMul"}};
  if (auto it = binary.find(std::string(target)); it != binary.end()) {
    ASSIGN_OR_RETURN(std::string y, Binary(node, it->second, false, false));
    return Emitted::Tensor(y);
  }
  const std::map<std::string, std::pair<std::string, bool>> native_binary = {
      {"torch.ops.quantized.add", {"Add", false}}, {"torch.ops.quantized.add_relu", {"Add", true}},
      {"torch.ops.quantized.mul", {"Mul", false}}, {"torch.ops.quantized.mul_relu", {"Mul", true}},
      {"torch.ops.quantized.matmul", {"MatMul", false}}};
  if (auto it = native_binary.find(std::string(target)); it != native_binary.end()) {
    ASSIGN_OR_RETURN(std::string y, Binary(node, it->second.first, it->second.second, true));
    return Emitted::Tensor(y);
  }
  if (target == "torch.cat" || target == "torch.ops.quantized.cat") {
    const Argument* tensors = ArgOf(node, 0, target == "torch.cat" ? "tensors" : "qx");
    if (tensors == nullptr || !tensors->is_list() || tensors->items().empty())
      return Error(node, "expects a list of tensors");
    std::vector<Operand> parts;
    for (const Argument& t : tensors->items()) {
      ASSIGN_OR_RETURN(Operand p, Resolve(t));
      parts.push_back(std::move(p));
    }
    ASSIGN_OR_RETURN(auto dim, IntsArg(node, 1, "dim"));
    const int64_t rank = Rank(parts[0]);
    std::vector<std::string> inputs;
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSIGN_OR_RETURN(std::string x, FChecked(node, parts[i], absl::StrCat(name, "_", i)));
      inputs.push_back(x);
    }
    return Emitted::Tensor(g_.Node("Concat", inputs, name,
                                   {IntAttr("axis", modded(dim ? (*dim)[0] : 0, rank))}));
  }
  if (target == "torch.flatten" || target == "flatten") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto start, IntsArg(node, 1, "start_dim"));
    ASSIGN_OR_RETURN(auto end, IntsArg(node, 2, "end_dim"));
    const int64_t rank = Rank(x);
    const std::string f = F(x, name);
    if (modded(start ? (*start)[0] : 0, rank) == 1 && modded(end ? (*end)[0] : -1, rank) == rank - 1)
      return Emitted::Tensor(g_.Node("Flatten", {f}, name, {IntAttr("axis", 1)}));
    return Emitted::Tensor(Reshape(f, node, name));
  }
  if (target == "torch.reshape" || target == "torch.squeeze" || target == "torch.unsqueeze" ||
      target == "view" || target == "reshape" || target == "squeeze" || target == "unsqueeze") {
    // The graph's shapes are the record run's: the result's recorded shape is the target.
    ASSIGN_OR_RETURN(Operand x, first());
    return Emitted::Tensor(Reshape(F(x, name), node, name));
  }
  if (target == "torch.permute" || target == "permute") {
    ASSIGN_OR_RETURN(Operand x, first());
    std::vector<int64_t> dims;
    for (size_t i = 1; i < node.num_args(); ++i) {
      ASSIGN_OR_RETURN(auto d, IntsArg(node, i, "dims"));
      if (d) dims.insert(dims.end(), d->begin(), d->end());
    }
    if (node.num_args() < 2) {
      ASSIGN_OR_RETURN(auto d, IntsArg(node, 99, "dims"));
      if (d) dims = *d;
    }
    for (int64_t& d : dims) d = modded(d, Rank(x));
    return Emitted::Tensor(g_.Node("Transpose", {F(x, name)}, name, {IntsAttr("perm", dims)}));
  }
  if (target == "torch.transpose" || target == "transpose") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto d0, IntsArg(node, 1, "dim0"));
    ASSIGN_OR_RETURN(auto d1, IntsArg(node, 2, "dim1"));
    if (!d0 || !d1) return Error(node, "expects dim0 and dim1");
    const int64_t rank = Rank(x);
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
    std::swap(perm[modded((*d0)[0], rank)], perm[modded((*d1)[0], rank)]);
    return Emitted::Tensor(g_.Node("Transpose", {F(x, name)}, name, {IntsAttr("perm", perm)}));
  }
  if (target == "torch.mean" || target == "mean") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto dim, IntsArg(node, 1, "dim"));
    bool keepdim = false;
    if (const Argument* k = ArgOf(node, 2, "keepdim"); k != nullptr && k->is_bool()) keepdim = k->as_bool();
    const int64_t rank = Rank(x);
    std::vector<int64_t> dims;
    if (dim) {
      for (int64_t d : *dim) dims.push_back(modded(d, rank));
    } else {
      for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
    }
    std::vector<int64_t> sorted = dims, spatial;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t d = 2; d < rank; ++d) spatial.push_back(d);
    if (rank >= 3 && sorted == spatial) {
      // The mean over all spatial dims is a global average pool, which ONNX Runtime runs
      // quantized (QLinearGlobalAveragePool); ReduceMean it does not.
      const std::string pooled = g_.Node("GlobalAveragePool", {F(x, name)}, keepdim ? name : name + "_pool");
      return Emitted::Tensor(keepdim ? pooled : Reshape(pooled, node, name));
    }
    return Emitted::Tensor(g_.Node("ReduceMean", {F(x, name)}, name,
                                   {IntsAttr("axes", dims), IntAttr("keepdims", keepdim ? 1 : 0)}));
  }
  if (target == "torch.softmax" || target == "torch.nn.functional.softmax" || target == "softmax" ||
      target == "torch.ops.quantized.softmax") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto dim, IntsArg(node, 1, "dim"));
    if (!dim) return Error(node, "softmax needs an explicit dim");
    return Emitted::Tensor(g_.Node("Softmax", {F(x, name)}, name, {IntAttr("axis", (*dim)[0])}));
  }
  if (target == "torch.nn.functional.pad") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto pad, IntsArg(node, 1, "pad"));
    if (const Argument* mode = ArgOf(node, 2, "mode");
        mode != nullptr && mode->is_string() && mode->as_string() != "constant")
      return Error(node, absl::StrCat("pad mode '", mode->as_string(),
                                      "' has no ONNX mapping here (constant only)"));
    const int64_t rank = Rank(x);
    std::vector<int64_t> begins(rank, 0), ends(rank, 0);
    for (size_t i = 0; pad && i < pad->size() / 2; ++i) {  // PyTorch lists the last axis first
      begins[rank - 1 - i] = (*pad)[2 * i];
      ends[rank - 1 - i] = (*pad)[2 * i + 1];
    }
    std::vector<int64_t> pads = begins;
    pads.insert(pads.end(), ends.begin(), ends.end());
    std::vector<std::string> inputs = {F(x, name), g_.Constant(Integers(kInt64, {2 * rank}, pads), "pads")};
    if (const Argument* v = ArgOf(node, 3, "value"); v != nullptr && (v->is_int() || v->is_float()) &&
                                                     v->as_float() != 0.0)
      inputs.push_back(g_.Constant(ScalarFloat(v->as_float()), "value"));
    return Emitted::Tensor(g_.Node("Pad", inputs, name, {StringAttr("mode", "constant")}));
  }
  if (target == "operator.getitem") return GetItem(node);
  if (target == "torchvision.ops.stochastic_depth.stochastic_depth") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(double p, FloatArg(node, 1, "p", 0.0));
    ASSIGN_OR_RETURN(bool training, BoolArg(node, 3, "training", true));
    if (training && p > 0)
      return Error(node, "stochastic depth in training mode (random) has no inference form");
    return Emitted::Pass(x);
  }
  if (target == "torch.nn.functional.hardtanh" || target == "torch.nn.functional.hardtanh_") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(double lo, FloatArg(node, 1, "min_val", -1.0));
    ASSIGN_OR_RETURN(double hi, FloatArg(node, 2, "max_val", 1.0));
    ASSIGN_OR_RETURN(std::string y, Clip(node, x, lo, hi, name));
    return Emitted::Tensor(y);
  }
  if (target == "torch.nn.functional.hardsigmoid") {
    ASSIGN_OR_RETURN(Operand x, first());
    return Emitted::Tensor(g_.Node("HardSigmoid", {F(x, name)}, name,
                                   {FloatAttr("alpha", 1.0 / 6), FloatAttr("beta", 0.5)}));
  }
  if (target == "torch.nn.functional.silu") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(std::string y, Silu(node, x));
    return Emitted::Tensor(y);
  }
  if (target == "torch.nn.functional.gelu") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(std::string approximate, StringArg(node, 1, "approximate", "none"));
    ASSIGN_OR_RETURN(std::string y, Gelu(node, x, approximate));
    return Emitted::Tensor(y);
  }
  if (target == "torch.nn.functional.elu" || target == "torch.nn.functional.leaky_relu" ||
      target == "torch.ops.quantized.leaky_relu") {
    const bool elu = target == "torch.nn.functional.elu";
    ASSIGN_OR_RETURN(Operand x, TensorArg(node, 0, target == "torch.ops.quantized.leaky_relu" ? "qx" : "input"));
    ASSIGN_OR_RETURN(double alpha, FloatArg(node, 1, elu ? "alpha" : "negative_slope", elu ? 1.0 : 0.01));
    return Emitted::Tensor(g_.Node(elu ? "Elu" : "LeakyRelu", {F(x, name)}, name, {FloatAttr("alpha", alpha)}));
  }
  if (target == "torch.nn.functional.layer_norm") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto normalized, IntsArg(node, 1, "normalized_shape"));
    if (!normalized) return Error(node, "no argument 'normalized_shape'");
    std::optional<Operand> affine[2];
    const char* what[2] = {"weight", "bias"};
    for (int i = 0; i < 2; ++i) {
      const Argument* a = ArgOf(node, 2 + i, what[i]);
      if (a == nullptr || a->is_none()) continue;
      ASSIGN_OR_RETURN(affine[i], Resolve(*a));
      if (!affine[i]->is_tensor()) return Error(node, absl::StrCat("argument '", what[i], "' is not a tensor"));
    }
    ASSIGN_OR_RETURN(double eps, FloatArg(node, 4, "eps", 1e-5));
    ASSIGN_OR_RETURN(std::string y, LayerNorm(node, x, *normalized, affine[0] ? &*affine[0] : nullptr,
                                              affine[1] ? &*affine[1] : nullptr, nullptr, eps));
    return Emitted::Tensor(y);
  }
  for (const char* kind : {"max", "avg"}) {
    for (int nd = 1; nd <= 3; ++nd) {
      if (target != absl::StrCat("torch.nn.functional.", kind, "_pool", nd, "d")) continue;
      const bool max = std::string(kind) == "max";
      ASSIGN_OR_RETURN(Operand x, first());
      ASSIGN_OR_RETURN(PoolParams p, CallPoolParams(node, x.shape.size() - 2, max));
      ASSIGN_OR_RETURN(std::string y, Pool(node, p, x, name, max));
      return Emitted::Tensor(y);
    }
  }
  if (target == "torch.nn.functional.adaptive_avg_pool1d" ||
      target == "torch.nn.functional.adaptive_avg_pool2d" ||
      target == "torch.nn.functional.adaptive_avg_pool3d") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(std::string y, AdaptiveAvgPool(node, x, ArgOf(node, 1, "output_size"), name));
    return Emitted::Tensor(y);
  }
  if (target == "torch.chunk" || target == "chunk") {
    ASSIGN_OR_RETURN(Operand x, first());
    ASSIGN_OR_RETURN(auto chunks, IntsArg(node, 1, "chunks"));
    ASSIGN_OR_RETURN(auto dim, IntsArg(node, 2, "dim"));
    if (!chunks || (*chunks)[0] <= 0) return Error(node, "expects a positive number of chunks");
    const int64_t axis = modded(dim ? (*dim)[0] : 0, Rank(x));
    const int64_t length = x.shape[axis];
    const int64_t step = (length + (*chunks)[0] - 1) / (*chunks)[0];
    std::vector<int64_t> sizes;
    for (int64_t start = 0; step > 0 && start < length; start += step)
      sizes.push_back(std::min(step, length - start));
    return Split(node, x, sizes, axis);
  }
  if (target == "torch.functional.split" || target == "split") {
    ASSIGN_OR_RETURN(Operand x, TensorArg(node, 0, target == "split" ? "self" : "tensor"));
    ASSIGN_OR_RETURN(auto sections, IntsArg(node, 1, "split_size_or_sections"));
    ASSIGN_OR_RETURN(auto dim, IntsArg(node, 2, "dim"));
    if (!sections) return Error(node, "no argument 'split_size_or_sections'");
    const int64_t axis = modded(dim ? (*dim)[0] : 0, Rank(x));
    std::vector<int64_t> sizes = *sections;
    const Argument* given = ArgOf(node, 1, "split_size_or_sections");
    if (!given->is_list()) {  // one size: parts of it, the last what remains
      const int64_t step = (*sections)[0], length = x.shape[axis];
      if (step <= 0) return Error(node, "expects a positive split size");
      sizes.clear();
      for (int64_t start = 0; start < length; start += step) sizes.push_back(std::min(step, length - start));
    }
    return Split(node, x, sizes, axis);
  }
  if (target == "torch.narrow" || target == "narrow") return Narrow(node);
  if (target == "torch.nn.functional.interpolate") return Interpolate(node);
  if (target == "expand") {
    ASSIGN_OR_RETURN(Operand x, first());
    const std::string input = F(x, name);
    const Shape& out = SeenOf(node).shape;
    const std::string shape = g_.Constant(Integers(kInt64, {static_cast<int64_t>(out.size())}, out), "shape");
    return Emitted::Tensor(g_.Node("Expand", {input, shape}, name));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Where(node), " has no ONNX mapping (onnx/onnx_writer.cc lists the ops that have one)"));
}

absl::StatusOr<Emitted> Emitter::Call(const Node& node) {
  if (node.op() == OpKind::kCallModule) {
    const Module* m = gm_.ModuleOf(&node);
    if (m == nullptr) return Error(node, "its module does not resolve");
    std::vector<Operand> inputs;
    for (const Argument& a : node.args()) {
      ASSIGN_OR_RETURN(Operand o, Resolve(a));
      inputs.push_back(std::move(o));
    }
    return CallModule(node, node.name(), *m, inputs);
  }
  return CallFunction(node, node.target().name());
}

void FlattenOutput(const Argument& arg, std::vector<const Argument*>& leaves) {
  if (arg.is_list()) {
    for (const Argument& a : arg.items()) FlattenOutput(a, leaves);
  } else {
    leaves.push_back(&arg);
  }
}

ValueInfoProto ValueInfo(const std::string& name, int elem_type, const Shape& shape) {
  ValueInfoProto info;
  info.set_name(name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  auto* s = tensor->mutable_shape();
  for (int64_t d : shape) s->add_dim()->set_dim_value(d);
  return info;
}

absl::Status Emitter::Outputs(const Node& node) {
  std::vector<const Argument*> leaves;
  for (const Argument& a : node.args()) FlattenOutput(a, leaves);
  std::set<std::string> inputs, taken, initializers;
  for (const ValueInfoProto& i : g_.inputs) inputs.insert(i.name());
  for (const TensorProto& t : g_.initializers) initializers.insert(t.name());
  for (const Argument* leaf : leaves) {
    if (!leaf->is_node() || !SeenOf(*leaf->as_node()).is_tensor)
      return absl::InvalidArgumentError(absl::StrCat("output: '", leaf->ToString(),
                                                     "' is not a tensor; ONNX outputs are tensors"));
    const Node& source = *leaf->as_node();
    const Operand& value = values_.at(&source);
    const Seen& s = SeenOf(source);
    std::string name;
    int elem_type = kFloat;
    if (value.kind == Operand::Kind::kFloat) {
      name = value.name;
      if (inputs.count(name) || taken.count(name) || initializers.count(name))
        name = g_.Node("Identity", {name}, source.name());
      elem_type = ElemTypeOf(s.dtype).value_or(kFloat);
    } else {
      // A quantized output leaves as float, through a DequantizeLinear of its own scale
      // and zero point: ONNX has no quantized tensor type.
      name = g_.Dequantize(value, source.name());
    }
    taken.insert(name);
    g_.outputs.push_back(ValueInfo(name, elem_type, s.shape));
  }
  return absl::OkStatus();
}

absl::Status Emitter::Walk() {
  for (const Node* node = gm_.graph().first(); node != nullptr; node = node->next()) {
    if (node->op() == OpKind::kOutput) {
      RETURN_IF_ERROR(Outputs(*node));
      continue;
    }
    auto it = seen_.find(node);
    if (it == seen_.end()) continue;  // never ran: nothing to write
    const Seen& s = it->second;
    Operand value;
    if (node->op() == OpKind::kPlaceholder) {
      std::optional<int> elem_type = ElemTypeOf(s.dtype);
      if (!s.is_tensor || !elem_type || s.quantized)
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", node->name(), "': an ONNX graph input is a float or integer tensor"));
      const std::string name = g_.Fresh(node->name());
      g_.inputs.push_back(ValueInfo(name, *elem_type, s.shape));
      value = Operand::Float(name, s.shape);
    } else if (!s.is_tensor && !HoldsTensor(s.python)) {
      value.constant = s.python;  // shape arithmetic, a flag: a constant
    } else if (node->op() == OpKind::kGetAttr) {
      const Tensor* t = gm_.FindTensor(node->target().name());
      if (t == nullptr) return Error(*node, "its target is not a tensor");
      std::optional<int> elem_type = ElemTypeOf(t->dtype());
      if (!elem_type || (t->is_quantized() && t->qparams().scheme != QScheme::kPerTensorAffine))
        return Error(*node, absl::StrCat("a ", DTypeName(t->dtype()), " constant has no ONNX form here"));
      const std::string name = g_.Constant(Array{*elem_type, t->shape(), std::string(t->bytes())}, node->name());
      value = t->is_quantized() ? Operand::Quantized(name, t->qparams().scales[0], t->qparams().zero_points[0],
                                                     *elem_type, t->shape())
                                : Operand::Float(name, t->shape());
    } else {
      ASSIGN_OR_RETURN(Emitted emitted, Call(*node));
      if (emitted.tensor) {
        if (s.quantized) {
          ASSIGN_OR_RETURN(value, QuantizeResult(*emitted.tensor, *node));
        } else {
          value = Operand::Float(*emitted.tensor, s.shape);
        }
      } else {
        value = std::move(emitted.value);
      }
    }
    if (s.is_tensor) value.shape = s.shape;
    values_[node] = std::move(value);
  }
  return absl::OkStatus();
}

// ---- QDQ tidying ----------------------------------------------------------------------------
// Writing each quantized op as DQ -> float op -> Q leaves shapes ONNX Runtime's QDQ
// selectors reject or would have to simplify themselves:
//   x -> Relu / Clip -> Q   the clamp goes after the Q, as a Clip of the integers with the
//                           bounds quantized; where the Q's own range lies inside the
//                           clamp's, it goes altogether (as ORT's quantizer folds a Relu
//                           into the Q before it). Conv -> Relu -> Q becomes Conv -> Q
//                           (-> Clip), which the Conv selector takes.
//   DQ -> Q                 with equal scale and zero point: the integers themselves.
//   Clip of integers        whose bounds are the integer type's own: the integers.
// Each is exact: quantization is monotone, so it commutes with a clamp whose bounds are
// quantized alike, and a DQ -> Q pair on one grid gives back its integers. Each applies
// only where the intermediate tensor has one reader and is no graph output.

class TidyView {
 public:
  explicit TidyView(OnnxGraph& g) : g(g) {
    for (NodeProto* n : g.nodes) {
      for (const std::string& name : n->input()) readers[name].push_back(n);
    }
    for (const ValueInfoProto& o : g.outputs) outputs.insert(o.name());
  }
  NodeProto* OnlyReader(const std::string& name, const std::string& op_type) const {
    auto it = readers.find(name);
    if (it == readers.end() || it->second.size() != 1 || it->second[0]->op_type() != op_type ||
        outputs.count(name) > 0)
      return nullptr;
    return it->second[0];
  }
  const Array* Small(const std::string& name) const {
    auto it = g.small.find(name);
    return it == g.small.end() ? nullptr : &it->second;
  }
  // (scale, zero point array) of a per-tensor Q / DQ with constant parameters.
  std::optional<std::pair<double, const Array*>> ScalarQParams(const NodeProto* node) const {
    if (node == nullptr || node->input_size() < 3) return std::nullopt;
    for (const AttributeProto& a : node->attribute())
      if (a.name() == "axis") return std::nullopt;
    const Array* scale = Small(node->input(1));
    const Array* zero_point = Small(node->input(2));
    if (scale == nullptr || zero_point == nullptr || scale->size() != 1 || zero_point->size() != 1)
      return std::nullopt;
    return std::make_pair(scale->At(0), zero_point);
  }
  std::optional<std::pair<double, double>> ClampRange(const NodeProto* node) const {
    const double inf = std::numeric_limits<double>::infinity();
    if (node->op_type() == "Relu") return std::make_pair(0.0, inf);
    double bounds[2] = {-inf, inf};
    for (int i = 1; i <= 2; ++i) {
      if (node->input_size() <= i || node->input(i).empty()) continue;
      const Array* a = Small(node->input(i));
      if (a == nullptr) return std::nullopt;
      bounds[i - 1] = a->At(0);
    }
    return std::make_pair(bounds[0], bounds[1]);
  }

  OnnxGraph& g;
  std::map<std::string, std::vector<NodeProto*>> readers;
  std::set<std::string> outputs;
};

std::pair<int64_t, int64_t> IntegerRange(const Array& zero_point) {
  return zero_point.elem_type == kUInt8 ? std::make_pair<int64_t, int64_t>(0, 255)
                                        : std::make_pair<int64_t, int64_t>(-128, 127);
}

bool SameGrid(const std::optional<std::pair<double, const Array*>>& a,
              const std::optional<std::pair<double, const Array*>>& b) {
  return a && b && a->first == b->first && a->second->At(0) == b->second->At(0) &&
         a->second->elem_type == b->second->elem_type;
}

// PyTorch's quantize_val: zero_point + nearbyint(value * (1.0f / scale)) in float32,
// clamped to the integer type: the bound PyTorch's quantized clamp uses.
Array QuantizeBound(double value, double scale, const Array& zero_point) {
  const auto [qmin, qmax] = IntegerRange(zero_point);
  const float inv_scale = 1.0f / static_cast<float>(scale);
  const float product = static_cast<float>(value) * inv_scale;
  int64_t q = static_cast<int64_t>(zero_point.At(0));
  if (std::isinf(product)) {
    q = product > 0 ? qmax : qmin;
  } else {
    q += static_cast<int64_t>(std::nearbyint(product));
  }
  return Integers(zero_point.elem_type, {}, {std::min(qmax, std::max(qmin, q))});
}

using Removed = std::set<const NodeProto*>;

bool ClampsAfterQuantize(TidyView& view, Removed& removed) {
  bool changed = false;
  std::map<const NodeProto*, size_t> position;
  for (size_t i = 0; i < view.g.nodes.size(); ++i) position[view.g.nodes[i]] = i;
  const std::vector<NodeProto*> snapshot = view.g.nodes;
  for (NodeProto* node : snapshot) {
    if (node->op_type() != "Relu" && node->op_type() != "Clip") continue;
    NodeProto* q = view.OnlyReader(node->output(0), "QuantizeLinear");
    auto bounds = view.ClampRange(node);
    auto qparams = q != nullptr ? view.ScalarQParams(q) : std::nullopt;
    if (!bounds || !qparams) continue;
    changed = true;
    const auto [qmin, qmax] = IntegerRange(*qparams->second);
    const double zp = qparams->second->At(0);
    const double lo = (static_cast<double>(qmin) - zp) * qparams->first;
    const double hi = (static_cast<double>(qmax) - zp) * qparams->first;
    if (bounds->first <= lo && hi <= bounds->second) {
      q->set_input(0, node->input(0));  // the Q clamps alike: the clamp goes
      removed.insert(node);
      continue;
    }
    // x -> clamp -> y -> Q -> z  becomes  x -> Q -> t -> Clip(integers) -> z; the two swap
    // places in the node order, which keeps it topological (only Q read y).
    const std::string integers = view.g.Fresh(q->output(0) + "_unclamped");
    const std::string z = q->output(0);
    q->set_input(0, node->input(0));
    q->set_output(0, integers);
    std::vector<std::string> inputs = {integers};
    const double inf = std::numeric_limits<double>::infinity();
    const double limits[2] = {bounds->first, bounds->second};
    const double unbounded[2] = {-inf, inf};
    for (int i = 0; i < 2; ++i)
      inputs.push_back(limits[i] == unbounded[i]
                           ? std::string()
                           : view.g.Constant(QuantizeBound(limits[i], qparams->first, *qparams->second), "bound"));
    while (inputs.back().empty()) inputs.pop_back();
    node->set_op_type("Clip");
    node->clear_input();
    for (const std::string& i : inputs) node->add_input(i);
    node->set_output(0, z);
    const size_t i = position[node], j = position[q];
    view.g.nodes[i] = q;
    view.g.nodes[j] = node;
    position[node] = j;
    position[q] = i;
  }
  return changed;
}

void Rewire(TidyView& view, const std::string& from, const std::string& to) {
  auto it = view.readers.find(from);
  if (it == view.readers.end()) return;
  for (NodeProto* reader : it->second)
    for (int i = 0; i < reader->input_size(); ++i)
      if (reader->input(i) == from) reader->set_input(i, to);
}

bool BypassRoundTrips(TidyView& view, Removed& removed) {
  bool changed = false;
  for (NodeProto* dq : view.g.nodes) {
    if (dq->op_type() != "DequantizeLinear" || removed.count(dq)) continue;
    NodeProto* q = view.OnlyReader(dq->output(0), "QuantizeLinear");
    if (q == nullptr || removed.count(q) || view.outputs.count(q->output(0)) ||
        !SameGrid(view.ScalarQParams(dq), view.ScalarQParams(q)))
      continue;
    Rewire(view, q->output(0), dq->input(0));
    removed.insert(dq);
    removed.insert(q);
    changed = true;
  }
  return changed;
}

bool DropWholeRangeClips(TidyView& view, Removed& removed) {
  bool changed = false;
  for (NodeProto* node : view.g.nodes) {
    if (node->op_type() != "Clip" || view.outputs.count(node->output(0))) continue;
    std::vector<const Array*> bounds;
    for (int i = 1; i <= 2 && i < node->input_size(); ++i)
      if (!node->input(i).empty()) bounds.push_back(view.Small(node->input(i)));
    if (bounds.empty() ||
        std::any_of(bounds.begin(), bounds.end(), [](const Array* b) {
          return b == nullptr || (b->elem_type != kUInt8 && b->elem_type != kInt8);
        }))
      continue;
    const auto [tmin, tmax] = IntegerRange(*bounds[0]);
    const Array* lo = node->input_size() > 1 && !node->input(1).empty() ? view.Small(node->input(1)) : nullptr;
    const Array* hi = node->input_size() > 2 && !node->input(2).empty() ? view.Small(node->input(2)) : nullptr;
    if ((lo != nullptr && lo->At(0) > tmin) || (hi != nullptr && hi->At(0) < tmax)) continue;
    Rewire(view, node->output(0), node->input(0));
    removed.insert(node);
    changed = true;
  }
  return changed;
}

void Tidy(OnnxGraph& g) {
  for (int round = 0; round < kMaxTidyRounds; ++round) {
    bool changed = false;
    for (auto rewrite : {ClampsAfterQuantize, BypassRoundTrips, DropWholeRangeClips}) {
      TidyView view(g);
      Removed removed;
      changed |= rewrite(view, removed);
      std::vector<NodeProto*> kept;
      for (NodeProto* n : g.nodes)
        if (!removed.count(n)) kept.push_back(n);
      g.nodes = std::move(kept);
    }
    if (!changed) break;
  }
  g.DropUnreadInitializers();  // a removed Clip's bounds, a removed Q's parameters
}

}  // namespace

absl::StatusOr<onnx_subset::ModelProto> GraphModuleToOnnx(const GraphModule& gm,
                                                          const OnnxWriterOptions& options) {
  ASSIGN_OR_RETURN(auto seen, Record(gm, options));
  Emitter emitter(gm, std::move(seen));
  RETURN_IF_ERROR(emitter.Walk());
  OnnxGraph& g = emitter.graph();
  Tidy(g);
  onnx_subset::ModelProto model;
  model.set_ir_version(kOnnxWriterIrVersion);
  model.set_producer_name("fuselage");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxWriterOpset);
  onnx_subset::GraphProto* graph = model.mutable_graph();
  graph->set_name("fuselage");
  for (const NodeProto* n : g.nodes) *graph->add_node() = *n;
  for (TensorProto& t : g.initializers) *graph->add_initializer() = std::move(t);
  for (ValueInfoProto& i : g.inputs) *graph->add_input() = std::move(i);
  for (ValueInfoProto& o : g.outputs) *graph->add_output() = std::move(o);
  return model;
}

absl::StatusOr<std::string> OnnxModelBytes(const GraphModule& gm, const OnnxWriterOptions& options) {
  ASSIGN_OR_RETURN(onnx_subset::ModelProto model, GraphModuleToOnnx(gm, options));
  if (model.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return absl::InvalidArgumentError(absl::StrCat(
        "to ONNX: the model is ", model.ByteSizeLong(), " bytes; one ONNX file holds < 2 GiB"));
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return absl::InternalError("to ONNX: serializing the ONNX model failed");
  return bytes;
}

absl::Status SaveOnnxModel(const GraphModule& gm, const std::string& path,
                           const OnnxWriterOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, OnnxModelBytes(gm, options));
  return WriteFileAtomically(path, bytes);
}

}  // namespace fuselage
