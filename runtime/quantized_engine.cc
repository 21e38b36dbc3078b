#include "runtime/quantized_engine.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/argument.h"
#include "graph/module.h"

namespace fuselage {

absl::string_view QuantizedEngineName(QuantizedEngine engine) {
  switch (engine) {
    case QuantizedEngine::kOnednn:
      return "onednn";
    case QuantizedEngine::kQnnpack:
      return "qnnpack";
    case QuantizedEngine::kOnnxruntime:
      return "onnxruntime";
  }
  return "?";
}

std::optional<QuantizedEngine> QuantizedEngineFromName(absl::string_view name) {
  if (name == "onednn") return QuantizedEngine::kOnednn;
  if (name == "qnnpack") return QuantizedEngine::kQnnpack;
  if (name == "onnxruntime") return QuantizedEngine::kOnnxruntime;
  return std::nullopt;
}

QuantizedEngine EngineForBackend(absl::string_view backend_name) {
  return backend_name == "qnnpack" ? QuantizedEngine::kQnnpack : QuantizedEngine::kOnednn;
}

void RecordEngine(QuantizedEngine engine, GraphModule& gm) {
  gm.root().SetAttribute(kQuantizedEngineAttribute,
                         Argument::String(QuantizedEngineName(engine)));
}

absl::StatusOr<std::optional<QuantizedEngine>> RecordedEngine(const GraphModule& gm) {
  const Argument* recorded = gm.root().FindAttribute(kQuantizedEngineAttribute);
  if (recorded == nullptr) return std::optional<QuantizedEngine>();
  std::optional<QuantizedEngine> engine;
  if (recorded->is_string()) engine = QuantizedEngineFromName(recorded->as_string());
  if (!engine.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "root module attribute '", kQuantizedEngineAttribute, "' is ", recorded->ToString(),
        "; expected the string onednn, qnnpack or onnxruntime"));
  }
  return engine;
}

absl::StatusOr<QuantizedEngine> ResolveEngine(const GraphModule& gm,
                                              std::optional<QuantizedEngine> requested) {
  if (requested.has_value()) return *requested;
  absl::StatusOr<std::optional<QuantizedEngine>> recorded = RecordedEngine(gm);
  if (!recorded.ok()) return recorded.status();
  return recorded->value_or(QuantizedEngine::kOnednn);
}

}  // namespace fuselage
