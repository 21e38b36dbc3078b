// GraphSnapshot: a complete textual picture of a Graph — every node in order with its op,
// target, args, kwargs, meta and users — so a test can assert that a failed mutation left
// the graph exactly as it was (Graph's contract) by comparing two snapshots.
#ifndef FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_
#define FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_

#include <string>

#include "graph/graph.h"

namespace fuselage::fuzz {

std::string GraphSnapshot(const Graph& graph);

}  // namespace fuselage::fuzz

#endif  // FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_
