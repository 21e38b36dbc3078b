// ConvertToReference: the pass "convert-to-reference" that turns a calibrated prepared
// graph (quantize/prepare.h, quantize/calibrate.h) into a reference quantized graph, as
// PyTorch 1.13's convert_to_reference_fx does:
//
//   x ─► obs_0 ─► conv ─► obs_1 ─► users
//      ⇒
//   x ─► quantize_per_tensor(·, s0, z0, quint8) ─► dequantize ─► conv' ─►
//        quantize_per_tensor(·, s1, z1, quint8) ─► dequantize ─► users
//
//  - every observer node becomes quantize_per_tensor with its observer's scale and zero
//    point (inline float / int / dtype args, graph/NAMING.md) followed by one
//    `dequantize` that all its former users read; the observer modules are removed. A
//    per-channel observer of a get_attr (a functional conv / linear's weight) becomes
//    quantize_per_channel(w, get_attr scales, get_attr zero_points, axis, dtype), the
//    scales (float32) and zero points (int64) installed next to the weight as
//    `<weight>_scale` / `<weight>_zero_point`, as PyTorch's convert does; a fixed-qparams
//    observer gives its fixed scale and zero point; a dynamic placeholder observer becomes
//    torch.quantize_per_tensor_dynamic(x, quint8, reduce_range) (reduce_range unless the
//    model's recorded engine is qnnpack, as PyTorch's convert decides by its engine); a
//    float16 cast (a static float16 PlaceholderObserver, float16_static_qconfig's)
//    becomes the method call x.to(torch.float16), then the dequantize;
//  - every quantized weighted module becomes its reference module: a float nn.Conv2d
//    becomes nnqr.Conv2d (the float contents plus weight_scale, weight_zero_point,
//    weight_axis, weight_qscheme, weight_dtype from the qconfig's weight observer run
//    on the weight); a fused module (nni.ConvAddReLU2d) keeps its type and structure with
//    child "0" replaced by the reference module. Symmetric weight schemes are recorded
//    as their affine form, as PyTorch's reference modules do. A weight observed
//    per_channel_affine_float_qparams (embeddings) gets float32 weight_zero_point values
//    (-min / scale) and keeps that scheme; a float16 placeholder weight observer gives
//    weight_dtype float16 and no scale or zero point.
//  - an observer of a constant float tensor (a get_attr: a functional op's weight) that
//    saw no value observes that tensor first, as PyTorch's convert runs the weight
//    observers: dynamic quantization's F.linear is not calibrated.
// Every output thus keeps its own quantization parameters.
//
// Contract: every observer's parameters and every reference module are computed before
// the graph is touched; an error (an activation observer that saw no value — PyTorch
// would use scale 1.0 and zero point 0 with a warning; with
// ConvertOptions::uncalibrated_as_pytorch so does this pass, naming each such observer in
// ConvertReport::uncalibrated —, a per-channel observer of a
// computed tensor, a weight observer that fails) names the observer or node and leaves
// the GraphModule as it was. Linear in the number of nodes.
#ifndef FUSELAGE_QUANTIZE_CONVERT_H_
#define FUSELAGE_QUANTIZE_CONVERT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "quantize/observers.h"
#include "quantize/prepare.h"

namespace fuselage {

inline constexpr char kConvertPassName[] = "convert-to-reference";

struct ConvertReport {
  int observers_replaced = 0;       // observer nodes → quantize + dequantize
  int reference_modules = 0;        // weighted modules made reference modules
  // The activation observers (module paths) that saw no value and were converted with
  // PyTorch's defaults (ConvertOptions::uncalibrated_as_pytorch); empty otherwise.
  std::vector<std::string> uncalibrated;
  std::string ToString() const;
};

struct ConvertOptions {
  // An activation observer that saw no value: refused (false, the CLI's rule), or
  // converted with PyTorch's defaults, scale 1.0 and zero point 0, and listed in the
  // report (true: PyTorch's convert_fx, which warns).
  bool uncalibrated_as_pytorch = false;
  // The reduce_range of the dynamic quantize nodes (quantize_per_tensor_dynamic). Unset:
  // unless the model's recorded engine is qnnpack. PyTorch's convert decides by the
  // engine it runs on (fbgemm or x86: reduce); the drop-in passes that decision.
  std::optional<bool> dynamic_reduce_range;
};

// Runs the pass on `gm` (see the file comment). `prepared` is what Prepare returned for
// this graph, after calibration.
absl::StatusOr<ConvertReport> ConvertToReference(GraphModule& gm,
                                                 const PreparedModel& prepared,
                                                 const ConvertOptions& options = {});

// Whether `observer` has seen no value yet: its range is still the empty one every
// observer starts with, [inf, -inf]. A fixed-qparams observer needs none. Convert refuses
// such an activation observer (unless ConvertOptions::uncalibrated_as_pytorch).
bool ObserverSawNoValue(const Observer& observer);

// The reference module of a float weighted module `float_module` (e.g. nn.Conv2d): a copy
// of type `reference_type` with the weight quantization parameters `weight_observer`
// computes on its weight. InvalidArgument naming the module type if it has no float32
// weight or the observer cannot be built or run.
absl::StatusOr<std::unique_ptr<Module>> MakeReferenceModule(const Module& float_module,
                                                            Symbol reference_type,
                                                            const ObserverSpec& weight_observer);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_CONVERT_H_
