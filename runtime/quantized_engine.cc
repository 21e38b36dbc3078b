#include "runtime/quantized_engine.h"

namespace fuselage {

absl::string_view QuantizedEngineName(QuantizedEngine engine) {
  switch (engine) {
    case QuantizedEngine::kOnednn:
      return "onednn";
    case QuantizedEngine::kQnnpack:
      return "qnnpack";
  }
  return "?";
}

std::optional<QuantizedEngine> QuantizedEngineFromName(absl::string_view name) {
  if (name == "onednn") return QuantizedEngine::kOnednn;
  if (name == "qnnpack") return QuantizedEngine::kQnnpack;
  return std::nullopt;
}

QuantizedEngine EngineForBackend(absl::string_view backend_name) {
  return backend_name == "qnnpack" ? QuantizedEngine::kQnnpack : QuantizedEngine::kOnednn;
}

}  // namespace fuselage
