#include "graph/serialization.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/wire_format_lite.h"
#include "google/protobuf/text_format.h"
#include "graph/check.h"
#include "graph/file_io.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// ---- GraphModule -> proto -----------------------------------------------------------

void ArgToProto(const Argument& arg, proto::Arg* out) {
  switch (arg.kind()) {
    case Argument::Kind::kNone: out->set_none(true); break;
    case Argument::Kind::kBool: out->set_bool_value(arg.as_bool()); break;
    case Argument::Kind::kInt: out->set_int_value(arg.as_int()); break;
    case Argument::Kind::kFloat: out->set_float_value(arg.as_float()); break;
    case Argument::Kind::kString: out->set_string_value(std::string(arg.as_string())); break;
    case Argument::Kind::kDType:
      out->set_dtype_value(static_cast<proto::DType>(arg.as_dtype()));
      break;
    case Argument::Kind::kNode: out->set_node(arg.as_node()->name()); break;
    case Argument::Kind::kEllipsis: out->set_ellipsis(true); break;
    case Argument::Kind::kTorchObject:
      out->set_torch_object(std::string(arg.as_torch_object()));
      break;
    case Argument::Kind::kSlice:
    case Argument::Kind::kList: {
      proto::ArgList* list = arg.is_slice()   ? out->mutable_slice()
                             : arg.is_tuple() ? out->mutable_tuple()
                                              : out->mutable_list();
      for (const Argument& item : arg.items()) ArgToProto(item, list->add_items());
      break;
    }
  }
}

void NamedArgsToProto(const Kwargs& args,
                      google::protobuf::RepeatedPtrField<proto::NamedArg>* out) {
  for (const Kwarg& kw : args) {
    proto::NamedArg* named = out->Add();
    named->set_name(std::string(kw.first.name()));
    ArgToProto(kw.second, named->mutable_value());
  }
}

void TensorToProto(const Tensor& t, proto::Tensor* out) {
  out->set_dtype(static_cast<proto::DType>(t.dtype()));
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(t.bytes().data(), t.bytes().size());
  const QuantParams& q = t.qparams();
  out->set_qscheme(static_cast<proto::QScheme>(q.scheme));
  for (double s : q.scales) out->add_scales(s);
  for (int64_t z : q.zero_points) out->add_zero_points(z);
  if (q.scheme == QScheme::kPerChannelAffine) out->set_axis(q.axis);
}

void ModuleToProto(const Module& m, proto::Module* out) {
  out->set_type(std::string(m.type().name()));
  for (const auto& [name, tensor] : m.tensors()) {
    proto::NamedTensor* nt = out->add_tensors();
    nt->set_name(name);
    TensorToProto(tensor, nt->mutable_tensor());
  }
  for (const auto& [name, value] : m.attributes()) {
    proto::NamedArg* na = out->add_attributes();
    na->set_name(name);
    ArgToProto(value, na->mutable_value());
  }
  for (const auto& [name, child] : m.children()) {
    proto::NamedModule* nm = out->add_children();
    nm->set_name(name);
    ModuleToProto(*child, nm->mutable_module());
  }
}

// ---- proto -> GraphModule -----------------------------------------------------------

int64_t EffectiveMaxBytes(const ModelLimits& limits) {
  return std::min<int64_t>(limits.max_file_bytes, std::numeric_limits<int>::max());
}

bool IsIdentifier(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// ParseModel hands protobuf a skeleton of the model file (SplitTensorData, below) in
// which every Tensor.data field of at least kDataTokenBytes bytes is replaced by a token
// of exactly kDataTokenBytes: where the field's bytes lie in the file (offset, then
// length, each a little-endian uint32; the file is below 2 GiB). A shorter data field
// stays as it is. So in a model parsed from a skeleton a data field of kDataTokenBytes is
// a token, a shorter one is the tensor's bytes, and none is longer: no bytes of a file
// can pass for a token, as a file's own data field of this size is itself replaced.
constexpr size_t kDataTokenBytes = 8;

uint32_t ReadUint32(const char* at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{static_cast<uint8_t>(at[i])} << (8 * i);
  return value;
}

class ModelReader {
 public:
  explicit ModelReader(const ModelLimits& limits) : limits_(limits) {}

  // Makes Read take every tensor from `tensors`, in the order the model lists them (each
  // module's tensors, then its children, depth first), instead of from data fields, which
  // must then be empty: the in-process handoff (ParseModelWithTensors).
  void HandTensors(std::vector<Tensor>* tensors) { handed_ = tensors; }

  // `donor`, if given, is `model` itself, writable: the tensors take their bytes out of
  // it instead of copying them (the parsers' own model, which nobody reads afterwards).
  //
  // `skeleton_of`, if given, is the file whose skeleton `model` was parsed from
  // (SplitTensorData): a data field that is a token names bytes of that file, which the
  // tensor copies into a buffer of its own.
  absl::StatusOr<std::unique_ptr<GraphModule>> Read(
      const proto::Model& model, proto::Model* donor = nullptr,
      const absl::string_view* skeleton_of = nullptr) {
    skeleton_of_ = skeleton_of;
    if (model.format_version() != kModelFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: format_version is ", model.format_version(), "; expected ",
          kModelFormatVersion));
    }
    const auto& nodes = model.graph().nodes();
    if (nodes.size() > limits_.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("model: ", nodes.size(),
                                                     " nodes; the limit is ", limits_.max_nodes));
    }
    // Validate every node before building: names, op kinds, targets, arg shapes.
    absl::flat_hash_map<absl::string_view, int> index;
    index.reserve(nodes.size());
    for (int i = 0; i < nodes.size(); ++i) {
      const proto::Node& n = nodes[i];
      const std::string where = absl::StrCat("node #", i, " '", n.name(), "'");
      RETURN_IF_ERROR(CheckString(n.name(), where, "name"));
      if (n.name().empty()) {
        return absl::InvalidArgumentError(absl::StrCat("node #", i, ": field 'name' is empty"));
      }
      if (!IsIdentifier(n.name())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node #", i, ": field 'name' is '", n.name().substr(0, 64),
            "'; expected an identifier ([A-Za-z_][A-Za-z0-9_]*)"));
      }
      if (!index.emplace(n.name(), i).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": field 'name' duplicates node #", index[n.name()]));
      }
      if (n.op() < proto::PLACEHOLDER || n.op() > proto::OUTPUT) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'op' is ", static_cast<int>(n.op()),
            "; expected one of placeholder, get_attr, call_function, call_module, "
            "call_method, output"));
      }
      RETURN_IF_ERROR(CheckString(n.target(), where, "target"));
      if (n.target().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": field 'target' is empty"));
      }
    }
    for (int i = 0; i < nodes.size(); ++i) {
      const proto::Node& n = nodes[i];
      const std::string where = absl::StrCat("node '", n.name(), "'");
      for (int a = 0; a < n.args_size(); ++a) {
        RETURN_IF_ERROR(CheckArg(n.args(a), index, absl::StrCat(where, " args[", a, "]"), 0));
      }
      for (const proto::NamedArg& kw : n.kwargs()) {
        RETURN_IF_ERROR(CheckNamedArg(kw, index, absl::StrCat(where, " kwargs"), true));
      }
      for (const proto::NamedArg& kw : n.meta()) {
        RETURN_IF_ERROR(CheckNamedArg(kw, {}, absl::StrCat(where, " meta"), false));
      }
    }
    RETURN_IF_ERROR(CheckModule(model.root(), "root module", 0));
    // Every text the builders intern, interned first through the bounded interner: a file
    // that would fill the process's symbol table fails here (ResourceExhausted naming the
    // limit), and the builders below then only find symbols that exist.
    RETURN_IF_ERROR(InternInputText(model));

    // Build. The file order is kept as is; Verify() judges it.
    auto gm = std::make_unique<GraphModule>();
    GraphBuilder builder(&gm->graph());
    std::vector<Node*> built;
    built.reserve(nodes.size());
    for (const proto::Node& n : nodes) {
      ASSIGN_OR_RETURN(Node * node, builder.AddNode(static_cast<OpKind>(n.op()),
                                                    Symbol::Intern(n.target()), n.name()));
      built.push_back(node);
    }
    for (int i = 0; i < nodes.size(); ++i) {
      const proto::Node& n = nodes[i];
      std::vector<Argument> args;
      args.reserve(n.args_size());
      for (const proto::Arg& a : n.args()) args.push_back(BuildArg(a, index, built));
      builder.SetInputs(built[i], std::move(args), BuildNamedArgs(n.kwargs(), index, built));
      builder.SetMeta(built[i], BuildNamedArgs(n.meta(), index, built));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Module> root,
                     BuildModule(model.root(), donor != nullptr ? donor->mutable_root() : nullptr));
    if (root->type() != Symbol::Intern("GraphModule")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "root module: field 'type' is '", root->type().name(), "'; expected 'GraphModule'"));
    }
    gm->root() = std::move(*root);
    if (handed_ != nullptr && next_handed_ != handed_->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: ", handed_->size(), " tensors were handed over; the structure lists ",
          next_handed_));
    }
    RETURN_IF_ERROR(gm->Verify());
    return gm;
  }

 private:
  absl::Status CheckString(const std::string& s, absl::string_view where,
                           absl::string_view field) const {
    if (static_cast<int64_t>(s.size()) > limits_.max_string_length) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field '", field, "' is ",
                                                     s.size(), " bytes; the limit is ",
                                                     limits_.max_string_length));
    }
    // The text parser does not check UTF-8 but the binary one does: without this, a text
    // model could load and then save a binary file that does not load.
    if (!google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size()))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": field '", field, "' is not valid UTF-8"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckNamedArg(const proto::NamedArg& kw,
                             const absl::flat_hash_map<absl::string_view, int>& index,
                             absl::string_view where, bool nodes_allowed) const {
    RETURN_IF_ERROR(CheckString(kw.name(), where, "name"));
    if (kw.name().empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty name"));
    const std::string field = absl::StrCat(where, "['", kw.name(), "']");
    if (!nodes_allowed) return CheckConstantArg(kw.value(), field, 0);
    return CheckArg(kw.value(), index, field, 0);
  }

  absl::Status CheckArg(const proto::Arg& a,
                        const absl::flat_hash_map<absl::string_view, int>& index,
                        const std::string& where, int depth) const {
    if (a.value_case() == proto::Arg::kNode) {
      if (!index.contains(a.node())) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": refers to node '", a.node().substr(0, 64), "', which does not exist"));
      }
      return absl::OkStatus();
    }
    const bool nests = a.value_case() == proto::Arg::kList ||
                       a.value_case() == proto::Arg::kTuple ||
                       a.value_case() == proto::Arg::kSlice;  // a slice nests as a list
    if (nests && depth >= limits_.max_arg_depth) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": args nest deeper than ", limits_.max_arg_depth));
    }
    if (a.value_case() == proto::Arg::kSlice) return CheckSlice(a.slice(), index, where);
    if (nests) {
      const proto::ArgList& list = a.has_list() ? a.list() : a.tuple();
      for (int i = 0; i < list.items_size(); ++i) {
        RETURN_IF_ERROR(CheckArg(list.items(i), index, absl::StrCat(where, "[", i, "]"), depth + 1));
      }
      return absl::OkStatus();
    }
    return CheckScalarArg(a, where);
  }

  // A slice's three parts (start, stop, step) are each None, an int or an earlier node.
  absl::Status CheckSlice(const proto::ArgList& slice,
                          const absl::flat_hash_map<absl::string_view, int>& index,
                          const std::string& where) const {
    if (slice.items_size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": field 'slice' has ", slice.items_size(),
          " items; expected 3 (start, stop, step)"));
    }
    static constexpr const char* kParts[] = {"start", "stop", "step"};
    for (int i = 0; i < 3; ++i) {
      const proto::Arg& part = slice.items(i);
      const std::string part_where = absl::StrCat(where, " slice ", kParts[i]);
      switch (part.value_case()) {
        case proto::Arg::kNone:
        case proto::Arg::kIntValue:
          break;
        case proto::Arg::kNode:
          RETURN_IF_ERROR(CheckArg(part, index, part_where, 0));
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat(part_where, ": expected None, an int or a node"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckConstantArg(const proto::Arg& a, const std::string& where, int depth) const {
    if (a.value_case() == proto::Arg::kNode) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": must not refer to a node"));
    }
    static const absl::flat_hash_map<absl::string_view, int> kNoNodes;
    return CheckArg(a, kNoNodes, where, depth);
  }

  absl::Status CheckScalarArg(const proto::Arg& a, const std::string& where) const {
    switch (a.value_case()) {
      case proto::Arg::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat(where, ": arg has no value"));
      case proto::Arg::kDtypeValue:
        if (!IsValidDType(a.dtype_value())) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": field 'dtype_value' is ", static_cast<int>(a.dtype_value()),
              "; expected a known dtype"));
        }
        return absl::OkStatus();
      case proto::Arg::kStringValue:
        return CheckString(a.string_value(), where, "string_value");
      case proto::Arg::kTorchObject:
        RETURN_IF_ERROR(CheckString(a.torch_object(), where, "torch_object"));
        if (!IsTorchObjectText(a.torch_object())) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": field 'torch_object' is '", a.torch_object(),
              "'; expected device:<device>, layout:<name> or memory_format:<name>"));
        }
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  // The bytes of `t`: its data field, or the bytes of the file its token names (see
  // kDataTokenBytes). A token is only ever written by SplitTensorData, so one that does
  // not name bytes of the file cannot come from any file; it is still refused as a
  // malformed file rather than trusted.
  absl::StatusOr<absl::string_view> TensorData(const proto::Tensor& t,
                                               absl::string_view where) const {
    const std::string& data = t.data();
    if (skeleton_of_ == nullptr || data.size() < kDataTokenBytes) return absl::string_view(data);
    if (data.size() == kDataTokenBytes) {
      const uint64_t offset = ReadUint32(data.data());
      const uint64_t length = ReadUint32(data.data() + 4);
      if (length >= kDataTokenBytes && offset + length <= skeleton_of_->size()) {
        return skeleton_of_->substr(offset, length);
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": field 'data' is not where the model file's lengths put it (a corrupt file)"));
  }

  absl::Status CheckTensor(const proto::Tensor& t, const std::string& where) const {
    if (!IsValidDType(t.dtype()) || DTypeSize(static_cast<DType>(t.dtype())) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": field 'dtype' is ", static_cast<int>(t.dtype()),
          "; expected a storable dtype (float32, int8, uint8, int32, int64, qint8, quint8, "
          "qint32, bool)"));
    }
    const DType dtype = static_cast<DType>(t.dtype());
    if (t.shape_size() > limits_.max_tensor_rank) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field 'shape' has rank ",
                                                     t.shape_size(), "; the limit is ",
                                                     limits_.max_tensor_rank));
    }
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    auto numel = CheckedNumel(shape);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field 'shape': ", numel.status().message()));
    }
    // The element count is compared against the bytes actually present before any
    // allocation, so a huge declared shape cannot make the loader allocate.
    const uint64_t expected = static_cast<uint64_t>(*numel) * DTypeSize(dtype);
    ASSIGN_OR_RETURN(const absl::string_view data, TensorData(t, where));
    if (handed_ != nullptr) {
      if (!data.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'data' has ", data.size(), " bytes; a structure whose tensors are "
            "handed over separately carries none"));
      }
    } else if (data.size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": field 'data' has ", data.size(), " bytes; expected ", expected,
          " for ", DTypeName(dtype), " shape [", absl::StrJoin(shape, ", "), "]"));
    }
    const bool quantized = IsQuantized(dtype);
    switch (t.qscheme()) {
      case proto::QSCHEME_NONE:
        if (quantized) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": field 'qscheme' is none; a ", DTypeName(dtype), " tensor needs one"));
        }
        return absl::OkStatus();
      case proto::PER_TENSOR_AFFINE:
        if (t.scales_size() != 1 || t.zero_points_size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": per-tensor quantization needs exactly 1 scale and 1 zero_point; got ",
              t.scales_size(), " and ", t.zero_points_size()));
        }
        break;
      case proto::PER_CHANNEL_AFFINE: {
        if (t.axis() < 0 || t.axis() >= t.shape_size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": field 'axis' is ", t.axis(), "; expected 0 <= axis < ", t.shape_size()));
        }
        const int64_t channels = t.shape(static_cast<int>(t.axis()));
        if (t.scales_size() != channels || t.zero_points_size() != channels) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": per-channel quantization needs ", channels,
              " scales and zero_points (shape[axis]); got ", t.scales_size(), " and ",
              t.zero_points_size()));
        }
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'qscheme' is ", static_cast<int>(t.qscheme()), "; expected 0, 1 or 2"));
    }
    if (!quantized) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": has quantization parameters but dtype ", DTypeName(dtype), " is not quantized"));
    }
    for (int i = 0; i < t.scales_size(); ++i) {
      const double s = t.scales(i);
      if (!(s > 0) || !(s <= QuantParams::kMaxScale)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": field 'scales[", i, "]' is ", s, "; expected a scale in (0, ",
                         QuantParams::kMaxScale, "]"));
      }
    }
    for (int i = 0; i < t.zero_points_size(); ++i) {
      const int64_t z = t.zero_points(i);
      if (z < DTypeMin(dtype) || z > DTypeMax(dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'zero_points[", i, "]' is ", z, "; expected within [",
            DTypeMin(dtype), ", ", DTypeMax(dtype), "] for ", DTypeName(dtype)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckModule(const proto::Module& m, const std::string& where, int depth) const {
    if (depth > limits_.max_module_depth) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": modules nest deeper than ",
                                                     limits_.max_module_depth));
    }
    RETURN_IF_ERROR(CheckString(m.type(), where, "type"));
    if (m.type().empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": field 'type' is empty"));
    absl::flat_hash_map<absl::string_view, int> seen;
    auto unique = [&](const std::string& name, absl::string_view kind) -> absl::Status {
      RETURN_IF_ERROR(CheckString(name, where, kind));
      if (name.empty() || name.find('.') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", kind, " name '", name,
                                                       "' must be non-empty without '.'"));
      }
      if (!seen.emplace(name, 0).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": duplicate member name '", name, "'"));
      }
      return absl::OkStatus();
    };
    for (const proto::NamedTensor& t : m.tensors()) {
      RETURN_IF_ERROR(unique(t.name(), "tensor"));
      RETURN_IF_ERROR(CheckTensor(t.tensor(), absl::StrCat(where, " tensor '", t.name(), "'")));
    }
    for (const proto::NamedArg& a : m.attributes()) {
      RETURN_IF_ERROR(unique(a.name(), "attribute"));
      RETURN_IF_ERROR(CheckConstantArg(a.value(), absl::StrCat(where, " attribute '", a.name(), "'"), 0));
    }
    for (const proto::NamedModule& c : m.children()) {
      RETURN_IF_ERROR(unique(c.name(), "child"));
      RETURN_IF_ERROR(CheckModule(c.module(), absl::StrCat("module '", c.name(), "' (in ", where, ")"),
                                  depth + 1));
    }
    return absl::OkStatus();
  }

  // Symbol::TryIntern of every string the builders intern: node targets, string args,
  // kwarg and meta names, module types and string attributes.
  static absl::Status InternInputText(const proto::Model& model) {
    for (const proto::Node& n : model.graph().nodes()) {
      RETURN_IF_ERROR(Symbol::TryIntern(n.target()).status());
      for (const proto::Arg& a : n.args()) RETURN_IF_ERROR(InternArgText(a));
      for (const auto* named : {&n.kwargs(), &n.meta()}) {
        for (const proto::NamedArg& kw : *named) {
          RETURN_IF_ERROR(Symbol::TryIntern(kw.name()).status());
          RETURN_IF_ERROR(InternArgText(kw.value()));
        }
      }
    }
    return InternModuleText(model.root());
  }
  static absl::Status InternArgText(const proto::Arg& a) {
    if (a.value_case() == proto::Arg::kStringValue) {
      return Symbol::TryIntern(a.string_value()).status();
    }
    if (a.value_case() == proto::Arg::kTorchObject) {
      return Symbol::TryIntern(a.torch_object()).status();
    }
    if (a.has_list() || a.has_tuple()) {
      for (const proto::Arg& item : (a.has_list() ? a.list() : a.tuple()).items()) {
        RETURN_IF_ERROR(InternArgText(item));
      }
    }
    // A slice holds no text (CheckSlice admits only None, ints and nodes).
    return absl::OkStatus();
  }
  static absl::Status InternModuleText(const proto::Module& m) {
    RETURN_IF_ERROR(Symbol::TryIntern(m.type()).status());
    for (const proto::NamedArg& a : m.attributes()) RETURN_IF_ERROR(InternArgText(a.value()));
    for (const proto::NamedModule& c : m.children()) RETURN_IF_ERROR(InternModuleText(c.module()));
    return absl::OkStatus();
  }

  // Builders run only on validated input.
  Argument BuildArg(const proto::Arg& a, const absl::flat_hash_map<absl::string_view, int>& index,
                    const std::vector<Node*>& built) const {
    switch (a.value_case()) {
      case proto::Arg::kBoolValue: return Argument::Bool(a.bool_value());
      case proto::Arg::kIntValue: return Argument::Int(a.int_value());
      case proto::Arg::kFloatValue: return Argument::Float(a.float_value());
      case proto::Arg::kStringValue: return Argument::String(a.string_value());
      case proto::Arg::kDtypeValue: return Argument::Dtype(static_cast<DType>(a.dtype_value()));
      case proto::Arg::kNode: return Argument(built[index.at(a.node())]);
      case proto::Arg::kEllipsis: return Argument::Ellipsis();
      case proto::Arg::kTorchObject: return Argument::TorchObject(a.torch_object());
      case proto::Arg::kSlice:
        return Argument::Slice(BuildArg(a.slice().items(0), index, built),
                               BuildArg(a.slice().items(1), index, built),
                               BuildArg(a.slice().items(2), index, built));
      case proto::Arg::kList:
      case proto::Arg::kTuple: {
        const proto::ArgList& list = a.has_list() ? a.list() : a.tuple();
        std::vector<Argument> items;
        items.reserve(list.items_size());
        for (const proto::Arg& item : list.items()) items.push_back(BuildArg(item, index, built));
        return a.has_list() ? Argument::List(std::move(items)) : Argument::Tuple(std::move(items));
      }
      default: return Argument::None();
    }
  }

  Kwargs BuildNamedArgs(const google::protobuf::RepeatedPtrField<proto::NamedArg>& named,
                        const absl::flat_hash_map<absl::string_view, int>& index,
                        const std::vector<Node*>& built) const {
    Kwargs kwargs;
    kwargs.reserve(named.size());
    for (const proto::NamedArg& kw : named) {
      kwargs.emplace_back(Symbol::Intern(kw.name()), BuildArg(kw.value(), index, built));
    }
    return kwargs;
  }

  // `donor`: `m` itself, writable, or nullptr (see Read).
  absl::StatusOr<std::unique_ptr<Module>> BuildModule(const proto::Module& m,
                                                      proto::Module* donor) const {
    auto module = std::make_unique<Module>(m.type());
    static const absl::flat_hash_map<absl::string_view, int> kNoNodes;
    for (int i = 0; i < m.tensors_size(); ++i) {
      const proto::NamedTensor& nt = m.tensors(i);
      const proto::Tensor& t = nt.tensor();
      QuantParams q;
      q.scheme = static_cast<QScheme>(t.qscheme());
      q.scales.assign(t.scales().begin(), t.scales().end());
      q.zero_points.assign(t.zero_points().begin(), t.zero_points().end());
      q.axis = t.axis();
      const DType dtype = static_cast<DType>(t.dtype());
      Shape shape(t.shape().begin(), t.shape().end());
      // The bytes are copied once, from the file (a skeleton's token) or from the parsed
      // model, into the tensor's buffer; or a donor's parsed bytes become the tensor's data
      // without a copy. CheckTensor has checked their size (and the token).
      auto make_tensor = [&]() -> absl::StatusOr<Tensor> {
        if (handed_ != nullptr) return NextHandedTensor(nt.name(), dtype, shape);
        if (skeleton_of_ != nullptr) {
          ASSIGN_OR_RETURN(const absl::string_view data, TensorData(t, nt.name()));
          return Tensor::CopyFromBytes(dtype, std::move(shape), data, std::move(q));
        }
        if (donor != nullptr) {
          return Tensor::FromBytes(
              dtype, std::move(shape),
              std::move(*donor->mutable_tensors(i)->mutable_tensor()->mutable_data()),
              std::move(q));
        }
        return Tensor::CopyFromBytes(dtype, std::move(shape), t.data(), std::move(q));
      };
      ASSIGN_OR_RETURN(Tensor tensor, make_tensor());
      module->SetTensor(nt.name(), std::move(tensor));
    }
    for (const proto::NamedArg& a : m.attributes()) {
      module->SetAttribute(a.name(), BuildArg(a.value(), kNoNodes, {}));
    }
    for (int i = 0; i < m.children_size(); ++i) {
      const proto::NamedModule& c = m.children(i);
      ASSIGN_OR_RETURN(
          std::unique_ptr<Module> child,
          BuildModule(c.module(),
                      donor != nullptr ? donor->mutable_children(i)->mutable_module() : nullptr));
      module->SetChild(c.name(), std::move(child));
    }
    return module;
  }

  // The next handed-over tensor, which must have the dtype and shape the structure
  // declares for it.
  absl::StatusOr<Tensor> NextHandedTensor(const std::string& where, DType dtype,
                                          const Shape& shape) const {
    if (next_handed_ >= handed_->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": only ", handed_->size(), " tensors were handed over; the structure lists more"));
    }
    Tensor& tensor = (*handed_)[next_handed_++];
    if (tensor.dtype() != dtype || !(tensor.shape() == shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the handed-over tensor is ", DTypeName(tensor.dtype()), " shape [",
          absl::StrJoin(tensor.shape(), ", "), "]; the structure declares ", DTypeName(dtype),
          " shape [", absl::StrJoin(shape, ", "), "]"));
    }
    return std::move(tensor);
  }

  const ModelLimits& limits_;
  const absl::string_view* skeleton_of_ = nullptr;  // see Read
  std::vector<Tensor>* handed_ = nullptr;           // see HandTensors
  mutable size_t next_handed_ = 0;  // BuildModule is const; Read is one pass
};

// True if every length-delimited field of a Model (at any depth) fits inside its enclosing
// message and nothing nests deeper than `depth_left`. Protobuf reserves up to 50 MB for a
// string whose declared length it has not yet checked against the input, so without this
// a 9-byte file makes the loader allocate 50 MB. Groups (unused by proto3) are rejected.
bool LengthsFit(google::protobuf::io::CodedInputStream& in,
                const google::protobuf::Descriptor* message, int depth_left) {
  using google::protobuf::internal::WireFormatLite;
  if (depth_left < 0) return false;
  while (true) {
    if (in.BytesUntilLimit() == 0) return true;
    // A truncated tag is an error here: protobuf reads it on into its zero padding and
    // may find a length-delimited field there.
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return false;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t ignored;
        if (!in.ReadVarint64(&ignored)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64:
        if (!in.Skip(8)) return false;
        break;
      case WireFormatLite::WIRETYPE_FIXED32:
        if (!in.Skip(4)) return false;
        break;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(in.BytesUntilLimit())) {
          return false;
        }
        const google::protobuf::FieldDescriptor* field =
            message->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
        if (field != nullptr && field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
          const auto limit = in.PushLimit(static_cast<int>(length));
          if (!LengthsFit(in, field->message_type(), depth_left - 1)) return false;
          in.PopLimit(limit);
        } else if (!in.Skip(static_cast<int>(length))) {
          return false;
        }
        break;
      }
      default:
        return false;
    }
  }
}

bool LengthsFit(absl::string_view bytes, int max_depth) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  const auto limit = in.PushLimit(static_cast<int>(bytes.size()));
  const bool fit = LengthsFit(in, proto::Model::descriptor(), max_depth);
  in.PopLimit(limit);
  return fit;
}

// ---- Tensor data outside protobuf ---------------------------------------------------
//
// Protobuf copies every bytes field into a std::string from malloc. For a 100 MB model that
// is ~100 MB of heap which glibc hands back to the kernel when the model is freed (it trims
// the heap top), so every parse in a long-lived process faulted in and zeroed fresh pages
// again: resnet50's warm re-parse took 36 ms CPU, 14.5 ms with glibc's trimming turned off.
// ParseModel therefore gives protobuf a skeleton of the file in which each Tensor.data
// field's bytes are replaced by a token (kDataTokenBytes), and the reader copies them from
// the file straight into the tensor's TensorBuffer, whose memory comes from the huge-page
// caches: warm when reused, in huge pages when fresh. The file's bytes are read once
// either way (by protobuf's copy before, by this copy now).
//
// The skeleton is never longer than the file: each field of it is at most as long as the
// file's (a token is no longer than the bytes it replaces; a rewritten message keeps its
// tag's bytes and its length's width, and its length can only shrink). Fields the rewrite
// does not touch stay in the file (pieces of at least kMinFilePiece bytes) or are copied
// (shorter runs), so the skeleton costs at most the file's size plus one piece per
// kMinFilePiece bytes.
//
// The walk reads the wire format by hand (LengthsFit has checked it with protobuf's
// CodedInputStream just before; every read here is bounds-checked again all the same).

// Whether a message of type `message` can hold a Tensor at some depth.
bool CanHoldTensors(const google::protobuf::Descriptor* message,
                    std::vector<const google::protobuf::Descriptor*>& visiting) {
  if (message == proto::Tensor::descriptor()) return true;
  if (std::find(visiting.begin(), visiting.end(), message) != visiting.end()) return false;
  visiting.push_back(message);
  bool holds = false;
  for (int i = 0; i < message->field_count() && !holds; ++i) {
    const google::protobuf::FieldDescriptor* field = message->field(i);
    holds = field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
            CanHoldTensors(field->message_type(), visiting);
  }
  visiting.pop_back();
  return holds;
}

// A message type of model.proto that can hold a Tensor (Model, Module, NamedModule,
// NamedTensor, Tensor): only those are rewritten; the graph, for one, stays in the file.
// Derived from the descriptors, so a field added to model.proto is seen.
struct TensorHolder {
  bool is_tensor = false;
  // Its message fields that can hold a Tensor: field number and type.
  std::vector<std::pair<int, const TensorHolder*>> fields;

  const TensorHolder* Field(int number) const {
    for (const auto& [n, holder] : fields) {
      if (n == number) return holder;
    }
    return nullptr;
  }
};

const TensorHolder& ModelHolder() {
  static const TensorHolder* const model = [] {
    // std::map: the holders point at each other, so their addresses must not move.
    auto* holders = new std::map<const google::protobuf::Descriptor*, TensorHolder>();
    const google::protobuf::FileDescriptor* file = proto::Model::descriptor()->file();
    for (int i = 0; i < file->message_type_count(); ++i) {
      std::vector<const google::protobuf::Descriptor*> visiting;
      if (CanHoldTensors(file->message_type(i), visiting)) (*holders)[file->message_type(i)];
    }
    for (auto& [message, holder] : *holders) {
      holder.is_tensor = message == proto::Tensor::descriptor();
      for (int i = 0; i < message->field_count(); ++i) {
        const google::protobuf::FieldDescriptor* field = message->field(i);
        if (field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) continue;
        auto it = holders->find(field->message_type());
        if (it != holders->end()) holder.fields.emplace_back(field->number(), &it->second);
      }
    }
    return &holders->at(proto::Model::descriptor());
  }();
  return *model;
}

// Reads a varint at `p` as protobuf does (at most 10 bytes; bits past 64 dropped); nullptr
// if it does not end before `end`.
const char* ReadVarint(const char* p, const char* end, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(*p++);
    value |= uint64_t{byte & 0x7fu} << shift;
    if (byte < 0x80) return p;
  }
  return nullptr;
}

// The most bytes protobuf's parser reads for a length (a varint below 2^31).
constexpr int kMaxLengthBytes = 5;

// The skeleton of a model file: its pieces in order, each either bytes of the file or
// bytes of `rewritten`.
struct ModelSkeleton {
  struct Piece {
    bool in_file;
    size_t begin, end;
  };
  std::vector<Piece> pieces;
  // Room for as many bytes as the file (the skeleton is never longer); `rewritten_size`
  // are written.
  std::unique_ptr<char[]> rewritten;
  size_t rewritten_size = 0;
};

// Builds the ModelSkeleton of `file` from runs of its bytes and new bytes, in order.
class SkeletonBuilder {
 public:
  // A run of the file's bytes shorter than this is copied into the rewritten bytes: the
  // pieces stay few (at most two per kMinFilePiece bytes of the file) whatever the file.
  static constexpr size_t kMinFilePiece = 4096;

  explicit SkeletonBuilder(absl::string_view file) : file_(file) {
    // Not zero-filled; pages never written are never faulted in.
    skeleton_.rewritten.reset(new char[file.size()]);
  }

  // The file's bytes [begin, end) come next, as they are.
  void CopyFromFile(size_t begin, size_t end) {
    if (begin != file_run_end_) {
      FlushFileRun();
      file_run_begin_ = begin;
    }
    file_run_end_ = end;
    size_ += end - begin;
  }

  // `size` bytes come next; returns where to write them.
  char* Append(size_t size) {
    FlushFileRun();
    size_ += size;
    return Room(size);
  }

  // Writes `value` (below 2^(7 * width)) at `at` as a varint of exactly `width` bytes:
  // continuation bits pad it, and protobuf reads it like the short form.
  static void WritePaddedVarint(uint64_t value, int width, char* at) {
    for (int i = 0; i < width; ++i) {
      const uint8_t bits = static_cast<uint8_t>((value >> (7 * i)) & 0x7f);
      at[i] = static_cast<char>(i + 1 < width ? (bits | 0x80) : bits);
    }
  }

  // Bytes of the skeleton so far.
  size_t size() const { return size_; }

  // Where the rewritten byte `offset` is (for a length written before its message).
  char* rewritten_at(size_t offset) { return skeleton_.rewritten.get() + offset; }

  ModelSkeleton Finish() && {
    FlushFileRun();
    FlushRewrittenRun();
    return std::move(skeleton_);
  }

 private:
  // `size` more rewritten bytes.
  char* Room(size_t size) {
    // The skeleton is never longer than the file (see above).
    FUSELAGE_CHECK(skeleton_.rewritten_size + size <= file_.size());
    char* at = skeleton_.rewritten.get() + skeleton_.rewritten_size;
    skeleton_.rewritten_size += size;
    return at;
  }

  void FlushFileRun() {
    const size_t length = file_run_end_ - file_run_begin_;
    if (length >= kMinFilePiece) {
      FlushRewrittenRun();
      skeleton_.pieces.push_back({true, file_run_begin_, file_run_end_});
    } else if (length > 0) {
      std::memcpy(Room(length), file_.data() + file_run_begin_, length);
    }
    file_run_begin_ = file_run_end_ = 0;
  }

  void FlushRewrittenRun() {
    if (skeleton_.rewritten_size > rewritten_run_begin_) {
      skeleton_.pieces.push_back({false, rewritten_run_begin_, skeleton_.rewritten_size});
      rewritten_run_begin_ = skeleton_.rewritten_size;
    }
  }

  const absl::string_view file_;
  ModelSkeleton skeleton_;
  size_t size_ = 0;
  size_t file_run_begin_ = 0, file_run_end_ = 0;  // file bytes not yet placed
  size_t rewritten_run_begin_ = 0;                // rewritten bytes not yet in a piece
};

// Appends to `out` the fields of a message of type `message` that lie in `file` at
// [begin, end), each Tensor.data field of kDataTokenBytes or more replaced by a token.
// False on anything protobuf's parser would read differently or reject in any case
// (LengthsFit, which has run on the same bytes, rejects the rest), or nesting deeper than
// `depth_left`.
bool RewriteMessage(absl::string_view file, size_t begin, size_t end, const TensorHolder& message,
                    int depth_left, SkeletonBuilder& out) {
  if (depth_left < 0) return false;
  const char* const base = file.data();
  const char* const limit = base + end;
  const char* p = base + begin;
  while (p < limit) {
    const char* const field_start = p;
    uint64_t tag;
    p = ReadVarint(p, limit, tag);
    if (p == nullptr || static_cast<uint32_t>(tag) == 0) return false;
    switch (tag & 7) {
      case 0: {  // varint
        uint64_t ignored;
        p = ReadVarint(p, limit, ignored);
        if (p == nullptr) return false;
        break;
      }
      case 1:  // fixed64
        if (limit - p < 8) return false;
        p += 8;
        break;
      case 5:  // fixed32
        if (limit - p < 4) return false;
        p += 4;
        break;
      case 2: {  // length-delimited
        // The tag stays as the file has it (even a padded varint): protobuf judges it as
        // it would have judged the file. The length is read as protobuf's parser reads
        // it: at most five bytes, the fifth below 8 (below 2^31).
        const char* const length_start = p;
        uint64_t length;
        p = ReadVarint(p, limit, length);
        if (p == nullptr) return false;
        const int width = static_cast<int>(p - length_start);
        if (width > kMaxLengthBytes ||
            (width == kMaxLengthBytes && static_cast<uint8_t>(length_start[4]) >= 8) ||
            length > static_cast<uint64_t>(limit - p)) {
          return false;
        }
        const size_t payload_start = static_cast<size_t>(p - base);
        const int number = static_cast<int>(static_cast<uint32_t>(tag) >> 3);
        if (message.is_tensor && number == proto::Tensor::kDataFieldNumber &&
            length >= kDataTokenBytes) {
          out.CopyFromFile(static_cast<size_t>(field_start - base),
                           static_cast<size_t>(length_start - base));
          char* token = out.Append(1 + kDataTokenBytes);
          token[0] = static_cast<char>(kDataTokenBytes);  // the token's length, then it
          for (int i = 0; i < 4; ++i) {
            token[1 + i] = static_cast<char>(payload_start >> (8 * i));
            token[5 + i] = static_cast<char>(length >> (8 * i));
          }
          p += length;
          continue;
        }
        if (const TensorHolder* nested = message.Field(number); nested != nullptr) {
          out.CopyFromFile(static_cast<size_t>(field_start - base),
                           static_cast<size_t>(length_start - base));
          const size_t length_at = out.Append(static_cast<size_t>(width)) - out.rewritten_at(0);
          const size_t message_start = out.size();
          if (!RewriteMessage(file, payload_start, payload_start + length, *nested, depth_left - 1,
                              out)) {
            return false;
          }
          // The rewritten message is at most `length` bytes (see above): its length fits
          // the file's width.
          const size_t rewritten_length = out.size() - message_start;
          FUSELAGE_CHECK(rewritten_length <= length);
          SkeletonBuilder::WritePaddedVarint(rewritten_length, width, out.rewritten_at(length_at));
          p += length;
          continue;
        }
        p += length;
        break;
      }
      default:
        return false;  // groups, as LengthsFit
    }
    out.CopyFromFile(static_cast<size_t>(field_start - base), static_cast<size_t>(p - base));
  }
  return true;
}

// The skeleton of the model file `file` (see above), or nullopt if protobuf would not
// parse the file.
std::optional<ModelSkeleton> SplitTensorData(absl::string_view file, int max_depth) {
  SkeletonBuilder out(file);
  if (!RewriteMessage(file, 0, file.size(), ModelHolder(), max_depth, out)) return std::nullopt;
  return std::move(out).Finish();
}

// Parses `skeleton` of the model file `file` into `model`, as protobuf would parse the
// file; false if protobuf cannot.
bool ParseSkeleton(absl::string_view file, const ModelSkeleton& skeleton, int recursion_limit,
                   proto::Model& model) {
  std::deque<google::protobuf::io::ArrayInputStream> pieces;  // `streams` point into it
  std::vector<google::protobuf::io::ZeroCopyInputStream*> streams;
  streams.reserve(skeleton.pieces.size());
  for (const ModelSkeleton::Piece& piece : skeleton.pieces) {
    const char* from = piece.in_file ? file.data() : skeleton.rewritten.get();
    pieces.emplace_back(from + piece.begin, static_cast<int>(piece.end - piece.begin));
    streams.push_back(&pieces.back());
  }
  google::protobuf::io::ConcatenatingInputStream joined(streams.data(),
                                                        static_cast<int>(streams.size()));
  google::protobuf::io::CodedInputStream input(&joined);
  input.SetRecursionLimit(recursion_limit);
  // A hostile file would make protobuf log "[libprotobuf ERROR ...] String field ...
  // contains invalid UTF-8 data" or "exceeded maximum protobuf recursion depth" to
  // stderr before we return our own error: the caller reports the failure, so the
  // library stays quiet about it. (Thread-safe; it also mutes other threads' protobuf
  // warnings while it lives, which the parse of one file makes brief.)
  google::protobuf::LogSilencer quiet;
  return model.ParseFromCodedStream(&input) && input.ConsumedEntireMessage();
}

bool IsTextPath(const std::string& path) {
  return absl::EndsWith(path, ".textproto") || absl::EndsWith(path, ".pbtxt");
}

}  // namespace

proto::Model ModelToProto(const GraphModule& gm) {
  proto::Model model;
  model.set_format_version(kModelFormatVersion);
  model.set_producer("fuselage");
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    proto::Node* out = model.mutable_graph()->add_nodes();
    out->set_name(n->name());
    out->set_op(static_cast<proto::OpKind>(n->op()));
    out->set_target(std::string(n->target().name()));
    for (const Argument& a : n->args()) ArgToProto(a, out->add_args());
    NamedArgsToProto(n->kwargs(), out->mutable_kwargs());
    NamedArgsToProto(n->meta(), out->mutable_meta());
  }
  ModuleToProto(gm.root(), model.mutable_root());
  return model;
}

absl::StatusOr<std::unique_ptr<GraphModule>> ModelFromProto(const proto::Model& model,
                                                            const ModelLimits& limits) {
  return ModelReader(limits).Read(model);
}

absl::StatusOr<std::unique_ptr<GraphModule>> ModelFromProto(proto::Model&& model,
                                                            const ModelLimits& limits) {
  return ModelReader(limits).Read(model, /*donor=*/&model);
}

// The protobuf nesting a model within `limits` can reach, so that the parser's recursion
// limit never refuses what ModelLimits allows: a module at depth max_module_depth is
// 1 + 2 * depth messages deep (Model > Module > NamedModule > Module ...), its attribute
// args another 2 + 2 * max_arg_depth (NamedArg > Arg > ArgList > Arg ...), its tensors 3.
// Node args (Model > Graph > Node > Arg ...) stay below that.
int ProtoNestingLimit(const ModelLimits& limits) {
  return 2 * limits.max_module_depth + 2 * limits.max_arg_depth + 8;
}

absl::StatusOr<std::unique_ptr<GraphModule>> ParseModel(absl::string_view bytes,
                                                        const ModelLimits& limits) {
  if (static_cast<int64_t>(bytes.size()) > EffectiveMaxBytes(limits)) {
    return absl::InvalidArgumentError(absl::StrCat("model file is ", bytes.size(),
                                                   " bytes; the limit is ", EffectiveMaxBytes(limits)));
  }
  const int recursion_limit = ProtoNestingLimit(limits);
  // LengthsFit first: SplitTensorData and protobuf then only see files whose every length
  // fits. The tensors' bytes stay in `bytes` (see SplitTensorData); protobuf parses the
  // skeleton, pieces of the file and rewritten bytes one after another.
  std::optional<ModelSkeleton> skeleton;
  if (LengthsFit(bytes, recursion_limit)) skeleton = SplitTensorData(bytes, recursion_limit);
  proto::Model model;
  if (!skeleton.has_value() || !ParseSkeleton(bytes, *skeleton, recursion_limit, model)) {
    return absl::InvalidArgumentError(
        "model file is not a valid fuselage model (protobuf parse failed: truncated, "
        "corrupt, a string field that is not valid UTF-8, or nested too deeply)");
  }
  return ModelReader(limits).Read(model, /*donor=*/nullptr, &bytes);
}

absl::StatusOr<std::unique_ptr<GraphModule>> ParseModelWithTensors(absl::string_view structure,
                                                                   std::vector<Tensor> tensors,
                                                                   const ModelLimits& limits) {
  if (static_cast<int64_t>(structure.size()) > EffectiveMaxBytes(limits)) {
    return absl::InvalidArgumentError(absl::StrCat("model structure is ", structure.size(),
                                                   " bytes; the limit is ", EffectiveMaxBytes(limits)));
  }
  const int recursion_limit = ProtoNestingLimit(limits);
  proto::Model model;
  if (!LengthsFit(structure, recursion_limit)) {
    return absl::InvalidArgumentError(
        "model structure is not a valid fuselage model (protobuf parse failed)");
  }
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(structure.data()),
                                            static_cast<int>(structure.size()));
  in.SetRecursionLimit(recursion_limit);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        "model structure is not a valid fuselage model (protobuf parse failed: truncated, "
        "corrupt, a string field that is not valid UTF-8, or nested too deeply)");
  }
  ModelReader reader(limits);
  reader.HandTensors(&tensors);
  return reader.Read(model);
}

absl::StatusOr<std::unique_ptr<GraphModule>> ParseModelText(absl::string_view text,
                                                            const ModelLimits& limits) {
  if (static_cast<int64_t>(text.size()) > EffectiveMaxBytes(limits)) {
    return absl::InvalidArgumentError(absl::StrCat("model text is ", text.size(),
                                                   " bytes; the limit is ", EffectiveMaxBytes(limits)));
  }
  class Collector : public google::protobuf::io::ErrorCollector {
   public:
    void AddError(int line, int column, const std::string& message) override {
      if (first.empty()) first = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
    }
    std::string first;
  } errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.SetRecursionLimit(ProtoNestingLimit(limits));
  proto::Model model;
  google::protobuf::io::ArrayInputStream raw(text.data(), static_cast<int>(text.size()));
  if (!parser.Parse(&raw, &model)) {
    return absl::InvalidArgumentError(absl::StrCat("model text does not parse: ", errors.first));
  }
  return ModelReader(limits).Read(model, &model);
}

namespace {

// Protobuf serializes messages of at most 2 GiB - 1 bytes.
constexpr size_t kMaxSerializedBytes = (size_t{1} << 31) - 1;

// `model`'s bytes (deterministic: map entries and unknown fields in a fixed order) into
// `out`, which has room for exactly model.ByteSizeLong() bytes, computed just before.
void SerializeInto(const proto::Model& model, char* out, size_t size) {
  google::protobuf::io::ArrayOutputStream raw(out, static_cast<int>(size));
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.SetSerializationDeterministic(true);
  model.SerializeWithCachedSizes(&coded);
  FUSELAGE_CHECK(!coded.HadError() && static_cast<size_t>(coded.ByteCount()) == size);
}

}  // namespace

std::string SerializeModel(const GraphModule& gm) {
  // Sized once: a growing string copied the model's bytes (all its weights) again at
  // every doubling.
  const proto::Model model = ModelToProto(gm);
  const size_t size = model.ByteSizeLong();
  if (size > kMaxSerializedBytes) return std::string();  // as protobuf's own refusal
  std::string bytes(size, '\0');
  SerializeInto(model, bytes.data(), bytes.size());
  return bytes;
}

std::string SerializeModelText(const GraphModule& gm) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(ModelToProto(gm), &text);
  return text;
}

namespace {

// A file's bytes in a TensorBuffer instead of a std::string: no zero fill before the read,
// and a large file lands in huge pages (a 100 MB model took ~25 k page faults for its copy
// alone). `length` bytes of the buffer are the file's.
struct FileBytes {
  struct Unref {
    void operator()(TensorBuffer* b) const { b->Unref(); }
  };
  std::unique_ptr<TensorBuffer, Unref> buffer;
  size_t length = 0;
  absl::string_view bytes() const {
    return buffer == nullptr ? absl::string_view() : absl::string_view(buffer->data(), length);
  }
};

// Read as ReadFile reads (ReadFileBoundedInto: until EOF, refused past max_bytes). A regular
// file is one allocation of its size + 1; only a file that grows while read, a pipe or a
// device is copied into a larger buffer as it grows.
absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path, int64_t max_bytes,
                                        const HeadCheck& check_head) {
  FileBytes file;
  auto grow = [&file](size_t capacity, size_t length) {
    std::unique_ptr<TensorBuffer, FileBytes::Unref> larger(TensorBuffer::Allocate(capacity));
    if (length > 0) std::memcpy(larger->data(), file.buffer->data(), length);
    file.buffer = std::move(larger);
    return file.buffer->data();
  };
  ASSIGN_OR_RETURN(file.length,
                   ReadFileBoundedInto(
                       path, static_cast<size_t>(std::max<int64_t>(max_bytes, 0)), grow,
                       check_head));
  return file;
}

// A binary model starts with a protobuf tag: field number >= 1 and a wire type a parser can
// skip (0 varint, 1 fixed64, 2 length-delimited, 3 group, 5 fixed32). Only the low bits of
// the first byte are needed to see that; a zero byte (as all of /dev/zero) is never one.
absl::Status CheckBinaryModelHead(absl::string_view head) {
  const auto first = static_cast<unsigned char>(head[0]);
  const int wire_type = first & 7;
  if ((first & 0x80) == 0 && (first >> 3) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a fuselage model file: its first byte 0x", absl::Hex(first, absl::kZeroPad2),
        " is a protobuf field number 0"));
  }
  if (wire_type == 4 || wire_type == 6 || wire_type == 7) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a fuselage model file: its first byte 0x", absl::Hex(first, absl::kZeroPad2),
        " has protobuf wire type ", wire_type, ", which cannot start a field"));
  }
  return absl::OkStatus();
}

// Text format holds no NUL byte.
absl::Status CheckTextModelHead(absl::string_view head) {
  const size_t nul = head.find('\0');
  if (nul == absl::string_view::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "not a fuselage text model file: byte ", nul, " is NUL, which text format never holds"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphModule>> LoadModel(const std::string& path,
                                                       const ModelLimits& limits) {
  ASSIGN_OR_RETURN(FileBytes file,
                   ReadFileBytes(path, EffectiveMaxBytes(limits),
                                 IsTextPath(path) ? CheckTextModelHead : CheckBinaryModelHead));
  const absl::string_view contents = file.bytes();
  auto gm = IsTextPath(path) ? ParseModelText(contents, limits) : ParseModel(contents, limits);
  if (!gm.ok()) {
    return absl::Status(gm.status().code(), absl::StrCat(path, ": ", gm.status().message()));
  }
  return gm;
}

absl::Status SaveModel(const GraphModule& gm, const std::string& path) {
  if (IsTextPath(path)) return WriteFileAtomically(path, SerializeModelText(gm));
  // Into a buffer that is neither zero-filled first nor, for a large model, in small
  // pages (see ReadFileBytes).
  const proto::Model model = ModelToProto(gm);
  const size_t size = model.ByteSizeLong();
  if (size > kMaxSerializedBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot save '", path, "': the model is ", size, " bytes; protobuf's limit is ",
        kMaxSerializedBytes));
  }
  FileBytes file;
  if (size != 0) {
    file.buffer.reset(TensorBuffer::Allocate(size));
    file.length = size;
    SerializeInto(model, file.buffer->data(), size);
  }
  return WriteFileAtomically(path, file.bytes());
}

}  // namespace fuselage
