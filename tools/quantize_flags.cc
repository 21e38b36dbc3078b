#include "tools/quantize_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "quantize/qconfig_mapping_loader.h"

namespace fuselage {
namespace {

constexpr int kDefaultSamples = 8;
// --seed seeds a 32-bit Mersenne Twister: every seed it can take, and no other.
constexpr int64_t kMaxSeed = int64_t{UINT32_MAX};

// The plain form's message is the one scripts already match; the named form adds why.
absl::Status BadInputShape(absl::string_view value, absl::string_view why) {
  if (!absl::StrContains(value, ':')) {
    return UsageError(absl::StrCat("--input-shape is '", value,
                                   "'; expected comma-separated dimensions in [0, ",
                                   Tensor::kMaxElements, "], e.g. 1,3,8,8"));
  }
  return UsageError(absl::StrCat("--input-shape is '", value, "'; ", why,
                                 "; expected NAME:DIMS;NAME:DIMS (e.g. x:1,3,8,8;y:1,4) with "
                                 "comma-separated dimensions in [0, ",
                                 Tensor::kMaxElements, "]"));
}

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view dims, absl::string_view value) {
  std::vector<int64_t> shape;
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    const std::optional<int64_t> dim = ParseInteger(d, 0, Tensor::kMaxElements);
    if (!dim.has_value()) return BadInputShape(value, absl::StrCat("'", d, "' is no dimension"));
    shape.push_back(*dim);
  }
  return shape;
}

}  // namespace

absl::StatusOr<absl::flat_hash_map<std::string, std::vector<int64_t>>> ParseInputShapes(
    absl::string_view value, const GraphModule& gm) {
  absl::flat_hash_map<std::string, std::vector<int64_t>> shapes;
  if (!absl::StrContains(value, ':')) {
    // One shape for every input: the original form.
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseDims(value, value));
    for (const Node* p : gm.graph().Placeholders()) shapes[p->name()] = shape;
    return shapes;
  }
  absl::flat_hash_set<std::string> placeholders;
  for (const Node* p : gm.graph().Placeholders()) placeholders.insert(p->name());
  for (absl::string_view entry : absl::StrSplit(value, ';', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, absl::MaxSplits(':', 1));
    if (parts.size() != 2) {
      return BadInputShape(value, absl::StrCat("'", entry, "' has no NAME:"));
    }
    const std::string name(parts[0]);
    if (placeholders.count(name) == 0) {
      return BadInputShape(value, absl::StrCat("the model has no input '", name, "'"));
    }
    if (shapes.count(name) > 0) {
      return BadInputShape(value, absl::StrCat("input '", name, "' is given twice"));
    }
    ASSIGN_OR_RETURN(shapes[name], ParseDims(parts[1], value));
  }
  return shapes;
}

absl::StatusOr<std::string> RequiredBackend(const ParsedArgs& parsed, absl::string_view command) {
  if (!parsed.Has("--backend") || parsed.flags.at("--backend").empty()) {
    return UsageError(absl::StrCat(
        command, ": needs --backend=NAME (fbgemm, qnnpack, x86, onednn): it chooses the "
                 "default qconfigs, and the config unless --config gives one"));
  }
  return parsed.flags.at("--backend");
}

FlagSpec QConfigMappingFlagSpec() {
  return {{"--qconfig-mapping"}, true,
          "QConfigMapping file (.textproto, quantize/qconfig_mapping.proto)", "FILE",
          "get_default_qconfig_mapping(backend)"};
}

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
  return {{{"--calibration"}, true,
           "calibration .npy files, comma-separated, k per sample for k placeholders",
           "X.npy,..."},
          {{"--samples"}, true, "random calibration samples, uniform in [-1, 1)", "N",
           absl::StrCat(kDefaultSamples)},
          {{"--seed"}, true, "seed of the random samples", "N", "0"},
          {{"--input-shape"}, true,
           "shape of the random samples: DIMS for every input, or NAME:DIMS;NAME:DIMS",
           "DIMS", "the placeholders' recorded shapes"}};
}

absl::StatusOr<CalibrationSamples> SamplesFromFlags(const CommandContext& context,
                                                    const ParsedArgs& parsed,
                                                    const GraphModule& gm) {
  if (parsed.Has("--calibration")) {
    // Calibration files fix both the samples and their shapes: the random-sample flags
    // would be silently ignored, so they are refused.
    for (const char* ignored : {"--samples", "--seed", "--input-shape"}) {
      if (parsed.Has(ignored)) {
        return UsageError(absl::StrCat(ignored, " conflicts with --calibration: the "
                                                "calibration files give the samples"));
      }
    }
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
    ASSIGN_OR_RETURN(shapes, ParseInputShapes(parsed.flags.at("--input-shape"), gm));
  } else {
    for (const Node* p : gm.graph().Placeholders()) {
      if (p->FindMeta("shape") == nullptr) {
        return UsageError(absl::StrCat(
            "placeholder '", p->name(), "' has no meta 'shape'; give --input-shape=DIMS "
            "(e.g. 1,3,8,8), --input-shape=NAME:DIMS;NAME:DIMS, or --calibration=X.npy"));
      }
    }
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
