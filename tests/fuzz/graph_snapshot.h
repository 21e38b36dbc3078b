// GraphSnapshot: a complete picture of a Graph — every node in order with its identity,
// op, target, name, args, kwargs, meta and users, and the output node — so a test can
// assert that a failed mutation left the graph exactly as it was (Graph's contract) by
// comparing two snapshots.
//
// Taking one formats no text: it copies node pointers, interned symbols, names and the
// args themselves (an Argument's lists are immutable and shared, so a copy is a few
// reference counts) into a few flat arrays. Comparison is exact: node args by identity, floats bit for bit (so a
// NaN equals itself and 0.0 differs from -0.0), everything else by value. A snapshot
// never dereferences the nodes it recorded, so it may outlive them (a failed call that
// erased a node is reported, not a use-after-free).
#ifndef FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_
#define FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "graph/argument.h"
#include "graph/graph.h"
#include "graph/node.h"
#include "graph/symbol.h"

namespace fuselage::fuzz {

class GraphSnapshot {
 public:
  GraphSnapshot() = default;  // of an empty graph
  explicit GraphSnapshot(const Graph& graph) { Take(graph); }

  // Retakes the snapshot of `graph`, reusing this one's memory: a harness that snapshots
  // before every call keeps two and allocates nothing once they have grown.
  void Take(const Graph& graph);

  // Empty if equal; else what differs first, e.g. "node 3 ('add'): args differ".
  std::string FirstDifference(const GraphSnapshot& other) const;
  bool operator==(const GraphSnapshot& other) const { return FirstDifference(other).empty(); }
  bool operator!=(const GraphSnapshot& other) const { return !(*this == other); }

 private:
  // One node; its args, kwargs, meta and users are ranges of the snapshot's shared arrays
  // (four allocations per snapshot instead of four per node).
  struct Range {
    size_t begin;
    size_t size;
  };
  struct NodeState {
    const Node* node = nullptr;
    OpKind op = OpKind::kPlaceholder;
    Symbol target;
    std::string name;
    Range args = {0, 0};
    Range kwargs = {0, 0};
    Range meta = {0, 0};
    Range users = {0, 0};
  };
  std::string DifferenceAt(size_t index, const GraphSnapshot& other) const;

  size_t size_ = 0;
  const Node* output_ = nullptr;
  size_t node_count_ = 0;         // nodes_[0, node_count_) are this snapshot's
  std::vector<NodeState> nodes_;  // never shrinks, see Take
  std::vector<Argument> args_;
  Kwargs kwargs_;  // kwargs and meta
  std::vector<const Node*> users_;
};

// The graph as text, one line per node with its users and meta, for failure messages.
std::string GraphText(const Graph& graph);

}  // namespace fuselage::fuzz

#endif  // FUSELAGE_TESTS_FUZZ_GRAPH_SNAPSHOT_H_
