// Pattern: the one internal form of a fusion pattern, a tree of op leaves read outermost op
// first, exactly like PyTorch's "complex" pattern format:
//
//   (ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))
//     position 0  ReLU                 the outermost op (the last to run)
//     position 1  add                  = arg 0 of ReLU
//     position 2  BatchNorm2d          = arg 0 of add
//     position 3  Conv2d               = arg 0 of BatchNorm2d (its own args unchecked)
//     position 4  MatchAllNode         = arg 1 of add (anything, not claimed)
//
// Positions are numbered in preorder (outermost = 0). A position is also addressed by its
// *path*: the arg indices from the outermost op, written dotted ("0.0.0" is Conv2d above,
// "0.1" the MatchAllNode, "" the outermost op). Configs use paths to name the root node
// and extra inputs (see fusion_rule.h).
//
// Text syntax (both formats share it):
//   text       := pattern ('->' '$' name (',' '$' name)*)?      declared outputs, see below
//   pattern    := position | '$' name | constant | '(' pattern (',' pattern)* ','? ')'
//   position   := leaf ('|' leaf)* kwargs? predicates? '?'? ('@' name)?
//   leaf       := name                                      (see the leaf names below)
//   kwargs     := '{' (key ('=' constant)?) (',' ...)* '}'   e.g. add{alpha=1}, relu{inplace}
//   predicates := '[' predicate (',' predicate)* ']'         all must hold
//   predicate  := subject | subject cmp (constant | subject | '@' name '.' subject)
//                                                           cmp: == != < <= > >=
//   constant   := None | True | False | number | 'string' | dtype | '(' constant, ... ')'
//
// Alternatives: `ReLU | ReLU6 | Hardswish` matches a node any of the leaves matches (their
// OpRefs are united; `add` alone already names three spellings). The kwargs and predicates
// written after the last leaf apply to the whole position. A fused node whose rule has a
// position of two or more leaves records in its meta `pattern_alternatives` the leaf that
// matched at each op position (a list of strings in preorder, e.g. ["ReLU6", "BatchNorm2d",
// "Conv2d"]; "" for an absent optional position).
//
// Predicates (checked by the matcher after the op and kwargs matched; patterns/matcher.h):
//   users                        the node's number of users
//   rank, shape, dtype           from the node's recorded meta "shape" / "dtype" (the
//                                exporter records them when traced with example inputs);
//                                a node without it does not match (explain says so)
//   argN, kwarg.NAME             positional arg N / keyword arg NAME of the node, when
//                                it is a constant (a node there, or no such arg: no match)
//   bias                         true iff the node's module has a tensor "bias"
//   groups, kernel_size, stride, padding, dilation, in_channels, out_channels,
//   in_features, out_features, num_features, eps, momentum, min_val, max_val, padding_mode
//                                the call_module node's module attribute of that name; a
//                                module without it does not match (explain says so)
// Any other subject is a parse error. Numbers compare as numbers (1 == 1.0); lists and
// tuples compare element by element with == and != only; `bias` alone means `bias == True`.
// Examples:
//   (ReLU | ReLU6, (BatchNorm2d, Conv2d[groups == in_channels, groups > 1]))  depthwise only
//   Conv2d[kernel_size == (3, 3), bias]
//   (ReLU, add[users == 1])
//   (torch.cat{dim}[kwarg.dim == 1], MatchAllNode)     a kwarg must also be allowed: {dim}
//   (torch.flatten[arg1 == 1], MatchAllNode)
//
// Named captures (DAG patterns; issue 21 item 3). `$name` as an arg is a wildcard (like
// MatchAllNode: anything, not claimed) bound to `name`; `Op@name` names an op position.
// Every later `$name` must bind the very node (or an equal constant) the first occurrence
// bound, in preorder; a `$name` naming an op position must come after it in preorder.
// An op position is named at most once, and an optional one cannot be named.
//   (mul, $x, (sigmoid | Sigmoid, $x))                     SiLU written as x * sigmoid(x)
//   (operator.truediv, (mul, $x, (F.relu6 | ReLU6, (add, $x, 3))), 6)   hardswish written out
//   (add, Conv2d@c, (ReLU, $c))                            the conv read twice in the match
// A later `$name` is not an extra input of its own (the fused node reads each distinct
// input once); the first `$name` is, like MatchAllNode. A named op position may have
// several users, all inside the match (matcher.h rule 3).
//
// Multi-output patterns (issue 21 item 3). A match yields the outermost op's node as
// output 0 and, after `->`, each listed op position (named with `Op@name`) as output 1,
// 2, ... in the order listed. A declared output may be read outside the match (matcher.h
// rules 3 and 11); any other inner node may not. Without `->` a pattern has one output and
// means exactly what it meant before. Only wrap_in_sequence into fuselage.FusedSubgraph
// (fusion_rule.h) fuses a multi-output match: one module whose forward returns the tuple
// of outputs, each outside reader then reading `operator.getitem(fused, i)`.
//   (ReLU, (BatchNorm2d@bn, Conv2d)) -> $bn        conv-bn-relu whose bn also feeds a
//                                                  residual add outside the pattern
//   (mul, (operator.getitem, (torch.chunk{dim}@c, $x, 2), 0),
//         (sigmoid, (operator.getitem@b, $c, 1))) -> $b
//                                                  GLU from a chunk, whose second half is
//                                                  also read outside
// The GLU without `-> $b` is a single-output DAG pattern: the chunk's two getitems are
// both inside the match. A declared output must be a named op position other than the
// outermost (a wildcard is an input, not an output), each listed once.
//
// Constant leaves: a number, None, True, False or a quoted string as an arg (`3`, `6.0`)
// matches only an equal constant arg (1 == 1.0), never a node; it is never an extra input.
//
// Relations: a predicate's right-hand side `@name.subject` reads the subject off the node
// bound at the op position named `name` (written anywhere in the pattern), e.g.
// `(add[shape == @c.shape], (BatchNorm2d, Conv2d@c), MatchAllNode)`: the add has the conv's
// shape. Relations are checked once the whole pattern is bound (matcher.h rule 10).
//
// Optional positions: `BatchNorm2d?` may be absent. It must have exactly one pattern arg
// and not be the outermost op; when absent, its arg 0 takes its place (the node there is
// read from the same edge), and its binding is None. The matcher tries present first,
// then absent. `(ReLU, (BatchNorm2d?, Conv2d))` matches conv-bn-relu and conv-relu. A
// fused node whose rule has optional positions records in its meta `pattern_absent` the
// dotted paths of the optional positions that were absent (a list, empty if none).
//
// Complex format: the first element of a tuple is the op, the rest are its args.
// Sequence format (PyTorch's simple forward format): a flat tuple of leaves in execution
// order, `(Conv2d, BatchNorm2d, ReLU)` == complex `(ReLU, (BatchNorm2d, Conv2d))`.
// A flat tuple means different things in the two formats, so the caller says which one.
//
// Leaf names (resolved once, at parse time, to (op kind, Symbol) alternatives):
//   MatchAllNode                 any arg (node or constant); it is not claimed by the match
//   add, mul                     call_function operator.X / torch.X and call_method X;
//                                commutative: a binary node matches with its args swapped
//   relu                         call_function torch.relu / torch.nn.functional.relu and
//                                call_method relu (kwarg inplace allowed)
//   sigmoid                      call_function torch.sigmoid / torch.nn.functional.sigmoid
//                                and call_method sigmoid (nn.Sigmoid is `Sigmoid`)
//   F.x, torch.nn.functional.x   exactly call_function torch.nn.functional.x
//   torch.x, operator.x          exactly that call_function (torch.add / operator.add keep
//                                their commutativity and built-in kwarg allowances)
//   method:x / function:q.x / module:T   explicit spelling of a method / function / module
//   aten.op.overload             torch.export's spelling: the op's FX form
//                                (patterns/aten_ops.h) with all its spellings, so
//                                aten.add_.Tensor is `add` and aten.conv2d.default is
//                                F.conv2d
//   onnx.OpType                  ONNX's spelling: every form fuselage.from_onnx gives the op
//                                (patterns/onnx_ops.h), so onnx.Conv is Conv1d | Conv2d |
//                                Conv3d and onnx.Clip is ReLU6 | ReLU | Hardtanh | torch.clamp
//   nn.T, nni.T, nnq.T, nniq.T, nnqr.T   call_module of exactly that module type
//   T (capitalized, no dot)      call_module of module type nn.T (Conv2d -> nn.Conv2d)
// Any other bare name is an error (so a typo never silently matches nothing).
//
// Keyword args: a node matches an op leaf only if each of its kwargs is allowed by the leaf,
// either by the built-in allowances (relu: inplace=any; add: alpha=1) or by the leaf's own
// `{...}` list (`key` = any value, `key=constant` = only that value). PyTorch ignores
// kwargs, which silently fuses `torch.add(x, y, alpha=2)` as if it were x + y.
#ifndef FUSELAGE_PATTERNS_PATTERN_H_
#define FUSELAGE_PATTERNS_PATTERN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/argument.h"
#include "graph/node.h"
#include "graph/symbol.h"

namespace fuselage {

// One thing an op leaf can match. For kCallModule, `target` is the module *type*
// ("nn.Conv2d"), not the node's module path.
struct OpRef {
  OpKind op = OpKind::kCallFunction;
  Symbol target;
  friend bool operator==(OpRef a, OpRef b) { return a.op == b.op && a.target == b.target; }
};

// A kwarg an op leaf tolerates on a node. Without `value`, any value is allowed.
struct AllowedKwarg {
  Symbol key;
  std::optional<Argument> value;
};

// A comparison in a position's `[...]` list (see the grammar above).
enum class PredicateOp { kTrue, kEq, kNe, kLt, kLe, kGt, kGe };

struct PositionPredicate {
  std::string subject;        // "groups", "users", "rank", ...
  PredicateOp op = PredicateOp::kTrue;  // kTrue: `subject` alone, which must be true
  // The right-hand side: a constant, or (when `other_subject` is non-empty) another
  // subject of the same node ("in_channels" in `groups == in_channels`).
  Argument constant;
  std::string other_subject;
  // A relation (`shape == @c.shape`): the right-hand subject is read off the node bound at
  // the named op position `other_name` (position `other_position`, resolved when the
  // pattern is built). Checked once the whole pattern is bound (matcher.h, rule 10).
  std::string other_name;
  int other_position = -1;
  std::string text;  // as written, normalized ("groups == in_channels"), for messages
};

// The subjects a predicate may name (see the grammar above).
bool IsKnownPredicateSubject(absl::string_view subject);

// One position of a pattern tree.
struct PatternPosition {
  bool match_all = false;           // MatchAllNode
  std::string spelling;             // as written ("Conv2d", "add", "F.relu"), for messages
  std::vector<OpRef> alternatives;  // empty iff match_all
  bool commutative = false;         // binary op whose two args may be swapped
  std::vector<AllowedKwarg> allowed_kwargs;
  // Positions of the pattern args, in arg order. Empty: the node's args are not checked.
  // Non-empty: the node must have exactly this many positional args (FX's rule).
  std::vector<int> args;
  int parent = -1;     // -1 for the outermost op
  int arg_index = -1;  // which arg of the parent this position is
  // The leaves written for this position ("ReLU", "ReLU6") and, per entry of
  // `alternatives`, the index of the leaf it came from. One leaf: leaf_of_alternative is
  // all zeros (or empty for positions built by hand).
  std::vector<std::string> leaves;
  std::vector<uint8_t> leaf_of_alternative;
  std::vector<PositionPredicate> predicates;  // all must hold
  bool optional = false;                      // `?`: may be absent (see above)
  int builtin_kwargs = 0;  // the first allowed_kwargs come from the leaves themselves
  // Named captures (`$x`, `Conv2d@c`; see the grammar above). `capture` is the name
  // written here ("" if none). `same_as` >= 0: this is a later occurrence of a name and
  // must bind the very node (or an equal constant) bound at position `same_as`, which
  // precedes it in preorder; such a position is a wildcard (match_all) and claims nothing.
  std::string capture;
  int same_as = -1;
  // True if a later position is `same_as` this op position: its node is read twice inside
  // the match, so it may have more than one user, all inside the match (matcher.h rule 3).
  bool referenced = false;
  // A constant leaf (`3`, `None`, `'same'`): a wildcard that only matches an equal
  // constant arg (1 == 1.0). Never an extra input by default.
  std::optional<Argument> constant;
  // True if some predicate of this position is a relation (`@name.subject`).
  bool has_relations = false;
  // i >= 1: this op position is the pattern's declared output i (`-> $name`, see the
  // grammar above), whose node may be read outside the match; -1: not declared.
  int output_index = -1;

  bool Matches(OpRef op) const;
  // The leaf that accepts `op` ("ReLU6"), or the spelling if there is one leaf only.
  absl::string_view LeafFor(OpRef op) const;
};

enum class PatternFormat {
  kComplex,   // PyTorch's nested format, outermost op first
  kSequence,  // PyTorch's simple format, a flat tuple in execution order
};

class Pattern {
 public:
  // Parses `text` in `format`. InvalidArgument naming the offending token and its offset
  // on a syntax error, an unknown leaf name, MatchAllNode as the outermost op, a sequence
  // pattern that is nested, or a pattern deeper/larger than kMaxPositions.
  static absl::StatusOr<Pattern> Parse(absl::string_view text, PatternFormat format);

  // Builds a pattern from already-parsed leaves (for C++ users): the same as parsing the
  // complex-format text, without the text.
  static absl::StatusOr<Pattern> FromPositions(std::vector<PatternPosition> preorder);

  const std::vector<PatternPosition>& positions() const { return positions_; }
  const PatternPosition& position(int i) const { return positions_[i]; }
  const PatternPosition& outermost() const { return positions_[0]; }
  int size() const { return static_cast<int>(positions_.size()); }
  // PyTorch's sort key: the number of leaves including MatchAllNode. Longer patterns are
  // tried first.
  int length() const { return static_cast<int>(positions_.size()); }

  // The position at dotted `path` ("" = outermost, "0.1" = arg 1 of arg 0), or
  // InvalidArgument naming the path and the pattern.
  absl::StatusOr<int> PositionAtPath(absl::string_view path) const;
  // The dotted path of position `i`.
  std::string PathOf(int i) const;

  // Default root position: the leaf reached from the outermost op by following arg 0.
  int DefaultRootPosition() const { return default_root_; }
  // Default extra inputs: the MatchAllNode positions hanging off that arg-0 chain (args 1..n
  // of each chain node), innermost chain node first, in arg order — i.e. in the order
  // the fused module's forward takes them after the root's own args.
  std::vector<int> DefaultExtraInputPositions() const { return default_extras_; }
  // The same, without a copy (the fusion pass reads it once per match).
  const std::vector<int>& default_extra_input_positions() const { return default_extras_; }

  // Complex-format text: "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))".
  std::string ToString() const;

  // The positions whose nodes the match yields, in output order: the outermost op (0),
  // then each declared output (`-> $a, $b`). {0} for a single-output pattern.
  const std::vector<int>& output_positions() const { return output_positions_; }
  // True if the pattern declares outputs beyond the outermost op (a multi-output pattern).
  bool has_declared_outputs() const { return output_positions_.size() > 1; }
  // Declares the op positions named `names` (`Op@name`) as outputs 1, 2, ... (what
  // `-> $a, $b` does in the text). InvalidArgument, changing nothing, if a name names no
  // op position, names a wildcard or the outermost op, or repeats.
  absl::Status DeclareOutputs(absl::Span<const std::string> names);

  // True if a position has two or more leaves / is optional / has predicates.
  bool has_alternatives() const { return has_alternatives_; }
  bool has_optional() const { return has_optional_; }

  // Upper bound on positions in one pattern (patterns come from config files).
  static constexpr int kMaxPositions = 64;

 private:
  // Fills default_root_ and default_extras_ from positions_ (once, when built).
  void ComputeDefaults();

  std::vector<PatternPosition> positions_;
  int default_root_ = 0;
  std::vector<int> default_extras_;
  std::vector<int> output_positions_ = {0};
  bool has_alternatives_ = false;
  bool has_optional_ = false;
};

// Resolves one leaf name (see the table above) into a position with no args.
absl::StatusOr<PatternPosition> ResolvePatternLeaf(absl::string_view name);

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_PATTERN_H_
