// The threading contract of graph/graph_module.h, exercised (and run under
// ThreadSanitizer: bash tools/sanitize.sh tsan -- //tests/graph:threading_test):
//  - N worker threads each build, fuse and quantize (the whole flow: fuse, prepare,
//    calibrate, convert, lower) a model of their own, while
//  - M reader threads match one shared model, ask it for module types and modules, and
//    verify it, all at once, starting from caches the shared model has not filled yet
//    (so the readers race to fill them), round after round; between rounds the main
//    thread edits the shared model (no reader running), which makes its caches stale.
// Every thread's results are compared with the same work done on one thread first.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "graph/graph_module.h"
#include "graph/printer.h"
#include "gtest/gtest.h"
#include "patterns/matcher.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

constexpr int kWorkers = 3;       // N: each quantizes models of its own
constexpr int kReaders = 3;       // M: all read the shared model
constexpr int kRounds = 4;        // edits of the shared model between reader rounds
constexpr int kModelsPerWorker = 3;
constexpr int kScansPerReader = 20;

// UniqueName advances the graph's suffix counters, so it is an edit, not a read: it must
// not be callable on a const Graph (issue #22, item 12).
static_assert(!std::is_invocable_v<decltype(&Graph::UniqueName), const Graph&, absl::string_view>,
              "Graph::UniqueName must not be const");
static_assert(std::is_invocable_v<decltype(&Graph::UniqueName), Graph&, absl::string_view>);

// What quantizing the residual example of `seed` gives: the report and the final code.
std::string QuantizeResidual(uint32_t seed) {
  auto gm = BuildResidualExample(seed);
  if (!gm.ok()) return absl::StrCat("build: ", gm.status().ToString());
  auto config = GetBackendConfig("qnnpack");
  auto mapping = DefaultQConfigMapping("qnnpack");
  if (!config.ok() || !mapping.ok()) return "no qnnpack config";
  auto samples = RandomCalibrationSamples(**gm, 2, seed, {{"x", {1, 4, 8, 8}}});
  if (!samples.ok()) return absl::StrCat("samples: ", samples.status().ToString());
  auto report = RunQuantizeFlow(**gm, *config, *mapping, *samples);
  if (!report.ok()) return absl::StrCat("flow: ", report.status().ToString());
  return absl::StrCat(report->ToString(), "\n", PrintCode(**gm));
}

// The shared model: the residual example (conv-bn-add-relu, which the qnnpack config
// fuses), with its own seed.
std::unique_ptr<GraphModule> SharedModel() {
  auto gm = BuildResidualExample(7);
  if (!gm.ok()) return nullptr;
  return *std::move(gm);
}

// What a reader sees of the shared model: its matches, each call_module node's module
// type and module, and whether it verifies.
struct ReaderView {
  size_t matches = 0;
  std::vector<std::string> types;
  std::vector<const Module*> modules;
  bool verified = false;
  bool operator==(const ReaderView& o) const {
    return matches == o.matches && types == o.types && modules == o.modules &&
           verified == o.verified;
  }
};

ReaderView Read(const GraphModule& gm, const PatternMatcher& matcher) {
  ReaderView view;
  view.matches = matcher.FindMatches(gm).size();
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    view.types.push_back(gm.ModuleTypeOf(n).str());
    view.modules.push_back(gm.ModuleOf(n));
  }
  view.verified = gm.Verify().ok();
  return view;
}

// The same from the module tree alone (paths resolved as text: no cache is read or
// filled), as the expectation.
ReaderView Expected(const GraphModule& gm, size_t matches) {
  ReaderView view;
  view.matches = matches;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    const Module* m = gm.FindModule(n->target().name());
    view.types.push_back(m == nullptr ? "" : m->type().str());
    view.modules.push_back(m);
  }
  view.verified = true;
  return view;
}

// The edit of round `round` (no reader runs meanwhile): a module replaced by a copy (a
// tree edit: the path table goes stale) or retyped in place (the binding generation).
void EditShared(GraphModule& gm, int round) {
  if (round % 2 == 0) {
    ASSERT_TRUE(gm.SetModule("relu", gm.FindModule("relu")->Clone()).ok());
  } else {
    gm.FindModule("identity")->set_type(Symbol::Intern("nn.Identity"));
  }
}

TEST(ThreadingTest, WorkersQuantizeOwnModelsWhileReadersMatchOneSharedModel) {
  // The work, done on one thread first.
  std::vector<std::string> expected_quantized(kWorkers * kModelsPerWorker);
  for (int i = 0; i < kWorkers * kModelsPerWorker; ++i) {
    expected_quantized[i] = QuantizeResidual(static_cast<uint32_t>(i));
    ASSERT_EQ(expected_quantized[i].find("flow: "), std::string::npos) << expected_quantized[i];
  }
  auto matcher = BuildFusionMatcher(*GetBackendConfig("qnnpack"));
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  std::unique_ptr<GraphModule> shared = SharedModel();
  ASSERT_NE(shared, nullptr);
  const size_t expected_matches = [&] {
    auto copy = shared->Clone();
    return matcher->FindMatches(*copy).size();  // on a copy: shared's caches stay unfilled
  }();
  ASSERT_GT(expected_matches, 0u);

  std::vector<std::string> quantized(kWorkers * kModelsPerWorker);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([w, &quantized] {
      for (int k = 0; k < kModelsPerWorker; ++k) {
        const int i = w * kModelsPerWorker + k;
        quantized[i] = QuantizeResidual(static_cast<uint32_t>(i));
      }
    });
  }
  std::atomic<int> mismatches{0};
  for (int round = 0; round < kRounds; ++round) {
    const ReaderView expected = Expected(*shared, expected_matches);
    std::vector<std::thread> readers;
    std::atomic<int> ready{0};
    for (int r = 0; r < kReaders; ++r) {
      readers.emplace_back([&] {
        // Start together, so the first scans race to fill the stale caches.
        ready.fetch_add(1);
        while (ready.load() < kReaders) std::this_thread::yield();
        for (int s = 0; s < kScansPerReader; ++s) {
          if (!(Read(*shared, *matcher) == expected)) mismatches.fetch_add(1);
        }
      });
    }
    for (std::thread& t : readers) t.join();
    EditShared(*shared, round);  // readers joined: the edit is ordered after their reads
  }
  for (std::thread& t : workers) t.join();

  EXPECT_EQ(mismatches.load(), 0) << "a reader saw another result than the tree gives";
  for (int i = 0; i < kWorkers * kModelsPerWorker; ++i) {
    EXPECT_EQ(quantized[i], expected_quantized[i]) << "model " << i;
  }
}

// Models on different threads share no caches: each thread edits its own model's tree
// and nodes in a loop while another thread reads its own model, whose caches must stay
// current (an edit elsewhere used to make every model's caches stale, and a reader's
// refill then raced with the other readers of that model).
TEST(ThreadingTest, EditsOfOneModelLeaveAnotherModelsCachesCurrentAcrossThreads) {
  std::unique_ptr<GraphModule> read = SharedModel();
  ASSERT_NE(read, nullptr);
  read->ResolveModuleTypes();
  const uint64_t binding = read->module_bindings().binding();
  const uint64_t tree = read->module_bindings().tree();
  std::atomic<bool> stop{false};
  std::thread editor([&stop] {
    std::unique_ptr<GraphModule> own = SharedModel();
    for (int i = 0; i < 200 && !stop.load(); ++i) {
      ASSERT_TRUE(own->SetModule("relu", own->FindModule("relu")->Clone()).ok());
      own->ResolveModuleTypes();
    }
  });
  auto matcher = BuildFusionMatcher(*GetBackendConfig("qnnpack"));
  ASSERT_TRUE(matcher.ok());
  const ReaderView expected = Expected(*read, matcher->FindMatches(*read).size());
  for (int s = 0; s < 50; ++s) EXPECT_TRUE(Read(*read, *matcher) == expected);
  stop.store(true);
  editor.join();
  EXPECT_EQ(read->module_bindings().binding(), binding);
  EXPECT_EQ(read->module_bindings().tree(), tree);
}

}  // namespace
}  // namespace fuselage
