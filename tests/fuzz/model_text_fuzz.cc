// Fuzz target: the text model file loader (ParseModelText) on arbitrary text.
// Properties: tests/fuzz/model_properties.h.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tests/fuzz/model_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuselage::fuzz::CheckModelLoad(
      absl::string_view(reinterpret_cast<const char*>(data), size),
      fuselage::fuzz::ModelForm::kText);
  return 0;
}
