// Loads a QConfigMapping from its declarative text format (quantize/qconfig_mapping.proto,
// protobuf text): what `--qconfig-mapping=FILE` reads and what fuselage.quantize_fx's
// translator (python/fuselage/_translate.py) writes from a PyTorch QConfigMapping.
//
//   global { activation { kind: "HistogramObserver" } weight { kind: "MinMaxObserver"
//            dtype: "qint8" qscheme: "per_tensor_symmetric" } }
//   module_name { module_name: "layer1" qconfig { none: true } }
//
//   ASSIGN_OR_RETURN(QConfigMapping mapping, LoadQConfigMappingFile("keep_layer1.textproto"));
//
// Nothing is taken on trust: every observer is validated as Prepare would build it
// (ObserverSpec::Validate: kind, dtype, qscheme, quant range, eps, ...), a field the
// observer kind does not take is refused, every regex must compile, keys are unique and
// every string is at most the model file's string limit (graph/serialization.h
// ModelLimits::max_string_length) of valid UTF-8. Errors are InvalidArgument naming the
// source, the entry (`module_name[1] 'layer1'`) and the field (`qconfig.activation.dtype`).
#ifndef FUSELAGE_QUANTIZE_QCONFIG_MAPPING_LOADER_H_
#define FUSELAGE_QUANTIZE_QCONFIG_MAPPING_LOADER_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "quantize/qconfig.h"

namespace fuselage {

// The largest mapping file read (real ones are a few KB); a larger file, or one that
// never ends, is refused at this size.
inline constexpr size_t kMaxQConfigMappingFileBytes = size_t{16} << 20;

// Parses text already in memory; `source` names it in errors.
absl::StatusOr<QConfigMapping> ParseQConfigMappingText(absl::string_view text,
                                                       absl::string_view source);

// Reads the file at `path` (graph/file_io.h ReadFileBounded) and parses it. NotFound if it
// does not exist; InvalidArgument for a file over the limit or any bad content.
absl::StatusOr<QConfigMapping> LoadQConfigMappingFile(absl::string_view path);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_QCONFIG_MAPPING_LOADER_H_
