// QuantizedEngine: whose integer arithmetic the quantized kernels reproduce. PyTorch 1.13
// runs a converted model on the engine `torch.backends.quantized.engine` names, and the
// engines round differently at requantization ties (runtime/quantized/
// output_requantizer.h has both formulas). A model quantized for the qnnpack backend
// config is meant to run on QNNPACK; one for onednn / fbgemm / x86 on oneDNN (Debian's
// PyTorch has no fbgemm; fuselage runs fbgemm and x86 configs with onednn's arithmetic).
// A third, `onnxruntime`, is ONNX Runtime's CPU int8 kernels (QLinearConv, QGemm) on the
// QDQ file fuselage.to_onnx writes: no backend config records it; a run asks for it to
// compare fuselage's arithmetic with ORT's (tests/python/test_onnx_import_torchvision.py).
//
// Prepare records the engine of its backend config in the model (RecordEngine: the root
// module's string attribute `quantized_engine`, graph/NAMING.md), convert and lowering
// keep it, and Run uses it unless RunOptions::engine names one (ResolveEngine), so a
// model quantized with the qnnpack config runs QNNPACK's arithmetic by default.
//
//   RunOptions options;
//   options.engine = QuantizedEngine::kQnnpack;   // as torch.backends.quantized.engine
//   Run(gm, inputs, kernels, options);            // without it: the recorded engine
#ifndef FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_
#define FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"

namespace fuselage {

enum class QuantizedEngine : uint8_t { kOnednn, kQnnpack, kOnnxruntime };

// "onednn", "qnnpack": the names torch.backends.quantized.engine uses; "onnxruntime".
absl::string_view QuantizedEngineName(QuantizedEngine engine);
std::optional<QuantizedEngine> QuantizedEngineFromName(absl::string_view name);

// The engine a backend config's model runs on: "qnnpack" -> kQnnpack; "onednn", "x86",
// "fbgemm", "native" and any other config -> kOnednn.
QuantizedEngine EngineForBackend(absl::string_view backend_name);

// The root module's attribute that records the engine a quantized model was made for.
inline constexpr char kQuantizedEngineAttribute[] = "quantized_engine";

// Records `engine` in `gm` (replacing an earlier record).
void RecordEngine(QuantizedEngine engine, GraphModule& gm);

// The engine recorded in `gm`, or nullopt if none is (a float model, or one made before
// the record existed). InvalidArgument naming the attribute if it is not an engine's
// name.
absl::StatusOr<std::optional<QuantizedEngine>> RecordedEngine(const GraphModule& gm);

// The engine a run of `gm` uses: `requested` if given, else the recorded one, else
// kOnednn. Errors as RecordedEngine (only when `requested` is absent).
absl::StatusOr<QuantizedEngine> ResolveEngine(const GraphModule& gm,
                                              std::optional<QuantizedEngine> requested);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ENGINE_H_
