#include "graph/printer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "graph/node.h"

namespace fuselage {
namespace {

// Python's str.isidentifier() for ASCII text.
bool IsIdentifier(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// Python's repr(float): the shortest digits that read back as the same double, in
// fixed notation for decimal exponents in [-4, 16) and scientific notation otherwise.
std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision - 1, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  // buffer is "[-]d.ddde[+-]xx": split it into sign, digits and exponent.
  absl::string_view text(buffer);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  if (exponent >= -4 && exponent < 16) {
    std::string fixed;
    if (exponent < 0) {
      fixed = absl::StrCat("0.", std::string(-exponent - 1, '0'), digits);
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      fixed = absl::StrCat(digits, std::string(exponent + 1 - digits.size(), '0'), ".0");
    } else {
      fixed = absl::StrCat(digits.substr(0, exponent + 1), ".", digits.substr(exponent + 1));
    }
    return sign + fixed;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) absl::StrAppend(&mantissa, ".", digits.substr(1));
  char exponent_text[16];
  std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+',
                std::abs(exponent));
  return absl::StrCat(sign, mantissa, exponent_text);
}

// Python's repr(str): single quotes unless the text holds a ' and no ".
std::string StringRepr(absl::string_view s) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out.push_back(c);
    }
  }
  out.push_back(quote);
  return out;
}

// FX's _format_target: "self" + "layer1.0.conv" -> `getattr(self.layer1, "0").conv`.
std::string FormatTarget(absl::string_view base, absl::string_view path) {
  std::string result(base);
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (IsIdentifier(part)) {
      absl::StrAppend(&result, ".", part);
    } else {
      result = absl::StrCat("getattr(", result, ", \"", part, "\")");
    }
  }
  return result;
}

// FX's _format_args: positional args, then `key = value` kwargs.
std::string FormatArgs(absl::Span<const Argument> args, const Kwargs& kwargs) {
  std::vector<std::string> parts;
  parts.reserve(args.size() + kwargs.size());
  for (const Argument& a : args) parts.push_back(PythonRepr(a));
  for (const Kwarg& kw : kwargs) {
    parts.push_back(absl::StrCat(kw.first.name(), " = ", PythonRepr(kw.second)));
  }
  return absl::StrJoin(parts, ", ");
}

// The Python operator form of an `operator.*` call_function, as FX's magic_methods
// table has it ("{} + {}"), or nullptr if the target is not one.
const char* OperatorTemplate(absl::string_view target) {
  struct Entry {
    const char* target;
    const char* format;
  };
  static constexpr Entry kOperators[] = {
      {"operator.add", "{} + {}"},      {"operator.sub", "{} - {}"},
      {"operator.mul", "{} * {}"},      {"operator.floordiv", "{} // {}"},
      {"operator.truediv", "{} / {}"},  {"operator.div", "{} / {}"},
      {"operator.mod", "{} % {}"},      {"operator.pow", "{} ** {}"},
      {"operator.lshift", "{} << {}"},  {"operator.rshift", "{} >> {}"},
      {"operator.and_", "{} & {}"},     {"operator.or_", "{} | {}"},
      {"operator.xor", "{} ^ {}"},      {"operator.getitem", "{}[{}]"},
      {"operator.matmul", "{} @ {}"},   {"operator.eq", "{} == {}"},
      {"operator.ne", "{} != {}"},      {"operator.lt", "{} < {}"},
      {"operator.gt", "{} > {}"},       {"operator.le", "{} <= {}"},
      {"operator.ge", "{} >= {}"},      {"operator.neg", "-{}"},
      {"operator.pos", "+{}"},          {"operator.invert", "~{}"},
  };
  for (const Entry& e : kOperators) {
    if (target == e.target) return e.format;
  }
  return nullptr;
}

// Fills each "{}" of `format` with the next arg. False if the counts differ (a malformed
// call, which the caller then prints as a plain call).
bool FillTemplate(absl::string_view format, absl::Span<const Argument> args, std::string* out) {
  const std::vector<absl::string_view> pieces = absl::StrSplit(format, "{}");
  if (pieces.size() != args.size() + 1) return false;
  out->clear();
  for (size_t i = 0; i < args.size(); ++i) absl::StrAppend(out, pieces[i], PythonRepr(args[i]));
  absl::StrAppend(out, pieces.back());
  return true;
}

// The right-hand side of the statement of a call_function node.
std::string CallFunctionExpression(const Node& node) {
  const absl::string_view target = node.target().name();
  std::string expression;
  if (node.kwargs().empty()) {
    const char* format = OperatorTemplate(target);
    if (format != nullptr && FillTemplate(format, node.args(), &expression)) return expression;
    // builtins.getattr(x, 'attr') reads as x.attr, as FX prints it.
    if ((target == "getattr" || target == "builtins.getattr") && node.num_args() == 2 &&
        node.arg(1).is_string() && IsIdentifier(node.arg(1).as_string())) {
      return absl::StrCat(PythonRepr(node.arg(0)), ".", node.arg(1).as_string());
    }
  }
  return absl::StrCat(target, "(", FormatArgs(node.args(), node.kwargs()), ")");
}

// The statement for one non-placeholder node, without indentation or newline.
std::string Statement(const Node& node) {
  const std::string& name = node.name();
  const absl::string_view target = node.target().name();
  switch (node.op()) {
    case OpKind::kPlaceholder:
      return name == target ? std::string() : absl::StrCat(name, " = ", target);
    case OpKind::kGetAttr:
      return absl::StrCat(name, " = ", FormatTarget("self", target));
    case OpKind::kCallModule:
      return absl::StrCat(name, " = ", FormatTarget("self", target), "(",
                          FormatArgs(node.args(), node.kwargs()), ")");
    case OpKind::kCallMethod: {
      if (node.num_args() == 0) {
        return absl::StrCat(name, " = ", target, "(", FormatArgs({}, node.kwargs()), ")");
      }
      return absl::StrCat(name, " = ", FormatTarget(PythonRepr(node.arg(0)), target), "(",
                          FormatArgs(node.args().subspan(1), node.kwargs()), ")");
    }
    case OpKind::kCallFunction:
      return absl::StrCat(name, " = ", CallFunctionExpression(node));
    case OpKind::kOutput:
      return absl::StrCat("return ", node.num_args() == 0 ? "None" : PythonRepr(node.arg(0)));
  }
  return absl::StrCat("# ", name, ": unknown op");
}

// The forward function, each line prefixed by `indent`; `annotate` appends the module
// type of call_module nodes as a comment.
std::string Forward(const GraphModule& gm, absl::string_view indent, bool annotate) {
  std::vector<std::string> parameters = {"self"};
  std::string body;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kPlaceholder) {
      std::string parameter(n->target().name());
      // A placeholder's first arg is its default value, as in FX.
      if (n->num_args() > 0) absl::StrAppend(&parameter, " = ", PythonRepr(n->arg(0)));
      parameters.push_back(std::move(parameter));
    }
    std::string statement = Statement(*n);
    if (statement.empty()) continue;
    if (annotate && n->op() == OpKind::kCallModule) {
      const Module* module = gm.FindModule(n->target().name());
      if (module != nullptr) absl::StrAppend(&statement, "  # ", module->type().name());
    }
    absl::StrAppend(&body, indent, "    ", statement, "\n");
  }
  return absl::StrCat(indent, "def forward(", absl::StrJoin(parameters, ", "), "):\n", body);
}

}  // namespace

std::string PythonRepr(const Argument& arg) {
  switch (arg.kind()) {
    case Argument::Kind::kNone: return "None";
    case Argument::Kind::kBool: return arg.as_bool() ? "True" : "False";
    case Argument::Kind::kInt: return absl::StrCat(arg.as_int());
    case Argument::Kind::kFloat: return FloatRepr(arg.as_float());
    case Argument::Kind::kString: return StringRepr(arg.as_string());
    case Argument::Kind::kDType: return std::string(DTypeName(arg.as_dtype()));
    case Argument::Kind::kNode: return arg.as_node()->name();
    case Argument::Kind::kEllipsis: return "Ellipsis";
    case Argument::Kind::kTorchObject: return TorchObjectRepr(arg.as_torch_object());
    case Argument::Kind::kSlice:
    case Argument::Kind::kList: {
      std::string inner = absl::StrJoin(arg.items(), ", ", [](std::string* out, const Argument& a) {
        out->append(PythonRepr(a));
      });
      if (arg.is_slice()) return absl::StrCat("slice(", inner, ")");
      if (!arg.is_tuple()) return absl::StrCat("[", inner, "]");
      return arg.items().size() == 1 ? absl::StrCat("(", inner, ",)")
                                     : absl::StrCat("(", inner, ")");
    }
  }
  return "<invalid>";
}

std::string PrintCode(const GraphModule& gm) { return Forward(gm, "", /*annotate=*/false); }

std::string PrintReadable(const GraphModule& gm) {
  return absl::StrCat("class GraphModule(torch.nn.Module):\n",
                      Forward(gm, "    ", /*annotate=*/true));
}

}  // namespace fuselage
