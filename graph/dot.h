// Graphviz export: a GraphModule as a DOT digraph, for looking at a graph before and
// after a pass (`fuselage dot MODEL -o g.dot && dot -Tsvg g.dot -o g.svg`).
//
// One box per node, in graph order, labelled with its name, op kind and target, plus the
// module type for call_module nodes; one edge from each input to each node that reads
// it (a node read twice by the same user gets one edge). Every name and label is quoted
// and escaped, so any node name a model file may hold gives valid DOT. Deterministic.
#ifndef FUSELAGE_GRAPH_DOT_H_
#define FUSELAGE_GRAPH_DOT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "graph/graph_module.h"

namespace fuselage {

std::string ToDot(const GraphModule& gm);

// `text` as a DOT double-quoted string, quotes included: " and \ escaped, line breaks
// as \n (DOT's centred line break), other control characters dropped.
std::string DotQuote(absl::string_view text);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_DOT_H_
