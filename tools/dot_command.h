// `fuselage dot`: a model as a picture. See dot_command.cc for the command line.
#ifndef FUSELAGE_TOOLS_DOT_COMMAND_H_
#define FUSELAGE_TOOLS_DOT_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/command.h"

namespace fuselage {

Command DotCommand();

// Runs Graphviz's `dot -T<format>` (found on PATH) on `dot_text` and returns what it drew
// (the SVG text, the PNG bytes). Works in a private temporary folder that it removes.
// FailedPrecondition if `dot` is not on PATH (saying how to install Graphviz), Internal
// with dot's own first error line if it fails.
absl::StatusOr<std::string> RenderWithGraphviz(absl::string_view dot_text,
                                               absl::string_view format);

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_DOT_COMMAND_H_
