#include "graph/module_schema.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/status_macros.h"

namespace fuselage {

ModuleSchemaRegistry& ModuleSchemaRegistry::Global() {
  static ModuleSchemaRegistry* registry = [] {
    auto* r = new ModuleSchemaRegistry();
    FUSELAGE_CHECK(RegisterBuiltinModuleSchemas(*r).ok());
    return r;
  }();
  return *registry;
}

absl::Status ModuleSchemaRegistry::Register(ModuleSchema schema) {
  if (schema.type.empty()) return absl::InvalidArgumentError("module schema: empty type");
  if (schema.min_inputs < 0 ||
      (schema.max_inputs != ModuleSchema::kAnyNumber && schema.max_inputs < schema.min_inputs)) {
    return absl::InvalidArgumentError(absl::StrCat("module schema '", schema.type,
                                                   "': bad input count range [",
                                                   schema.min_inputs, ", ", schema.max_inputs, "]"));
  }
  const Symbol type = Symbol::Intern(schema.type);
  absl::MutexLock lock(&mu_);
  auto it = schemas_.find(type);
  if (it != schemas_.end()) {
    const ModuleSchema& old = *it->second;
    if (old.min_inputs == schema.min_inputs && old.max_inputs == schema.max_inputs &&
        old.required_tensors == schema.required_tensors) {
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(
        absl::StrCat("module type '", schema.type, "' is already registered differently"));
  }
  schemas_.emplace(type, std::make_unique<ModuleSchema>(std::move(schema)));
  return absl::OkStatus();
}

const ModuleSchema* ModuleSchemaRegistry::Find(Symbol type) const {
  absl::MutexLock lock(&mu_);
  auto it = schemas_.find(type);
  return it == schemas_.end() ? nullptr : it->second.get();
}

absl::Status RegisterBuiltinModuleSchemas(ModuleSchemaRegistry& registry) {
  constexpr int kAny = ModuleSchema::kAnyNumber;
  const std::vector<std::string> kWeight = {"weight"};
  const std::vector<std::string> kNone;
  auto add = [&](std::string type, int min_in, int max_in,
                 const std::vector<std::string>& tensors) {
    return registry.Register({std::move(type), min_in, max_in, tensors});
  };
  // Containers and the root.
  for (const char* t : {"GraphModule", "nn.Module", "nn.Sequential", "nn.ModuleList"}) {
    RETURN_IF_ERROR(add(t, 0, kAny, kNone));
  }
  // Float modules with weights, and their intrinsic fused forms (one input).
  for (const char* t :
       {"nn.Conv1d", "nn.Conv2d", "nn.Conv3d", "nn.ConvTranspose1d", "nn.ConvTranspose2d",
        "nn.ConvTranspose3d", "nn.Linear", "nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d",
        "nnqr.Conv1d", "nnqr.Conv2d", "nnqr.Conv3d", "nnqr.Linear",
        "nnqr.ConvTranspose1d", "nnqr.ConvTranspose2d", "nnqr.ConvTranspose3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  // Fused float modules of torch.ao.nn.intrinsic hold their parts as children "0", "1",
  // ... (NAMING.md) and no tensors of their own, so they require none.
  for (const char* t :
       {"nni.ConvReLU1d", "nni.ConvReLU2d", "nni.ConvReLU3d", "nni.LinearReLU", "nni.ConvBn1d",
        "nni.ConvBn2d", "nni.ConvBn3d", "nni.ConvBnReLU1d", "nni.ConvBnReLU2d",
        "nni.ConvBnReLU3d", "nni.LinearBn1d", "nni.BNReLU2d", "nni.BNReLU3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  // Two inputs: the fused conv-add(-relu) modules take the residual as a second input.
  for (const char* t : {"nni.ConvAdd2d", "nni.ConvAddReLU2d"}) {
    RETURN_IF_ERROR(add(t, 2, 2, kNone));
  }
  // Quantized (native) modules keep packed parameters as tensors too.
  for (const char* t : {"nnq.Conv1d", "nnq.Conv2d", "nnq.Conv3d", "nnq.Linear",
                        "nnq.ConvTranspose1d", "nnq.ConvTranspose2d", "nnq.ConvTranspose3d",
                        "nniq.ConvReLU1d", "nniq.ConvReLU2d", "nniq.ConvReLU3d",
                        "nniq.LinearReLU", "nnq.BatchNorm2d", "nnq.BatchNorm3d",
                        "nniq.BNReLU2d", "nniq.BNReLU3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  for (const char* t : {"nniq.ConvAdd2d", "nniq.ConvAddReLU2d"}) {
    RETURN_IF_ERROR(add(t, 2, 2, kWeight));
  }
  // Parameter-free single-input modules.
  for (const char* t :
       {"nn.ReLU", "nn.ReLU6", "nn.Hardtanh", "nn.Hardswish", "nn.Hardsigmoid", "nn.Sigmoid",
        "nn.Tanh", "nn.SiLU", "nn.GELU", "nn.LeakyReLU", "nn.ELU", "nn.Softmax",
        "nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nn.AvgPool1d", "nn.AvgPool2d",
        "nn.AvgPool3d", "nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
        "nn.Flatten", "nn.Identity", "nn.Dropout", "nn.Dropout2d", "nnq.ReLU6",
        "nnq.Hardswish", "nnq.Quantize", "nnq.DeQuantize", "nnq.Sigmoid", "nnq.LeakyReLU",
        "nnq.ELU", "nnq.Dropout", "torch.ao.quantization.QuantStub",
        "torch.ao.quantization.DeQuantStub",
        // Observers and fake-quantize modules (quantize/ inserts them).
        "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
        "MovingAveragePerChannelMinMaxObserver", "HistogramObserver", "PlaceholderObserver",
        "FixedQParamsObserver", "FakeQuantize", "FixedQParamsFakeQuantize",
        "FusedMovingAvgObsFakeQuantize", "ReuseInputObserver", "NoopObserver",
        // Quantized modules without weights that PyTorch's convert_fx can emit.
        "nnq.MaxPool2d", "nnq.Softmax", "nnq.LayerNorm", "nnq.GroupNorm",
        "nnq.InstanceNorm1d", "nnq.InstanceNorm2d", "nnq.InstanceNorm3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  // The remaining module types PyTorch's backend configs name (norms, PReLU, embeddings,
  // recurrent cells and their reference forms), so configs naming them validate.
  for (const char* t : {"nn.LayerNorm", "nn.InstanceNorm1d", "nn.InstanceNorm2d",
                        "nn.InstanceNorm3d"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kNone));
  }
  for (const char* t : {"nn.PReLU", "nn.Embedding", "nnqr.Embedding", "nnq.PReLU"}) {
    RETURN_IF_ERROR(add(t, 1, 1, kWeight));
  }
  // EmbeddingBag(input, offsets=None, per_sample_weights=None).
  for (const char* t : {"nn.EmbeddingBag", "nnqr.EmbeddingBag"}) {
    RETURN_IF_ERROR(add(t, 1, 3, kWeight));
  }
  // Cells take (input, hx=None); LSTM takes (input, (h0, c0)=None).
  for (const char* t : {"nn.GRUCell", "nn.LSTMCell", "nn.RNNCell", "nnqr.GRUCell",
                        "nnqr.LSTMCell", "nnqr.RNNCell"}) {
    RETURN_IF_ERROR(add(t, 1, 2, {"weight_ih", "weight_hh"}));
  }
  for (const char* t : {"nn.LSTM", "nnqr.LSTM"}) {
    RETURN_IF_ERROR(add(t, 1, 2, {"weight_ih_l0", "weight_hh_l0"}));
  }
  // Functional wrappers of quantized add / mul / cat take several inputs.
  for (const char* t : {"nnq.FloatFunctional", "nnq.FXFloatFunctional", "nnq.QFunctional"}) {
    RETURN_IF_ERROR(add(t, 0, kAny, kNone));
  }
  return absl::OkStatus();
}

}  // namespace fuselage
