// The built-in backend configs: "native", "fbgemm", "qnnpack", "x86" with the same
// patterns, observation types and dtype configs as PyTorch 1.13's get_*_backend_config()
// (tests/backend_configs/ compares them against a dump of PyTorch itself), and "onednn",
// which is "x86" plus the conv-add fusions of PyTorch 2.x's onednn config.
//
// Deliberate differences from PyTorch 1.13 (each checked by the tests):
//  - QAT modules (nnqat.*, nniqat.*) are not part of fuselage, so their entries are absent.
//  - The fusers are the eval-mode ones PyTorch runs for inference, and the fused module
//    type is what they really produce: conv-bn, linear-bn and convtranspose-bn fold the
//    batch norm into the conv / linear (no fused type: the result is the folded module),
//    conv-bn-relu gives nni.ConvReLU{1,2,3}d. PyTorch declares nni.ConvBn2d etc., the
//    types its QAT fusers produce.
//  - Each pattern appears once. PyTorch's tables list nni.ConvReLU{1,2,3}d twice and the
//    second entry silently drops their root and reference modules; here every fused conv
//    keeps root nn.ConvNd and reference nnqr.ConvNd (the first entry's intent).
//
//   ASSIGN_OR_RETURN(BackendConfig config, GetBackendConfig("qnnpack"));
//   for (const std::string& name : BuiltinBackendConfigNames()) ...  // native, fbgemm, ...
#ifndef FUSELAGE_BACKEND_CONFIGS_BUILTIN_CONFIGS_H_
#define FUSELAGE_BACKEND_CONFIGS_BUILTIN_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"

namespace fuselage {

// The built-in config `name`, freshly built. NotFound listing the known names otherwise.
absl::StatusOr<BackendConfig> GetBackendConfig(absl::string_view name);

// "native", "fbgemm", "qnnpack", "x86", "onednn".
std::vector<std::string> BuiltinBackendConfigNames();

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_BUILTIN_CONFIGS_H_
