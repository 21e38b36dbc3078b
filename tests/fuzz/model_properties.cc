#include "tests/fuzz/model_properties.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "tests/fuzz/fuzz_check.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSELAGE_FUZZ_COUNT_ALLOCATIONS 1
#include <sanitizer/allocator_interface.h>
#endif
#endif

namespace fuselage::fuzz {
namespace {

// Bytes allocated while `counting` is set. ASan's malloc hook sees every allocation
// (malloc and operator new); other builds skip the allocation property.
std::atomic<bool> counting{false};
std::atomic<int64_t> allocated_bytes{0};

#ifdef FUSELAGE_FUZZ_COUNT_ALLOCATIONS
void OnMalloc(const volatile void*, size_t size) {
  if (counting.load(std::memory_order_relaxed)) {
    allocated_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  }
}
void OnFree(const volatile void*) {}
const bool hooks_installed = __sanitizer_install_malloc_and_free_hooks(OnMalloc, OnFree) != 0;
#endif

absl::StatusOr<std::unique_ptr<GraphModule>> Load(absl::string_view bytes, ModelForm form) {
  return form == ModelForm::kBinary ? ParseModel(bytes) : ParseModelText(bytes);
}

const char* FormName(ModelForm form) { return form == ModelForm::kBinary ? "binary" : "text"; }

// ParseModel does not hand protobuf the file itself (tensor data stays in the file, see
// graph/serialization.cc): its verdict must be protobuf's own parse of the same bytes,
// read by ModelFromProto. ParseModel may refuse, before protobuf's parse, files protobuf
// takes (groups, a truncated tag, lengths that do not fit); everything else must agree.
void CheckBinaryLoadIsProtobufs(absl::string_view bytes,
                                const absl::StatusOr<std::unique_ptr<GraphModule>>& loaded) {
  proto::Model model;
  bool parsed;
  {
    google::protobuf::LogSilencer quiet;
    parsed = model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }
  if (loaded.ok()) {
    FUZZ_CHECK(parsed, "ParseModel accepted a file protobuf does not parse");
    auto expected = ModelFromProto(model);
    FUZZ_CHECK(expected.ok(), absl::StrCat("ParseModel accepted a file whose protobuf parse is refused: ",
                                           expected.status().ToString()));
    FUZZ_CHECK(SerializeModel(**loaded) == SerializeModel(**expected),
               "ParseModel's model differs from protobuf's parse of the same bytes");
    return;
  }
  if (absl::StrContains(loaded.status().message(), "protobuf parse failed")) return;
  FUZZ_CHECK(parsed, absl::StrCat("ParseModel refused after parsing a file protobuf does not parse: ",
                                  loaded.status().ToString()));
  const absl::Status expected = ModelFromProto(model).status();
  FUZZ_CHECK(expected == loaded.status(),
             absl::StrCat("ParseModel: ", loaded.status().ToString(),
                          "; protobuf's parse of the same bytes: ", expected.ToString()));
}

}  // namespace

void CheckModelLoad(absl::string_view bytes, ModelForm form) {
  allocated_bytes = 0;
  counting = true;
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = Load(bytes, form);
  counting = false;
#ifdef FUSELAGE_FUZZ_COUNT_ALLOCATIONS
  const int64_t budget = kMaxAllocationFactor * static_cast<int64_t>(bytes.size()) +
                         kAllocationSlackBytes;
  FUZZ_CHECK(!hooks_installed || allocated_bytes <= budget,
             absl::StrCat("loading a ", bytes.size(), "-byte ", FormName(form), " model allocated ",
                          allocated_bytes.load(), " bytes; budget ", budget));
#endif

  // FUSELAGE_FUZZ_VERBOSE=1 prints each verdict, to see what a corpus exercises.
  static const bool verbose = std::getenv("FUSELAGE_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "  %s model: %s\n", FormName(form),
                 loaded.ok() ? "accepted" : loaded.status().ToString().c_str());
  }
  if (form == ModelForm::kBinary) CheckBinaryLoadIsProtobufs(bytes, loaded);
  if (!loaded.ok()) {
    FUZZ_CHECK(!loaded.status().message().empty(), "a rejected model has an empty error message");
    FUZZ_CHECK(loaded.status().code() != absl::StatusCode::kInternal,
               absl::StrCat("loader hit a broken internal invariant: ", loaded.status().ToString()));
    return;
  }
  const GraphModule& gm = **loaded;
  const absl::Status verified = gm.Verify();
  FUZZ_CHECK(verified.ok(), absl::StrCat("accepted model fails Verify: ", verified.ToString()));

  // Round trip through both forms: what we save, we must load, to the same bytes.
  const std::string binary = SerializeModel(gm);
  auto reloaded = ParseModel(binary);
  FUZZ_CHECK(reloaded.ok(), absl::StrCat("saved binary model does not load: ",
                                         reloaded.status().ToString()));
  FUZZ_CHECK(SerializeModel(**reloaded) == binary, "binary round trip changed the model");

  const std::string text = SerializeModelText(gm);
  auto reloaded_text = ParseModelText(text);
  FUZZ_CHECK(reloaded_text.ok(), absl::StrCat("saved text model does not load: ",
                                              reloaded_text.status().ToString(), "\n", text));
  // Compared as text: the text form writes every NaN as "nan", so a NaN's sign and payload
  // (kept by the binary form) do not survive it; everything else must.
  FUZZ_CHECK(SerializeModelText(**reloaded_text) == text,
             absl::StrCat("text round trip changed the model:\n", text, "\nreloaded as\n",
                          SerializeModelText(**reloaded_text)));
}

}  // namespace fuselage::fuzz
