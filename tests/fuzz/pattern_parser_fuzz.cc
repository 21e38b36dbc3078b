// Fuzz target: the pattern text parser (patterns/pattern.h: Pattern::Parse). The first
// byte picks the format (even, e.g. '0': complex; odd, e.g. '1': sequence), the rest is
// the text.
// Properties:
//  - a rejected text gets a non-empty InvalidArgument error;
//  - an accepted pattern is a well-formed tree: 1..kMaxPositions positions in preorder,
//    the outermost op is not MatchAllNode, every other position hangs off an earlier
//    parent at the arg slot it records, MatchAllNode iff no alternatives;
//  - every position's path leads back to it (PathOf / PositionAtPath);
//  - ToString() is complex-format text that parses to the same pattern (same text).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "patterns/pattern.h"
#include "tests/fuzz/fuzz_check.h"

namespace fuselage::fuzz {
namespace {

void CheckTree(const Pattern& pattern, absl::string_view text) {
  const std::string where = absl::StrCat("pattern '", text, "' -> '", pattern.ToString(), "': ");
  FUZZ_CHECK(pattern.size() >= 1 && pattern.size() <= Pattern::kMaxPositions,
             absl::StrCat(where, pattern.size(), " positions"));
  FUZZ_CHECK(pattern.outermost().parent == -1 && !pattern.outermost().match_all,
             absl::StrCat(where, "bad outermost position"));
  for (int i = 0; i < pattern.size(); ++i) {
    const PatternPosition& p = pattern.position(i);
    FUZZ_CHECK(p.match_all == p.alternatives.empty(),
               absl::StrCat(where, "position ", i, ": match_all disagrees with alternatives"));
    if (i > 0) {
      FUZZ_CHECK(p.parent >= 0 && p.parent < i,
                 absl::StrCat(where, "position ", i, " has parent ", p.parent));
      const PatternPosition& parent = pattern.position(p.parent);
      FUZZ_CHECK(p.arg_index >= 0 && p.arg_index < static_cast<int>(parent.args.size()) &&
                     parent.args[p.arg_index] == i,
                 absl::StrCat(where, "position ", i, " is not arg ", p.arg_index, " of ",
                              p.parent));
    }
    const std::string path = pattern.PathOf(i);
    absl::StatusOr<int> back = pattern.PositionAtPath(path);
    FUZZ_CHECK(back.ok() && *back == i,
               absl::StrCat(where, "path '", path, "' of position ", i, " leads to ",
                            back.ok() ? absl::StrCat(*back) : back.status().ToString()));
  }
}

}  // namespace
}  // namespace fuselage::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fuselage::Pattern;
  using fuselage::PatternFormat;
  if (size == 0) return 0;
  const PatternFormat format = (data[0] % 2 == 1) ? PatternFormat::kSequence : PatternFormat::kComplex;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<Pattern> parsed = Pattern::Parse(text, format);
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty() &&
                   parsed.status().code() == absl::StatusCode::kInvalidArgument,
               absl::StrCat("rejection is not a clear InvalidArgument: ",
                            parsed.status().ToString()));
    return 0;
  }
  fuselage::fuzz::CheckTree(*parsed, text);
  const std::string printed = parsed->ToString();
  absl::StatusOr<Pattern> reparsed = Pattern::Parse(printed, PatternFormat::kComplex);
  FUZZ_CHECK(reparsed.ok(), absl::StrCat("ToString '", printed, "' of '", text,
                                         "' does not parse: ", reparsed.status().ToString()));
  FUZZ_CHECK(reparsed->ToString() == printed,
             absl::StrCat("'", printed, "' reparses as '", reparsed->ToString(), "'"));
  return 0;
}
