#include "quantize/calibrate.h"

#include <algorithm>
#include <random>
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

}  // namespace

absl::StatusOr<CalibrationReport> Calibrate(GraphModule& gm, PreparedModel& prepared,
                                            const CalibrationSamples& samples,
                                            const KernelRegistry& kernels, int threads,
                                            const CalibrationProgress& on_sample) {
  if (samples.size() <= 0) {
    return absl::InvalidArgumentError("calibrate: no calibration sample given");
  }
  // Node → its observer, looked up once: the per-node callback stays O(1).
  absl::flat_hash_map<const Node*, Observer*> observer_of_node;
  absl::flat_hash_map<const Observer*, bool> reached;
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallModule) continue;
    auto it = prepared.observers.find(n->target());
    if (it == prepared.observers.end()) continue;
    observer_of_node[n] = it->second.get();
    reached[it->second.get()] = false;
  }
  RunOptions options;
  options.threads = threads;
  options.observer = [&](const Node& node, const Value& value) -> absl::Status {
    auto it = observer_of_node.find(&node);
    if (it == observer_of_node.end()) return absl::OkStatus();
    if (!value.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observer '", node.target().name(), "' watches a ", value.KindName(),
          "; expected a Tensor"));
    }
    reached[it->second] = true;
    return it->second->Update(value.as_tensor());
  };
  // A declared type's observed intermediate step (quantize/prepare.h): its observer is
  // no node's, and is fed by the composite kernel, by path.
  options.inner_observer = [&](absl::string_view path,
                               const Value& value) -> absl::Status {
    auto it = prepared.observers.find(Symbol::Intern(path));
    if (it == prepared.observers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' is not an observer of this prepared model"));
    }
    if (!value.is_tensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat("observer '", path, "' watches a ", value.KindName(),
                       "; expected a Tensor"));
    }
    reached[it->second.get()] = true;
    return it->second->Update(value.as_tensor());
  };
  // Each sample is made, checked, run and dropped before the next one is made.
  const std::vector<Node*> placeholders = gm.graph().Placeholders();
  int64_t ran = 0;
  RETURN_IF_ERROR(samples.ForEach([&](CalibrationSample sample) -> absl::Status {
    RETURN_IF_ERROR(CheckSample(placeholders, ran, sample));
    std::vector<Value> inputs(std::make_move_iterator(sample.begin()),
                              std::make_move_iterator(sample.end()));
    RETURN_IF_ERROR(Run(gm, std::move(inputs), kernels, options).status());
    ++ran;
    if (on_sample) on_sample(ran, samples.size());
    return absl::OkStatus();
  }));
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
