#include "quantize/quantized_readers.h"

#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

bool IsObserverNode(const GraphModule& gm, const Node* node) {
  return node->op() == OpKind::kCallModule && IsObserverModuleType(gm.ModuleTypeOf(node));
}

// Whether `reader`'s own output is observed by the module `observer` calls (it shares
// its input's observer).
bool Shares(const Node* reader, const Node* observer) {
  for (const Node* user : reader->users()) {
    if (user->op() == OpKind::kCallModule && user->target() == observer->target()) return true;
  }
  return false;
}

// `reader` reading `to` wherever it read `from`.
absl::Status Rewire(Graph& graph, Node* reader, Node* from, Node* to) {
  auto swap = [from, to](Node* n) { return n == from ? to : n; };
  std::vector<Argument> args;
  args.reserve(reader->num_args());
  for (const Argument& a : reader->args()) args.push_back(a.MapNodes(swap));
  RETURN_IF_ERROR(graph.SetArgs(reader, NodeArgs(std::move(args))));
  if (reader->kwargs().empty()) return absl::OkStatus();
  Kwargs kwargs;
  for (const Kwarg& kw : reader->kwargs()) kwargs.emplace_back(kw.first, kw.second.MapNodes(swap));
  return graph.SetKwargs(reader, std::move(kwargs));
}

}  // namespace

absl::Status ObserveForQuantizedReadersOnly(
    GraphModule& gm, const PrepareReport& report,
    const absl::flat_hash_set<std::string>& always_observed) {
  Graph& graph = gm.graph();
  gm.ResolveModuleTypes();
  absl::flat_hash_set<std::string> kept_float;
  for (const PrepareReport::KeptFloat& k : report.kept_float) kept_float.insert(k.node);
  std::vector<Symbol> erased;  // the observer modules whose calls went
  for (Node* node : graph.Nodes()) {
    if (!IsObserverNode(gm, node) || node->num_args() == 0 || !node->arg(0).is_node()) continue;
    Node* source = node->arg(0).as_node();
    if (always_observed.contains(source->name())) continue;
    const bool after_float = kept_float.contains(source->name());
    std::vector<Node*> readers;
    for (Node* reader : node->users()) {
      if (reader->op() == OpKind::kOutput || kept_float.contains(reader->name()) ||
          (after_float && Shares(reader, node))) {
        readers.push_back(reader);
      }
    }
    for (Node* reader : readers) RETURN_IF_ERROR(Rewire(graph, reader, node, source));
    if (node->num_users() == 0) {
      erased.push_back(node->target());
      RETURN_IF_ERROR(graph.Erase(node));
    }
  }
  // A shared observer's other calls keep its module.
  absl::flat_hash_set<Symbol> called;
  for (const Node* node = graph.first(); node != nullptr; node = node->next()) {
    if (node->op() == OpKind::kCallModule) called.insert(node->target());
  }
  std::vector<Symbol> unused;
  for (Symbol target : erased) {
    if (!called.contains(target)) {
      called.insert(target);  // listed once
      unused.push_back(target);
    }
  }
  return gm.RemoveModules(absl::MakeConstSpan(unused));
}

}  // namespace fuselage
