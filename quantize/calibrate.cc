#include "quantize/calibrate.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "runtime/value.h"

namespace fuselage {

std::string CalibrationReport::ToString() const {
  std::string s = absl::StrCat("calibrate: ", samples, " samples\n");
  if (!unobserved.empty()) {
    absl::StrAppend(&s, "  warning: no value reached ", absl::StrJoin(unobserved, ", "),
                    "; convert refuses an observer that saw no value\n");
  }
  return s;
}

absl::Status RegisterObserverKernels(KernelRegistry& registry) {
  for (ObserverKind kind :
       {ObserverKind::kMinMax, ObserverKind::kMovingAverageMinMax,
        ObserverKind::kPerChannelMinMax, ObserverKind::kMovingAveragePerChannelMinMax,
        ObserverKind::kHistogram, ObserverKind::kFixedQParams,
        // A dynamic placeholder (the input of a dynamically quantized op).
        ObserverKind::kPlaceholder}) {
    RETURN_IF_ERROR(registry.RegisterModule(
        ObserverKindName(kind),
        [](const KernelContext&, const Module& m, absl::Span<const Value> args,
           const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
          if (args.size() != 1 || !kwargs.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat(m.type().name(), " takes 1 input; got ", args.size()));
          }
          return args[0];
        }));
  }
  return absl::OkStatus();
}

CalibrationSamples::CalibrationSamples(std::vector<CalibrationSample> samples)
    : count_(static_cast<int64_t>(samples.size())),
      produce_([samples = std::move(samples)](const Visitor& visit) -> absl::Status {
        for (const CalibrationSample& sample : samples) RETURN_IF_ERROR(visit(sample));
        return absl::OkStatus();
      }) {}

namespace {

// InvalidArgument unless `sample` (number `index`) has one tensor per placeholder, each
// with at least one element: an empty tensor gives an observer no value, and a range
// invented from nothing (PyTorch's scale 1.0, zero point 0) is a silent wrong result.
absl::Status CheckSample(const std::vector<Node*>& placeholders, int64_t index,
                         const CalibrationSample& sample) {
  if (sample.size() != placeholders.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrate: sample ", index, " has ", sample.size(),
                     " tensors; the model has ", placeholders.size(), " placeholders"));
  }
  for (size_t i = 0; i < sample.size(); ++i) {
    if (sample[i].numel() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibrate: sample ", index, " gives placeholder '", placeholders[i]->name(),
          "' a tensor of shape ", sample[i].ShapeString(),
          ", which has no elements; expected at least one value to observe"));
    }
  }
  return absl::OkStatus();
}

// The observers a prepared model's run feeds: by the node that calls one (an observer
// node) and by module path (a declared type's observed step, fed by its kernel).
class ObserverLookup {
 public:
  ObserverLookup(const GraphModule& gm, const PreparedModel& prepared) : prepared_(prepared) {
    // Node → its observer, looked up once: the per-node callback stays O(1).
    for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
      if (n->op() != OpKind::kCallModule) continue;
      auto it = prepared.observers.find(n->target());
      if (it == prepared.observers.end()) continue;
      of_node_[n] = it->second.get();
    }
  }

  // The observer `node` calls (null: none), given the value it watches.
  absl::StatusOr<Observer*> ForNode(const Node& node, const Value& value) const {
    auto it = of_node_.find(&node);
    if (it == of_node_.end()) return nullptr;
    if (!value.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observer '", node.target().name(), "' watches a ", value.KindName(),
          "; expected a Tensor"));
    }
    return it->second;
  }

  // The observer at module `path`, given the value it watches.
  absl::StatusOr<Observer*> ForPath(absl::string_view path, const Value& value) const {
    auto it = prepared_.observers.find(Symbol::Intern(path));
    if (it == prepared_.observers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' is not an observer of this prepared model"));
    }
    if (!value.is_tensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat("observer '", path, "' watches a ", value.KindName(),
                       "; expected a Tensor"));
    }
    return it->second.get();
  }

 private:
  const PreparedModel& prepared_;
  absl::flat_hash_map<const Node*, Observer*> of_node_;
};

// One value an observer watched during a concurrent sample's run, as its range, folded
// into the observer afterwards in sample order. `node` is the observer node that watched
// it, or null for a declared type's inner observer (`path`).
struct Observation {
  Observer* observer = nullptr;
  const Node* node = nullptr;
  std::string path;
  ObservedRange range;
};

// What a concurrent sample's run gave: its status and its observations in run order.
struct SampleRun {
  absl::Status status;
  std::vector<Observation> observations;
};

// The rule for running samples at once (Calibrate's `threads`): every observer of the
// model must fold ranges (Observer::FoldsRanges: MinMax, PerChannelMinMax, their moving
// averages, FixedQParams). Their update of a sample is a function of that sample's
// tensor (RangeOf) folded into the running statistics (FoldRange); folding the samples'
// ranges in sample order gives the bits of a sequential calibration, whatever order the
// runs finish in. A histogram observer's update needs the tensor and its running
// histogram at once, so a model with one runs its samples one after another.
bool SamplesMayRunConcurrently(const PreparedModel& prepared) {
  for (const auto& [path, observer] : prepared.observers) {
    if (!observer->FoldsRanges()) return false;
  }
  return true;
}

// The samples run on `workers` threads, `threads_per_worker` OpenMP threads each, while
// this thread makes them (CalibrationSamples::ForEach; a sample is checked here, in
// order) and folds each finished sample's observations in sample order (`fold`: the
// observations a run made before it failed too, so that an observer's error at a node
// before the failing one comes first, as it would one sample at a time; then the run's
// status; then progress). At most `workers` samples wait to be run and at most
// 4 * `workers` are made but not yet folded, so memory stays bounded however many samples
// there are. The first error in sample order is returned (a run's, a fold's, or making or
// checking a sample), as a one-at-a-time calibration would return it; `ran` counts the
// samples folded.
absl::Status RunSamplesConcurrently(
    const GraphModule& gm, const CalibrationSamples& samples, const KernelRegistry& kernels,
    const ObserverLookup& lookup, int workers, int threads_per_worker,
    const std::function<absl::Status(SampleRun&)>& fold, int64_t& ran) {
  struct Job {
    int64_t index;
    CalibrationSample sample;
  };
  std::mutex mu;
  std::condition_variable changed;
  std::deque<Job> queue;
  std::map<int64_t, SampleRun> finished;  // by sample index, not yet folded
  bool closed = false;
  // The lowest index of a failed run or fold: later samples need not run.
  std::atomic<int64_t> first_failure{std::numeric_limits<int64_t>::max()};

  auto run_one = [&](Job& job) {
    SampleRun result;
    RunOptions options;
    options.threads = threads_per_worker;
    options.observer = [&](const Node& node, const Value& value) -> absl::Status {
      ASSIGN_OR_RETURN(Observer * observer, lookup.ForNode(node, value));
      if (observer == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(ObservedRange range, observer->RangeOf(value.as_tensor()));
      result.observations.push_back(Observation{observer, &node, "", std::move(range)});
      return absl::OkStatus();
    };
    options.inner_observer = [&](absl::string_view path, const Value& value) -> absl::Status {
      ASSIGN_OR_RETURN(Observer * observer, lookup.ForPath(path, value));
      ASSIGN_OR_RETURN(ObservedRange range, observer->RangeOf(value.as_tensor()));
      result.observations.push_back(
          Observation{observer, nullptr, std::string(path), std::move(range)});
      return absl::OkStatus();
    };
    std::vector<Value> inputs(std::make_move_iterator(job.sample.begin()),
                              std::make_move_iterator(job.sample.end()));
    job.sample.clear();
    result.status = Run(gm, std::move(inputs), kernels, options).status();
    if (!result.status.ok()) {
      int64_t seen = first_failure.load();
      while (job.index < seen && !first_failure.compare_exchange_weak(seen, job.index)) {
      }
    }
    return result;
  };
  auto work = [&] {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        changed.wait(lock, [&] { return !queue.empty() || closed; });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      changed.notify_all();  // room in the queue
      SampleRun result;
      if (job.index < first_failure.load()) result = run_one(job);
      {
        std::lock_guard<std::mutex> lock(mu);
        finished.emplace(job.index, std::move(result));
      }
      changed.notify_all();
    }
  };

  // Folds the finished samples that come next in order; the first error stops folding.
  absl::Status fold_status;
  auto fold_ready = [&](std::unique_lock<std::mutex>& lock) {
    while (fold_status.ok()) {
      auto it = finished.find(ran);
      if (it == finished.end()) return;
      SampleRun result = std::move(it->second);
      finished.erase(it);
      lock.unlock();  // folding reads nothing the workers write
      fold_status = fold(result);
      lock.lock();
      if (!fold_status.ok()) {
        first_failure.store(std::min(first_failure.load(), ran));
        return;
      }
      ++ran;
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads.emplace_back(work);
  int64_t made = 0;
  const absl::Status produced = samples.ForEach([&](CalibrationSample sample) -> absl::Status {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] {
      fold_ready(lock);
      return !fold_status.ok() ||
             (static_cast<int64_t>(queue.size()) < workers && made - ran < 4 * workers);
    });
    // A failed sample stops the making; the error returned is decided below.
    if (!fold_status.ok()) return absl::CancelledError("calibration stopped");
    queue.push_back(Job{made++, std::move(sample)});
    lock.unlock();
    changed.notify_all();
    return absl::OkStatus();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    closed = true;
  }
  changed.notify_all();
  for (std::thread& t : threads) t.join();
  std::unique_lock<std::mutex> lock(mu);
  fold_ready(lock);
  if (!fold_status.ok()) return fold_status;
  // Every sample made was run and folded: the making's own error, if any, comes next.
  return produced;
}

}  // namespace

absl::StatusOr<CalibrationReport> Calibrate(GraphModule& gm, PreparedModel& prepared,
                                            const CalibrationSamples& samples,
                                            const KernelRegistry& kernels, int threads,
                                            const CalibrationProgress& on_sample) {
  if (samples.size() <= 0) {
    return absl::InvalidArgumentError("calibrate: no calibration sample given");
  }
  if (threads < 0 || threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("calibrate: threads is ", threads,
                                                   "; expected 1 to ", kMaxThreads,
                                                   " (or 0 for OpenMP's default)"));
  }
  const ObserverLookup lookup(gm, prepared);
  absl::flat_hash_map<const Observer*, bool> reached;
  for (const auto& [path, observer] : prepared.observers) reached[observer.get()] = false;
  const std::vector<Node*> placeholders = gm.graph().Placeholders();
  int64_t ran = 0;

  const int available = threads > 0 ? threads : DefaultRunThreads();
  const int workers = static_cast<int>(std::min<int64_t>(available, samples.size()));
  if (workers > 1 && SamplesMayRunConcurrently(prepared)) {
    // Samples run at once, one per worker, each with its share of the threads.
    const CalibrationSamples checked(
        samples.size(), [&](const CalibrationSamples::Visitor& visit) -> absl::Status {
          int64_t index = 0;
          return samples.ForEach([&](CalibrationSample sample) -> absl::Status {
            RETURN_IF_ERROR(CheckSample(placeholders, index++, sample));
            return visit(std::move(sample));
          });
        });
    auto fold = [&](SampleRun& run) -> absl::Status {
      for (Observation& o : run.observations) {
        absl::Status folded = o.observer->FoldRange(o.range);
        if (!folded.ok()) {
          return o.node != nullptr
                     ? PrefixedWithNode(*o.node, folded)
                     : absl::Status(folded.code(), absl::StrCat("observer '", o.path,
                                                                "': ", folded.message()));
        }
        reached[o.observer] = true;
      }
      RETURN_IF_ERROR(run.status);  // where the run stopped, after what it observed first
      if (on_sample) on_sample(ran + 1, samples.size());
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(RunSamplesConcurrently(gm, checked, kernels, lookup, workers,
                                           std::max(1, available / workers), fold, ran));
  } else {
    RunOptions options;
    options.threads = threads;
    options.observer = [&](const Node& node, const Value& value) -> absl::Status {
      ASSIGN_OR_RETURN(Observer * observer, lookup.ForNode(node, value));
      if (observer == nullptr) return absl::OkStatus();
      reached[observer] = true;
      return observer->Update(value.as_tensor());
    };
    // A declared type's observed intermediate step (quantize/prepare.h): its observer is
    // no node's, and is fed by the composite kernel, by path.
    options.inner_observer = [&](absl::string_view path, const Value& value) -> absl::Status {
      ASSIGN_OR_RETURN(Observer * observer, lookup.ForPath(path, value));
      reached[observer] = true;
      return observer->Update(value.as_tensor());
    };
    // Each sample is made, checked, run and dropped before the next one is made.
    RETURN_IF_ERROR(samples.ForEach([&](CalibrationSample sample) -> absl::Status {
      RETURN_IF_ERROR(CheckSample(placeholders, ran, sample));
      std::vector<Value> inputs(std::make_move_iterator(sample.begin()),
                                std::make_move_iterator(sample.end()));
      RETURN_IF_ERROR(Run(gm, std::move(inputs), kernels, options).status());
      ++ran;
      if (on_sample) on_sample(ran, samples.size());
      return absl::OkStatus();
    }));
  }
  if (ran != samples.size()) {
    return absl::InternalError(absl::StrCat("calibrate: ", samples.size(),
                                            " samples were promised; ", ran, " were made"));
  }

  CalibrationReport report;
  report.samples = ran;
  for (auto& [path, observer] : prepared.observers) {
    Module* m = gm.FindModule(path);
    if (m == nullptr) continue;
    const std::vector<float> lo = observer->min_val();
    const std::vector<float> hi = observer->max_val();
    const bool scalar = lo.size() == 1;
    const std::vector<int64_t> shape =
        scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(lo.size())};
    m->SetTensor("min_val", Tensor::FromFloats(shape, lo));
    m->SetTensor("max_val", Tensor::FromFloats(shape, hi));
    auto r = reached.find(observer.get());
    if (r == reached.end() || !r->second) report.unobserved.push_back(std::string(path.name()));
  }
  std::sort(report.unobserved.begin(), report.unobserved.end());
  return report;
}

absl::StatusOr<CalibrationSamples> RandomCalibrationSource(
    const GraphModule& gm, int64_t count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes) {
  if (count <= 0 || count > kMaxCalibrationSamples) {
    return absl::InvalidArgumentError(absl::StrCat("calibrate: sample count is ", count,
                                                   "; expected 1 to ", kMaxCalibrationSamples));
  }
  std::vector<Shape> placeholder_shapes;
  for (const Node* p : gm.graph().Placeholders()) {
    std::vector<int64_t> shape;
    auto it = shapes.find(p->name());
    if (it != shapes.end()) {
      shape = it->second;
    } else {
      const Argument* meta = p->FindMeta("shape");
      if (meta == nullptr || !meta->is_list()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "calibrate: placeholder '", p->name(),
            "' has no meta 'shape' (a list of ints); give its shape or calibration files"));
      }
      for (const Argument& d : meta->items()) {
        if (!d.is_int()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "calibrate: placeholder '", p->name(), "' meta 'shape' holds ", d.ToString(),
              "; expected ints"));
        }
        shape.push_back(d.as_int());
      }
    }
    // The tensor limit, checked before any sample is made (not at the first allocation).
    absl::Status size_ok = CheckedNumel(shape).status();
    if (!size_ok.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibrate: placeholder '", p->name(), "': ", size_ok.message()));
    }
    placeholder_shapes.push_back(std::move(shape));
  }
  return CalibrationSamples(
      count, [count, seed, placeholder_shapes = std::move(placeholder_shapes)](
                 const CalibrationSamples::Visitor& visit) -> absl::Status {
        // Raw mt19937 bits, not std::uniform_real_distribution, whose algorithm differs
        // between standard libraries: a seed must give the same inputs everywhere. One
        // engine for the whole pass: sample i continues where sample i - 1 stopped.
        std::mt19937 engine(seed);
        for (int64_t i = 0; i < count; ++i) {
          CalibrationSample sample;
          for (const Shape& shape : placeholder_shapes) {
            ASSIGN_OR_RETURN(Tensor t, Tensor::Uninitialized(DType::kFloat32, shape));
            float* data = t.mutable_data<float>();
            for (int64_t k = 0; k < t.numel(); ++k) {
              data[k] =
                  -1.0f + 2.0f * static_cast<float>(engine() >> 8) * (1.0f / 16777216.0f);
            }
            sample.push_back(std::move(t));
          }
          RETURN_IF_ERROR(visit(std::move(sample)));
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<std::vector<CalibrationSample>> RandomCalibrationSamples(
    const GraphModule& gm, int count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes) {
  ASSIGN_OR_RETURN(CalibrationSamples source, RandomCalibrationSource(gm, count, seed, shapes));
  std::vector<CalibrationSample> samples;
  RETURN_IF_ERROR(source.ForEach([&](CalibrationSample sample) {
    samples.push_back(std::move(sample));
    return absl::OkStatus();
  }));
  return samples;
}

absl::StatusOr<CalibrationSamples> NpyCalibrationSamples(const GraphModule& gm,
                                                         const std::vector<std::string>& paths) {
  const size_t k = gm.graph().Placeholders().size();
  if (k == 0 || paths.empty() || paths.size() % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate: ", paths.size(), " calibration files for a model with ", k,
        " placeholders; expected a positive multiple of ", k));
  }
  return CalibrationSamples(
      static_cast<int64_t>(paths.size() / k),
      [k, paths](const CalibrationSamples::Visitor& visit) -> absl::Status {
        for (size_t first = 0; first < paths.size(); first += k) {
          CalibrationSample sample;
          for (size_t i = first; i < first + k; ++i) {
            ASSIGN_OR_RETURN(Tensor t, ReadNpy(paths[i]));
            sample.push_back(std::move(t));
          }
          RETURN_IF_ERROR(visit(std::move(sample)));
        }
        return absl::OkStatus();
      });
}

}  // namespace fuselage
