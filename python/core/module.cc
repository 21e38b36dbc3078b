// fuselage._core: the engine in process, a pybind11 module over the pipeline library
// (pipeline/) and the interpreter. See kModuleDoc for the Python API; python/fuselage/_core.py
// imports this extension and says how to build it when it is missing.
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph_module.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "onnx/onnx_reader.h"
#include "onnx/onnx_writer.h"
#include "patterns/aten_ops.h"
#include "patterns/batch_norm_folding.h"
#include "pipeline/quantize_flow.h"
#include "pipeline/stages.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/core/arrays.h"
#include "python/core/errors.h"
#include "quantize/qconfig.h"
#include "quantize/qconfig_mapping_loader.h"
#include "quantize/quantized_constants.h"
#include "quantize/quantized_readers.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage::python {
namespace {

namespace py = pybind11;

// Bumped whenever the Python API changes; python/fuselage/_core.py refuses an extension
// built with another value (a stale build) and says how to rebuild it.
constexpr int kApiVersion = 3;  // 2: Model.load_onnx / from_onnx_bytes; 3: save_onnx / onnx_bytes

constexpr char kModuleDoc[] = R"doc(fuselage's engine in process (the compiled extension).

    from fuselage import _core
    m = _core.from_torch(gm, (x,))              # or Model.from_bytes(to_proto(gm)...)
    print(_core.fuse(m, "qnnpack"))            # the report; str() is the CLI's text
    _core.prepare(m, "qnnpack")                 # the backend's default qconfig mapping
    _core.calibrate(m, [(x,) for x in batches]) # numpy arrays or torch tensors
    _core.convert(m); _core.lower(m)
    y = _core.run(m, [x])                       # list of outputs (numpy / QuantizedArray)
    gm = _core.to_torch(m)                      # a torch.fx.GraphModule again

Models:
    Model.load(path) / Model.save(path)   binary, or text for .textproto / .pbtxt
    Model.from_bytes(data) / to_bytes()   serialized graph/model.proto (binary)
    Model.from_text(text) / to_text()     its protobuf text form
    Model.load_onnx(path) / from_onnx_bytes(data, shown)   a float ONNX model, read by the
                                          C++ ONNX reader (errors: fuselage.OnnxImportError)
    model.code()                          the FX-style code listing
    model.verify()                        raises if an invariant is broken
    model.copy(), model.node_count, model.placeholders
    Model.from_parts(structure, tensors) / take_parts()   the tensor handoff: model.proto
                                          bytes without tensor data + one tensor each
    model.share_parts()                   take_parts' pair, the model kept, buffers shared
    model.set_tensors([(path, tensor), ...])   replaces tensors it has (borrowed)
    from_torch(module, example_inputs=None) -> Model   (tensors read in place, no copy)
    to_torch(model, consume=False) -> torch.fx.GraphModule   (consume: no copy, model emptied)
    save_onnx(model, path, example_inputs=None) / onnx_bytes(model, example_inputs=None)
                                          the model as ONNX (onnx/onnx_writer.h; errors:
                                          fuselage.OnnxExportError)

Passes (in place; each returns a report object with fields, str() = the CLI's text; a
pass that fails raises and leaves the model as it was). `backend` is a built-in backend
config name (native, fbgemm, qnnpack, x86, onednn); `config_text` a backend config
textproto (the contents of the CLI's --config=FILE) whose base `backend`, if also given,
must be; `config_source` the text's name (e.g. its file's path; default "config_text"),
used in errors, naming the config that declares a type (fused_module_type) there (a
type keeps the name it was first declared under in the process):
    fold_batch_norms(model) -> int        (F.conv + F.batch_norm on constants)
    fold_constant_quantizes(model) -> int (quantize nodes of constant weights)
    observe_for_quantized_readers_only(model, report, always_observed=())
    fuse(model, backend=None, *, config_text=None, config_source=None,
         report_overlaps=False) -> FuseReport
    explain(model, backend=None, *, config_text=None, config_source=None)
            -> ExplainReport (read-only)
    prepare(model, backend=None, *, config_text=None, config_source=None,
            qconfig_mapping=None, qconfig_mapping_text=None) -> PrepareReport
    calibrate(model, samples, *, threads=0) -> CalibrationReport
    convert(model, *, uncalibrated_as_pytorch=False) -> ConvertReport
    lower(model, *, config_text=None, config_source=None,
          drop_requantizing_quantizes=True) -> LoweringReport
    quantize(model, samples, backend=None, *, config_text=None, config_source=None,
             qconfig_mapping=None, qconfig_mapping_text=None, reference=False, threads=0,
             engine=None)
             -> QuantizeReport (engine: recorded for runs; None: the backend's)
qconfig_mapping=None uses the backend's default mapping (get_default_qconfig_mapping).
`samples` is an iterable of samples, each a tuple of arrays (one per placeholder, numpy
or torch) or one array for a one-input model.

Running:
    run(model, inputs, *, threads=0, engine=None) -> list of outputs
`engine` ("onednn" / "qnnpack"): whose integer arithmetic quantized ops compute; None:
the engine recorded in the model at prepare (qnnpack for the qnnpack config), else onednn.
`inputs`: a sequence of arrays (one per placeholder) or one array. Outputs are flattened
as the CLI's `fuselage run` gives them: float / int outputs as numpy arrays, quantized
ones as QuantizedArray (integer values, scale, zero_point; .dequantize()). Input arrays
that are C-contiguous are read in place; outputs take the interpreter's buffers without
a copy.

Errors: fuselage.ModelFileError for a model that does not load or parse, otherwise
EngineError (a fuselage.FuselageError with .code, the Status code's name).
)doc";

// One model in process. Passes take the lock exclusively; run takes it shared (the
// interpreter only reads the graph), both with the GIL released, so other Python threads
// keep running and one model is never edited while it runs.
class Model {
 public:
  explicit Model(std::unique_ptr<GraphModule> gm) : gm_(std::move(gm)) {}

  // Runs `work(graph)` with the GIL released and the lock held as `Lock` says.
  template <typename Lock, typename Work>
  auto With(Work work) {
    py::gil_scoped_release release;
    Lock lock(mutex_);
    if (gm_ == nullptr) {
      py::gil_scoped_acquire gil;
      ThrowIfError(absl::FailedPreconditionError(
          "this Model was handed over to torch (Model.take_parts); it holds nothing now"));
    }
    return work(*gm_);
  }
  template <typename Work>
  auto Edit(Work work) {
    return With<std::unique_lock<std::shared_mutex>>(work);
  }
  template <typename Work>
  auto Read(Work work) {
    return With<std::shared_lock<std::shared_mutex>>(work);
  }
  // The model, taken out: this Model is empty afterwards (every use raises).
  std::unique_ptr<GraphModule> Take() {
    py::gil_scoped_release release;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    return std::move(gm_);
  }
  // Makes `gm` the model (a pass run on a copy, kept).
  void Replace(std::unique_ptr<GraphModule> gm) {
    py::gil_scoped_release release;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    gm_ = std::move(gm);
  }

 private:
  std::unique_ptr<GraphModule> gm_;
  std::shared_mutex mutex_;
};

std::string PathArg(const py::object& path) {
  return py::str(py::module_::import("os").attr("fspath")(path));
}

// The bytes of a Python buffer (bytes, bytearray, memoryview), read in place.
absl::string_view BufferBytes(const py::buffer& data, py::buffer_info& info) {
  info = data.request();
  return absl::string_view(static_cast<const char*>(info.ptr),
                           static_cast<size_t>(info.size * info.itemsize));
}

// A Model of what `read()` gives (a file or bytes read into the engine), with the GIL
// released while it reads; its error raised as `kind`.
template <typename Read>
std::unique_ptr<Model> ReadModel(Read read, ErrorKind kind) {
  auto gm = ValueOrThrow(
      [&] {
        py::gil_scoped_release release;
        return read();
      }(),
      kind);
  return std::make_unique<Model>(std::move(gm));
}

std::unique_ptr<Model> ModelFromBytes(const py::buffer& data) {
  py::buffer_info info;
  const absl::string_view bytes = BufferBytes(data, info);
  return ReadModel([&] { return ParseModel(bytes); }, ErrorKind::kModelFile);
}

// ---- the tensor handoff (fuselage._core.from_torch / to_torch) ----------------------------
// A model crosses between torch and the engine as its structure (graph/model.proto bytes
// whose tensors carry no data) plus one Python object per tensor, in the order the
// structure lists them: each module's tensors, then its children, depth first. Weights
// are not serialized either way.

std::unique_ptr<Model> ModelFromParts(const py::buffer& structure, const py::list& objects) {
  std::vector<Tensor> tensors;
  tensors.reserve(objects.size());
  for (size_t i = 0; i < objects.size(); ++i) {
    tensors.push_back(TensorFromPython(objects[i], absl::StrCat("handed-over tensor ", i)));
  }
  const py::buffer_info info = structure.request();
  const absl::string_view bytes(static_cast<const char*>(info.ptr),
                                static_cast<size_t>(info.size * info.itemsize));
  auto gm = ValueOrThrow(
      [&] {
        py::gil_scoped_release release;
        return ParseModelWithTensors(bytes, std::move(tensors));
      }(),
      ErrorKind::kModelFile);
  return std::make_unique<Model>(std::move(gm));
}

// Moves every tensor of `module` and its children out into `out` (as numpy arrays or
// QuantizedArrays over the tensor's own buffer: no copy unless something else shares
// it), leaving an empty tensor in its place.
void ReleaseTensors(Module& module, std::vector<Tensor>& out) {
  std::vector<std::string> names;
  names.reserve(module.tensors().size());
  for (const auto& [name, tensor] : module.tensors()) names.push_back(name);
  for (const std::string& name : names) {
    out.push_back(std::move(*module.FindMutableTensor(name)));
    module.SetTensor(name, Tensor());
  }
  for (const auto& [name, child] : module.children()) ReleaseTensors(*child, out);
}

// Puts the tensors ReleaseTensors moved out of `module` and its children back, in the
// same order, from `*next` on.
void RestoreTensors(Module& module, std::vector<Tensor>::const_iterator* next) {
  std::vector<std::string> names;
  names.reserve(module.tensors().size());
  for (const auto& [name, tensor] : module.tensors()) names.push_back(name);
  for (const std::string& name : names) module.SetTensor(name, *(*next)++);
  for (const auto& [name, child] : module.children()) RestoreTensors(*child, next);
}

std::vector<std::string> PlaceholderNames(const GraphModule& gm) {
  std::vector<std::string> names;
  for (const Node* node : gm.graph().Placeholders()) names.push_back(node->name());
  return names;
}

// The tensors of one sample or one run: a sequence with one array per placeholder, or a
// single array for a one-placeholder model. `what` starts each error ("run", "sample 2").
std::vector<Tensor> InputTensors(const py::handle& inputs,
                                 const std::vector<std::string>& placeholders,
                                 const std::string& what) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(inputs) || py::isinstance<py::list>(inputs)) {
    for (py::handle item : inputs) items.push_back(py::reinterpret_borrow<py::object>(item));
  } else {
    items.push_back(py::reinterpret_borrow<py::object>(inputs));
  }
  if (items.size() != placeholders.size()) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
        what, ": ", items.size(), items.size() == 1 ? " input" : " inputs", " for a model with ",
        placeholders.size(), placeholders.size() == 1 ? " placeholder" : " placeholders", " (",
        absl::StrJoin(placeholders, ", "), ")")));
  }
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < items.size(); ++i) {
    tensors.push_back(
        TensorFromPython(items[i], absl::StrCat(what, ": input ", i, " (", placeholders[i], ")")));
  }
  return tensors;
}

// The name a config text goes by in errors when the caller gives none.
constexpr char kDefaultConfigSource[] = "config_text";

// The config text's name: `config_source` (e.g. the file's path, which errors then name),
// else kDefaultConfigSource. A source without a text names nothing and is refused.
std::string ConfigSource(const std::optional<std::string>& config_text,
                         const std::optional<std::string>& config_source) {
  if (!config_source.has_value()) return kDefaultConfigSource;
  if (!config_text.has_value()) {
    ThrowIfError(absl::InvalidArgumentError(
        "config_source names the backend config text: give config_text too"));
  }
  if (config_source->empty()) {
    ThrowIfError(absl::InvalidArgumentError(
        "config_source is empty; give the config's name (e.g. its file's path) or None"));
  }
  return *config_source;
}

BackendConfig ResolveBackend(const std::optional<std::string>& backend,
                             const std::optional<std::string>& config_text,
                             const std::string& source) {
  std::optional<absl::string_view> text;
  if (config_text.has_value()) text = *config_text;
  return ValueOrThrow(ResolveBackendConfig(backend.value_or(""), text, source));
}

// The qconfig mapping of prepare / quantize: a PyTorch QConfigMapping (translated), a
// quantize/qconfig_mapping.proto text, or else the backend's default.
QConfigMapping ResolveMapping(const std::optional<std::string>& backend,
                              const std::optional<std::string>& config_text,
                              const std::string& source, const py::object& qconfig_mapping,
                              const std::optional<std::string>& qconfig_mapping_text) {
  if (!qconfig_mapping.is_none() && qconfig_mapping_text.has_value()) {
    ThrowIfError(absl::InvalidArgumentError(
        "give qconfig_mapping (a PyTorch QConfigMapping) or qconfig_mapping_text "
        "(quantize/qconfig_mapping.proto text), not both"));
  }
  if (!qconfig_mapping.is_none()) {
    // PyTorch's object, translated by the bridge (its errors are ConfigTranslationError).
    const std::string translated = py::module_::import("fuselage._translate")
                                       .attr("qconfig_mapping_to_text")(qconfig_mapping)
                                       .cast<std::string>();
    return ValueOrThrow(ParseQConfigMappingText(translated, "qconfig_mapping"));
  }
  if (qconfig_mapping_text.has_value()) {
    return ValueOrThrow(ParseQConfigMappingText(*qconfig_mapping_text, "qconfig_mapping_text"));
  }
  std::optional<absl::string_view> text;
  if (config_text.has_value()) text = *config_text;
  const std::string name =
      ValueOrThrow(DefaultMappingBackend(backend.value_or(""), text, source));
  return ValueOrThrow(DefaultQConfigMapping(name));
}

CalibrationSamples SamplesFrom(const py::iterable& samples,
                               const std::vector<std::string>& placeholders) {
  std::vector<CalibrationSample> out;
  for (py::handle sample : samples) {
    out.push_back(InputTensors(sample, placeholders, absl::StrCat("sample ", out.size())));
  }
  return CalibrationSamples(std::move(out));
}

// "Name(field=repr, ...)" from the Python object's own attributes.
std::string FieldsRepr(const py::handle& self, const std::string& name,
                       const std::vector<std::string>& fields) {
  std::vector<std::string> parts;
  for (const std::string& field : fields) {
    parts.push_back(absl::StrCat(field, "=", std::string(py::repr(self.attr(field.c_str())))));
  }
  return absl::StrCat(name, "(", absl::StrJoin(parts, ", "), ")");
}

// Gives a bound report type what a dataclass has for reading: a repr listing its fields
// and `_fields`, their names.
template <typename T>
void DataclassLike(py::class_<T>& cls, const std::string& name, std::vector<std::string> fields) {
  py::tuple names(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) names[i] = py::str(fields[i]);
  cls.attr("_fields") = names;
  cls.def("__repr__", [name, fields = std::move(fields)](const py::object& self) {
    return FieldsRepr(self, name, fields);
  });
}

void RegisterReports(py::module_& m) {
  py::class_<FuseReport> fuse(m, "FuseReport", "What fuse did; str() is `fuselage fuse`'s line.");
  fuse.def_readonly("backend", &FuseReport::backend)
      .def_readonly("fused", &FuseReport::fused)
      .def_readonly("per_pattern", &FuseReport::per_pattern)
      .def_readonly("nodes_before", &FuseReport::nodes_before)
      .def_readonly("nodes_after", &FuseReport::nodes_after)
      .def_readonly("overlaps", &FuseReport::overlaps)
      .def("__str__", &FuseReport::ToString);
  DataclassLike(fuse, "FuseReport",
                {"backend", "fused", "per_pattern", "nodes_before", "nodes_after", "overlaps"});

  py::class_<MatchOverlap> overlap(
      m, "MatchOverlap", "A fused match that took nodes another pattern would have matched.");
  overlap.def_readonly("winner", &MatchOverlap::winner)
      .def_readonly("winner_at", &MatchOverlap::winner_at)
      .def_readonly("loser", &MatchOverlap::loser)
      .def_readonly("loser_at", &MatchOverlap::loser_at)
      .def_readonly("nodes", &MatchOverlap::nodes)
      .def("__str__", &MatchOverlap::ToString);
  DataclassLike(overlap, "MatchOverlap", {"winner", "winner_at", "loser", "loser_at", "nodes"});

  py::class_<MatchFailure> failure(m, "MatchFailure",
                                   "Where and why a fusion pattern did not match.");
  failure.def_readonly("rule", &MatchFailure::rule)
      .def_readonly("node", &MatchFailure::node)
      .def_readonly("path", &MatchFailure::path)
      .def_readonly("position", &MatchFailure::position)
      .def_readonly("reason", &MatchFailure::reason)
      .def("__str__", &MatchFailure::ToString);
  DataclassLike(failure, "MatchFailure", {"rule", "node", "path", "position", "reason"});

  py::class_<ExplainResult> explain(m, "ExplainReport",
                                    "explain's findings; str() is `fuselage explain`'s output.");
  explain.def_readonly("backend", &ExplainResult::backend)
      .def_readonly("nodes", &ExplainResult::nodes)
      .def_property_readonly("failures", [](const ExplainResult& r) { return r.report.failures; })
      .def_property_readonly("matches_per_pattern",
                             [](const ExplainResult& r) { return r.report.matches_per_rule; })
      .def("__str__", &ExplainResult::ToString);
  DataclassLike(explain, "ExplainReport", {"backend", "nodes", "failures", "matches_per_pattern"});

  py::class_<PrepareReport::KeptFloat> kept(m, "KeptFloat", "An op prepare keeps float, and why.");
  py::enum_<PrepareReport::KeptFloat::Cause>(kept, "Cause",
                                             "What a caller acts on; `reason` says it.")
      .value("NOT_QUANTIZABLE", PrepareReport::KeptFloat::Cause::kNotQuantizable)
      .value("QCONFIG_NONE", PrepareReport::KeptFloat::Cause::kQConfigNone)
      .value("QCONFIG_REFUSED_BY_PYTORCH",
             PrepareReport::KeptFloat::Cause::kQConfigRefusedByPyTorch);
  kept.def_readonly("node", &PrepareReport::KeptFloat::node)
      .def_readonly("op", &PrepareReport::KeptFloat::op)
      .def_readonly("reason", &PrepareReport::KeptFloat::reason)
      .def_readonly("cause", &PrepareReport::KeptFloat::cause);
  DataclassLike(kept, "KeptFloat", {"node", "op", "reason", "cause"});

  py::class_<PrepareReport> prepare(m, "PrepareReport",
                                    "What prepare did; str() is the CLI's report.");
  prepare.def_readonly("quantized_ops", &PrepareReport::quantized_ops)
      .def_readonly("observer_nodes", &PrepareReport::observer_nodes)
      .def_readonly("observer_modules", &PrepareReport::observer_modules)
      .def_readonly("kept_float", &PrepareReport::kept_float)
      .def("__str__", &PrepareReport::ToString);
  DataclassLike(prepare, "PrepareReport",
                {"quantized_ops", "observer_nodes", "observer_modules", "kept_float"});

  py::class_<CalibrationReport> calibration(m, "CalibrationReport", "What calibrate did.");
  calibration.def_readonly("samples", &CalibrationReport::samples)
      .def_readonly("unobserved", &CalibrationReport::unobserved)
      .def("__str__", &CalibrationReport::ToString);
  DataclassLike(calibration, "CalibrationReport", {"samples", "unobserved"});

  py::class_<ConvertReport> convert(m, "ConvertReport", "What convert (to reference) did.");
  convert.def_readonly("observers_replaced", &ConvertReport::observers_replaced)
      .def_readonly("reference_modules", &ConvertReport::reference_modules)
      .def_readonly("uncalibrated", &ConvertReport::uncalibrated)
      .def("__str__", &ConvertReport::ToString);
  DataclassLike(convert, "ConvertReport",
                {"observers_replaced", "reference_modules", "uncalibrated"});

  py::class_<LoweringReport::Unlowered> unlowered(m, "Unlowered",
                                                  "A reference pattern left unlowered, and why.");
  unlowered.def_readonly("node", &LoweringReport::Unlowered::node)
      .def_readonly("target", &LoweringReport::Unlowered::target)
      .def_readonly("reason", &LoweringReport::Unlowered::reason);
  DataclassLike(unlowered, "Unlowered", {"node", "target", "reason"});

  py::class_<OutputQParams> qparams(m, "OutputQParams",
                                    "An output's quantization: scale, zero point, dtype.");
  qparams.def_readonly("scale", &OutputQParams::scale)
      .def_readonly("zero_point", &OutputQParams::zero_point)
      .def_property_readonly("dtype", [](const OutputQParams& q) {
        return std::string(DTypeName(q.dtype));
      });
  DataclassLike(qparams, "OutputQParams", {"scale", "zero_point", "dtype"});

  py::class_<LoweringReport::DroppedQuantize> dropped(
      m, "DroppedQuantize",
      "A pass-through op lowered although its quantize had other parameters: the op's "
      "output keeps `kept` (its input's) instead of `dropped` (the quantize's).");
  dropped.def_readonly("node", &LoweringReport::DroppedQuantize::node)
      .def_readonly("target", &LoweringReport::DroppedQuantize::target)
      .def_readonly("kept", &LoweringReport::DroppedQuantize::kept)
      .def_readonly("dropped", &LoweringReport::DroppedQuantize::dropped);
  DataclassLike(dropped, "DroppedQuantize", {"node", "target", "kept", "dropped"});

  py::class_<LoweringReport> lowering(m, "LoweringReport", "What lower did.");
  lowering.def_readonly("lowered_per_rule", &LoweringReport::lowered_per_rule)
      .def_readonly("unlowered", &LoweringReport::unlowered)
      .def_readonly("quantizes_dropped_after_pass_through",
                    &LoweringReport::quantizes_dropped_after_pass_through)
      .def_readonly("tuple_accesses_removed", &LoweringReport::tuple_accesses_removed)
      .def_readonly("shape_reads_of_dequantize_moved",
                    &LoweringReport::shape_reads_of_dequantize_moved)
      .def_readonly("dequantize_quantize_pairs_removed",
                    &LoweringReport::dequantize_quantize_pairs_removed)
      .def_readonly("constants_quantized", &LoweringReport::constants_quantized)
      .def_readonly("folded_tensors_removed", &LoweringReport::folded_tensors_removed)
      .def_readonly("dead_nodes_removed", &LoweringReport::dead_nodes_removed)
      .def_readonly("float16_casts_kept", &LoweringReport::float16_casts_kept)
      .def_property_readonly("total_lowered", &LoweringReport::total_lowered)
      .def("__str__", &LoweringReport::ToString);
  DataclassLike(lowering, "LoweringReport",
                {"lowered_per_rule", "unlowered", "quantizes_dropped_after_pass_through",
                 "tuple_accesses_removed", "shape_reads_of_dequantize_moved",
                 "dequantize_quantize_pairs_removed", "constants_quantized",
                 "folded_tensors_removed", "dead_nodes_removed"});

  py::class_<QuantizeFlowReport> flow(m, "QuantizeReport",
                                      "Every stage's report; str() is `fuselage quantize`'s.");
  flow.def_readonly("fused", &QuantizeFlowReport::fused)
      .def_readonly("prepare", &QuantizeFlowReport::prepare)
      .def_readonly("calibration", &QuantizeFlowReport::calibration)
      .def_readonly("convert", &QuantizeFlowReport::convert)
      .def_readonly("lowering", &QuantizeFlowReport::lowering)
      .def("__str__", &QuantizeFlowReport::ToString);
  DataclassLike(flow, "QuantizeReport", {"fused", "prepare", "calibration", "convert", "lowering"});
}

void RegisterModel(py::module_& m) {
  py::class_<Model>(m, "Model", "A fuselage model (graph + modules + tensors) in process.")
      .def_static(
          "load",
          [](const py::object& path) {
            const std::string p = PathArg(path);
            return ReadModel([&] { return LoadModel(p); }, ErrorKind::kModelFile);
          },
          py::arg("path"), "Loads a model file: text for .textproto / .pbtxt, else binary.")
      .def_static(
          "load_onnx",
          [](const py::object& path) {
            const std::string p = PathArg(path);
            return ReadModel([&] { return LoadOnnxModel(p); }, ErrorKind::kOnnxImport);
          },
          py::arg("path"),
          "Reads a float ONNX file (onnx/onnx_reader.h; its external data from its folder). "
          "Raises fuselage.OnnxImportError naming the node, initializer or input at fault.")
      .def_static(
          "from_onnx_bytes",
          [](const py::buffer& data, const std::string& shown) {
            py::buffer_info info;
            const absl::string_view bytes = BufferBytes(data, info);
            return ReadModel([&] { return ParseOnnxModel(bytes, shown); },
                             ErrorKind::kOnnxImport);
          },
          py::arg("data"), py::arg("shown") = "model",
          "Reads a serialized float ONNX model (no external data); `shown` names it in errors.")
      .def_static("from_bytes", &ModelFromBytes, py::arg("data"),
                  "A model from serialized graph/model.proto bytes (bytes, bytearray, memoryview).")
      .def_static("from_parts", &ModelFromParts, py::arg("structure"), py::arg("tensors"),
                  "A model from graph/model.proto bytes whose tensors carry no data and one "
                  "torch tensor / numpy array / QuantizedArray per tensor, in the structure's "
                  "order (each module's tensors, then its children, depth first). The "
                  "tensors' memory is read in place where the layout allows (no copy); the "
                  "engine copies a borrowed buffer before it writes to it.")
      .def(
          "take_parts",
          [](Model& self) {
            std::unique_ptr<GraphModule> gm = self.Take();
            if (gm == nullptr) {
              ThrowIfError(absl::FailedPreconditionError(
                  "this Model was handed over to torch (Model.take_parts); it holds nothing now"));
            }
            std::vector<Tensor> tensors;
            std::string structure;
            {
              py::gil_scoped_release release;
              ReleaseTensors(gm->root(), tensors);
              structure = SerializeModel(*gm);
            }
            py::list arrays;
            for (Tensor& t : tensors) arrays.append(PythonFromTensor(std::move(t)));
            return py::make_tuple(py::bytes(structure), arrays);
          },
          "Hands the model over: (structure, tensors) as Model.from_parts takes them, the "
          "tensors as numpy arrays / QuantizedArrays over the engine's own buffers (no copy "
          "unless a buffer is shared, e.g. borrowed from a torch tensor). The Model is empty "
          "afterwards, so nothing in the engine can see a later write to the arrays.")
      .def(
          "set_tensors",
          [](Model& self, const py::iterable& pairs) {
            std::vector<std::pair<std::string, Tensor>> tensors;
            for (py::handle pair : pairs) {
              auto item = pair.cast<std::pair<std::string, py::object>>();
              tensors.emplace_back(item.first,
                                   TensorFromPython(item.second, absl::StrCat("tensor '", item.first, "'")));
            }
            ThrowIfError(self.Edit([&](GraphModule& gm) {
              for (auto& [path, tensor] : tensors) {
                const size_t dot = path.rfind('.');
                if (gm.FindModule(dot == std::string::npos ? "" : path.substr(0, dot)) == nullptr) {
                  return absl::NotFoundError(
                      absl::StrCat("set_tensors: the model has no module for tensor '", path, "'"));
                }
              }
              for (auto& [path, tensor] : tensors) RETURN_IF_ERROR(gm.SetTensor(path, std::move(tensor)));
              return absl::OkStatus();
            }));
          },
          py::arg("pairs"),
          "Sets tensors of the model's modules, each (dotted path, array or torch tensor), "
          "read in place as from_parts reads them; NotFound, changing nothing, for a path "
          "under no module of the model.")
      .def(
          "share_parts",
          [](Model& self) {
            std::vector<Tensor> tensors;
            std::string structure = self.Edit([&](GraphModule& gm) {
              ReleaseTensors(gm.root(), tensors);
              std::string bytes = SerializeModel(gm);
              std::vector<Tensor>::const_iterator next = tensors.begin();
              RestoreTensors(gm.root(), &next);
              return bytes;
            });
            py::list arrays;
            for (Tensor& t : tensors) arrays.append(PythonFromTensor(std::move(t), true));
            return py::make_tuple(py::bytes(structure), arrays);
          },
          "(structure, tensors) as take_parts gives them, the Model kept: the arrays are "
          "views of the engine's own buffers, shared with it (no copy), so a write through "
          "an array is seen by this Model (the engine copies a shared buffer before it "
          "writes to it itself, so its writes are not seen through the arrays).")
      .def_static(
          "from_text",
          [](const std::string& text) {
            return std::make_unique<Model>(
                ValueOrThrow(ParseModelText(text), ErrorKind::kModelFile));
          },
          py::arg("text"), "A model from graph/model.proto's protobuf text form.")
      .def(
          "save",
          [](Model& self, const py::object& path) {
            const std::string p = PathArg(path);
            ThrowIfError(self.Read([&](GraphModule& gm) { return SaveModel(gm, p); }));
          },
          py::arg("path"),
          "Writes the model atomically: text for .textproto / .pbtxt, else binary.")
      .def("to_bytes",
           [](Model& self) {
             return py::bytes(self.Read([](GraphModule& gm) { return SerializeModel(gm); }));
           })
      .def("to_text",
           [](Model& self) {
             return self.Read([](GraphModule& gm) { return SerializeModelText(gm); });
           })
      .def(
          "code",
          [](Model& self) { return self.Read([](GraphModule& gm) { return PrintCode(gm); }); },
          "The FX-style code listing (`fuselage print`).")
      .def(
          "verify",
          [](Model& self) { ThrowIfError(self.Read([](GraphModule& gm) { return gm.Verify(); })); },
          "Checks every graph invariant; raises EngineError naming the first broken one.")
      .def("copy",
           [](Model& self) {
             return std::make_unique<Model>(self.Read([](GraphModule& gm) { return gm.Clone(); }));
           })
      .def("__copy__",
           [](Model& self) {
             return std::make_unique<Model>(self.Read([](GraphModule& gm) { return gm.Clone(); }));
           })
      .def("__deepcopy__",
           [](Model& self, py::object) {
             return std::make_unique<Model>(self.Read([](GraphModule& gm) { return gm.Clone(); }));
           })
      .def_property_readonly(
          "node_count",
          [](Model& self) { return self.Read([](GraphModule& gm) { return gm.graph().size(); }); })
      .def_property_readonly(
          "placeholders",
          [](Model& self) {
            return self.Read([](GraphModule& gm) { return PlaceholderNames(gm); });
          })
      .def("__repr__", [](Model& self) {
        return self.Read([](GraphModule& gm) {
          return absl::StrCat("<fuselage Model: ", gm.graph().size(), " nodes, inputs (",
                              absl::StrJoin(PlaceholderNames(gm), ", "), ")>");
        });
      });
}

// The `engine=` argument of quantize / run: None (the model's recorded engine) or a name.
std::optional<QuantizedEngine> EngineArgument(const std::optional<std::string>& name) {
  if (!name.has_value()) return std::nullopt;
  std::optional<QuantizedEngine> engine = QuantizedEngineFromName(*name);
  if (!engine.has_value()) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat("engine is '", *name, "'; expected onednn, qnnpack, onnxruntime or None")));
  }
  return engine;
}

void RegisterPasses(py::module_& m) {
  using OptString = std::optional<std::string>;
  m.def(
      "aten_ops",
      [] {
        std::vector<std::pair<std::string, std::string>> ops;
        for (const AtenOp& op : AtenOps()) ops.emplace_back(op.aten, op.fx);
        return ops;
      },
      "The aten ops fuselage reads from torch.export, as (aten name, FX form) pairs "
      "(patterns/aten_ops.h): fuselage.from_exported rewrites by them, and a pattern leaf "
      "may name the aten op.");
  m.def(
      "fold_batch_norms",
      [](Model& model) {
        return ValueOrThrow(
            model.Edit([](GraphModule& gm) { return FoldFunctionalBatchNorms(gm); }));
      },
      py::arg("model"),
      "Folds each inference F.batch_norm into the F.conv1d/2d/3d before it (read by it "
      "alone), all their parameters constants, as torchao's prepare_pt2e folds them "
      "(patterns/batch_norm_folding.h), in place; returns how many were folded.");
  m.def(
      "observe_for_quantized_readers_only",
      [](Model& model, const PrepareReport& report, const std::vector<std::string>& names) {
        const absl::flat_hash_set<std::string> always_observed(names.begin(), names.end());
        ThrowIfError(model.Edit([&](GraphModule& gm) {
          return ObserveForQuantizedReadersOnly(gm, report, always_observed);
        }));
      },
      py::arg("model"), py::arg("report"), py::arg("always_observed") = std::vector<std::string>(),
      "On a prepared model and its PrepareReport: each observed value read in float by "
      "the readers that stay float (and by the graph's output), as torchao's quantizers "
      "quantize a value per reader (quantize/quantized_readers.h), in place.");
  m.def(
      "fold_constant_quantizes",
      [](Model& model) {
        return ValueOrThrow(
            model.Edit([](GraphModule& gm) { return FoldConstantQuantizes(gm); }));
      },
      py::arg("model"),
      "Replaces each quantize node of constants (a converted weight's quantize_per_channel) "
      "by its quantized tensor, computed once (quantize/quantized_constants.h), in place; "
      "returns how many were folded.");
  m.def(
      "fuse",
      [](Model& model, const OptString& backend, const OptString& config_text,
         const OptString& config_source, bool report_overlaps) {
        const BackendConfig config =
            ResolveBackend(backend, config_text, ConfigSource(config_text, config_source));
        FuseOptions options;
        options.report_overlaps = report_overlaps;
        return ValueOrThrow(
            model.Edit([&](GraphModule& gm) { return FuseModel(gm, config, options); }));
      },
      py::arg("model"), py::arg("backend") = py::none(), py::kw_only(),
      py::arg("config_text") = py::none(), py::arg("config_source") = py::none(),
      py::arg("report_overlaps") = false,
      "Fuses every match of the backend config's fusion patterns, in place. "
      "report_overlaps=True also lists, in FuseReport.overlaps, the matches that claimed "
      "nodes another pattern would have matched.");
  m.def(
      "explain",
      [](Model& model, const OptString& backend, const OptString& config_text,
         const OptString& config_source) {
        const BackendConfig config =
            ResolveBackend(backend, config_text, ConfigSource(config_text, config_source));
        return ValueOrThrow(model.Read([&](GraphModule& gm) { return ExplainModel(gm, config); }));
      },
      py::arg("model"), py::arg("backend") = py::none(), py::kw_only(),
      py::arg("config_text") = py::none(), py::arg("config_source") = py::none(),
      "Why each fusion pattern did or did not match, node by node; the model is not changed.");
  m.def(
      "prepare",
      [](Model& model, const OptString& backend, const OptString& config_text,
         const OptString& config_source, const py::object& qconfig_mapping,
         const OptString& qconfig_mapping_text) {
        const std::string source = ConfigSource(config_text, config_source);
        const QConfigMapping mapping =
            ResolveMapping(backend, config_text, source, qconfig_mapping, qconfig_mapping_text);
        const BackendConfig config = ResolveBackend(backend, config_text, source);
        return ValueOrThrow(
            model.Edit([&](GraphModule& gm) { return PrepareModel(gm, mapping, config); }));
      },
      py::arg("model"), py::arg("backend") = py::none(), py::kw_only(),
      py::arg("config_text") = py::none(), py::arg("config_source") = py::none(),
      py::arg("qconfig_mapping") = py::none(),
      py::arg("qconfig_mapping_text") = py::none(),
      "Inserts observers (as prepare_fx does, on a fused model: call fuse first), in place.");
  m.def(
      "calibrate",
      [](Model& model, const py::iterable& samples, int threads) {
        const CalibrationSamples calibration =
            SamplesFrom(samples, model.Read([](GraphModule& gm) { return PlaceholderNames(gm); }));
        return ValueOrThrow(
            model.Edit([&](GraphModule& gm) { return CalibrateModel(gm, calibration, threads); }));
      },
      py::arg("model"), py::arg("samples"), py::kw_only(), py::arg("threads") = 0,
      "Runs a prepared model on the samples so its observers record ranges, in place.");
  m.def(
      "convert",
      [](Model& model, bool uncalibrated_as_pytorch, std::optional<bool> dynamic_reduce_range) {
        ConvertOptions options;
        options.uncalibrated_as_pytorch = uncalibrated_as_pytorch;
        options.dynamic_reduce_range = dynamic_reduce_range;
        return ValueOrThrow(
            model.Edit([&](GraphModule& gm) { return ConvertModel(gm, options); }));
      },
      py::arg("model"), py::kw_only(), py::arg("uncalibrated_as_pytorch") = false,
      py::arg("dynamic_reduce_range") = py::none(),
      "Converts a prepared, calibrated model to a reference quantized model. An observer "
      "that saw no value is refused, or with uncalibrated_as_pytorch=True converted with "
      "PyTorch's defaults (scale 1.0, zero point 0) and named in the report's "
      "`uncalibrated`. dynamic_reduce_range: the reduce_range of dynamic quantize nodes "
      "(default: unless the model's engine is qnnpack).");
  m.def(
      "lower",
      [](Model& model, const OptString& config_text, const OptString& config_source,
         bool drop_requantizing_quantizes) {
        // The lowering rules a config declares lower with that config only.
        std::optional<BackendConfig> config;
        if (config_text.has_value()) {
          config = ResolveBackend(std::nullopt, config_text, ConfigSource(config_text, config_source));
        }
        // Lowering a model with no reference pattern would hand it back unchanged as if
        // it had been lowered; it is refused instead, and the model is left as it was.
        auto copy = model.Read([](GraphModule& gm) { return gm.Clone(); });
        LoweringReport report = ValueOrThrow([&] {
          py::gil_scoped_release release;
          NativeLoweringOptions options;
          options.drop_requantizing_quantizes = drop_requantizing_quantizes;
          return LowerModel(*copy, config.has_value() ? &*config : nullptr, options);
        }());
        if (LoweredNothing(report)) {
          ThrowIfError(absl::FailedPreconditionError(
              "lower: nothing to lower: the model has no quantize / dequantize reference "
              "patterns (dequantize -> op -> quantize_per_tensor); lower takes a reference "
              "quantized model, what convert() gives"));
        }
        model.Replace(std::move(copy));
        return report;
      },
      py::arg("model"), py::kw_only(), py::arg("config_text") = py::none(),
      py::arg("config_source") = py::none(), py::arg("drop_requantizing_quantizes") = true,
      "Lowers a reference quantized model to native quantized ops, in place; with "
      "config_text, also by the lowering rules that backend config declares. A pass-through "
      "op (pool, flatten, cat, ...) whose quantize requantizes drops it as PyTorch does, or "
      "with drop_requantizing_quantizes=False stays dequantize -> op -> quantize. The ops "
      "prepare kept float because their qconfig is None keep their binary-op and "
      "weighted-functional patterns float, as PyTorch's should_skip_lowering.");
  m.def(
      "quantize",
      [](Model& model, const py::iterable& samples, const OptString& backend,
         const OptString& config_text, const OptString& config_source,
         const py::object& qconfig_mapping, const OptString& qconfig_mapping_text,
         bool reference, int threads, const OptString& engine) {
        const std::string source = ConfigSource(config_text, config_source);
        const QConfigMapping mapping =
            ResolveMapping(backend, config_text, source, qconfig_mapping, qconfig_mapping_text);
        const BackendConfig config = ResolveBackend(backend, config_text, source);
        const CalibrationSamples calibration =
            SamplesFrom(samples, model.Read([](GraphModule& gm) { return PlaceholderNames(gm); }));
        QuantizeFlowOptions options;
        options.stop_at_reference = reference;
        options.threads = threads;
        options.engine = EngineArgument(engine);
        return ValueOrThrow(model.Edit([&](GraphModule& gm) {
          return RunQuantizeFlow(gm, config, mapping, calibration, options);
        }));
      },
      py::arg("model"), py::arg("samples"), py::arg("backend") = py::none(), py::kw_only(),
      py::arg("config_text") = py::none(), py::arg("config_source") = py::none(),
      py::arg("qconfig_mapping") = py::none(),
      py::arg("qconfig_mapping_text") = py::none(), py::arg("reference") = false,
      py::arg("threads") = 0, py::arg("engine") = py::none(),
      "fuse -> prepare -> calibrate -> convert -> lower (the pipeline `fuselage quantize` "
      "runs), in place; reference=True stops after convert.");
  m.def(
      "run",
      [](Model& model, const py::object& inputs, int threads, const OptString& engine) {
        const std::vector<std::string> names =
            model.Read([](GraphModule& gm) { return PlaceholderNames(gm); });
        std::vector<Tensor> tensors = InputTensors(inputs, names, "run");
        std::vector<Value> values(std::make_move_iterator(tensors.begin()),
                                  std::make_move_iterator(tensors.end()));
        tensors.clear();
        RunOptions options;
        options.threads = threads;
        options.engine = EngineArgument(engine);
        std::vector<Value> outputs = ValueOrThrow(model.Read([&](GraphModule& gm) {
          auto kernels = BuiltinKernels();
          if (!kernels.ok()) return absl::StatusOr<std::vector<Value>>(kernels.status());
          // A prepared model (observers still in it) runs too, as with `fuselage run`.
          absl::Status observers = RegisterObserverKernels(**kernels);
          if (!observers.ok()) return absl::StatusOr<std::vector<Value>>(observers);
          return Run(gm, std::move(values), **kernels, options);
        }));
        py::list result;
        for (Value& value : outputs) {
          if (value.is_tensor()) {
            Tensor t = value.as_tensor();
            value = Value();  // the array becomes the buffer's only holder: no copy
            result.append(PythonFromTensor(std::move(t)));
          } else if (value.is_none()) {
            result.append(py::none());
          } else if (value.is_bool()) {
            result.append(py::bool_(value.as_bool()));
          } else if (value.is_int()) {
            result.append(py::int_(value.as_int()));
          } else if (value.is_float()) {
            result.append(py::float_(value.as_float()));
          } else if (value.is_string()) {
            result.append(py::str(value.as_string()));
          } else {
            ThrowIfError(absl::UnimplementedError(absl::StrCat("run: output ", py::len(result),
                                                               " is a ", value.KindName(),
                                                               ", which has no Python form here")));
          }
        }
        return result;
      },
      py::arg("model"), py::arg("inputs"), py::kw_only(), py::arg("threads") = 0,
      py::arg("engine") = py::none(),
      "Runs the model with the interpreter; returns the flattened outputs as a list.");
}

// The writer's options for `example_inputs` (None: the placeholders' recorded shapes).
OnnxWriterOptions OnnxOptions(Model& model, const py::object& example_inputs) {
  OnnxWriterOptions options;
  if (example_inputs.is_none()) return options;
  const std::vector<std::string> names =
      model.Read([](GraphModule& gm) { return PlaceholderNames(gm); });
  options.inputs = InputTensors(example_inputs, names, "to_onnx: example_inputs");
  return options;
}

void RegisterOnnxWriter(py::module_& m) {
  m.def(
      "save_onnx",
      [](Model& model, const py::object& path, const py::object& example_inputs) {
        const std::string p = PathArg(path);
        OnnxWriterOptions options = OnnxOptions(model, example_inputs);
        ThrowIfError(model.Read([&](GraphModule& gm) { return SaveOnnxModel(gm, p, options); }),
                     ErrorKind::kOnnxExport);
      },
      py::arg("model"), py::arg("path"), py::arg("example_inputs") = py::none(),
      "Writes the model as ONNX (onnx/onnx_writer.h: plain, or QDQ where quantized), whole "
      "or not at all. The record run takes `example_inputs` (one array per placeholder), or "
      "zeros of the placeholders' recorded shapes. Raises fuselage.OnnxExportError naming "
      "the node.");
  m.def(
      "onnx_bytes",
      [](Model& model, const py::object& example_inputs) {
        OnnxWriterOptions options = OnnxOptions(model, example_inputs);
        std::string bytes = ValueOrThrow(
            model.Read([&](GraphModule& gm) { return OnnxModelBytes(gm, options); }),
            ErrorKind::kOnnxExport);
        return py::bytes(bytes);
      },
      py::arg("model"), py::arg("example_inputs") = py::none(),
      "The serialized ONNX model save_onnx writes.");
}

void RegisterModule(py::module_& m) {
  m.doc() = kModuleDoc;
  m.attr("API_VERSION") = kApiVersion;
  RegisterErrors(m);
  RegisterArrays(m);
  RegisterReports(m);
  RegisterModel(m);
  RegisterPasses(m);
  RegisterOnnxWriter(m);
}

}  // namespace
}  // namespace fuselage::python

PYBIND11_MODULE(_fuselage_core, m) { fuselage::python::RegisterModule(m); }
