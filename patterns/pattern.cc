#include "patterns/pattern.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/dtype.h"
#include "graph/status_macros.h"
#include "patterns/aten_ops.h"
#include "patterns/onnx_ops.h"

namespace fuselage {
namespace {

constexpr absl::string_view kMatchAllName = "MatchAllNode";
constexpr absl::string_view kFunctionalPrefix = "torch.nn.functional.";

bool IsModuleNamespace(absl::string_view name) {
  for (absl::string_view ns : {"nn.", "nni.", "nnq.", "nniq.", "nnqr."}) {
    if (absl::StartsWith(name, ns)) return true;
  }
  return false;
}

// The last dotted component: "torch.nn.functional.relu" -> "relu".
absl::string_view BaseName(absl::string_view qualified) {
  const size_t dot = qualified.rfind('.');
  return dot == absl::string_view::npos ? qualified : qualified.substr(dot + 1);
}

// Properties every spelling of a function/method gets from its base name, so `torch.add`,
// `operator.add`, `add` and `method:add` behave the same way.
void AddBuiltinProperties(PatternPosition& leaf) {
  bool all_commutative = !leaf.alternatives.empty();
  bool any_add = false, any_relu = false, any_functional = false;
  for (const OpRef& op : leaf.alternatives) {
    if (op.op == OpKind::kCallModule) {
      all_commutative = false;
      continue;
    }
    const absl::string_view target = op.target.name();
    const absl::string_view base = BaseName(target);
    const bool plain_namespace = op.op == OpKind::kCallMethod ||
                                 absl::StartsWith(target, "operator.") ||
                                 target == absl::StrCat("torch.", base);
    if (!((base == "add" || base == "mul") && plain_namespace)) all_commutative = false;
    if (base == "add") any_add = true;
    if (base == "relu") any_relu = true;
    if (absl::StartsWith(target, kFunctionalPrefix)) any_functional = true;
  }
  leaf.commutative = all_commutative;
  // alpha=1 is torch.add's default: harmless. Any other alpha changes the result.
  if (any_add) leaf.allowed_kwargs.push_back({Symbol::Intern("alpha"), Argument::Int(1)});
  // inplace only decides where the result is stored, never its value.
  if (any_relu || any_functional) {
    leaf.allowed_kwargs.push_back({Symbol::Intern("inplace"), std::nullopt});
  }
}

PatternPosition FunctionLeaf(absl::string_view spelling,
                             std::vector<std::pair<OpKind, absl::string_view>> alternatives) {
  PatternPosition leaf;
  leaf.spelling = std::string(spelling);
  for (const auto& [op, target] : alternatives) {
    leaf.alternatives.push_back({op, Symbol::Intern(target)});
  }
  AddBuiltinProperties(leaf);
  leaf.builtin_kwargs = static_cast<int>(leaf.allowed_kwargs.size());
  return leaf;
}

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  }
  return !absl::EndsWith(name, ".") && !absl::StrContains(name, "..");
}

// A constant as the pattern syntax writes it. Strings have no escapes: they are quoted
// with whichever quote they do not contain (a parsed string never contains both). Lists
// and tuples are written as tuples.
std::string ConstantText(const Argument& value) {
  if (value.is_list()) {
    std::vector<std::string> parts;
    for (const Argument& item : value.items()) parts.push_back(ConstantText(item));
    return absl::StrCat("(", absl::StrJoin(parts, ", "), parts.size() == 1 ? ",)" : ")");
  }
  if (!value.is_string()) return value.ToString();
  const absl::string_view s = value.as_string();
  const char quote = s.find('\'') == absl::string_view::npos ? '\'' : '"';
  return absl::StrCat(std::string(1, quote), s, std::string(1, quote));
}

// ---- Text parsing ----------------------------------------------------------------------

// The parse tree before resolution: a leaf (name + kwargs) or a tuple.
struct TextTree {
  bool is_tuple = false;
  std::vector<std::string> names;  // the leaves, `a | b` -> {a, b}
  size_t offset = 0;
  std::vector<AllowedKwarg> kwargs;
  std::vector<PositionPredicate> predicates;
  bool optional = false;
  std::string capture;              // `@name` after an op position
  std::string reference;            // `$name` leaf
  std::optional<Argument> constant;  // a constant leaf (`3`, None, 'same')
  std::vector<TextTree> items;
};

// A capture name: an identifier without dots.
bool IsCaptureName(absl::string_view name) {
  return IsIdentifier(name) && !absl::StrContains(name, '.');
}

class PatternParser {
 public:
  explicit PatternParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<TextTree> ParseAll() {
    ASSIGN_OR_RETURN(TextTree tree, ParseTree(0));
    SkipSpace();
    if (text_.substr(pos_, 2) == "->") {
      pos_ += 2;
      RETURN_IF_ERROR(ParseOutputs());
      SkipSpace();
    }
    if (pos_ != text_.size()) return Error("unexpected text after the pattern");
    return tree;
  }

  // The names after `->` (the declared outputs 1, 2, ...), in order.
  const std::vector<std::string>& outputs() const { return outputs_; }

 private:
  static constexpr int kMaxDepth = Pattern::kMaxPositions;
  static constexpr size_t kMaxLeaves = 16;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("pattern '", text_, "': ", what,
                                                   " at offset ", pos_));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // A name or bare constant token: letters, digits, '_', '.', ':', '+', '-'.
  absl::string_view Word() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
          c == '+' || c == '-') {
        ++pos_;
      } else {
        break;
      }
    }
    return text_.substr(start, pos_ - start);
  }

  // `-> $a, $b`: one or more `$name`, comma separated.
  absl::Status ParseOutputs() {
    do {
      if (!Consume('$')) return Error("expected '$name' (a declared output) after '->'");
      const absl::string_view name = Word();
      if (!IsCaptureName(name)) return Error("expected a capture name after '$'");
      if (outputs_.size() + 1 >= static_cast<size_t>(Pattern::kMaxPositions)) {
        return Error("too many declared outputs");
      }
      outputs_.emplace_back(name);
    } while (Consume(','));
    return absl::OkStatus();
  }

  absl::StatusOr<TextTree> ParseTree(int depth) {
    if (depth > kMaxDepth) return Error("pattern nested too deeply");
    SkipSpace();
    TextTree tree;
    tree.offset = pos_;
    if (Consume('(')) {
      tree.is_tuple = true;
      while (true) {
        if (Consume(')')) break;
        if (!tree.items.empty() && !Consume(',')) return Error("expected ',' or ')'");
        if (Consume(')')) break;  // trailing comma
        ASSIGN_OR_RETURN(TextTree item, ParseTree(depth + 1));
        tree.items.push_back(std::move(item));
        if (tree.items.size() > static_cast<size_t>(Pattern::kMaxPositions)) {
          return Error("too many elements");
        }
      }
      if (tree.items.empty()) return Error("empty tuple");
      return tree;
    }
    if (Consume('$')) {
      const absl::string_view name = Word();
      if (!IsCaptureName(name)) return Error("expected a capture name after '$'");
      tree.reference = std::string(name);
      return tree;
    }
    if (StartsConstantLeaf()) {
      ASSIGN_OR_RETURN(tree.constant, ParseConstant(0));
      return tree;
    }
    while (true) {
      const absl::string_view name = Word();
      if (name.empty()) return Error("expected a leaf name or '('");
      tree.names.push_back(std::string(name));
      if (tree.names.size() > kMaxLeaves) return Error("too many alternatives");
      if (!Consume('|')) break;
    }
    if (Consume('{')) {
      while (!Consume('}')) {
        if (!tree.kwargs.empty() && !Consume(',')) return Error("expected ',' or '}'");
        if (Consume('}')) break;
        const absl::string_view key = Word();
        if (!IsIdentifier(key)) return Error("expected a kwarg name");
        AllowedKwarg allowed{Symbol::Intern(key), std::nullopt};
        if (Consume('=')) {
          ASSIGN_OR_RETURN(allowed.value, ParseConstant(0));
        }
        tree.kwargs.push_back(std::move(allowed));
      }
    }
    if (Consume('[')) {
      while (!Consume(']')) {
        if (!tree.predicates.empty() && !Consume(',')) return Error("expected ',' or ']'");
        if (Consume(']')) break;
        ASSIGN_OR_RETURN(PositionPredicate predicate, ParsePredicate());
        tree.predicates.push_back(std::move(predicate));
        if (tree.predicates.size() > kMaxLeaves) return Error("too many predicates");
      }
    }
    // `@name` names the op position; accepted before or after `?`.
    tree.optional = Consume('?');
    if (Consume('@')) {
      const absl::string_view name = Word();
      if (!IsCaptureName(name)) return Error("expected a capture name after '@'");
      tree.capture = std::string(name);
      if (!tree.optional) tree.optional = Consume('?');
    }
    return tree;
  }

  // True if the next token is a constant written as a pattern arg: a number, None, True,
  // False or a quoted string. (Dtypes and tuples are not: they read as leaves / subtrees.)
  bool StartsConstantLeaf() {
    SkipSpace();
    if (pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"')) return true;
    const size_t start = pos_;
    const absl::string_view word = Word();
    pos_ = start;
    double d;
    return word == "None" || word == "True" || word == "False" || absl::SimpleAtod(word, &d);
  }

  // subject | subject cmp (constant | subject)
  absl::StatusOr<PositionPredicate> ParsePredicate() {
    SkipSpace();
    const size_t start = pos_;
    PositionPredicate predicate;
    predicate.subject = std::string(Word());
    if (!IsKnownPredicateSubject(predicate.subject)) {
      pos_ = start;
      return Error(absl::StrCat("unknown predicate subject '", predicate.subject,
                                "' (expected users, rank, shape, dtype, bias, argN, kwarg.NAME, or a module attribute: "
                                "groups, kernel_size, stride, padding, dilation, in_channels, "
                                "out_channels, in_features, out_features, num_features, eps, "
                                "momentum, min_val, max_val, padding_mode)"));
    }
    SkipSpace();
    static constexpr std::pair<absl::string_view, PredicateOp> kOps[] = {
        {"==", PredicateOp::kEq}, {"!=", PredicateOp::kNe}, {"<=", PredicateOp::kLe},
        {">=", PredicateOp::kGe}, {"<", PredicateOp::kLt},  {">", PredicateOp::kGt}};
    absl::string_view op_text;
    for (const auto& [spelling, op] : kOps) {
      if (absl::StartsWith(text_.substr(pos_), spelling)) {
        predicate.op = op;
        op_text = spelling;
        pos_ += spelling.size();
        break;
      }
    }
    if (op_text.empty()) {
      if (predicate.subject != "bias") {
        return Error(absl::StrCat("predicate '", predicate.subject,
                                  "' needs a comparison (==, !=, <, <=, >, >=); only bias "
                                  "stands alone"));
      }
      predicate.text = predicate.subject;
      return predicate;
    }
    SkipSpace();
    const size_t rhs = pos_;
    if (Consume('@')) {  // a relation: `@name.subject`
      const absl::string_view word = Word();
      const size_t dot = word.find('.');
      if (dot == absl::string_view::npos || !IsCaptureName(word.substr(0, dot)) ||
          !IsKnownPredicateSubject(word.substr(dot + 1))) {
        pos_ = rhs;
        return Error("expected '@name.subject' (a named op position and a predicate subject)");
      }
      predicate.other_name = std::string(word.substr(0, dot));
      predicate.other_subject = std::string(word.substr(dot + 1));
      predicate.text = absl::StrCat(predicate.subject, " ", op_text, " @", word);
      return predicate;
    }
    const absl::string_view word = Word();
    if (IsKnownPredicateSubject(word)) {
      predicate.other_subject = std::string(word);
      predicate.text = absl::StrCat(predicate.subject, " ", op_text, " ", word);
    } else {
      pos_ = rhs;
      ASSIGN_OR_RETURN(predicate.constant, ParseConstant(0));
      if (predicate.constant.is_list() && predicate.op != PredicateOp::kEq &&
          predicate.op != PredicateOp::kNe) {
        return Error(absl::StrCat("a tuple compares with == or != only, not ", op_text));
      }
      predicate.text =
          absl::StrCat(predicate.subject, " ", op_text, " ", ConstantText(predicate.constant));
    }
    return predicate;
  }

  absl::StatusOr<Argument> ParseConstant(int depth) {
    SkipSpace();
    if (depth > kMaxDepth) return Error("constant nested too deeply");
    if (Consume('(')) {
      std::vector<Argument> items;
      while (!Consume(')')) {
        if (!items.empty() && !Consume(',')) return Error("expected ',' or ')'");
        if (Consume(')')) break;
        ASSIGN_OR_RETURN(Argument item, ParseConstant(depth + 1));
        items.push_back(std::move(item));
        if (items.size() > static_cast<size_t>(Pattern::kMaxPositions)) {
          return Error("too many elements");
        }
      }
      return Argument::Tuple(std::move(items));
    }
    if (pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"')) {
      const char quote = text_[pos_++];
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] != quote) ++pos_;
      if (pos_ == text_.size()) return Error("unterminated string");
      const absl::string_view s = text_.substr(start, pos_ - start);
      ++pos_;
      return Argument::String(s);
    }
    const absl::string_view word = Word();
    if (word == "None") return Argument::None();
    if (word == "True") return Argument::Bool(true);
    if (word == "False") return Argument::Bool(false);
    int64_t i;
    if (absl::SimpleAtoi(word, &i)) return Argument::Int(i);
    double d;
    if (absl::SimpleAtod(word, &d)) return Argument::Float(d);
    if (const std::optional<DType> dtype = DTypeFromName(word)) return Argument::Dtype(*dtype);
    return Error(absl::StrCat("expected a constant (None, True, False, a number, a quoted "
                              "string, a dtype such as torch.float32 or a tuple), got '", word,
                              "'"));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::vector<std::string> outputs_;
};

absl::StatusOr<PatternPosition> ResolvePosition(const TextTree& tree, absl::string_view text);

// Appends `tree` (complex format) to `out` in preorder; returns its position.
absl::StatusOr<int> FlattenComplex(const TextTree& tree, std::vector<PatternPosition>& out,
                                   absl::string_view text) {
  const TextTree& op = tree.is_tuple ? tree.items[0] : tree;
  if (op.is_tuple) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern '", text, "': the first element of a tuple must be an op, not a tuple, at "
        "offset ", op.offset));
  }
  if (out.size() >= static_cast<size_t>(Pattern::kMaxPositions)) {
    return absl::InvalidArgumentError(absl::StrCat("pattern '", text, "': more than ",
                                                   Pattern::kMaxPositions, " positions"));
  }
  ASSIGN_OR_RETURN(PatternPosition leaf, ResolvePosition(op, text));
  if (leaf.match_all && out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern '", text, "': the outermost op cannot be MatchAllNode (it would match "
        "every node)"));
  }
  if (leaf.match_all && tree.is_tuple && tree.items.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern '", text, "': MatchAllNode cannot have args"));
  }
  const int self = static_cast<int>(out.size());
  out.push_back(std::move(leaf));
  if (tree.is_tuple) {
    for (size_t i = 1; i < tree.items.size(); ++i) {
      ASSIGN_OR_RETURN(int child, FlattenComplex(tree.items[i], out, text));
      out[self].args.push_back(child);
    }
  }
  return self;
}

absl::Status CheckOutermost(const std::vector<PatternPosition>& positions,
                            absl::string_view text) {
  if (positions.empty()) return absl::InvalidArgumentError("empty pattern");
  if (positions[0].match_all) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern '", text, "': the outermost op cannot be MatchAllNode (it would match "
        "every node)"));
  }
  return absl::OkStatus();
}

// Renders the kwargs a pattern author added; the built-in allowances of the spelling come
// first in the list and are implied by the spelling itself.
std::string UserKwargsToString(const PatternPosition& p) {
  const size_t skip = static_cast<size_t>(p.builtin_kwargs);
  if (p.allowed_kwargs.size() <= skip) return "";
  std::vector<std::string> parts;
  for (size_t i = skip; i < p.allowed_kwargs.size(); ++i) {
    const AllowedKwarg& kw = p.allowed_kwargs[i];
    parts.push_back(kw.value ? absl::StrCat(kw.key.name(), "=", ConstantText(*kw.value))
                             : std::string(kw.key.name()));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

// The `[...]` and `?` suffixes of a position, as written.
std::string SuffixToString(const PatternPosition& p) {
  std::string out;
  if (!p.predicates.empty()) {
    std::vector<std::string> parts;
    for (const PositionPredicate& predicate : p.predicates) parts.push_back(predicate.text);
    absl::StrAppend(&out, "[", absl::StrJoin(parts, ", "), "]");
  }
  if (p.optional) out += "?";
  if (!p.capture.empty() && !p.match_all) absl::StrAppend(&out, "@", p.capture);
  return out;
}

// One written position (`ReLU | ReLU6{inplace}[users == 1]?`) resolved: the leaves'
// alternatives united, each remembering its leaf; commutative only if every leaf is.
absl::StatusOr<PatternPosition> ResolvePosition(const TextTree& tree, absl::string_view text) {
  PatternPosition position;
  if (!tree.reference.empty()) {
    position.match_all = true;
    position.capture = tree.reference;
    position.spelling = absl::StrCat("$", tree.reference);
    return position;
  }
  if (tree.constant.has_value()) {
    position.match_all = true;
    position.constant = tree.constant;
    position.spelling = ConstantText(*tree.constant);
    return position;
  }
  if (tree.names.size() == 1) {
    ASSIGN_OR_RETURN(position, ResolvePatternLeaf(tree.names[0]));
    position.leaves = {tree.names[0]};
    position.leaf_of_alternative.assign(position.alternatives.size(), 0);
  } else {
    bool commutative = true;
    for (size_t i = 0; i < tree.names.size(); ++i) {
      ASSIGN_OR_RETURN(PatternPosition leaf, ResolvePatternLeaf(tree.names[i]));
      if (leaf.match_all) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern '", text, "': MatchAllNode cannot be an alternative, at offset ",
            tree.offset));
      }
      commutative &= leaf.commutative;
      for (const OpRef& op : leaf.alternatives) {
        if (position.Matches(op)) continue;  // `add | torch.add`: tried once
        position.alternatives.push_back(op);
        position.leaf_of_alternative.push_back(static_cast<uint8_t>(i));
      }
      for (AllowedKwarg& kw : leaf.allowed_kwargs) {
        const bool seen = std::any_of(
            position.allowed_kwargs.begin(), position.allowed_kwargs.end(),
            [&](const AllowedKwarg& a) { return a.key == kw.key && a.value == kw.value; });
        if (!seen) position.allowed_kwargs.push_back(std::move(kw));
      }
      position.leaves.push_back(tree.names[i]);
    }
    position.commutative = commutative;
    position.spelling = absl::StrJoin(tree.names, " | ");
  }
  position.builtin_kwargs = static_cast<int>(position.allowed_kwargs.size());
  for (const AllowedKwarg& kw : tree.kwargs) position.allowed_kwargs.push_back(kw);
  position.predicates = tree.predicates;
  position.optional = tree.optional;
  position.capture = tree.capture;
  if (position.match_all && (!tree.predicates.empty() || tree.optional)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern '", text, "': MatchAllNode takes no predicates and cannot be optional, at "
        "offset ", tree.offset));
  }
  return position;
}

// Links the named captures of `preorder` (see the grammar in pattern.h): the first
// occurrence of a name binds it, later `$name` occurrences are `same_as` it, and each
// relation predicate (`@name.subject`) gets the position of its named op position.
absl::Status ResolveCaptures(std::vector<PatternPosition>& preorder) {
  std::vector<std::pair<std::string, int>> first;  // name -> first position; few names
  const auto find = [&first](absl::string_view name) {
    for (const auto& [n, pos] : first) {
      if (n == name) return pos;
    }
    return -1;
  };
  for (PatternPosition& p : preorder) {
    p.same_as = -1;
    p.referenced = false;
    p.has_relations = false;
  }
  for (int i = 0; i < static_cast<int>(preorder.size()); ++i) {
    PatternPosition& p = preorder[i];
    if (p.capture.empty()) continue;
    if (p.constant.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position ", i, ": a constant cannot be named ('", p.capture, "')"));
    }
    if (!p.match_all && p.optional) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position ", i, " ('", p.spelling, "@", p.capture,
          "'): an optional position cannot be named (when absent there is no node to refer "
          "to)"));
    }
    const int earlier = find(p.capture);
    if (earlier < 0) {
      first.emplace_back(p.capture, i);
      continue;
    }
    if (!p.match_all) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position ", i, " ('", p.spelling, "@", p.capture, "'): the name '",
          p.capture, "' is already used at position ", earlier, " ('",
          preorder[earlier].spelling, "'); name an op position once, before (in preorder) "
          "every $", p.capture, " that refers to it"));
    }
    p.same_as = earlier;
    if (!preorder[earlier].match_all) preorder[earlier].referenced = true;
  }
  for (int i = 0; i < static_cast<int>(preorder.size()); ++i) {
    PatternPosition& p = preorder[i];
    for (PositionPredicate& predicate : p.predicates) {
      predicate.other_position = -1;
      if (predicate.other_name.empty()) continue;
      const int other = find(predicate.other_name);
      if (other < 0 || preorder[other].match_all) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern position ", i, " ('", p.spelling, "'): predicate '", predicate.text,
            "' names '@", predicate.other_name, "', which is not a named op position (write "
            "e.g. Conv2d@", predicate.other_name, ")"));
      }
      predicate.other_position = other;
      p.has_relations = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool PatternPosition::Matches(OpRef op) const {
  for (const OpRef& alt : alternatives) {
    if (alt == op) return true;
  }
  return false;
}

absl::string_view PatternPosition::LeafFor(OpRef op) const {
  if (leaves.size() <= 1) return spelling;
  for (size_t i = 0; i < alternatives.size() && i < leaf_of_alternative.size(); ++i) {
    if (alternatives[i] == op) return leaves[leaf_of_alternative[i]];
  }
  return spelling;
}

bool IsKnownPredicateSubject(absl::string_view subject) {
  static constexpr absl::string_view kSubjects[] = {
      "users",        "rank",         "shape",       "dtype",       "bias",        "groups",
      "kernel_size",  "stride",       "padding",     "dilation",    "in_channels",
      "out_channels", "in_features",  "out_features", "num_features", "eps",
      "momentum",     "min_val",      "max_val",     "padding_mode"};
  for (absl::string_view known : kSubjects) {
    if (subject == known) return true;
  }
  // argN: a positional arg (N < kMaxPositions); kwarg.NAME: a keyword arg.
  int n;
  if (absl::StartsWith(subject, "arg") && subject.size() <= 5 &&
      std::all_of(subject.begin() + 3, subject.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
      absl::SimpleAtoi(subject.substr(3), &n) && n < Pattern::kMaxPositions) {
    return true;
  }
  if (absl::StartsWith(subject, "kwarg.")) {
    const absl::string_view name = subject.substr(6);
    return IsIdentifier(name) && !absl::StrContains(name, '.');
  }
  return false;
}

absl::StatusOr<PatternPosition> ResolvePatternLeaf(absl::string_view name) {
  if (name == kMatchAllName) {
    PatternPosition leaf;
    leaf.match_all = true;
    leaf.spelling = std::string(name);
    return leaf;
  }
  const auto unknown = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown pattern leaf '", name, "': ", why,
        " (write a module type like Conv2d or nni.ConvReLU2d, a function like torch.add or "
        "F.relu, an aten op like aten.conv2d.default, an ONNX op like onnx.Conv, method:NAME, "
        "or one of add, mul, relu, "
        "sigmoid, MatchAllNode)"));
  };
  // Explicit spellings.
  if (absl::StartsWith(name, "module:")) {
    const absl::string_view type = name.substr(7);
    if (!IsIdentifier(type)) return unknown("bad module type");
    PatternPosition leaf;
    leaf.spelling = std::string(name);
    leaf.alternatives.push_back({OpKind::kCallModule, Symbol::Intern(type)});
    return leaf;
  }
  if (absl::StartsWith(name, "method:")) {
    const absl::string_view method = name.substr(7);
    if (!IsIdentifier(method) || absl::StrContains(method, '.')) return unknown("bad method");
    return FunctionLeaf(name, {{OpKind::kCallMethod, method}});
  }
  if (absl::StartsWith(name, "function:")) {
    const absl::string_view function = name.substr(9);
    if (!IsIdentifier(function)) return unknown("bad function name");
    return FunctionLeaf(name, {{OpKind::kCallFunction, function}});
  }
  if (!IsIdentifier(name)) return unknown("not a name");
  // torch.export's spelling: the op's FX form, with every spelling that form has (a leaf
  // aten.add_.Tensor is `add`).
  if (absl::StartsWith(name, "aten.")) {
    const std::optional<absl::string_view> fx = FxFormOfAtenOp(name);
    if (!fx.has_value()) return unknown("not an aten op fuselage reads (patterns/aten_ops.cc)");
    const absl::string_view base = fx->substr(fx->rfind('.') + 1);
    const bool has_alias = *fx == "operator.add" || *fx == "operator.mul" ||
                           *fx == "torch.nn.functional.relu" || *fx == "torch.sigmoid";
    ASSIGN_OR_RETURN(PatternPosition leaf,
                     has_alias ? ResolvePatternLeaf(base)
                               : FunctionLeaf(name, {{OpKind::kCallFunction, *fx}}));
    leaf.spelling = std::string(name);
    return leaf;
  }
  // ONNX's spelling: every form fuselage.from_onnx gives the op (patterns/onnx_ops.h), so
  // onnx.Conv is Conv1d | Conv2d | Conv3d and onnx.Clip is ReLU6 | ReLU | Hardtanh |
  // torch.clamp.
  if (absl::StartsWith(name, "onnx.")) {
    const std::optional<absl::Span<const absl::string_view>> forms =
        FxFormsOfOnnxOp(name.substr(5));
    if (!forms.has_value()) {
      return unknown("not an ONNX op fuselage reads (patterns/onnx_ops.cc)");
    }
    PatternPosition leaf;
    leaf.spelling = std::string(name);
    bool commutative = true;
    for (absl::string_view form : *forms) {
      ASSIGN_OR_RETURN(PatternPosition part, ResolvePatternLeaf(form));
      commutative &= part.commutative;
      for (const OpRef& op : part.alternatives) {
        if (!leaf.Matches(op)) leaf.alternatives.push_back(op);
      }
      for (AllowedKwarg& kw : part.allowed_kwargs) {
        const bool seen = std::any_of(
            leaf.allowed_kwargs.begin(), leaf.allowed_kwargs.end(),
            [&](const AllowedKwarg& a) { return a.key == kw.key && a.value == kw.value; });
        if (!seen) leaf.allowed_kwargs.push_back(std::move(kw));
      }
    }
    leaf.commutative = commutative;
    leaf.builtin_kwargs = static_cast<int>(leaf.allowed_kwargs.size());
    return leaf;
  }
  // The aliases users expect.
  if (name == "add" || name == "mul") {
    const std::string op_name = absl::StrCat("operator.", name);
    const std::string torch_name = absl::StrCat("torch.", name);
    return FunctionLeaf(name, {{OpKind::kCallFunction, op_name},
                               {OpKind::kCallFunction, torch_name},
                               {OpKind::kCallMethod, name}});
  }
  if (name == "relu") {
    return FunctionLeaf(name, {{OpKind::kCallFunction, "torch.relu"},
                               {OpKind::kCallFunction, "torch.nn.functional.relu"},
                               {OpKind::kCallMethod, "relu"}});
  }
  if (name == "sigmoid") {
    return FunctionLeaf(name, {{OpKind::kCallFunction, "torch.sigmoid"},
                               {OpKind::kCallFunction, "torch.nn.functional.sigmoid"},
                               {OpKind::kCallMethod, "sigmoid"}});
  }
  // Qualified names.
  if (IsModuleNamespace(name)) {
    PatternPosition leaf;
    leaf.spelling = std::string(name);
    leaf.alternatives.push_back({OpKind::kCallModule, Symbol::Intern(name)});
    return leaf;
  }
  if (absl::StartsWith(name, "F.")) {
    return FunctionLeaf(name, {{OpKind::kCallFunction,
                                absl::StrCat(kFunctionalPrefix, name.substr(2))}});
  }
  if (absl::StartsWith(name, "torch.") || absl::StartsWith(name, "operator.")) {
    return FunctionLeaf(name, {{OpKind::kCallFunction, name}});
  }
  if (absl::StartsWith(name, "_operator.")) {
    return FunctionLeaf(name, {{OpKind::kCallFunction, absl::StrCat("operator.",
                                                                     name.substr(10))}});
  }
  // Short module names: Conv2d -> nn.Conv2d.
  if (std::isupper(static_cast<unsigned char>(name[0])) && !absl::StrContains(name, '.')) {
    PatternPosition leaf;
    leaf.spelling = std::string(name);
    leaf.alternatives.push_back({OpKind::kCallModule, Symbol::Intern(absl::StrCat("nn.", name))});
    return leaf;
  }
  return unknown("not a known alias, module type or qualified function");
}

absl::StatusOr<Pattern> Pattern::Parse(absl::string_view text, PatternFormat format) {
  PatternParser parser(text);
  ASSIGN_OR_RETURN(TextTree tree, parser.ParseAll());
  std::vector<PatternPosition> positions;
  if (format == PatternFormat::kComplex || !tree.is_tuple) {
    RETURN_IF_ERROR(FlattenComplex(tree, positions, text).status());
  } else {
    // Sequence format: (a, b, c) in execution order == complex (c, (b, a)).
    if (tree.items.size() > static_cast<size_t>(kMaxPositions)) {
      return absl::InvalidArgumentError(absl::StrCat("pattern '", text, "': more than ",
                                                     kMaxPositions, " positions"));
    }
    for (auto it = tree.items.rbegin(); it != tree.items.rend(); ++it) {
      if (it->is_tuple) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern '", text, "': a sequence pattern is a flat tuple of ops; nested tuple at "
            "offset ", it->offset, " (use the complex format for trees)"));
      }
      ASSIGN_OR_RETURN(PatternPosition leaf, ResolvePosition(*it, text));
      if (leaf.match_all && std::next(it) != tree.items.rend()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern '", text, "': MatchAllNode can only be first in a sequence pattern"));
      }
      const int self = static_cast<int>(positions.size());
      if (self > 0) positions[self - 1].args.push_back(self);
      positions.push_back(std::move(leaf));
    }
  }
  RETURN_IF_ERROR(CheckOutermost(positions, text));
  ASSIGN_OR_RETURN(Pattern pattern, FromPositions(std::move(positions)));
  if (!parser.outputs().empty()) {
    const absl::Status declared = pattern.DeclareOutputs(parser.outputs());
    if (!declared.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("pattern '", text, "': ", declared.message()));
    }
  }
  return pattern;
}

absl::Status Pattern::DeclareOutputs(absl::Span<const std::string> names) {
  std::vector<int> outputs = {0};
  for (const std::string& name : names) {
    int found = -1;
    for (int i = 0; i < size(); ++i) {
      const PatternPosition& p = positions_[i];
      if (p.capture == name && p.same_as < 0) found = i;
    }
    if (found < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "declared output $", name, " names no position; name an op position with '@", name,
          "'"));
    }
    const PatternPosition& p = positions_[found];
    if (p.match_all) {
      return absl::InvalidArgumentError(absl::StrCat(
          "declared output $", name, " is a wildcard (an input of the match), not an op "
          "position; only a node the match computes can be an output"));
    }
    if (found == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "declared output $", name, " is the outermost op, which is always output 0"));
    }
    if (std::find(outputs.begin(), outputs.end(), found) != outputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output $", name, " is declared twice"));
    }
    outputs.push_back(found);
  }
  for (PatternPosition& p : positions_) p.output_index = -1;
  for (size_t i = 1; i < outputs.size(); ++i) {
    positions_[outputs[i]].output_index = static_cast<int>(i);
  }
  output_positions_ = std::move(outputs);
  return absl::OkStatus();
}

absl::StatusOr<Pattern> Pattern::FromPositions(std::vector<PatternPosition> preorder) {
  if (preorder.size() > static_cast<size_t>(kMaxPositions)) {
    return absl::InvalidArgumentError(absl::StrCat("pattern has more than ", kMaxPositions,
                                                   " positions"));
  }
  RETURN_IF_ERROR(CheckOutermost(preorder, "<positions>"));
  // Walk in preorder and require it to visit 0, 1, 2, ... exactly once each.
  int next = 0;
  std::vector<int> stack = {0};
  for (PatternPosition& p : preorder) {
    p.parent = -1;
    p.arg_index = -1;
    p.output_index = -1;  // DeclareOutputs sets it, on the built pattern
  }
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    if (i != next) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern positions are not in preorder: expected position ", next, ", found ", i));
    }
    ++next;
    PatternPosition& p = preorder[i];
    if (p.match_all != p.alternatives.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position ", i, " ('", p.spelling,
          "'): an op position needs alternatives and MatchAllNode must have none"));
    }
    if (p.match_all && !p.args.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pattern position ", i, ": MatchAllNode cannot have args"));
    }
    if (p.optional && (i == 0 || p.args.size() != 1 || preorder[p.args[0]].match_all)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position ", i, " ('", p.spelling, "?'): an optional position needs exactly "
          "one pattern arg, an op (it takes its place when absent), and cannot be the "
          "outermost op"));
    }
    for (const PositionPredicate& predicate : p.predicates) {
      if (!IsKnownPredicateSubject(predicate.subject) ||
          (!predicate.other_subject.empty() &&
           !IsKnownPredicateSubject(predicate.other_subject))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern position ", i, " ('", p.spelling, "'): predicate '", predicate.text,
            "' names an unknown subject"));
      }
    }
    for (size_t a = p.args.size(); a-- > 0;) {
      const int child = p.args[a];
      if (child <= i || child >= static_cast<int>(preorder.size()) ||
          preorder[child].parent != -1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern position ", i, " ('", p.spelling, "'): arg ", a,
            " refers to position ", child, ", which is out of range or already used"));
      }
      preorder[child].parent = i;
      preorder[child].arg_index = static_cast<int>(a);
      stack.push_back(child);
    }
  }
  if (next != static_cast<int>(preorder.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern positions ", next, ".. are not reachable from the outermost op"));
  }
  RETURN_IF_ERROR(ResolveCaptures(preorder));
  Pattern pattern;
  for (const PatternPosition& p : preorder) {
    pattern.has_alternatives_ |= p.leaves.size() > 1;
    pattern.has_optional_ |= p.optional;
  }
  pattern.positions_ = std::move(preorder);
  pattern.ComputeDefaults();
  return pattern;
}

absl::StatusOr<int> Pattern::PositionAtPath(absl::string_view path) const {
  int pos = 0;
  if (path.empty()) return pos;
  for (absl::string_view step : absl::StrSplit(path, '.')) {
    int arg;
    if (!absl::SimpleAtoi(step, &arg) || arg < 0 ||
        arg >= static_cast<int>(positions_[pos].args.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern position path '", path, "' does not exist in ", ToString(), " (step '",
          step, "' at '", positions_[pos].spelling, "', which has ",
          positions_[pos].args.size(), " pattern args)"));
    }
    pos = positions_[pos].args[arg];
  }
  return pos;
}

std::string Pattern::PathOf(int i) const {
  std::vector<int> steps;
  for (int p = i; positions_[p].parent != -1; p = positions_[p].parent) {
    steps.push_back(positions_[p].arg_index);
  }
  return absl::StrJoin(steps.rbegin(), steps.rend(), ".");
}

void Pattern::ComputeDefaults() {
  int root = 0;
  std::vector<int> chain;  // from the outermost op down arg 0 to the root
  for (int pos = 0;; pos = positions_[pos].args[0]) {
    chain.push_back(pos);
    root = pos;
    if (positions_[pos].args.empty() || positions_[positions_[pos].args[0]].match_all) break;
  }
  default_root_ = root;
  default_extras_.clear();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const std::vector<int>& args = positions_[*it].args;
    // The root's own args are the fused node's leading args, not extras.
    const size_t first = (it == chain.rbegin()) ? args.size() : 1;
    for (size_t a = first; a < args.size(); ++a) {
      const PatternPosition& arg = positions_[args[a]];
      // A constant is part of the pattern and a repeated `$name` the same input again:
      // neither is a separate input of the fused node.
      if (arg.match_all && !arg.constant.has_value() && arg.same_as < 0) {
        default_extras_.push_back(args[a]);
      }
    }
  }
}

std::string Pattern::ToString() const {
  // Recursive rendering of a preorder tree.
  std::string out;
  auto render = [&](auto&& self, int i) -> void {
    const PatternPosition& p = positions_[i];
    if (p.args.empty()) {
      absl::StrAppend(&out, p.spelling, UserKwargsToString(p), SuffixToString(p));
      return;
    }
    absl::StrAppend(&out, "(", p.spelling, UserKwargsToString(p), SuffixToString(p));
    for (int child : p.args) {
      absl::StrAppend(&out, ", ");
      self(self, child);
    }
    absl::StrAppend(&out, ")");
  };
  render(render, 0);
  for (size_t i = 1; i < output_positions_.size(); ++i) {
    absl::StrAppend(&out, i == 1 ? " -> $" : ", $", positions_[output_positions_[i]].capture);
  }
  return out;
}

}  // namespace fuselage
