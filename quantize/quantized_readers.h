// A value quantized per reader, as torchao's quantizers quantize it (an input_qspec_map
// entry per reader), where fuselage's prepare, as PyTorch's prepare_fx, observes a quantized
// op's output for all its readers.
#ifndef FUSELAGE_QUANTIZE_QUANTIZED_READERS_H_
#define FUSELAGE_QUANTIZE_QUANTIZED_READERS_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "graph/graph_module.h"
#include "quantize/prepare.h"

namespace fuselage {

// The pass "observe-for-quantized-readers-only", on a prepared model and its prepare
// `report`: each observer node's readers that stay float (an op the report keeps float,
// the graph's output) read the observed value itself instead, and so do the ops that
// share their input's observer (a pool, flatten, cat: they call the same observer module
// on their output) where the observed value is a float op's: such an op is quantized only
// after a quantized op. An observer node left without readers goes, and so does its
// module once no node calls it. The observer nodes whose input is named in
// `always_observed` stay observed for all their readers (X86InductorQuantizer's QAT
// patterns).
absl::Status ObserveForQuantizedReadersOnly(
    GraphModule& gm, const PrepareReport& report,
    const absl::flat_hash_set<std::string>& always_observed);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_QUANTIZED_READERS_H_
