// The properties every model-loader fuzz target asserts, shared by the binary and text
// targets (and by the pass target to come):
//  - a rejected file gets a non-empty error that is not kInternal (Internal means one of
//    Graph's own invariants broke, i.e. a loader bug, not bad input);
//  - an accepted model passes GraphModule::Verify() and round-trips: saving it (binary and
//    text) and loading that again succeeds and saves to the same bytes (the same text for
//    the text form, which cannot keep a NaN's sign and payload);
//  - the binary form's model (or error) is what protobuf's own parse of the same bytes
//    gives, read by ModelFromProto (ParseModel keeps tensor data out of protobuf), except
//    that ParseModel may refuse a file before protobuf's parse (groups, a truncated tag, a
//    length that does not fit);
//  - under ASan, loading allocates at most kMaxAllocationFactor times the input's size
//    plus kAllocationSlackBytes in total (so a hostile file cannot make the loader allocate
//    far more than its own size).
#ifndef FUSELAGE_TESTS_FUZZ_MODEL_PROPERTIES_H_
#define FUSELAGE_TESTS_FUZZ_MODEL_PROPERTIES_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace fuselage::fuzz {

inline constexpr int64_t kMaxAllocationFactor = 256;
inline constexpr int64_t kAllocationSlackBytes = int64_t{4} << 20;

enum class ModelForm { kBinary, kText };

// Loads `bytes` with ParseModel or ParseModelText and checks the properties above;
// aborts with a description on the first one broken.
void CheckModelLoad(absl::string_view bytes, ModelForm form);

}  // namespace fuselage::fuzz

#endif  // FUSELAGE_TESTS_FUZZ_MODEL_PROPERTIES_H_
