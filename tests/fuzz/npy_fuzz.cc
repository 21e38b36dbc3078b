// Fuzz target: the .npy reader (runtime/npy.h: ParseNpy) on arbitrary bytes.
// Properties:
//  - a rejected file gets a non-empty InvalidArgument error (the only code ParseNpy
//    documents);
//  - an accepted file allocates no more than it holds: the tensor's bytes are at most the
//    input's (a header claiming 2^40 elements is refused before anything is allocated;
//    tools/fuzz.sh's -malloc_limit_mb catches an allocation that slips through);
//  - an accepted file round-trips through the writer: SerializeNpy succeeds, its bytes
//    parse back to an equal tensor (dtype, shape, bytes), and writing that tensor again
//    gives the same bytes (the writer's form is a fixed point).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "graph/tensor.h"
#include "runtime/npy.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<fuselage::Tensor> tensor = fuselage::ParseNpy(bytes);
  if (!tensor.ok()) {
    FUZZ_CHECK(!tensor.status().message().empty() &&
                   tensor.status().code() == absl::StatusCode::kInvalidArgument,
               absl::StrCat("rejection is not a clear InvalidArgument: ",
                            tensor.status().ToString()));
    return 0;
  }
  FUZZ_CHECK(tensor->bytes().size() <= size,
             absl::StrCat("a ", size, "-byte file gave a tensor of ", tensor->bytes().size(),
                          " bytes"));
  absl::StatusOr<std::string> written = fuselage::SerializeNpy(*tensor);
  FUZZ_CHECK(written.ok(), absl::StrCat("an accepted ", fuselage::DTypeName(tensor->dtype()),
                                        " tensor ", tensor->ShapeString(),
                                        " does not write: ", written.status().ToString()));
  absl::StatusOr<fuselage::Tensor> reread = fuselage::ParseNpy(*written);
  FUZZ_CHECK(reread.ok(), absl::StrCat("the writer's bytes do not parse: ",
                                       reread.status().ToString()));
  FUZZ_CHECK(*reread == *tensor,
             absl::StrCat("round trip changed the tensor: ", tensor->ShapeString(), " -> ",
                          reread->ShapeString()));
  absl::StatusOr<std::string> rewritten = fuselage::SerializeNpy(*reread);
  FUZZ_CHECK(rewritten.ok() && *rewritten == *written, "writing the tensor again gave other bytes");
  return 0;
}
