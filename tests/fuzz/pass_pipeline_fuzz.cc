// Fuzz target: the passes on a hostile model (tests/fuzz/pass_pipeline.h). The first byte
// picks a built-in backend config; the rest is a binary model file. A model that loads goes
// through fuse → prepare → calibrate → convert-to-reference → lower-to-native; after every
// pass, success ⇒ Verify() passes, failure ⇒ a non-empty error and the saved bytes
// unchanged.
//
// FUSELAGE_FUZZ_VERBOSE=1 prints each pass's verdict, to see how far a corpus gets.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tests/fuzz/pass_pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  fuselage::fuzz::RunPassPipeline(
      data[0], absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
