// The aten ops of torch.export programs and the FX form each takes in fuselage's graphs.
//
// fuselage reads an exported program into its one internal form (docs/architecture.md,
// "Front ends"): aten.conv2d.default is the functional conv torch.nn.functional.conv2d,
// aten.add_.Tensor is operator.add, and so on. python/fuselage/_exported.py rewrites the
// graph by this table (tests/python/test_exported.py checks the two agree); the pattern
// language resolves a leaf named by its aten spelling through it, so one pattern written
// in the user's dialect matches every spelling of the op:
//
//   FxFormOfAtenOp("aten.relu_.default")  // "torch.nn.functional.relu" (a pattern leaf:
//                                         // relu's spellings)
//   FxFormOfAtenOp("aten.cumsum.default") // nullopt: not an op fuselage reads
#ifndef FUSELAGE_PATTERNS_ATEN_OPS_H_
#define FUSELAGE_PATTERNS_ATEN_OPS_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fuselage {

struct AtenOp {
  absl::string_view aten;  // "aten.add_.Tensor": namespace, op, overload
  absl::string_view fx;    // "operator.add": the call_function target fuselage's graph holds
};

// Every aten op fuselage reads, in a fixed order.
absl::Span<const AtenOp> AtenOps();

// The FX form of `aten_name`, or nullopt for an op fuselage does not read.
std::optional<absl::string_view> FxFormOfAtenOp(absl::string_view aten_name);

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_ATEN_OPS_H_
