// QuantizedEngine: whose integer arithmetic the quantized kernels reproduce. PyTorch 1.13
// runs a converted model on the engine `torch.backends.quantized.engine` names, and the
// engines round differently at requantization ties (runtime/quantized/
// output_requantizer.h has both formulas). A model quantized for the qnnpack backend
// config is meant to run on QNNPACK; one for onednn / fbgemm / x86 on oneDNN (Debian's
// PyTorch has no fbgemm; fuselage runs fbgemm and x86 configs with onednn's arithmetic).
//
//   RunOptions options;
//   options.engine = QuantizedEngine::kQnnpack;   // as torch.backends.quantized.engine
//   Run(gm, inputs, kernels, options);
#ifndef FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_
#define FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace fuselage {

enum class QuantizedEngine : uint8_t { kOnednn, kQnnpack };

// "onednn", "qnnpack": the names torch.backends.quantized.engine uses.
absl::string_view QuantizedEngineName(QuantizedEngine engine);
std::optional<QuantizedEngine> QuantizedEngineFromName(absl::string_view name);

// The engine a backend config's model runs on: "qnnpack" -> kQnnpack; "onednn", "x86",
// "fbgemm", "native" and any other config -> kOnednn.
QuantizedEngine EngineForBackend(absl::string_view backend_name);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_
