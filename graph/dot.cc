#include "graph/dot.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/node.h"

namespace fuselage {
namespace {

absl::string_view FillColor(NodeMark mark) {
  switch (mark) {
    case NodeMark::kIo: return "#ffffff";
    case NodeMark::kFloat: return "#cfe2f3";
    case NodeMark::kQuantized: return "#b6d7a8";
    case NodeMark::kConversion: return "#ffe599";
    case NodeMark::kObserver: return "#d9d9d9";
  }
  return "#ffffff";
}

// The attributes that draw a node's marks: fill colour, and a double bold border if fused.
std::string MarkAttributes(NodeMarks marks) {
  std::string attributes = absl::StrCat("fillcolor=\"", FillColor(marks.mark), "\"");
  if (marks.fused) attributes += ", peripheries=2, penwidth=2";
  return attributes;
}

// The legend: one box per mark, chained invisibly so Graphviz stacks them.
constexpr absl::string_view kLegend =
    "  subgraph cluster_legend {\n"
    "    label=\"legend\"; fontname=\"Helvetica\"; color=\"#999999\";\n"
    "    \"legend:float\" [label=\"float op\", fillcolor=\"#cfe2f3\"];\n"
    "    \"legend:quantized\" [label=\"quantized op\", fillcolor=\"#b6d7a8\"];\n"
    "    \"legend:conversion\" [label=\"quantize / dequantize\", fillcolor=\"#ffe599\"];\n"
    "    \"legend:observer\" [label=\"observer\", fillcolor=\"#d9d9d9\"];\n"
    "    \"legend:io\" [label=\"input / parameter / output\", fillcolor=\"#ffffff\"];\n"
    "    \"legend:fused\" [label=\"fused (double border)\", fillcolor=\"#ffffff\", "
    "peripheries=2, penwidth=2];\n"
    "    \"legend:float\" -> \"legend:quantized\" -> \"legend:conversion\" -> "
    "\"legend:observer\" -> \"legend:io\" -> \"legend:fused\" [style=invis];\n"
    "  }\n";

}  // namespace

NodeMarks MarkNode(const GraphModule& gm, const Node& node) {
  NodeMarks marks;
  const Argument* pattern = node.FindMeta("pattern");
  marks.fused = pattern != nullptr;
  const absl::string_view target = node.target().name();
  switch (node.op()) {
    case OpKind::kPlaceholder:
    case OpKind::kGetAttr:
    case OpKind::kOutput:
      marks.mark = NodeMark::kIo;
      break;
    case OpKind::kCallModule: {
      const Module* module = gm.FindModule(target);
      const absl::string_view type = module == nullptr ? "" : module->type().name();
      if (absl::StartsWith(type, "nni.") || absl::StartsWith(type, "nniq.")) marks.fused = true;
      if (IsQuantizedModuleType(type)) {
        marks.mark = NodeMark::kQuantized;
      } else if (absl::EndsWith(type, "Observer") || absl::EndsWith(type, "FakeQuantize")) {
        marks.mark = NodeMark::kObserver;
      }
      break;
    }
    case OpKind::kCallFunction:
      if (absl::StartsWith(target, "torch.ops.quantized.")) {
        marks.mark = NodeMark::kQuantized;
      } else if (absl::StartsWith(target, "torch.quantize_per_") ||
                 target == "torch.dequantize") {
        marks.mark = NodeMark::kConversion;
      }
      break;
    case OpKind::kCallMethod:
      if (target == "dequantize") marks.mark = NodeMark::kConversion;
      break;
  }
  return marks;
}

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
    const Argument* pattern = n->FindMeta("pattern");
    if (pattern != nullptr && pattern->is_string()) {
      lines.push_back(absl::StrCat("pattern: ", pattern->as_string()));
    }
    std::string label;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string quoted = DotQuote(lines[i]);
      absl::StrAppend(&label, i == 0 ? "" : "\\n", quoted.substr(1, quoted.size() - 2));
    }
    absl::StrAppend(&dot, "  ", DotQuote(n->name()), " [label=\"", label, "\", ",
                    MarkAttributes(MarkNode(gm, *n)), "];\n");
  }
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    for (const Node* input : n->InputNodes()) {
      absl::StrAppend(&dot, "  ", DotQuote(input->name()), " -> ", DotQuote(n->name()), ";\n");
    }
  }
  absl::StrAppend(&dot, kLegend, "}\n");
  return dot;
}

}  // namespace fuselage
