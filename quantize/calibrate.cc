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
                    "; they keep scale 1.0 and zero point 0\n");
  }
  return s;
}

absl::Status RegisterObserverKernels(KernelRegistry& registry) {
  for (ObserverKind kind :
       {ObserverKind::kMinMax, ObserverKind::kMovingAverageMinMax,
        ObserverKind::kPerChannelMinMax, ObserverKind::kMovingAveragePerChannelMinMax,
        ObserverKind::kHistogram}) {
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

absl::StatusOr<CalibrationReport> Calibrate(GraphModule& gm, PreparedModel& prepared,
                                            const std::vector<CalibrationSample>& samples,
                                            const KernelRegistry& kernels) {
  if (samples.empty()) {
    return absl::InvalidArgumentError("calibrate: no calibration sample given");
  }
  const size_t num_placeholders = gm.graph().Placeholders().size();
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].size() != num_placeholders) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibrate: sample ", i, " has ", samples[i].size(),
                       " tensors; the model has ", num_placeholders, " placeholders"));
    }
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
  for (const CalibrationSample& sample : samples) {
    std::vector<Value> inputs(sample.begin(), sample.end());
    RETURN_IF_ERROR(Run(gm, std::move(inputs), kernels, options).status());
  }

  CalibrationReport report;
  report.samples = static_cast<int>(samples.size());
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

absl::StatusOr<std::vector<CalibrationSample>> RandomCalibrationSamples(
    const GraphModule& gm, int count, uint32_t seed,
    const absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes) {
  if (count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrate: sample count is ", count, "; expected at least 1"));
  }
  std::vector<std::vector<int64_t>> placeholder_shapes;
  for (const Node* p : gm.graph().Placeholders()) {
    auto it = shapes.find(p->name());
    if (it != shapes.end()) {
      placeholder_shapes.push_back(it->second);
      continue;
    }
    const Argument* meta = p->FindMeta("shape");
    if (meta == nullptr || !meta->is_list()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibrate: placeholder '", p->name(),
          "' has no meta 'shape' (a list of ints); give its shape or calibration files"));
    }
    std::vector<int64_t> shape;
    for (const Argument& d : meta->items()) {
      if (!d.is_int()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "calibrate: placeholder '", p->name(), "' meta 'shape' holds ", d.ToString(),
            "; expected ints"));
      }
      shape.push_back(d.as_int());
    }
    placeholder_shapes.push_back(std::move(shape));
  }
  // Raw mt19937 bits, not std::uniform_real_distribution, whose algorithm differs between
  // standard libraries: a seed must give the same inputs everywhere.
  std::mt19937 engine(seed);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    CalibrationSample sample;
    for (const std::vector<int64_t>& shape : placeholder_shapes) {
      ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kFloat32, shape));
      float* data = t.mutable_data<float>();
      for (int64_t k = 0; k < t.numel(); ++k) {
        data[k] = -1.0f + 2.0f * static_cast<float>(engine() >> 8) * (1.0f / 16777216.0f);
      }
      sample.push_back(std::move(t));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

absl::StatusOr<std::vector<CalibrationSample>> NpyCalibrationSamples(
    const GraphModule& gm, const std::vector<std::string>& paths) {
  const size_t k = gm.graph().Placeholders().size();
  if (k == 0 || paths.empty() || paths.size() % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate: ", paths.size(), " calibration files for a model with ", k,
        " placeholders; expected a positive multiple of ", k));
  }
  std::vector<CalibrationSample> samples(paths.size() / k);
  for (size_t i = 0; i < paths.size(); ++i) {
    ASSIGN_OR_RETURN(Tensor t, ReadNpy(paths[i]));
    samples[i / k].push_back(std::move(t));
  }
  return samples;
}

}  // namespace fuselage
