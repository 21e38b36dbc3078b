// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian's Abseil 20220623 ships no status macros,
// so the project keeps its own two here, and only here.
//
//   absl::Status SaveVerified(GraphModule& gm, const std::string& path) {
//     RETURN_IF_ERROR(gm.Verify());                        // returns the error as it is
//     ASSIGN_OR_RETURN(Node* x, gm.graph().AddPlaceholder("extra"));  // declares x, or returns
//     ...
//   }
#ifndef FUSELAGE_GRAPH_STATUS_MACROS_H_
#define FUSELAGE_GRAPH_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FUSELAGE_STATUS_CONCAT_INNER_(a, b) a##b
#define FUSELAGE_STATUS_CONCAT_(a, b) FUSELAGE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    const ::absl::Status _fuselage_st = (expr);  \
    if (!_fuselage_st.ok()) return _fuselage_st; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, StatusOrExpr());` assigns the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr)                                               \
  ASSIGN_OR_RETURN_IMPL_(FUSELAGE_STATUS_CONCAT_(_fuselage_sor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // FUSELAGE_GRAPH_STATUS_MACROS_H_
