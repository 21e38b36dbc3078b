// Fuzz target: the C++ ONNX reader (onnx/onnx_reader.h: ParseOnnxModel) on arbitrary bytes.
// Properties:
//  - a rejected file gets a non-empty InvalidArgument or Unimplemented error (the codes the
//    reader documents: bad input, or input it does not read);
//  - an accepted file gives a GraphModule that passes Verify() and saves as a model file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "graph/serialization.h"
#include "onnx/onnx_reader.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto gm = fuselage::ParseOnnxModel(bytes, "fuzz.onnx");
  if (!gm.ok()) {
    FUZZ_CHECK(!gm.status().message().empty() &&
                   (gm.status().code() == absl::StatusCode::kInvalidArgument ||
                    gm.status().code() == absl::StatusCode::kUnimplemented),
               absl::StrCat("rejection is not a clear InvalidArgument / Unimplemented: ",
                            gm.status().ToString()));
    return 0;
  }
  const absl::Status verified = (*gm)->Verify();
  FUZZ_CHECK(verified.ok(), absl::StrCat("an accepted model does not verify: ", verified.ToString()));
  auto reread = fuselage::ParseModel(fuselage::SerializeModel(**gm));
  FUZZ_CHECK(reread.ok(), absl::StrCat("an accepted model does not save and load: ",
                                       reread.status().ToString()));
  return 0;
}
