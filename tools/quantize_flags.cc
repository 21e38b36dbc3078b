#include "tools/quantize_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "quantize/qconfig_mapping_loader.h"

namespace fuselage {
namespace {

constexpr int kDefaultSamples = 8;
// --seed seeds a 32-bit Mersenne Twister: every seed it can take, and no other.
constexpr int64_t kMaxSeed = int64_t{UINT32_MAX};

}  // namespace

absl::StatusOr<std::string> RequiredBackend(const ParsedArgs& parsed, absl::string_view command) {
  if (!parsed.Has("--backend") || parsed.flags.at("--backend").empty()) {
    return UsageError(absl::StrCat(
        command, ": needs --backend=NAME (fbgemm, qnnpack, x86, onednn): it chooses the "
                 "default qconfigs, and the config unless --config gives one"));
  }
  return parsed.flags.at("--backend");
}

FlagSpec QConfigMappingFlagSpec() { return {{"--qconfig-mapping"}, true}; }

absl::StatusOr<QConfigMapping> QConfigMappingFromFlags(const CommandContext& context,
                                                       const ParsedArgs& parsed,
                                                       absl::string_view backend,
                                                       absl::string_view command) {
  if (!parsed.Has("--qconfig-mapping")) return DefaultQConfigMapping(backend);
  const std::string& path = parsed.flags.at("--qconfig-mapping");
  if (path.empty()) {
    return UsageError(absl::StrCat(command, ": --qconfig-mapping needs a file name"));
  }
  return LoadQConfigMappingFile(context.ResolvePath(path));
}

std::vector<FlagSpec> CalibrationFlagSpecs() {
  return {{{"--calibration"}, true},
          {{"--samples"}, true},
          {{"--seed"}, true},
          {{"--input-shape"}, true}};
}

absl::StatusOr<CalibrationSamples> SamplesFromFlags(const CommandContext& context,
                                                    const ParsedArgs& parsed,
                                                    const GraphModule& gm) {
  if (parsed.Has("--calibration")) {
    std::vector<std::string> paths;
    for (absl::string_view p : absl::StrSplit(parsed.flags.at("--calibration"), ',',
                                              absl::SkipEmpty())) {
      paths.push_back(context.ResolvePath(std::string(p)));
    }
    return NpyCalibrationSamples(gm, paths);
  }
  ASSIGN_OR_RETURN(const int64_t count,
                   IntFlag(parsed, "--samples", kDefaultSamples, 1, kMaxCalibrationSamples));
  ASSIGN_OR_RETURN(const int64_t seed, IntFlag(parsed, "--seed", 0, 0, kMaxSeed));
  absl::flat_hash_map<std::string, std::vector<int64_t>> shapes;
  if (parsed.Has("--input-shape")) {
    std::vector<int64_t> shape;
    for (absl::string_view d : absl::StrSplit(parsed.flags.at("--input-shape"), ',')) {
      const std::optional<int64_t> dim = ParseInteger(d, 0, Tensor::kMaxElements);
      if (!dim.has_value()) {
        return UsageError(absl::StrCat("--input-shape is '", parsed.flags.at("--input-shape"),
                                       "'; expected comma-separated dimensions in [0, ",
                                       Tensor::kMaxElements, "], e.g. 1,3,8,8"));
      }
      shape.push_back(*dim);
    }
    for (const Node* p : gm.graph().Placeholders()) shapes[p->name()] = shape;
  }
  return RandomCalibrationSource(gm, count, static_cast<uint32_t>(seed), shapes);
}

void StageTimes::Stop(absl::string_view step) {
  times_.emplace_back(
      std::string(step),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
          .count());
}

std::string StageTimes::ToString() const {
  std::string out;
  for (const auto& [step, ms] : times_) absl::StrAppendFormat(&out, "time %-8s %12.3f ms\n", step, ms);
  return out;
}

}  // namespace fuselage
