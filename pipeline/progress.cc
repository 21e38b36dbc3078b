#include "pipeline/progress.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/dtype.h"
#include "lowering/lowering_rule.h"

namespace fuselage {
namespace {

// The sample line is rewritten at most this often: a fast calibration would otherwise
// spend its time writing to the terminal.
constexpr double kSampleLineInterval = 0.2;

std::string JsonString(absl::string_view text) {
  // Quotes, backslashes and control bytes escaped; other bytes as they are (node names
  // and messages are UTF-8).
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (byte < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", byte);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string JsonObject(const std::vector<std::pair<std::string, std::string>>& fields) {
  return absl::StrCat(
      "{",
      absl::StrJoin(fields, ", ",
                    [](std::string* out, const std::pair<std::string, std::string>& field) {
                      absl::StrAppend(out, JsonString(field.first), ": ", field.second);
                    }),
      "}");
}

template <typename T, typename ToJson>
std::string JsonArray(const std::vector<T>& items, ToJson to_json) {
  return absl::StrCat("[",
                      absl::StrJoin(items, ", ",
                                    [&](std::string* out, const T& item) {
                                      absl::StrAppend(out, to_json(item));
                                    }),
                      "]");
}

// The shortest text that reads back as the same double (0.1 -> "0.1"); JSON has no
// NaN or infinity, a scale never is one.
std::string JsonDouble(double value) {
  char buffer[32];
  const std::to_chars_result written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, written.ptr);
}

// {"scale": 0.1, "zero_point": 3, "dtype": "torch.quint8"}.
std::string QParamsJson(const OutputQParams& q) {
  return JsonObject({{"scale", JsonDouble(q.scale)},
                     {"zero_point", absl::StrCat(q.zero_point)},
                     {"dtype", JsonString(DTypeName(q.dtype))}});
}

// The counts of one stage's report, as JSON fields.
std::vector<std::pair<std::string, std::string>> StageFields(const QuantizeFlowReport& report,
                                                             absl::string_view stage) {
  if (stage == "fuse") return {{"fused", absl::StrCat(report.fused)}};
  if (stage == "prepare") {
    const PrepareReport& p = report.prepare;
    return {{"quantized_ops", absl::StrCat(p.quantized_ops)},
            {"observer_nodes", absl::StrCat(p.observer_nodes)},
            {"observer_modules", absl::StrCat(p.observer_modules)},
            {"kept_float", JsonArray(p.kept_float, [](const PrepareReport::KeptFloat& k) {
               return JsonObject({{"node", JsonString(k.node)},
                                  {"op", JsonString(k.op)},
                                  {"reason", JsonString(k.reason)}});
             })}};
  }
  if (stage == "calibrate") {
    const CalibrationReport& c = report.calibration;
    return {{"samples", absl::StrCat(c.samples)},
            {"unobserved", JsonArray(c.unobserved, JsonString)}};
  }
  if (stage == "convert") {
    return {{"observers_replaced", absl::StrCat(report.convert.observers_replaced)},
            {"reference_modules", absl::StrCat(report.convert.reference_modules)}};
  }
  if (stage == "lower") {
    const LoweringReport& l = report.lowering;
    std::vector<std::pair<std::string, std::string>> per_rule;
    for (const auto& [rule, count] : l.lowered_per_rule) {
      per_rule.emplace_back(rule, absl::StrCat(count));
    }
    return {{"lowered_per_rule", JsonObject(per_rule)},
            {"unlowered", JsonArray(l.unlowered, [](const LoweringReport::Unlowered& u) {
               return JsonObject({{"node", JsonString(u.node)},
                                  {"target", JsonString(u.target)},
                                  {"reason", JsonString(u.reason)}});
             })},
            {"quantizes_dropped_after_pass_through",
             JsonArray(l.quantizes_dropped_after_pass_through,
                       [](const LoweringReport::DroppedQuantize& d) {
                         return JsonObject({{"node", JsonString(d.node)},
                                            {"target", JsonString(d.target)},
                                            {"kept", QParamsJson(d.kept)},
                                            {"dropped", QParamsJson(d.dropped)}});
                       })},
            {"shape_reads_of_dequantize_moved", absl::StrCat(l.shape_reads_of_dequantize_moved)},
            {"dequantize_quantize_pairs_removed",
             absl::StrCat(l.dequantize_quantize_pairs_removed)},
            {"constants_quantized", absl::StrCat(l.constants_quantized)},
            {"folded_tensors_removed", absl::StrCat(l.folded_tensors_removed)},
            {"dead_nodes_removed", absl::StrCat(l.dead_nodes_removed)}};
  }
  return {};
}

}  // namespace

double FlowProgress::SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

FlowProgress::FlowProgress(std::ostream* out, Clock clock)
    : out_(out), clock_(std::move(clock)), stage_start_(clock_()) {}

void FlowProgress::Attach(QuantizeFlowOptions& options) {
  auto previous = std::move(options.on_stage);
  options.on_stage = [this, previous](absl::string_view stage,
                                      const GraphModule& gm) -> absl::Status {
    if (previous) {
      absl::Status status = previous(stage, gm);
      if (!status.ok()) return status;
    }
    StageDone(stage);
    return absl::OkStatus();
  };
  options.on_sample = [this](int64_t done, int64_t total) { SampleDone(done, total); };
}

void FlowProgress::StageDone(absl::string_view stage) {
  const double now = clock_();
  stage_seconds_.emplace_back(std::string(stage), now - stage_start_);
  stage_start_ = now;
  if (out_ != nullptr) {
    *out_ << absl::StrFormat("%s: done in %.2f s\n", stage, stage_seconds_.back().second)
          << std::flush;
  }
}

void FlowProgress::SampleDone(int64_t done, int64_t total) {
  if (out_ == nullptr) return;
  const double now = clock_();
  const bool last = done >= total;
  if (!last && last_sample_line_ >= 0 && now - last_sample_line_ < kSampleLineInterval) return;
  last_sample_line_ = now;
  const double elapsed = std::max(now - stage_start_, 1e-9);
  const double rate = static_cast<double>(done) / elapsed;
  const double left = static_cast<double>(total - done) / rate;
  *out_ << absl::StrFormat("\rcalibrate: %d/%d samples, %.1f samples/s, %.1f s left", done,
                           total, rate, left)
        << (last ? "\n" : "") << std::flush;
}

std::string QuantizeFlowJson(const QuantizeFlowReport& report,
                             const std::vector<std::pair<std::string, double>>& stage_seconds) {
  std::vector<std::string> stages;
  for (const auto& [stage, seconds] : stage_seconds) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {"name", JsonString(stage)}, {"seconds", absl::StrFormat("%.6f", seconds)}};
    for (auto& field : StageFields(report, stage)) fields.push_back(std::move(field));
    stages.push_back(JsonObject(fields));
  }
  return absl::StrCat("{\"stages\": [", absl::StrJoin(stages, ", "), "]}\n");
}

}  // namespace fuselage
