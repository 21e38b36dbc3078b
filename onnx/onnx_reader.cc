#include "onnx/onnx_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "onnx/onnx_fold.h"

namespace fuselage {
namespace {

using onnx_subset::AttributeProto;
using onnx_subset::ModelProto;
using onnx_subset::NodeProto;
using onnx_subset::TensorProto;
using Shape = std::vector<int64_t>;

// The most elements a tensor the reader makes may have (1 GiB of float32) and the highest
// rank (fuselage.from_onnx refuses larger tensors with these).
constexpr int64_t kMaxElements = kMaxFoldElements;
constexpr int kMaxRank = static_cast<int>(kMaxFoldRank);
// The largest ONNX file read: protobuf parses at most 2 GiB - 1.
constexpr size_t kMaxFileBytes = (size_t{1} << 31) - 1;

static_assert(sizeof(float) == 4, "float32 tensors");

// A value of the ONNX graph: the output of a fuselage node, or a constant (an initializer,
// a Constant node, or what a reshape of one gives).
struct Value {
  std::string node;  // the fuselage node's name; empty for a constant
  Shape shape;
  bool is_float = true;           // a constant's element type: float32, else int64
  bool is_bool = false;           // an integer constant of ONNX's BOOL type (`ints` 0 / 1)
  // A float constant's elements, row-major: `floats`, or, read from an ONNX tensor's
  // raw_data, `raw_floats`: those bytes (float32, little-endian, as this reader assumes
  // throughout) viewed in the parsed ONNX model, which outlives the reading, not copied
  // (a model's weights are most of its file). FloatBytes / Floats read either.
  std::vector<float> floats;
  absl::string_view raw_floats;
  // The raw_data string `raw_floats` views, when the reader may take it (an initializer
  // of a model given away that one node input reads): its one consumer moves the string
  // into the fuselage model instead of copying it (AddFloatValue).
  std::string* raw_source = nullptr;
  std::vector<int64_t> ints;      // an integer constant's elements
  std::string unreadable;         // why a constant cannot be used (its data type), if so

  bool is_constant() const { return node.empty(); }
  int64_t size() const { return ElementCount(shape); }
};

// A float constant's elements as float32 bytes (Value::floats or Value::raw_floats).
absl::string_view FloatBytes(const Value& v) {
  if (v.raw_floats.data() != nullptr) return v.raw_floats;
  return absl::string_view(reinterpret_cast<const char*>(v.floats.data()),
                           v.floats.size() * sizeof(float));
}

// A float constant's elements.
std::vector<float> Floats(const Value& v) {
  const absl::string_view bytes = FloatBytes(v);
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// A float constant's first element (it has one).
float FirstFloat(const Value& v) {
  float first;
  std::memcpy(&first, FloatBytes(v).data(), sizeof(float));
  return first;
}

// A constant as the folds (onnx/onnx_fold.h) take it, its bytes copied.
OnnxConstant ToConstant(const Value& v) {
  OnnxConstant c;
  c.type = v.is_float ? OnnxConstant::Type::kFloat
           : v.is_bool ? OnnxConstant::Type::kBool
                       : OnnxConstant::Type::kInt64;
  c.shape = v.shape;
  if (v.is_float)
    c.floats = Floats(v);
  else
    c.ints = v.ints;
  return c;
}

Value FromConstant(OnnxConstant c) {
  Value v;
  v.is_float = c.type == OnnxConstant::Type::kFloat;
  v.is_bool = c.type == OnnxConstant::Type::kBool;
  v.shape = std::move(c.shape);
  v.floats = std::move(c.floats);
  v.ints = std::move(c.ints);
  return v;
}

std::string Where(const NodeProto& node) {
  if (!node.name().empty()) return absl::StrCat("node '", node.name(), "' (", node.op_type(), ")");
  return absl::StrCat("the ", node.op_type(), " node writing '",
                      node.output_size() > 0 ? node.output(0) : std::string(), "'");
}

absl::Status NodeError(const NodeProto& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(node), ": ", what));
}

// ---- args and attributes of the fuselage model -------------------------------------------

proto::Arg NodeArg(const std::string& name) {
  proto::Arg arg;
  arg.set_node(name);
  return arg;
}
proto::Arg IntArg(int64_t v) {
  proto::Arg arg;
  arg.set_int_value(v);
  return arg;
}
proto::Arg FloatArg(double v) {
  proto::Arg arg;
  arg.set_float_value(v);
  return arg;
}
proto::Arg BoolArg(bool v) {
  proto::Arg arg;
  arg.set_bool_value(v);
  return arg;
}
proto::Arg StringArg(const std::string& v) {
  proto::Arg arg;
  arg.set_string_value(v);
  return arg;
}
proto::Arg NoneArg() {
  proto::Arg arg;
  arg.set_none(true);
  return arg;
}
proto::Arg IntsArg(const std::vector<int64_t>& values, bool tuple) {
  proto::Arg arg;
  proto::ArgList* list = tuple ? arg.mutable_tuple() : arg.mutable_list();
  for (int64_t v : values) *list->add_items() = IntArg(v);
  return arg;
}
proto::Arg ShapeArg(const Shape& shape) {
  proto::Arg arg;
  proto::ArgList* list = arg.mutable_list();
  for (int64_t d : shape) *list->add_items() = IntArg(d);
  return arg;
}

void AddAttribute(proto::Module& module, const std::string& name, proto::Arg value) {
  proto::NamedArg* entry = module.add_attributes();
  entry->set_name(name);
  *entry->mutable_value() = std::move(value);
}

void AddMeta(proto::Node& node, const std::string& name, proto::Arg value) {
  proto::NamedArg* entry = node.add_meta();
  entry->set_name(name);
  *entry->mutable_value() = std::move(value);
}

// `bytes`: the tensor's float32 elements (FloatBytes).
void AddFloatTensor(proto::Module& module, const std::string& name, const Shape& shape,
                    absl::string_view bytes) {
  proto::NamedTensor* entry = module.add_tensors();
  entry->set_name(name);
  proto::Tensor* t = entry->mutable_tensor();
  t->set_dtype(proto::FLOAT32);
  for (int64_t d : shape) t->add_shape(d);
  t->set_data(std::string(bytes));
}

void AddFloatTensor(proto::Module& module, const std::string& name, const Shape& shape,
                    const std::vector<float>& data) {
  AddFloatTensor(module, name, shape,
                 absl::string_view(reinterpret_cast<const char*>(data.data()),
                                   data.size() * sizeof(float)));
}

// A float constant as a module's tensor: its raw_data string moved in when the reader may
// take it (Value::raw_source; the heap block moves with the string, so `raw_floats` still
// views the same bytes), else its bytes copied.
void AddFloatValue(proto::Module& module, const std::string& name, const Value& value) {
  // Moved already (a value passed on, e.g. by Identity, to several readers): the bytes are
  // where the first reader's tensor holds them now, and are copied from there.
  if (value.raw_source == nullptr || value.raw_source->data() != value.raw_floats.data()) {
    AddFloatTensor(module, name, value.shape, FloatBytes(value));
    return;
  }
  proto::NamedTensor* entry = module.add_tensors();
  entry->set_name(name);
  proto::Tensor* t = entry->mutable_tensor();
  t->set_dtype(proto::FLOAT32);
  for (int64_t d : value.shape) t->add_shape(d);
  t->set_data(std::move(*value.raw_source));
}

void AddInt64Tensor(proto::Module& module, const std::string& name, const Shape& shape,
                    const std::vector<int64_t>& data) {
  proto::NamedTensor* entry = module.add_tensors();
  entry->set_name(name);
  proto::Tensor* t = entry->mutable_tensor();
  t->set_dtype(proto::INT64);
  for (int64_t d : shape) t->add_shape(d);
  t->set_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(int64_t)));
}

// ---- ONNX attributes ---------------------------------------------------------------------

class Attributes {
 public:
  explicit Attributes(const NodeProto& node) : node_(node) {
    for (const AttributeProto& a : node.attribute()) by_name_[a.name()] = &a;
  }
  bool Has(const std::string& name) const { return by_name_.count(name) > 0; }
  int64_t Int(const std::string& name, int64_t fallback) const {
    const AttributeProto* a = Find(name);
    return a == nullptr ? fallback : a->i();
  }
  double Float(const std::string& name, double fallback) const {
    const AttributeProto* a = Find(name);
    return a == nullptr ? fallback : static_cast<double>(a->f());
  }
  std::string String(const std::string& name, const std::string& fallback) const {
    const AttributeProto* a = Find(name);
    return a == nullptr ? fallback : a->s();
  }
  std::optional<std::vector<int64_t>> Ints(const std::string& name) const {
    const AttributeProto* a = Find(name);
    if (a == nullptr) return std::nullopt;
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  const AttributeProto* Find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

 private:
  const NodeProto& node_;
  std::map<std::string, const AttributeProto*> by_name_;
};

// The value of an ONNX tensor (an initializer or a Constant's), float32 or integer; one of
// another data type is kept with why it cannot be used (only its use is an error).
absl::StatusOr<Value> ReadTensor(const TensorProto& t, const std::string& where) {
  absl::string_view raw_floats;
  absl::StatusOr<OnnxConstant> c = ReadOnnxTensor(t, where, &raw_floats);
  if (absl::IsUnimplemented(c.status())) {
    Value unreadable;
    unreadable.shape.assign(t.dims().begin(), t.dims().end());  // checked before the type
    unreadable.unreadable = std::string(c.status().message());
    return unreadable;
  }
  if (absl::IsFailedPrecondition(c.status()))  // external data, given without its folder
    return absl::UnimplementedError(c.status().message());
  RETURN_IF_ERROR(c.status());
  Value v = FromConstant(*std::move(c));
  v.raw_floats = raw_floats;
  return v;
}

// Python's `re.sub(r"[^0-9a-zA-Z_]+", "_", base).strip("_")`, "v" if empty, a leading digit
// prefixed by "_": the former Python importer's names (a module's or buffer's name must be
// a Python attribute name), which tests/onnx/testdata pins.
std::string Sanitize(const std::string& base) {
  std::string out;
  bool in_run = false;
  for (char c : base) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '_';
    if (ok) {
      out.push_back(c);
      in_run = false;
    } else if (!in_run) {
      out.push_back('_');
      in_run = true;
    }
  }
  size_t begin = out.find_first_not_of('_');
  if (begin == std::string::npos) return "v";
  size_t end = out.find_last_not_of('_');
  out = out.substr(begin, end - begin + 1);
  if (out[0] >= '0' && out[0] <= '9') out = "_" + out;
  return out;
}

// The names an nn.Module has (dir(torch.nn.Module()) in torch 2.14): a child or buffer of
// the root named so would shadow them in the GraphModule fuselage.from_onnx builds.
const std::set<std::string>& TorchModuleAttributes() {
  static const auto* names = new std::set<std::string>{
      "T_destination", "__annotations__", "__call__", "__class__", "__delattr__", "__dict__",
      "__dir__", "__doc__", "__eq__", "__format__", "__ge__", "__getattr__", "__getattribute__",
      "__getstate__", "__gt__", "__hash__", "__init__", "__init_subclass__", "__le__", "__lt__",
      "__module__", "__ne__", "__new__", "__reduce__", "__reduce_ex__", "__repr__", "__setattr__",
      "__setstate__", "__sizeof__", "__str__", "__subclasshook__", "__weakref__", "_apply",
      "_backward_hooks", "_backward_pre_hooks", "_buffers", "_call_impl", "_compiled_call_impl",
      "_forward_hooks", "_forward_hooks_always_called", "_forward_hooks_with_kwargs",
      "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_get_backward_hooks",
      "_get_backward_pre_hooks", "_get_name", "_is_full_backward_hook", "_load_from_state_dict",
      "_load_state_dict_post_hooks", "_load_state_dict_pre_hooks",
      "_maybe_warn_non_full_backward_hook", "_modules", "_named_members",
      "_non_persistent_buffers_set", "_parameters", "_register_load_state_dict_pre_hook",
      "_register_state_dict_hook", "_replicate_for_data_parallel", "_save_to_state_dict",
      "_slow_forward", "_state_dict_hooks", "_state_dict_pre_hooks", "_version",
      "_wrapped_call_impl", "add_module", "apply", "bfloat16", "buffers", "call_super_init",
      "children", "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr",
      "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule",
      "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers", "named_children",
      "named_modules", "named_parameters", "parameters", "register_backward_hook",
      "register_buffer", "register_forward_hook", "register_forward_pre_hook",
      "register_full_backward_hook", "register_full_backward_pre_hook",
      "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
      "register_module", "register_parameter", "register_state_dict_post_hook",
      "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule",
      "share_memory", "state_dict", "to", "to_empty", "train", "training", "type", "xpu",
      "zero_grad"};
  return *names;
}

// Python's keywords and builtins, and torch.fx's custom builtins: torch.fx never names a node
// so (torch.fx.graph._illegal_names in torch 2.14 on Python 3.11).
const std::set<std::string>& FxIllegalNames() {
  static const auto* names = new std::set<std::string>{
      "ArithmeticError", "AssertionError", "AttributeError", "BaseException",
      "BaseExceptionGroup", "BlockingIOError", "BrokenPipeError", "BufferError", "BytesWarning",
      "ChildProcessError", "ConnectionAbortedError", "ConnectionError", "ConnectionRefusedError",
      "ConnectionResetError", "DeprecationWarning", "EOFError", "Ellipsis", "EncodingWarning",
      "EnvironmentError", "Exception", "ExceptionGroup", "False", "FileExistsError",
      "FileNotFoundError", "FloatingPointError", "FutureWarning", "GeneratorExit", "IOError",
      "ImportError", "ImportWarning", "IndentationError", "IndexError", "InterruptedError",
      "IsADirectoryError", "KeyError", "KeyboardInterrupt", "LookupError", "MemoryError",
      "ModuleNotFoundError", "NameError", "None", "NoneType", "NotADirectoryError",
      "NotImplemented", "NotImplementedError", "OSError", "OverflowError",
      "PendingDeprecationWarning", "PermissionError", "ProcessLookupError", "RecursionError",
      "ReferenceError", "ResourceWarning", "RuntimeError", "RuntimeWarning", "StopAsyncIteration",
      "StopIteration", "SyntaxError", "SyntaxWarning", "SystemError", "SystemExit", "TabError",
      "TimeoutError", "True", "TypeError", "UnboundLocalError", "UnicodeDecodeError",
      "UnicodeEncodeError", "UnicodeError", "UnicodeTranslateError", "UnicodeWarning",
      "UserWarning", "ValueError", "Warning", "ZeroDivisionError", "__build_class__", "__debug__",
      "__doc__", "__import__", "__loader__", "__name__", "__package__", "__spec__", "abs",
      "aiter", "all", "and", "anext", "any", "as", "ascii", "assert", "async", "await", "bin",
      "bool", "break", "breakpoint", "bytearray", "bytes", "callable", "chr", "class",
      "classmethod", "compile", "complex", "continue", "copyright", "credits", "def", "del",
      "delattr", "device", "dict", "dir", "divmod", "elif", "else", "enumerate", "eval", "except",
      "exec", "exit", "filter", "finally", "float", "for", "format", "from", "frozenset",
      "fx_pytree", "getattr", "global", "globals", "hasattr", "hash", "help", "hex", "id", "if",
      "import", "in", "inf", "input", "int", "is", "isinstance", "issubclass", "iter", "lambda",
      "len", "license", "list", "locals", "map", "max", "memoryview", "min", "nan", "next",
      "nonlocal", "not", "object", "oct", "open", "or", "ord", "pass", "pow", "print", "property",
      "pytree", "quit", "raise", "range", "repr", "return", "reversed", "round", "set", "setattr",
      "slice", "sorted", "staticmethod", "str", "sum", "super", "torch", "try", "tuple", "type",
      "vars", "while", "with", "yield", "zip"};
  return *names;
}

// Python's keywords (keyword.kwlist): a module or buffer named one would make torch.fx's
// code `self.class(x)`, which does not compile.
bool IsPythonKeyword(const std::string& name) {
  static const auto* keywords = new std::set<std::string>{
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
      "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
      "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
      "try", "while", "with", "yield"};
  return keywords->count(name) > 0;
}

// torch.fx's node names (torch.fx.graph._Namespace.create_name, torch 2.14): the names a
// torch.fx graph of these nodes, and so its model file, gives each node. A candidate that is a
// valid identifier keeps its numeric suffix; a taken or illegal one gets the next free
// `base_<n>` counted from the base's last number.
class FxNamespace {
 public:
  std::string Create(std::string candidate) {
    if (!IsIdentifier(candidate)) {
      std::string cleaned;
      bool in_run = false;
      for (char c : candidate) {
        if (IsWordChar(c)) {
          cleaned.push_back(c);
          in_run = false;
        } else if (!in_run) {
          cleaned.push_back('_');
          in_run = true;
        }
      }
      if (cleaned.empty()) cleaned = "_unnamed";
      if (cleaned[0] >= '0' && cleaned[0] <= '9') cleaned = "_" + cleaned;
      candidate = cleaned;
    }
    // _name_regex: ^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$ -- only the last '_' can start
    // the numeric suffix.
    std::string base = candidate;
    std::optional<int64_t> num;
    const size_t last = candidate.rfind('_');
    if (last != std::string::npos && last > 0 && last + 1 < candidate.size() &&
        candidate.find_first_not_of("0123456789", last + 1) == std::string::npos &&
        candidate.size() - last - 1 <= 15) {
      base = candidate.substr(0, last);
      num = std::stoll(candidate.substr(last + 1));
    }
    int64_t n;
    if (!num || used_.count(candidate) > 0) {
      auto it = base_count_.find(base);
      n = it == base_count_.end() ? 0 : it->second;
      if (FxIllegalNames().count(candidate) > 0) {
        ++n;
        candidate = absl::StrCat(base, "_", n);
      }
    } else {
      n = *num;
    }
    while (used_.count(candidate) > 0) {
      ++n;
      candidate = absl::StrCat(base, "_", n);
    }
    used_.insert(candidate);
    base_count_[base] = n;
    return candidate;
  }

 private:
  static bool IsWordChar(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool IsIdentifier(const std::string& s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
    for (char c : s)
      if (!IsWordChar(c)) return false;
    return true;
  }

  std::set<std::string> used_;
  std::map<std::string, int64_t> base_count_;
};

// ---- the reader --------------------------------------------------------------------------

class Reader {
 public:
  // `takeable`: the graph Read reads, writable (a model given away), whose initializers'
  // bytes the reader may move into the fuselage model; or null.
  explicit Reader(int64_t opset, onnx_subset::GraphProto* takeable = nullptr)
      : opset_(opset), takeable_(takeable) {
    model_.set_format_version(kModelFormatVersion);
    model_.set_producer("fuselage onnx reader (C++)");
    model_.mutable_root()->set_type("GraphModule");
  }

  absl::Status Read(const onnx_subset::GraphProto& graph);
  proto::Model TakeModel() { return std::move(model_); }

 private:
  std::string Fresh(const std::string& base) {
    const std::string name = Sanitize(base);
    std::string candidate = name;
    for (int i = 1; names_.count(candidate) > 0 || TorchModuleAttributes().count(candidate) > 0 ||
                    IsPythonKeyword(candidate);
         ++i)
      candidate = absl::StrCat(name, "_", i);
    names_.insert(candidate);
    return candidate;
  }

  std::string BaseName(const NodeProto& node) {
    return !node.name().empty() ? node.name() : node.output_size() > 0 ? node.output(0) : "";
  }

  proto::Node& NewNode(proto::OpKind op, const std::string& name, const std::string& target) {
    proto::Node* node = model_.mutable_graph()->add_nodes();
    node->set_name(name);
    node->set_op(op);
    node->set_target(target);
    return *node;
  }

  static void SetShapeMeta(proto::Node& node, const Shape& shape, bool is_float) {
    AddMeta(node, "shape", ShapeArg(shape));
    proto::Arg dtype;
    dtype.set_dtype_value(is_float ? proto::FLOAT32 : proto::INT64);
    AddMeta(node, "dtype", dtype);
  }

  static void SetOnnxMeta(proto::Node& node, const NodeProto& onnx) {
    AddMeta(node, "onnx", StringArg(onnx.op_type()));
    AddMeta(node, "onnx_node", StringArg(onnx.name()));
  }

  // A call_module node of `module` (added to the root) on `input`.
  Value Module(const NodeProto& onnx, proto::Module module, const std::string& input,
               const Shape& out_shape) {
    const std::string target = Fresh(BaseName(onnx));
    const std::string name = fx_.Create(target);
    proto::NamedModule* child = model_.mutable_root()->add_children();
    child->set_name(target);
    *child->mutable_module() = std::move(module);
    proto::Node& node = NewNode(proto::CALL_MODULE, name, target);
    *node.add_args() = NodeArg(input);
    SetOnnxMeta(node, onnx);
    SetShapeMeta(node, out_shape, true);
    Value v;
    v.node = name;
    v.shape = out_shape;
    return v;
  }

  // A call_function node of `target` on `args` (its ONNX node's meta only), by name.
  proto::Node& CallNode(const NodeProto& onnx, const std::string& target,
                        std::vector<proto::Arg> args) {
    const std::string name = fx_.Create(Fresh(BaseName(onnx)));
    proto::Node& node = NewNode(proto::CALL_FUNCTION, name, target);
    for (proto::Arg& a : args) *node.add_args() = std::move(a);
    SetOnnxMeta(node, onnx);
    return node;
  }

  // A call_function node giving a float tensor of `out_shape`.
  Value Call(const NodeProto& onnx, const std::string& target, std::vector<proto::Arg> args,
             const Shape& out_shape) {
    proto::Node& node = CallNode(onnx, target, std::move(args));
    SetShapeMeta(node, out_shape, true);
    Value v;
    v.node = node.name();
    v.shape = out_shape;
    return v;
  }

  // The node name of `value`: itself, or a constant as a root buffer read by get_attr.
  absl::StatusOr<std::string> Tensor(const Value& value, const std::string& onnx_name) {
    if (!value.is_constant()) return value.node;
    if (!value.unreadable.empty()) return absl::InvalidArgumentError(value.unreadable);
    if (value.is_bool)
      return absl::UnimplementedError(absl::StrCat(
          "'", onnx_name, "': a bool constant read as a tensor; fuselage reads bool values "
          "only in shape arithmetic"));
    const std::string target = Fresh(onnx_name);
    if (value.is_float)
      AddFloatValue(*model_.mutable_root(), target, value);
    else
      AddInt64Tensor(*model_.mutable_root(), target, value.shape, value.ints);
    const std::string name = fx_.Create(target);
    proto::Node& node = NewNode(proto::GET_ATTR, name, target);
    SetShapeMeta(node, value.shape, value.is_float);
    return name;
  }

  // A binary op's operand: a tensor node, a one-element float constant as a number where
  // it broadcasts alike (the other operand has at least its rank), else a buffer.
  absl::StatusOr<proto::Arg> Operand(const Value& value, const std::string& onnx_name,
                                     const Value& other) {
    if (value.is_constant() && value.unreadable.empty() && value.is_float && value.size() == 1 &&
        !other.is_constant() && value.shape.size() <= other.shape.size())
      return FloatArg(FirstFloat(value));
    ASSIGN_OR_RETURN(std::string name, Tensor(value, onnx_name));
    return NodeArg(name);
  }

  absl::StatusOr<const Value*> Input(const NodeProto& node, int i) {
    if (i >= node.input_size() || node.input(i).empty())
      return NodeError(node, absl::StrCat("input ", i, " is missing"));
    auto it = values_.find(node.input(i));
    if (it == values_.end())
      return NodeError(node, absl::StrCat("input '", node.input(i), "' is produced by no node"));
    return &it->second;
  }
  bool HasInput(const NodeProto& node, int i) {
    return i < node.input_size() && !node.input(i).empty();
  }
  absl::StatusOr<const Value*> TensorInput(const NodeProto& node, int i) {
    ASSIGN_OR_RETURN(const Value* v, Input(node, i));
    if (v->is_constant())
      return NodeError(node, absl::StrCat("input ", i, " ('", node.input(i),
                                          "') is a constant; fuselage reads this op "
                                          "on a computed tensor"));
    return v;
  }
  absl::StatusOr<const Value*> ConstantInput(const NodeProto& node, int i, absl::string_view what,
                                             bool want_float) {
    ASSIGN_OR_RETURN(const Value* v, Input(node, i));
    if (!v->is_constant())
      return NodeError(node, absl::StrCat("its ", what,
                                          " is computed at run time; fuselage reads it as a "
                                          "constant (an initializer or a Constant)"));
    if (!v->unreadable.empty()) return absl::InvalidArgumentError(v->unreadable);
    if (v->is_float != want_float)
      return NodeError(node, absl::StrCat("its ", what, " is ", v->is_float ? "float" : "integer",
                                          "; expected ", want_float ? "float" : "integer",
                                          " values"));
    return v;
  }

  absl::StatusOr<int64_t> Axis(const NodeProto& node, int64_t axis, int64_t rank,
                               absl::string_view what = "axis") {
    if (axis < -rank || axis >= rank)
      return NodeError(node, absl::StrCat(what, " ", axis, " for an input of rank ", rank,
                                          "; expected one in [", -rank, ", ", rank - 1, "]"));
    return axis < 0 ? axis + rank : axis;
  }

  absl::Status NoAutoPad(const NodeProto& node, const Attributes& attrs) {
    const std::string auto_pad = attrs.String("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID")
      return NodeError(node, absl::StrCat("auto_pad ", auto_pad,
                                          "; fuselage reads explicit pads (NOTSET) or VALID"));
    return absl::OkStatus();
  }

  absl::Status Emit(const NodeProto& node, std::vector<Value>& outputs);
  absl::Status EmitConv(const NodeProto& node, const Attributes& attrs, std::vector<Value>& out);
  absl::Status EmitBatchNorm(const NodeProto& node, const Attributes& attrs,
                             std::vector<Value>& out);
  absl::Status EmitClip(const NodeProto& node, std::vector<Value>& out);
  absl::Status EmitLayerNorm(const NodeProto& node, const Attributes& attrs,
                             std::vector<Value>& out);
  absl::Status EmitBinary(const NodeProto& node, const std::string& target,
                          std::vector<Value>& out);
  absl::Status EmitGemm(const NodeProto& node, const Attributes& attrs, std::vector<Value>& out);
  absl::Status EmitMatMul(const NodeProto& node, std::vector<Value>& out);
  absl::Status EmitPool(const NodeProto& node, const Attributes& attrs, bool max,
                        std::vector<Value>& out);
  absl::Status EmitReduceMean(const NodeProto& node, const Attributes& attrs,
                              std::vector<Value>& out);
  absl::Status EmitReshape(const NodeProto& node, const Attributes& attrs,
                           std::vector<Value>& out);
  absl::Status EmitConcat(const NodeProto& node, const Attributes& attrs,
                          std::vector<Value>& out);
  absl::Status EmitConstant(const NodeProto& node, const Attributes& attrs,
                            std::vector<Value>& out);
  absl::Status EmitShape(const NodeProto& node, const Attributes& attrs, std::vector<Value>& out);
  absl::Status EmitPad(const NodeProto& node, const Attributes& attrs, std::vector<Value>& out);
  absl::Status EmitSlice(const NodeProto& node, std::vector<Value>& out);
  absl::Status EmitSplit(const NodeProto& node, const Attributes& attrs, std::vector<Value>& out);
  absl::Status EmitResize(const NodeProto& node, const Attributes& attrs,
                          std::vector<Value>& out);
  absl::Status EmitSqueeze(const NodeProto& node, std::vector<Value>& out);
  // True (and `out` the outputs) if every present input of `node` is a constant and it was
  // folded (onnx/onnx_fold.h); false if an input is a computed tensor.
  absl::StatusOr<bool> FoldIfConstant(const NodeProto& node, std::vector<Value>& out);
  // An optional input's integer constant (`what` names it in errors), or nullopt if absent.
  absl::StatusOr<std::optional<std::vector<int64_t>>> OptionalInts(const NodeProto& node, int i,
                                                                   absl::string_view what);
  Value Linear(const NodeProto& node, const Value& x, const std::vector<float>& weight,
               int64_t out_features, int64_t in_features, const std::vector<float>* bias);

  int64_t opset_;
  onnx_subset::GraphProto* takeable_;
  proto::Model model_;
  std::set<std::string> names_;  // the names given so far to modules and buffers (Fresh)
  FxNamespace fx_;                // node names, as torch.fx gives them
  std::map<std::string, Value> values_;
  // The elements folds may still make (onnx_fold.h's kFoldBudget beyond the initializers'
  // and Constant nodes' own): the work a file makes the reader do stays in proportion to it.
  int64_t fold_budget_ = kFoldBudget;
};

// The ops read on tensors (and, where the op allows, folded on constants).
const std::vector<std::string>& TensorOps() {
  static const auto* ops = new std::vector<std::string>{
      "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Constant", "Conv", "Div",
      "Dropout", "Erf", "Flatten", "Gemm", "GlobalAveragePool", "HardSigmoid", "HardSwish",
      "Identity", "LayerNormalization", "MatMul", "MaxPool", "Mul", "Pad", "ReduceMean", "Relu",
      "Reshape", "Resize", "Shape", "Sigmoid", "Slice", "Softmax", "Split", "Squeeze", "Sub",
      "Tanh", "Transpose", "Unsqueeze"};
  return *ops;
}

// Every op the reader reads, sorted: the tensor ops and the fold-only ops.
const std::vector<std::string>& ReadOps() {
  static const auto* ops = [] {
    auto* all = new std::vector<std::string>(TensorOps());
    all->insert(all->end(), FoldOnlyOps().begin(), FoldOnlyOps().end());
    std::sort(all->begin(), all->end());
    return all;
  }();
  return *ops;
}

// torch's symmetric padding of ONNX `pads` [b1.., e1..], or nullopt if begin != end.
std::optional<std::vector<int64_t>> SymmetricPads(const std::vector<int64_t>& pads, size_t rank) {
  if (pads.empty()) return std::vector<int64_t>(rank, 0);
  if (pads.size() != 2 * rank) return std::nullopt;
  std::vector<int64_t> begin(pads.begin(), pads.begin() + rank), end(pads.begin() + rank, pads.end());
  if (begin != end) return std::nullopt;
  return begin;
}

int64_t PoolOut(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch drops a last window that would start in the end padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Kernel sizes, strides, pads and dilations: each in [lowest, kMaxElements], so the shape
// arithmetic on them cannot overflow.
absl::Status CheckWindow(const NodeProto& node, const std::vector<int64_t>& values,
                         absl::string_view what, int64_t lowest) {
  for (int64_t v : values)
    if (v < lowest || v > kMaxElements)
      return NodeError(node, absl::StrCat(what, " ", ShapeText(values), "; expected values in [",
                                          lowest, ", ", kMaxElements, "]"));
  return absl::OkStatus();
}

absl::Status Reader::EmitConv(const NodeProto& node, const Attributes& attrs,
                              std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  ASSIGN_OR_RETURN(const Value* w, ConstantInput(node, 1, "weight (input 1)", true));
  const Value* b = nullptr;
  if (HasInput(node, 2)) {
    ASSIGN_OR_RETURN(b, ConstantInput(node, 2, "bias (input 2)", true));
  }
  RETURN_IF_ERROR(NoAutoPad(node, attrs));
  const int64_t rank = static_cast<int64_t>(w->shape.size()) - 2;
  if (rank < 1 || rank > 3)
    return NodeError(node, absl::StrCat("a weight of rank ", w->shape.size(),
                                        "; fuselage reads 1-, 2- and 3-d convolutions"));
  if (static_cast<int64_t>(x->shape.size()) != rank + 2)
    return NodeError(node, absl::StrCat("an input of shape ", ShapeText(x->shape),
                                        " for a weight of shape ", ShapeText(w->shape)));
  const Shape kernel(w->shape.begin() + 2, w->shape.end());
  if (auto k = attrs.Ints("kernel_shape"); k && *k != kernel)
    return NodeError(node, absl::StrCat("kernel_shape ", ShapeText(*k), " differs from the weight's ",
                                        ShapeText(kernel)));
  const std::vector<int64_t> strides = attrs.Ints("strides").value_or(Shape(rank, 1));
  const std::vector<int64_t> dilations = attrs.Ints("dilations").value_or(Shape(rank, 1));
  if (static_cast<int64_t>(strides.size()) != rank || static_cast<int64_t>(dilations.size()) != rank)
    return NodeError(node, absl::StrCat("strides / dilations of another length than the ", rank,
                                        " spatial axes"));
  const std::vector<int64_t> pads = attrs.Ints("pads").value_or(Shape(2 * rank, 0));
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return NodeError(node, absl::StrCat(pads.size(), " pads; expected ", 2 * rank));
  RETURN_IF_ERROR(CheckWindow(node, strides, "strides", 1));
  RETURN_IF_ERROR(CheckWindow(node, dilations, "dilations", 1));
  RETURN_IF_ERROR(CheckWindow(node, pads, "pads", 0));
  const int64_t group = attrs.Int("group", 1);
  if (group < 1 || group > kMaxElements || w->shape[0] % group != 0 || x->shape[1] != w->shape[1] * group)
    return NodeError(node, absl::StrCat("group ", group, " with an input of ", x->shape[1],
                                        " channels and a weight of shape ", ShapeText(w->shape)));
  if (b != nullptr && (b->shape.size() != 1 || b->shape[0] != w->shape[0]))
    return NodeError(node, absl::StrCat("a bias of shape ", ShapeText(b->shape), "; expected [",
                                        w->shape[0], "]"));
  std::string input = x->node;
  Shape in_shape = x->shape;
  std::vector<int64_t> padding;
  if (auto sym = SymmetricPads(pads, rank)) {
    padding = *sym;
  } else {
    // F.pad(x, pads of the last axis first, "constant", 0.0), then an unpadded conv.
    std::vector<int64_t> torch_pads;
    for (int64_t i = rank - 1; i >= 0; --i) {
      torch_pads.push_back(pads[i]);
      torch_pads.push_back(pads[rank + i]);
    }
    for (int64_t i = 0; i < rank; ++i) in_shape[2 + i] += pads[i] + pads[rank + i];
    std::vector<proto::Arg> args = {NodeArg(input), IntsArg(torch_pads, true), StringArg("constant"),
                                    FloatArg(0.0)};
    Value padded = Call(node, "torch.nn.functional.pad", std::move(args), in_shape);
    input = padded.node;
    padding.assign(rank, 0);
  }
  Shape out_shape = {in_shape[0], w->shape[0]};
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t o = PoolOut(in_shape[2 + i], kernel[i], strides[i], padding[i], dilations[i], false);
    if (o < 1 || strides[i] < 1 || dilations[i] < 1)
      return NodeError(node, absl::StrCat("an output of spatial size ", o, " on axis ", 2 + i));
    out_shape.push_back(o);
  }
  proto::Module conv;
  conv.set_type(absl::StrCat("nn.Conv", rank, "d"));
  AddFloatValue(conv, "weight", *w);
  if (b != nullptr) AddFloatValue(conv, "bias", *b);
  AddAttribute(conv, "in_channels", IntArg(w->shape[1] * group));
  AddAttribute(conv, "out_channels", IntArg(w->shape[0]));
  AddAttribute(conv, "kernel_size", IntsArg(kernel, true));
  AddAttribute(conv, "stride", IntsArg(strides, true));
  AddAttribute(conv, "padding", IntsArg(padding, true));
  AddAttribute(conv, "dilation", IntsArg(dilations, true));
  AddAttribute(conv, "transposed", BoolArg(false));
  AddAttribute(conv, "output_padding", IntsArg(Shape(rank, 0), true));
  AddAttribute(conv, "groups", IntArg(group));
  AddAttribute(conv, "padding_mode", StringArg("zeros"));
  out.push_back(Module(node, std::move(conv), input, out_shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitBatchNorm(const NodeProto& node, const Attributes& attrs,
                                   std::vector<Value>& out) {
  if (attrs.Int("training_mode", 0) != 0)
    return NodeError(node, "training_mode=1; fuselage reads inference batch norms (training_mode=0)");
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty())
      return NodeError(node, "its running statistics are outputs; fuselage reads inference batch "
                             "norms with one output");
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  const char* whats[] = {"scale", "B", "input_mean", "input_var"};
  const Value* params[4];
  for (int i = 0; i < 4; ++i) {
    ASSIGN_OR_RETURN(params[i], ConstantInput(node, i + 1, whats[i], true));
  }
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  if (rank < 2 || rank > 5)
    return NodeError(node, absl::StrCat("an input of rank ", rank, "; fuselage reads rank 2 to 5"));
  const int64_t c = x->shape[1];
  for (int i = 0; i < 4; ++i)
    if (params[i]->shape != Shape{c})
      return NodeError(node, absl::StrCat("its ", whats[i], " has shape ", ShapeText(params[i]->shape),
                                          "; expected [", c, "]"));
  proto::Module bn;
  bn.set_type(absl::StrCat("nn.BatchNorm", rank <= 3 ? 1 : rank - 2, "d"));
  AddFloatValue(bn, "weight", *params[0]);
  AddFloatValue(bn, "bias", *params[1]);
  AddFloatValue(bn, "running_mean", *params[2]);
  AddFloatValue(bn, "running_var", *params[3]);
  AddInt64Tensor(bn, "num_batches_tracked", {}, {0});
  AddAttribute(bn, "num_features", IntArg(c));
  AddAttribute(bn, "eps", FloatArg(attrs.Float("epsilon", 1e-5)));
  AddAttribute(bn, "momentum", FloatArg(1.0 - (attrs.Has("momentum") ? attrs.Float("momentum", 0.9) : 0.9)));
  AddAttribute(bn, "affine", BoolArg(true));
  AddAttribute(bn, "track_running_stats", BoolArg(true));
  out.push_back(Module(node, std::move(bn), x->node, x->shape));
  return absl::OkStatus();
}

// LayerNormalization (opset 17): nn.LayerNorm over the dimensions from `axis` on, its
// Scale the weight and B (zeros where absent) the bias.
absl::Status Reader::EmitLayerNorm(const NodeProto& node, const Attributes& attrs,
                                   std::vector<Value>& out) {
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty())
      return NodeError(node, "its Mean or InvStdDev output is read; fuselage reads the "
                             "normalized output only");
  if (attrs.Int("stash_type", 1) != 1)
    return NodeError(node, absl::StrCat("stash_type=", attrs.Int("stash_type", 1),
                                        "; fuselage computes layer norms in float32 (1)"));
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  ASSIGN_OR_RETURN(const int64_t axis, Axis(node, attrs.Int("axis", -1), rank));
  const Shape normalized(x->shape.begin() + axis, x->shape.end());
  ASSIGN_OR_RETURN(const Value* scale, ConstantInput(node, 1, "Scale", true));
  const Value* bias = nullptr;
  if (HasInput(node, 2)) {
    ASSIGN_OR_RETURN(bias, ConstantInput(node, 2, "B", true));
  }
  for (const Value* param : {scale, bias}) {
    if (param != nullptr && param->shape != normalized)
      return NodeError(node, absl::StrCat("its ", param == scale ? "Scale" : "B", " has shape ",
                                          ShapeText(param->shape), "; expected ",
                                          ShapeText(normalized), " (the input's from axis ",
                                          axis, ")"));
  }
  proto::Module norm;
  norm.set_type("nn.LayerNorm");
  AddAttribute(norm, "normalized_shape", IntsArg(normalized, true));
  AddAttribute(norm, "eps", FloatArg(attrs.Float("epsilon", 1e-5)));
  AddAttribute(norm, "elementwise_affine", BoolArg(true));
  AddFloatValue(norm, "weight", *scale);
  if (bias != nullptr) {
    AddFloatValue(norm, "bias", *bias);
  } else {
    AddFloatTensor(norm, "bias", normalized,
                   std::vector<float>(static_cast<size_t>(ElementCount(normalized)), 0.0f));
  }
  out.push_back(Module(node, std::move(norm), x->node, x->shape));
  return absl::OkStatus();
}

proto::Module SimpleModule(const std::string& type) {
  proto::Module m;
  m.set_type(type);
  AddAttribute(m, "inplace", BoolArg(false));
  return m;
}

absl::Status Reader::EmitClip(const NodeProto& node, std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  std::optional<double> bounds[2];
  for (int i = 1; i <= 2; ++i) {
    if (!HasInput(node, i)) continue;
    ASSIGN_OR_RETURN(const Value* v, ConstantInput(node, i, i == 1 ? "min (input 1)" : "max (input 2)", true));
    if (v->size() != 1)
      return NodeError(node, absl::StrCat("its ", i == 1 ? "min" : "max", " has ", v->size(),
                                          " elements; expected one"));
    bounds[i - 1] = FirstFloat(*v);
  }
  const auto& [lo, hi] = bounds;
  if (!lo && !hi) {  // clips nothing
    out.push_back(*x);
    return absl::OkStatus();
  }
  if (lo && hi && *lo == 0.0 && *hi == 6.0) {
    proto::Module m;
    m.set_type("nn.ReLU6");
    AddAttribute(m, "min_val", FloatArg(0.0));
    AddAttribute(m, "max_val", FloatArg(6.0));
    AddAttribute(m, "inplace", BoolArg(false));
    out.push_back(Module(node, std::move(m), x->node, x->shape));
  } else if (lo && !hi && *lo == 0.0) {
    out.push_back(Module(node, SimpleModule("nn.ReLU"), x->node, x->shape));
  } else if (lo && hi && *lo < *hi) {  // nn.Hardtanh asserts min_val < max_val
    proto::Module m;
    m.set_type("nn.Hardtanh");
    AddAttribute(m, "min_val", FloatArg(*lo));
    AddAttribute(m, "max_val", FloatArg(*hi));
    AddAttribute(m, "inplace", BoolArg(false));
    out.push_back(Module(node, std::move(m), x->node, x->shape));
  } else {  // one bound, or min >= max: every element max, as ONNX and torch.clamp say
    std::vector<proto::Arg> args = {NodeArg(x->node), lo ? FloatArg(*lo) : NoneArg(),
                                    hi ? FloatArg(*hi) : NoneArg()};
    out.push_back(Call(node, "torch.clamp", std::move(args), x->shape));
  }
  return absl::OkStatus();
}

absl::Status Reader::EmitBinary(const NodeProto& node, const std::string& target,
                                std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* a, Input(node, 0));
  ASSIGN_OR_RETURN(const Value* b, Input(node, 1));
  ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
  if (folded) return absl::OkStatus();
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a->shape, b->shape, Where(node)));
  ASSIGN_OR_RETURN(proto::Arg lhs, Operand(*a, node.input(0), *b));
  ASSIGN_OR_RETURN(proto::Arg rhs, Operand(*b, node.input(1), *a));
  out.push_back(Call(node, target, {std::move(lhs), std::move(rhs)}, shape));
  return absl::OkStatus();
}

Value Reader::Linear(const NodeProto& node, const Value& x, const std::vector<float>& weight,
                     int64_t out_features, int64_t in_features, const std::vector<float>* bias) {
  proto::Module m;
  m.set_type("nn.Linear");
  AddFloatTensor(m, "weight", {out_features, in_features}, weight);
  if (bias != nullptr) AddFloatTensor(m, "bias", {out_features}, *bias);
  AddAttribute(m, "in_features", IntArg(in_features));
  AddAttribute(m, "out_features", IntArg(out_features));
  Shape shape = x.shape;
  shape.back() = out_features;
  return Module(node, std::move(m), x.node, shape);
}

std::vector<float> Transposed(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

absl::Status Reader::EmitGemm(const NodeProto& node, const Attributes& attrs,
                              std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* a, TensorInput(node, 0));
  ASSIGN_OR_RETURN(const Value* b, ConstantInput(node, 1, "B (input 1)", true));
  if (attrs.Int("transA", 0) != 0)
    return NodeError(node, "transA=1; fuselage reads Gemm as a linear layer, transA=0");
  if (b->shape.size() != 2 || a->shape.size() != 2)
    return NodeError(node, absl::StrCat("A of shape ", ShapeText(a->shape), " and B of shape ",
                                        ShapeText(b->shape), "; expected matrices"));
  const float alpha = static_cast<float>(attrs.Float("alpha", 1.0));
  const float beta = static_cast<float>(attrs.Float("beta", 1.0));
  const bool trans_b = attrs.Int("transB", 0) != 0;
  const int64_t out_features = trans_b ? b->shape[0] : b->shape[1];
  const int64_t in_features = trans_b ? b->shape[1] : b->shape[0];
  if (a->shape[1] != in_features)
    return NodeError(node, absl::StrCat("A of shape ", ShapeText(a->shape), " and B of shape ",
                                        ShapeText(b->shape), " (transB=", trans_b, ") do not multiply"));
  std::vector<float> weight = trans_b ? Floats(*b) : Transposed(Floats(*b), b->shape[0], b->shape[1]);
  if (alpha != 1.0f)
    for (float& v : weight) v *= alpha;
  std::optional<std::vector<float>> bias;
  if (HasInput(node, 2)) {
    ASSIGN_OR_RETURN(const Value* c, ConstantInput(node, 2, "C (input 2)", true));
    std::vector<float> scaled = Floats(*c);
    for (float& v : scaled) v *= beta;
    if ((c->size() == out_features && c->shape.size() <= 1) || c->shape == Shape{1, out_features}) {
      bias = scaled;
    } else if (c->size() == 1) {
      bias = std::vector<float>(out_features, scaled[0]);
    } else {
      return NodeError(node, absl::StrCat("C of shape ", ShapeText(c->shape), "; fuselage reads a bias of shape [",
                                          out_features, "] or a scalar"));
    }
  }
  out.push_back(Linear(node, *a, weight, out_features, in_features, bias ? &*bias : nullptr));
  return absl::OkStatus();
}

absl::Status Reader::EmitMatMul(const NodeProto& node, std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* a, Input(node, 0));
  ASSIGN_OR_RETURN(const Value* b, Input(node, 1));
  ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
  if (folded) return absl::OkStatus();
  if (a->shape.empty() || b->shape.empty())
    return NodeError(node, "a 0-d input; expected tensors of rank >= 1");
  if (!a->is_constant() && b->is_constant() && b->is_float && b->unreadable.empty() &&
      b->shape.size() == 2) {
    if (a->shape.back() != b->shape[0])
      return NodeError(node, absl::StrCat("shapes ", ShapeText(a->shape), " and ", ShapeText(b->shape),
                                          " do not multiply"));
    out.push_back(Linear(node, *a, Transposed(Floats(*b), b->shape[0], b->shape[1]), b->shape[1],
                         b->shape[0], nullptr));
    return absl::OkStatus();
  }
  // numpy matmul shapes: 1-d operands promoted, batch dimensions broadcast.
  Shape sa = a->shape, sb = b->shape;
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  if (sa.back() != sb[sb.size() - 2])
    return NodeError(node, absl::StrCat("shapes ", ShapeText(a->shape), " and ", ShapeText(b->shape),
                                        " do not multiply"));
  ASSIGN_OR_RETURN(Shape batch, BroadcastShapes(Shape(sa.begin(), sa.end() - 2),
                                                Shape(sb.begin(), sb.end() - 2), Where(node)));
  Shape shape = batch;
  if (!a1) shape.push_back(sa[sa.size() - 2]);
  if (!b1) shape.push_back(sb.back());
  ASSIGN_OR_RETURN(std::string lhs, Tensor(*a, node.input(0)));
  ASSIGN_OR_RETURN(std::string rhs, Tensor(*b, node.input(1)));
  out.push_back(Call(node, "torch.matmul", {NodeArg(lhs), NodeArg(rhs)}, shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitPool(const NodeProto& node, const Attributes& attrs, bool max,
                              std::vector<Value>& out) {
  if (max) {
    if (node.output_size() > 1 && !node.output(1).empty())
      return NodeError(node, "its Indices output is read; fuselage reads MaxPool with one output");
    if (attrs.Int("storage_order", 0) != 0) return NodeError(node, "storage_order=1; expected 0");
  }
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  RETURN_IF_ERROR(NoAutoPad(node, attrs));
  auto kernel = attrs.Ints("kernel_shape");
  if (!kernel) return NodeError(node, "no kernel_shape; expected one");
  const int64_t rank = static_cast<int64_t>(kernel->size());
  if (rank < 1 || rank > 3 || static_cast<int64_t>(x->shape.size()) != rank + 2)
    return NodeError(node, absl::StrCat("kernel_shape ", ShapeText(*kernel), " for an input of shape ",
                                        ShapeText(x->shape), "; expected 1 to 3 spatial axes"));
  const Shape strides = attrs.Ints("strides").value_or(Shape(rank, 1));
  const Shape dilations = attrs.Ints("dilations").value_or(Shape(rank, 1));
  const Shape pads = attrs.Ints("pads").value_or(Shape());
  auto padding = SymmetricPads(pads, rank);
  if (!padding)
    return NodeError(node, absl::StrCat("asymmetric pads ", ShapeText(pads),
                                        "; fuselage reads pools padded alike on both sides"));
  if (static_cast<int64_t>(strides.size()) != rank || static_cast<int64_t>(dilations.size()) != rank)
    return NodeError(node, "strides / dilations of another length than kernel_shape");
  RETURN_IF_ERROR(CheckWindow(node, *kernel, "kernel_shape", 1));
  RETURN_IF_ERROR(CheckWindow(node, strides, "strides", 1));
  RETURN_IF_ERROR(CheckWindow(node, dilations, "dilations", 1));
  RETURN_IF_ERROR(CheckWindow(node, pads, "pads", 0));
  if (!max && attrs.Has("dilations") && dilations != Shape(rank, 1))
    return NodeError(node, "dilations; fuselage reads AveragePool without dilation");
  const bool ceil_mode = attrs.Int("ceil_mode", 0) != 0;
  Shape shape = {x->shape[0], x->shape[1]};
  for (int64_t i = 0; i < rank; ++i) {
    if ((*kernel)[i] < 1 || strides[i] < 1 || dilations[i] < 1)
      return NodeError(node, "a kernel, stride or dilation below 1");
    const int64_t o = PoolOut(x->shape[2 + i], (*kernel)[i], strides[i], (*padding)[i], dilations[i],
                              ceil_mode);
    if (o < 1) return NodeError(node, absl::StrCat("an output of size ", o, " on axis ", 2 + i));
    shape.push_back(o);
  }
  proto::Module m;
  m.set_type(absl::StrCat(max ? "nn.MaxPool" : "nn.AvgPool", rank, "d"));
  AddAttribute(m, "kernel_size", IntsArg(*kernel, true));
  AddAttribute(m, "stride", IntsArg(strides, true));
  AddAttribute(m, "padding", IntsArg(*padding, true));
  if (max) {
    AddAttribute(m, "dilation", IntsArg(dilations, true));
    AddAttribute(m, "return_indices", BoolArg(false));
    AddAttribute(m, "ceil_mode", BoolArg(ceil_mode));
  } else {
    AddAttribute(m, "ceil_mode", BoolArg(ceil_mode));
    AddAttribute(m, "count_include_pad", BoolArg(attrs.Int("count_include_pad", 0) != 0));
    AddAttribute(m, "divisor_override", NoneArg());
  }
  out.push_back(Module(node, std::move(m), x->node, shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitReduceMean(const NodeProto& node, const Attributes& attrs,
                                    std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  std::vector<int64_t> axes;
  if (HasInput(node, 1)) {  // opset 18: axes as an input
    ASSIGN_OR_RETURN(const Value* a, ConstantInput(node, 1, "axes (input 1)", false));
    axes = a->ints;
  } else {
    axes = attrs.Ints("axes").value_or(std::vector<int64_t>());
  }
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  if (axes.empty()) {
    if (attrs.Int("noop_with_empty_axes", 0) != 0) {
      out.push_back(*x);
      return absl::OkStatus();
    }
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) {
    ASSIGN_OR_RETURN(a, Axis(node, a, rank, "axes entry"));
  }
  const bool keepdims = attrs.Int("keepdims", 1) != 0;
  Shape shape;
  for (int64_t i = 0; i < rank; ++i) {
    const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) shape.push_back(x->shape[i]);
    else if (keepdims) shape.push_back(1);
  }
  out.push_back(Call(node, "torch.mean", {NodeArg(x->node), IntsArg(axes, false), BoolArg(keepdims)},
                     shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitReshape(const NodeProto& node, const Attributes& attrs,
                                 std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, Input(node, 0));
  ASSIGN_OR_RETURN(const Value* s, ConstantInput(node, 1, "shape (input 1)", false));
  if (attrs.Int("allowzero", 0) != 0 && std::count(s->ints.begin(), s->ints.end(), 0) > 0)
    return NodeError(node, "allowzero=1 with a 0 in the shape; expected allowzero=0");
  Shape target;
  int unknown = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s->ints.size(); ++i) {
    int64_t d = s->ints[i];
    if (d == 0) {
      if (i >= x->shape.size())
        return NodeError(node, absl::StrCat("a 0 at position ", i, " of the shape for an input of rank ",
                                            x->shape.size()));
      d = x->shape[i];
    }
    if (d == -1) {
      if (unknown >= 0) return NodeError(node, "two -1 entries in the shape; expected at most one");
      unknown = static_cast<int>(i);
    } else if (d < 0 || d > kMaxElements) {
      return NodeError(node, absl::StrCat("a shape entry ", d, "; expected -1 or 0 to ", kMaxElements));
    } else {
      known *= d;
    }
    target.push_back(d);
  }
  Shape shape = target;
  const int64_t n = ElementCount(x->shape);
  if (unknown >= 0) {
    if (known == 0 || n % known != 0)
      return NodeError(node, absl::StrCat("cannot reshape ", ShapeText(x->shape), " to ",
                                          ShapeText(target)));
    shape[unknown] = n / known;
  } else if (known != n) {
    return NodeError(node, absl::StrCat("cannot reshape ", ShapeText(x->shape), " to ",
                                        ShapeText(target)));
  }
  if (x->is_constant()) {  // a constant's shape changes, its data does not
    Value v = *x;
    v.shape = shape;
    out.push_back(std::move(v));
    return absl::OkStatus();
  }
  out.push_back(Call(node, "torch.reshape", {NodeArg(x->node), IntsArg(target, true)}, shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitConcat(const NodeProto& node, const Attributes& attrs,
                                std::vector<Value>& out) {
  if (node.input_size() == 0) return NodeError(node, "no inputs; expected at least one");
  std::vector<const Value*> inputs;
  bool all_constant = true;
  for (int i = 0; i < node.input_size(); ++i) {
    ASSIGN_OR_RETURN(const Value* v, Input(node, i));
    inputs.push_back(v);
    all_constant = all_constant && v->is_constant();
  }
  if (!attrs.Has("axis")) return NodeError(node, "no axis; expected one");
  const int64_t rank = static_cast<int64_t>(inputs[0]->shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, attrs.Int("axis", 0), rank));
  Shape shape = inputs[0]->shape;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Shape& s = inputs[i]->shape;
    bool ok = static_cast<int64_t>(s.size()) == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || s[d] == shape[d];
    if (!ok)
      return NodeError(node, absl::StrCat("input ", i, " of shape ", ShapeText(s),
                                          " does not concatenate with ", ShapeText(inputs[0]->shape),
                                          " on axis ", axis));
    shape[axis] += s[axis];
  }
  if (all_constant) {
    ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
    if (folded) return absl::OkStatus();
  }
  proto::Arg list;
  list.mutable_list();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSIGN_OR_RETURN(std::string name, Tensor(*inputs[i], node.input(i)));
    *list.mutable_list()->add_items() = NodeArg(name);
  }
  out.push_back(Call(node, "torch.cat", {std::move(list), IntArg(axis)}, shape));
  return absl::OkStatus();
}

absl::Status Reader::EmitConstant(const NodeProto& node, const Attributes& attrs,
                                  std::vector<Value>& out) {
  if (const AttributeProto* a = attrs.Find("value")) {
    ASSIGN_OR_RETURN(Value v, ReadTensor(a->t(), Where(node)));
    if (!v.unreadable.empty()) return absl::InvalidArgumentError(v.unreadable);
    fold_budget_ += v.size();
    out.push_back(std::move(v));
    return absl::OkStatus();
  }
  Value v;
  if (const AttributeProto* a = attrs.Find("value_float")) {
    v.floats = {a->f()};
  } else if (const AttributeProto* a = attrs.Find("value_int")) {
    v.is_float = false;
    v.ints = {a->i()};
  } else if (const AttributeProto* a = attrs.Find("value_floats")) {
    v.floats.assign(a->floats().begin(), a->floats().end());
    v.shape = {static_cast<int64_t>(v.floats.size())};
  } else if (const AttributeProto* a = attrs.Find("value_ints")) {
    v.is_float = false;
    v.ints.assign(a->ints().begin(), a->ints().end());
    v.shape = {static_cast<int64_t>(v.ints.size())};
  } else {
    return NodeError(node, "a Constant of another attribute; fuselage reads value, value_float(s) "
                           "and value_int(s)");
  }
  out.push_back(std::move(v));
  return absl::OkStatus();
}

// ---- shape arithmetic and the ops of static shapes -----------------------------------------

absl::StatusOr<bool> Reader::FoldIfConstant(const NodeProto& node, std::vector<Value>& out) {
  std::vector<OnnxConstant> constants;
  constants.reserve(node.input_size());
  std::vector<const OnnxConstant*> inputs;
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    ASSIGN_OR_RETURN(const Value* v, Input(node, i));
    if (!v->is_constant()) return false;
    if (!v->unreadable.empty()) return absl::InvalidArgumentError(v->unreadable);
    constants.push_back(ToConstant(*v));
    inputs.push_back(nullptr);  // pointed at below, once `constants` no longer grows
  }
  for (int i = 0, next = 0; i < node.input_size(); ++i)
    if (!node.input(i).empty()) inputs[i] = &constants[next++];
  ASSIGN_OR_RETURN(std::vector<OnnxConstant> folded,
                   FoldOnnxNode(node, inputs, Where(node), fold_budget_));
  for (OnnxConstant& c : folded) {
    fold_budget_ -= c.size();
    out.push_back(FromConstant(std::move(c)));
  }
  return true;
}

absl::StatusOr<std::optional<std::vector<int64_t>>> Reader::OptionalInts(const NodeProto& node,
                                                                         int i,
                                                                         absl::string_view what) {
  if (!HasInput(node, i)) return std::nullopt;
  ASSIGN_OR_RETURN(const Value* v, ConstantInput(node, i, what, false));
  return v->ints;
}

// An error if a tensor of `shape` would be too large (or has a negative dimension): a
// hostile pad or resize is refused before anything is allocated.
absl::Status GuardSize(const NodeProto& node, const Shape& shape, absl::string_view what) {
  bool ok = static_cast<int>(shape.size()) <= kMaxRank;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > kMaxElements / d)) ok = false;
    if (ok) n *= d;
  }
  if (ok && n <= kMaxElements) return absl::OkStatus();
  const Shape shown(shape.begin(), shape.begin() + std::min<size_t>(shape.size(), 16));
  return NodeError(node, absl::StrCat(what, " of shape ", ShapeText(shown),
                                      "; fuselage makes tensors of rank <= ", kMaxRank, " and <= ",
                                      kMaxElements, " elements"));
}

// Shape(x)[start:end] as an int64 constant: shapes are static.
absl::Status Reader::EmitShape(const NodeProto& node, const Attributes& attrs,
                               std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, Input(node, 0));
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  const SliceRange range = SliceIndices(attrs.Int("start", 0), attrs.Int("end", rank), 1, rank);
  Value v;
  v.is_float = false;
  for (int64_t i = range.begin; i < range.end; ++i) v.ints.push_back(x->shape[i]);
  v.shape = {static_cast<int64_t>(v.ints.size())};
  out.push_back(std::move(v));
  return absl::OkStatus();
}

// Pad (mode constant) as torch.nn.functional.pad(x, pads of the last axis first,
// "constant", value).
absl::Status Reader::EmitPad(const NodeProto& node, const Attributes& attrs,
                             std::vector<Value>& out) {
  const std::string mode = attrs.String("mode", "constant");
  if (mode != "constant")
    return NodeError(node, absl::StrCat("mode '", mode, "'; fuselage reads constant padding"));
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  ASSIGN_OR_RETURN(const Value* p, ConstantInput(node, 1, "pads (input 1)", false));
  double value = 0.0;
  if (HasInput(node, 2)) {
    ASSIGN_OR_RETURN(const Value* c, ConstantInput(node, 2, "constant_value (input 2)", true));
    if (c->size() != 1)
      return NodeError(node, absl::StrCat("a constant_value of ", c->size(),
                                          " elements; expected one"));
    value = FirstFloat(*c);
  }
  if (HasInput(node, 3))
    return NodeError(node, "the axes input (opset 18); expected pads of every axis");
  const std::vector<int64_t>& pads = p->ints;
  const size_t rank = x->shape.size();
  if (pads.size() != 2 * rank)
    return NodeError(node, absl::StrCat(pads.size(), " pads for an input of rank ", rank,
                                        "; expected ", 2 * rank));
  Shape shape = x->shape;
  for (size_t i = 0; i < rank; ++i) {
    // Each pad within the tensor limit first, so the sum cannot overflow.
    if (pads[i] < -kMaxElements || pads[i] > kMaxElements || pads[rank + i] < -kMaxElements ||
        pads[rank + i] > kMaxElements)
      return GuardSize(node, {-1}, "a padded tensor");
    shape[i] += pads[i] + pads[rank + i];
  }
  RETURN_IF_ERROR(GuardSize(node, shape, "a padded tensor"));
  std::vector<int64_t> torch_pads;
  for (size_t i = rank; i-- > 0;) {
    torch_pads.push_back(pads[i]);
    torch_pads.push_back(pads[rank + i]);
  }
  out.push_back(Call(node, "torch.nn.functional.pad",
                     {NodeArg(x->node), IntsArg(torch_pads, true), StringArg("constant"),
                      FloatArg(value)},
                     shape));
  return absl::OkStatus();
}

// Slice of a tensor: torch.narrow(x, axis, begin, length) for each axis not taken whole
// (steps of 1); of a constant: folded.
absl::Status Reader::EmitSlice(const NodeProto& node, std::vector<Value>& out) {
  ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
  if (folded) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  ASSIGN_OR_RETURN(const Value* s, ConstantInput(node, 1, "starts (input 1)", false));
  ASSIGN_OR_RETURN(const Value* e, ConstantInput(node, 2, "ends (input 2)", false));
  const std::vector<int64_t>& starts = s->ints;
  const std::vector<int64_t>& ends = e->ints;
  ASSIGN_OR_RETURN(auto axes, OptionalInts(node, 3, "axes (input 3)"));
  ASSIGN_OR_RETURN(auto steps, OptionalInts(node, 4, "steps (input 4)"));
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i < starts.size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  if (!steps) steps = std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes->size() != starts.size() ||
      steps->size() != starts.size())
    return NodeError(node, "starts, ends, axes and steps of different lengths; expected one each "
                           "per sliced axis");
  const Shape in_shape = x->shape;
  const int64_t rank = static_cast<int64_t>(in_shape.size());
  Value current = *x;
  for (size_t i = 0; i < starts.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(node, (*axes)[i], rank, "axes entry"));
    const int64_t step = (*steps)[i];
    if (step != 1)
      return NodeError(node, absl::StrCat("step ", step, " on axis ", axis,
                                          "; fuselage reads slices of step 1"));
    const SliceRange range = SliceIndices(starts[i], ends[i], 1, in_shape[axis]);
    if (range.begin == 0 && range.end == in_shape[axis]) continue;
    const int64_t length = std::max<int64_t>(range.end - range.begin, 0);
    Shape shape = current.shape;
    shape[axis] = length;
    current = Call(node, "torch.narrow",
                   {NodeArg(current.node), IntArg(axis), IntArg(range.begin), IntArg(length)},
                   shape);
  }
  out.push_back(std::move(current));
  return absl::OkStatus();
}

// Split as torch.split(x, sizes, axis) and an operator.getitem per output.
absl::Status Reader::EmitSplit(const NodeProto& node, const Attributes& attrs,
                               std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, attrs.Int("axis", 0), rank));
  const int64_t dim = x->shape[axis];
  const int64_t n = node.output_size();
  if (n == 0) return NodeError(node, "no outputs; expected at least one");
  std::vector<int64_t> sizes;
  ASSIGN_OR_RETURN(auto given, OptionalInts(node, 1, "split (input 1)"));
  if (given) {
    sizes = *given;
  } else if (auto split = attrs.Ints("split")) {
    sizes = *split;
  } else {
    if (dim % n != 0)
      return NodeError(node, absl::StrCat(dim, " does not split into ", n, " equal parts"));
    sizes.assign(n, dim / n);
  }
  int64_t sum = 0;
  bool ok = static_cast<int64_t>(sizes.size()) == n;
  for (int64_t size : sizes) {
    ok = ok && size >= 0 && size <= kMaxElements;
    if (ok) sum += size;
  }
  if (!ok || sum != dim)
    return NodeError(node, absl::StrCat("split sizes ", ShapeText(sizes), " for ", n,
                                        " outputs of an axis of ", dim,
                                        "; expected one size per output, summing to the axis"));
  const std::string parts =
      CallNode(node, "torch.functional.split", {NodeArg(x->node), IntsArg(sizes, false), IntArg(axis)})
          .name();
  for (int64_t i = 0; i < n; ++i) {
    Shape shape = x->shape;
    shape[axis] = sizes[i];
    out.push_back(Call(node, "operator.getitem", {NodeArg(parts), IntArg(i)}, shape));
  }
  return absl::OkStatus();
}

// Resize of the spatial axes as torch.nn.functional.interpolate(x, size, None, mode[,
// align_corners]), or (x, None, scale_factor, ...) where the file's scales are not
// out / in: nearest (asymmetric, floor) and linear (half_pixel, pytorch_half_pixel,
// align_corners), PyTorch's two.
absl::Status Reader::EmitResize(const NodeProto& node, const Attributes& attrs,
                                std::vector<Value>& out) {
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  const std::string mode = attrs.String("mode", "nearest");
  const std::string transform = attrs.String("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = attrs.String("nearest_mode", "round_prefer_floor");
  const Shape& shape = x->shape;
  Shape size;
  // The file's scale factors where they are not out / in: ONNX Runtime maps output
  // coordinates by the given scale, which PyTorch's interpolate does only when given it
  // (with a size it uses in / out; 15 -> 7 at scale 0.5 moved every sample).
  std::vector<float> inexact_factors;
  if (HasInput(node, 3)) {
    ASSIGN_OR_RETURN(const Value* sizes, ConstantInput(node, 3, "sizes (input 3)", false));
    size = sizes->ints;
  } else if (HasInput(node, 2)) {
    ASSIGN_OR_RETURN(const Value* scales, ConstantInput(node, 2, "scales (input 2)", true));
    const std::vector<float> factors = Floats(*scales);
    bool exact = true;
    for (size_t i = 0; i < factors.size() && i < shape.size(); ++i) {
      const double scaled = static_cast<double>(shape[i]) * factors[i];
      const double d = std::floor(scaled);
      if (!(d >= 0 && d <= static_cast<double>(kMaxElements)))
        return GuardSize(node, {-1}, "a resized tensor");
      exact = exact && d == scaled;
      size.push_back(static_cast<int64_t>(d));
    }
    if (!exact && factors.size() > 2) inexact_factors.assign(factors.begin() + 2, factors.end());
  } else {
    return NodeError(node, "neither scales nor sizes; expected one");
  }
  if (attrs.String("keep_aspect_ratio_policy", "stretch") != "stretch" || attrs.Has("axes"))
    return NodeError(node, "axes or keep_aspect_ratio_policy; fuselage reads resizes of every "
                           "axis, stretched");
  RETURN_IF_ERROR(GuardSize(node, size, "a resized tensor"));
  if (size.size() != shape.size() || shape.size() < 2 || size[0] != shape[0] ||
      size[1] != shape[1])
    return NodeError(node, "resizes the batch or channel axis; fuselage reads resizes of the "
                           "spatial axes");
  const Shape spatial(size.begin() + 2, size.end());
  std::vector<proto::Arg> args = {NodeArg(x->node), IntsArg(spatial, true), NoneArg()};
  if (!inexact_factors.empty()) {
    proto::Arg factors;
    for (float f : inexact_factors) *factors.mutable_tuple()->add_items() = FloatArg(f);
    args = {NodeArg(x->node), NoneArg(), std::move(factors)};
  }
  if (mode == "nearest" && transform == "asymmetric" && nearest == "floor") {
    args.push_back(StringArg("nearest"));
  } else if (mode == "linear" && (transform == "half_pixel" || transform == "pytorch_half_pixel" ||
                                  transform == "align_corners") &&
             !spatial.empty() && spatial.size() <= 3) {
    const char* modes[] = {"linear", "bilinear", "trilinear"};
    args.push_back(StringArg(modes[spatial.size() - 1]));
    args.push_back(BoolArg(transform == "align_corners"));
  } else {
    return NodeError(node, absl::StrCat(
        "mode '", mode, "', coordinate_transformation_mode '", transform, "', nearest_mode '",
        nearest, "' on ", spatial.size(), " spatial axes; fuselage reads nearest (asymmetric, "
        "floor) and linear (half_pixel, pytorch_half_pixel, align_corners) on 1 to 3 spatial "
        "axes, as PyTorch's interpolate"));
  }
  out.push_back(Call(node, "torch.nn.functional.interpolate", std::move(args), size));
  return absl::OkStatus();
}

// Squeeze / Unsqueeze of a tensor: torch.reshape to the static shape it gives; of a
// constant: folded.
absl::Status Reader::EmitSqueeze(const NodeProto& node, std::vector<Value>& out) {
  ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
  if (folded) return absl::OkStatus();
  ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
  ASSIGN_OR_RETURN(auto axes, OptionalInts(node, 1, "axes (input 1)"));
  Shape shape;
  if (node.op_type() == "Squeeze") {
    ASSIGN_OR_RETURN(shape, SqueezeShape(x->shape, axes.value_or(std::vector<int64_t>()),
                                         Where(node)));
  } else {
    if (!axes) return NodeError(node, "no axes (input 1); expected them");
    ASSIGN_OR_RETURN(shape, UnsqueezeShape(x->shape, *axes, Where(node)));
  }
  RETURN_IF_ERROR(GuardSize(node, shape, "a reshaped tensor"));
  out.push_back(Call(node, "torch.reshape", {NodeArg(x->node), IntsArg(shape, true)}, shape));
  return absl::OkStatus();
}

absl::Status Reader::Emit(const NodeProto& node, std::vector<Value>& out) {
  const Attributes attrs(node);
  const std::string& op = node.op_type();
  if (op == "Conv") return EmitConv(node, attrs, out);
  if (op == "BatchNormalization") return EmitBatchNorm(node, attrs, out);
  if (op == "LayerNormalization") return EmitLayerNorm(node, attrs, out);
  if (op == "Relu" || op == "HardSwish") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    out.push_back(Module(node, SimpleModule(op == "Relu" ? "nn.ReLU" : "nn.Hardswish"), x->node,
                         x->shape));
    return absl::OkStatus();
  }
  if (op == "HardSigmoid") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    const double alpha = attrs.Float("alpha", 0.2), beta = attrs.Float("beta", 0.5);
    if (std::abs(alpha - 1.0 / 6) > 1e-6 || std::abs(beta - 0.5) > 1e-6)
      return NodeError(node, absl::StrCat("alpha=", alpha, ", beta=", beta,
                                          "; fuselage reads PyTorch's hardsigmoid, alpha=1/6 and "
                                          "beta=0.5"));
    out.push_back(Module(node, SimpleModule("nn.Hardsigmoid"), x->node, x->shape));
    return absl::OkStatus();
  }
  if (op == "Sigmoid" || op == "Tanh" || op == "Erf") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    const char* target = op == "Sigmoid" ? "torch.sigmoid"
                         : op == "Tanh"  ? "torch.tanh"
                                         : "torch.erf";
    out.push_back(Call(node, target, {NodeArg(x->node)}, x->shape));
    return absl::OkStatus();
  }
  if (op == "Clip") return EmitClip(node, out);
  if (op == "Add") return EmitBinary(node, "operator.add", out);
  if (op == "Sub") return EmitBinary(node, "operator.sub", out);
  if (op == "Mul") return EmitBinary(node, "operator.mul", out);
  if (op == "Div") return EmitBinary(node, "operator.truediv", out);
  if (op == "Gemm") return EmitGemm(node, attrs, out);
  if (op == "MatMul") return EmitMatMul(node, out);
  if (op == "MaxPool" || op == "AveragePool") return EmitPool(node, attrs, op == "MaxPool", out);
  if (op == "GlobalAveragePool") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    const int64_t rank = static_cast<int64_t>(x->shape.size()) - 2;
    if (rank < 1 || rank > 3)
      return NodeError(node, absl::StrCat("an input of rank ", rank + 2, "; expected 3 to 5"));
    proto::Module m;
    m.set_type(absl::StrCat("nn.AdaptiveAvgPool", rank, "d"));
    AddAttribute(m, "output_size", IntArg(1));
    Shape shape = {x->shape[0], x->shape[1]};
    shape.resize(x->shape.size(), 1);
    out.push_back(Module(node, std::move(m), x->node, shape));
    return absl::OkStatus();
  }
  if (op == "ReduceMean") return EmitReduceMean(node, attrs, out);
  if (op == "Flatten") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    const int64_t rank = static_cast<int64_t>(x->shape.size());
    // Flatten's axis is in [-rank, rank]: a negative one counts from rank (-1: all axes
    // but the last go to the first dimension), not from rank + 1.
    int64_t axis = attrs.Int("axis", 1);
    if (axis < -rank || axis > rank)
      return NodeError(node, absl::StrCat("axis ", axis, " for an input of rank ", rank,
                                          "; expected one in [", -rank, ", ", rank, "]"));
    if (axis < 0) axis += rank;
    Shape shape = {1, 1};
    for (int64_t i = 0; i < rank; ++i) shape[i < axis ? 0 : 1] *= x->shape[i];
    if (axis == 1) {
      out.push_back(Call(node, "torch.flatten", {NodeArg(x->node), IntArg(1)}, shape));
    } else {
      out.push_back(Call(node, "torch.reshape", {NodeArg(x->node), IntsArg(shape, true)}, shape));
    }
    return absl::OkStatus();
  }
  if (op == "Reshape") return EmitReshape(node, attrs, out);
  if (op == "Concat") return EmitConcat(node, attrs, out);
  if (op == "Transpose") {
    ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
    if (folded) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    const int64_t rank = static_cast<int64_t>(x->shape.size());
    std::vector<int64_t> perm;
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    perm = attrs.Ints("perm").value_or(perm);
    ASSIGN_OR_RETURN(const Shape shape, TransposedShape(x->shape, perm, Where(node)));
    out.push_back(Call(node, "torch.permute", {NodeArg(x->node), IntsArg(perm, true)}, shape));
    return absl::OkStatus();
  }
  if (op == "Softmax") {
    ASSIGN_OR_RETURN(const Value* x, TensorInput(node, 0));
    ASSIGN_OR_RETURN(int64_t axis, Axis(node, attrs.Int("axis", -1),
                                        static_cast<int64_t>(x->shape.size())));
    out.push_back(Call(node, "torch.softmax", {NodeArg(x->node), IntArg(axis)}, x->shape));
    return absl::OkStatus();
  }
  if (op == "Identity" || op == "Dropout") {
    if (op == "Dropout" && node.output_size() > 1 && !node.output(1).empty())
      return NodeError(node, "its mask output is read; fuselage reads inference dropout");
    ASSIGN_OR_RETURN(const Value* x, Input(node, 0));
    out.push_back(*x);
    return absl::OkStatus();
  }
  if (op == "Constant") return EmitConstant(node, attrs, out);
  if (op == "Shape") return EmitShape(node, attrs, out);
  if (op == "Pad") return EmitPad(node, attrs, out);
  if (op == "Slice") return EmitSlice(node, out);
  if (op == "Split") return EmitSplit(node, attrs, out);
  if (op == "Resize") return EmitResize(node, attrs, out);
  if (op == "Squeeze" || op == "Unsqueeze") return EmitSqueeze(node, out);
  if (IsFoldOnlyOp(op)) {
    ASSIGN_OR_RETURN(bool folded, FoldIfConstant(node, out));
    if (folded) return absl::OkStatus();
    return NodeError(node, absl::StrCat("fuselage reads ", op, " only on constants (shape "
                                        "arithmetic); an input here is a computed tensor"));
  }
  return NodeError(node, absl::StrCat("op '", op, "' is not one fuselage reads (it reads ",
                                      absl::StrJoin(ReadOps(), ", "), ")"));
}

absl::Status Reader::Read(const onnx_subset::GraphProto& graph) {
  // Every node of a domain and op the reader knows, before anything else looks at them.
  for (const NodeProto& node : graph.node()) {
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return NodeError(node, absl::StrCat("domain '", node.domain(),
                                          "'; fuselage reads the default ONNX domain's ops"));
    const auto& ops = ReadOps();
    if (std::find(ops.begin(), ops.end(), node.op_type()) == ops.end())
      return NodeError(node, absl::StrCat("op '", node.op_type(),
                                          "' is not one fuselage reads (it reads ",
                                          absl::StrJoin(ops, ", "), ")"));
  }
  // How many node inputs read each name (graph outputs count as readers too): an
  // initializer read once may give its bytes away (Value::raw_source).
  std::map<std::string, int> readers;
  if (takeable_ != nullptr) {
    for (const NodeProto& node : graph.node())
      for (const std::string& input : node.input()) ++readers[input];
    for (const auto& output : graph.output()) ++readers[output.name()];
  }
  std::set<std::string> initializer_names;
  for (int i = 0; i < graph.initializer_size(); ++i) {
    const TensorProto& t = graph.initializer(i);
    ASSIGN_OR_RETURN(Value v, ReadTensor(t, absl::StrCat("initializer '", t.name(), "'")));
    // Only a string large enough to keep its bytes on the heap (moved, they stay where
    // raw_floats views them).
    constexpr size_t kTakenMinBytes = 4096;
    if (takeable_ != nullptr && v.raw_floats.data() != nullptr &&
        v.raw_floats.size() >= kTakenMinBytes && readers[t.name()] == 1 &&
        takeable_->initializer_size() == graph.initializer_size() &&
        &takeable_->initializer(i) == &t) {
      v.raw_source = takeable_->mutable_initializer(i)->mutable_raw_data();
    }
    fold_budget_ += v.size();
    values_[t.name()] = std::move(v);
    initializer_names.insert(t.name());
  }
  for (const auto& info : graph.input()) {
    if (initializer_names.count(info.name()) > 0) continue;
    const std::string where = absl::StrCat("graph input '", info.name(), "'");
    const auto& type = info.type().tensor_type();
    if (!info.type().has_tensor_type() || type.elem_type() != TensorProto::FLOAT)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": element type ", type.elem_type(), "; fuselage reads float (FLOAT) inputs"));
    Shape shape;
    bool fixed = type.has_shape();
    std::vector<std::string> shown;
    for (const auto& d : type.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() > 0) {
        shape.push_back(d.dim_value());
        shown.push_back(absl::StrCat(d.dim_value()));
      } else {
        fixed = false;
        shown.push_back(d.has_dim_param() ? absl::StrCat("'", d.dim_param(), "'") : "?");
      }
    }
    if (!fixed)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": its shape is not static ([", absl::StrJoin(shown, ", "),
          "]); fuselage reads models of fixed input shapes (export with fixed sizes, no "
          "dynamic_axes)"));
    if (static_cast<int>(shape.size()) > kMaxRank || ElementCount(shape) > kMaxElements)
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeText(shape),
                                                     "; fuselage reads inputs of rank <= ", kMaxRank,
                                                     " and <= ", kMaxElements, " elements"));
    const std::string target = Fresh(info.name());
    const std::string name = fx_.Create(target);
    proto::Node& node = NewNode(proto::PLACEHOLDER, name, target);
    SetShapeMeta(node, shape, true);
    Value v;
    v.node = name;
    v.shape = shape;
    values_[info.name()] = std::move(v);
  }
  for (const NodeProto& node : graph.node()) {
    std::vector<Value> outputs;
    RETURN_IF_ERROR(Emit(node, outputs));
    for (size_t i = 0; i < outputs.size() && i < static_cast<size_t>(node.output_size()); ++i) {
      if (node.output(i).empty()) continue;
      for (int64_t d : outputs[i].shape)
        if (d < 0 || ElementCount(outputs[i].shape) > kMaxElements)
          return NodeError(node, absl::StrCat("an output of shape ", ShapeText(outputs[i].shape),
                                              "; fuselage makes tensors of <= ", kMaxElements,
                                              " elements"));
      values_[node.output(i)] = std::move(outputs[i]);
    }
  }
  if (graph.output_size() == 0)
    return absl::InvalidArgumentError("the ONNX graph has no outputs");
  std::vector<std::string> results;
  std::vector<const Value*> result_values;
  for (const auto& info : graph.output()) {
    auto it = values_.find(info.name());
    if (it == values_.end())
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", info.name(), "' is produced by no node"));
    ASSIGN_OR_RETURN(std::string name, Tensor(it->second, info.name()));
    results.push_back(name);
    result_values.push_back(&it->second);
  }
  proto::Node& output = NewNode(proto::OUTPUT, fx_.Create("output"), "output");
  if (results.size() == 1) {
    *output.add_args() = NodeArg(results[0]);
    SetShapeMeta(output, result_values[0]->shape, result_values[0]->is_float);
  } else {
    proto::Arg tuple;
    for (const std::string& r : results) *tuple.mutable_tuple()->add_items() = NodeArg(r);
    *output.add_args() = std::move(tuple);
  }
  return absl::OkStatus();
}

}  // namespace

bool IsOnnxPath(absl::string_view path) { return absl::EndsWith(path, ".onnx"); }

namespace {

absl::StatusOr<proto::Model> ConvertOnnx(const onnx_subset::ModelProto& onnx,
                                         onnx_subset::GraphProto* takeable) {
  std::optional<int64_t> opset;
  for (const auto& entry : onnx.opset_import())
    if (entry.domain().empty() || entry.domain() == "ai.onnx") opset = entry.version();
  if (!opset)
    return absl::InvalidArgumentError("the model imports no opset of the default ONNX domain");
  if (*opset < kOnnxMinOpset || *opset > kOnnxMaxOpset)
    return absl::UnimplementedError(absl::StrCat(
        "the model's opset is ", *opset, "; fuselage reads opsets ", kOnnxMinOpset, " to ",
        kOnnxMaxOpset, " of the default domain (re-export with opset_version=17)"));
  Reader reader(*opset, takeable);
  RETURN_IF_ERROR(reader.Read(onnx.graph()));
  return reader.TakeModel();
}

// The bytes per element of the ONNX data types the reader reads, 0 for another.
int64_t ItemSize(int data_type) {
  switch (data_type) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
      return 4;
    case TensorProto::INT64:
      return 8;
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

// Reads each initializer's external data (onnx's save_as_external_data: a file beside the
// model, named by the `location` key, from `offset` for `length` bytes) into its raw_data,
// checking that the file exists, stays inside the model's folder `base` and holds the bytes
// the tensor's shape needs.
absl::Status ReadExternalData(onnx_subset::GraphProto& graph, const std::string& base) {
  for (TensorProto& t : *graph.mutable_initializer()) {
    if (t.data_location() != TensorProto::EXTERNAL) continue;
    const std::string where = absl::StrCat("initializer '", t.name(), "'");
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& e : t.external_data()) {
      if (e.key() == "location") location = e.value();
      if (e.key() == "offset" && !absl::SimpleAtoi(e.value(), &offset))
        return absl::InvalidArgumentError(absl::StrCat(where, ": external data offset '", e.value(),
                                                       "' is not a number"));
      if (e.key() == "length" && !absl::SimpleAtoi(e.value(), &length))
        return absl::InvalidArgumentError(absl::StrCat(where, ": external data length '", e.value(),
                                                       "' is not a number"));
    }
    // Inside the folder: relative, and no component that climbs out of it.
    const std::vector<std::string> parts = absl::StrSplit(location, '/');
    if (location.empty() || location[0] == '/' ||
        std::find(parts.begin(), parts.end(), "..") != parts.end())
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": external data location '", location, "' is outside the model's folder"));
    const int64_t item = ItemSize(t.data_type());
    if (item == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": external data of data type ", t.data_type(),
          "; fuselage reads FLOAT, INT64, INT32 and BOOL tensors"));
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || (d > 0 && n > kMaxElements / d))
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": a shape of more than ", kMaxElements, " elements (or a negative dimension)"));
      n *= d;
    }
    const int64_t expected = n * item;
    const std::string path = absl::StrCat(base, "/", location);
    std::ifstream in(path, std::ios::binary);
    if (!in.good())
      return absl::InvalidArgumentError(absl::StrCat(where, ": its external data file '", location,
                                                     "' is missing (expected at ", path, ")"));
    if (offset < 0 || (length >= 0 && length != expected))
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": external data offset ", offset, " and length ", length, "; its shape ",
          "needs ", expected, " bytes"));
    // The file holds the bytes before they are allocated: a hostile shape is an error,
    // never an allocation.
    in.seekg(0, std::ios::end);
    const int64_t file_size = static_cast<int64_t>(in.tellg());
    if (offset > file_size || file_size - offset < expected)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": its external data file '", location, "' holds ", file_size,
          " bytes; its shape needs ", expected, " from offset ", offset));
    std::string data(static_cast<size_t>(expected), '\0');
    in.seekg(offset);
    in.read(data.data(), expected);
    if (!in.good() || in.gcount() != expected)
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": its external data file '", location, "' holds fewer than the ", expected,
          " bytes its shape needs from offset ", offset));
    t.set_raw_data(std::move(data));
    t.clear_external_data();
    t.clear_data_location();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Model> OnnxToModelProto(const onnx_subset::ModelProto& onnx) {
  return ConvertOnnx(onnx, nullptr);
}

absl::StatusOr<proto::Model> OnnxToModelProto(onnx_subset::ModelProto&& onnx) {
  return ConvertOnnx(onnx, onnx.mutable_graph());
}

absl::StatusOr<std::unique_ptr<GraphModule>> ParseOnnxModel(absl::string_view bytes,
                                                            absl::string_view shown,
                                                            const std::string& folder) {
  onnx_subset::ModelProto onnx;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(64);
  if (!onnx.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return absl::InvalidArgumentError(
        absl::StrCat("'", shown, "' is not an ONNX model (malformed or truncated protobuf)"));
  if (onnx.graph().node_size() == 0 && onnx.graph().output_size() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "'", shown, "' is not an ONNX model: it has no graph (an empty or truncated file?)"));
  absl::StatusOr<proto::Model> model = [&]() -> absl::StatusOr<proto::Model> {
    if (!folder.empty()) RETURN_IF_ERROR(ReadExternalData(*onnx.mutable_graph(), folder));
    return OnnxToModelProto(std::move(onnx));
  }();
  if (!model.ok())
    return absl::Status(model.status().code(),
                        absl::StrCat("'", shown, "': ", model.status().message()));
  // The tensors take their bytes out of the model made here: no second copy of them.
  return ModelFromProto(std::move(*model));
}

absl::StatusOr<std::unique_ptr<GraphModule>> LoadOnnxModel(const std::string& path) {
  // Into a buffer that is not zero-filled first (ReadFileBounded's std::string is): the
  // read is the first write to its pages.
  std::unique_ptr<char[]> buffer;
  ASSIGN_OR_RETURN(const size_t length,
                   ReadFileBoundedInto(path, kMaxFileBytes, [&buffer](size_t capacity,
                                                                      size_t length) {
                     std::unique_ptr<char[]> larger(new char[capacity]);
                     if (length > 0) std::memcpy(larger.get(), buffer.get(), length);
                     buffer = std::move(larger);
                     return buffer.get();
                   }));
  // The folder external data is read from: the file's own.
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return ParseOnnxModel(absl::string_view(buffer.get(), length), path, folder);
}

}  // namespace fuselage
