#include "graph/dot.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/node.h"

namespace fuselage {
namespace {

// Fill colours by op kind, so inputs, parameters, calls and the output stand apart.
absl::string_view FillColor(OpKind op) {
  switch (op) {
    case OpKind::kPlaceholder: return "#d9ead3";
    case OpKind::kGetAttr: return "#fff2cc";
    case OpKind::kCallModule: return "#cfe2f3";
    case OpKind::kCallFunction: return "#ead1dc";
    case OpKind::kCallMethod: return "#fce5cd";
    case OpKind::kOutput: return "#d9d9d9";
  }
  return "#ffffff";
}

}  // namespace

std::string DotQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (u >= 0x20 && u != 0x7f) {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string ToDot(const GraphModule& gm) {
  std::string dot =
      "digraph GraphModule {\n"
      "  rankdir=TB;\n"
      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n";
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    // The label's lines are joined by DOT's "\n" after escaping each part, so a
    // backslash inside a name stays a literal backslash.
    std::vector<std::string> lines = {n->name(), std::string(OpKindName(n->op())),
                                      absl::StrCat("target: ", n->target().name())};
    if (n->op() == OpKind::kCallModule) {
      const Module* module = gm.FindModule(n->target().name());
      if (module != nullptr) lines.push_back(absl::StrCat("type: ", module->type().name()));
    }
    std::string label;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string quoted = DotQuote(lines[i]);
      absl::StrAppend(&label, i == 0 ? "" : "\\n", quoted.substr(1, quoted.size() - 2));
    }
    absl::StrAppend(&dot, "  ", DotQuote(n->name()), " [label=\"", label, "\", fillcolor=\"",
                    FillColor(n->op()), "\"];\n");
  }
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    for (const Node* input : n->InputNodes()) {
      absl::StrAppend(&dot, "  ", DotQuote(input->name()), " -> ", DotQuote(n->name()), ";\n");
    }
  }
  dot += "}\n";
  return dot;
}

}  // namespace fuselage
