// Graphviz export: a GraphModule as a DOT digraph, for looking at a graph before and
// after a pass. `fuselage dot MODEL -o g.svg` renders it with Graphviz's `dot`;
// `-o g.dot` writes the text this header makes.
//
// One box per node, in graph order, labelled with its name, op kind and target, plus the
// module type for call_module nodes and the fusion pattern of a fused node; one edge from
// each input to each node that reads it (a node read twice by the same user gets one
// edge). Every name and label is quoted and escaped, so any node name a model file may
// hold gives valid DOT. Deterministic.
//
// The fill colour says what a node computes in (NodeMark below): float ops blue,
// quantized ops (nnq / nniq / nnqr modules, torch.ops.quantized functions) green,
// quantize / dequantize conversions yellow, observers grey, inputs / parameters / the
// output white. A fused node (meta `pattern`, or an nni / nniq module) has a double,
// bold border. A legend box (cluster "legend", its node names start with "legend:",
// which no node name can: node names are identifiers) explains the colours.
//
//   GraphModule gm = ...;
//   RETURN_IF_ERROR(WriteFileAtomically("g.dot", ToDot(gm)));
//   // then: dot -Tsvg g.dot -o g.svg
#ifndef FUSELAGE_GRAPH_DOT_H_
#define FUSELAGE_GRAPH_DOT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "graph/graph_module.h"

namespace fuselage {

// What a node computes in, as the picture colours it.
enum class NodeMark {
  kIo,          // placeholder, get_attr, output
  kFloat,       // a float op (nn.*, nni.*, operator.add, torch.relu, ...)
  kQuantized,   // nnq.*, nniq.*, nnqr.* modules; torch.ops.quantized.* functions
  kConversion,  // torch.quantize_per_tensor / _per_channel, dequantize
  kObserver,    // a module whose type ends in "Observer" or "FakeQuantize"
};

struct NodeMarks {
  NodeMark mark = NodeMark::kFloat;
  bool fused = false;  // meta `pattern`, or an nni.* / nniq.* module
};

NodeMarks MarkNode(const GraphModule& gm, const Node& node);

std::string ToDot(const GraphModule& gm);

// `text` as a DOT double-quoted string, quotes included: " and \ escaped, line breaks
// as \n (DOT's centred line break), other control characters dropped.
std::string DotQuote(absl::string_view text);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_DOT_H_
