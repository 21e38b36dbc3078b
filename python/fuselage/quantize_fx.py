"""fuselage.quantize_fx: torch.ao.quantization.quantize_fx (PyTorch 2 and 1.13), run by fuselage.

    from fuselage.quantize_fx import prepare_fx, convert_fx

    prepared = prepare_fx(model.eval(), qconfig_mapping, example_inputs,
                          backend_config=backend_config)
    for x in loader:                  # the user's own calibration loop
        prepared(x)
    converted = convert_fx(prepared)  # a runnable torch.fx.GraphModule

The same functions, signatures and semantics as PyTorch's (fuse_fx, prepare_fx,
convert_fx, convert_to_reference_fx): a user changes the import, not their code. The
user's BackendConfig and QConfigMapping are PyTorch's own objects, translated by
fuselage._translate into fuselage's config formats (root-node / extra-inputs getters
resolved on marker patterns; anything the formats cannot say is a ConfigTranslationError
naming it); the passes are fuselage's, in process (fuselage._core); models cross between
torch.fx and the engine in memory.

prepare_fx returns a GraphModule holding PyTorch's own observer modules, so calibrating is
running it; convert_fx reads their statistics. Where fuselage deliberately differs from
PyTorch:
  - a fused op with two tensor inputs (conv-add-relu) gets both inputs quantized, so
    convert_fx's result has no dequantize between them; PyTorch 1.13 has no such native
    module, so fuselage ships it (fuselage.nn.quantized.ConvAddReLU2d, bit-exact with
    fuselage's kernel);
  - an observer that saw no value converts with PyTorch's defaults (scale 1.0, zero
    point 0) and a UserWarning naming it (fuselage's CLI refuses such a model);
  - keyword arguments are matched (`torch.add(x, y, alpha=2)` is not fused as x + y).
convert_fx takes the prepare-time qconfig_mapping again (PyTorch's examples pass it) or one
that narrows it, with PyTorch's meaning (fuselage._convert_mapping). A user's own fuser
method runs as in PyTorch's fuse_fx, and the fused module it returns is quantized and
lowered as fuselage's fusion of the same pattern (fuselage._user_fusers). Of the custom
configs (fuse / prepare / convert_custom_config) fuselage takes preserved_attributes,
prepare's input_quantized_idxs / output_quantized_idxs (fuselage._quantized_io), its
non-traceable modules (kept as opaque modules, never traced into, as PyTorch's tracer keeps
them), custom module classes (fuselage._custom_modules) and standalone modules
(fuselage._standalone); any other setting, and equalization, is a clear error. The
prepared model is laid out as PyTorch's (observers on the root, fuselage._prepared).

Quantization-aware training (prepare_qat_fx): fuselage's fuse and prepare place the
observers, as above, from the QAT qconfig mapping read as the observers its fake-quantizes
wrap, with the batch norms kept for training (nni.ConvBnReLU2d & co.); then the observers
become PyTorch's fake-quantizes and the quantized weighted modules PyTorch's QAT modules
(nniqat.ConvBnReLU2d, nnqat.Linear, ...; fuselage._qat), so training is PyTorch's.
convert_fx of the trained model folds each batch norm (the QAT module's to_float()), takes
the activation qparams from the fake-quantizes' observers and the weight qparams from the
weight fake-quantizes, as PyTorch's convert does, and lowers as for post-training
quantization.

backend_config may also be the path of a fuselage backend config file
(backend_configs/backend_config.proto, text form): what PyTorch's BackendConfig cannot say,
such as a fused module type declared as data (fused_module_type; e.g.
backend_configs/examples/conv_add_relu_new_type.textproto), whose modules then cross to
torch as fuselage.nn.FusedSubgraph subclasses named after the type.
"""

import os
import warnings

import torch.nn as nn
from torch.ao.quantization import QConfigMapping
from torch.ao.quantization.backend_config import get_native_backend_config

from fuselage import _translate, _user_fusers
from fuselage.errors import ConfigTranslationError

__all__ = ["fuse_fx", "prepare_fx", "prepare_qat_fx", "convert_fx",
           "convert_to_reference_fx"]

# The backend config's and the qconfig mapping's text, kept on the prepared GraphModule
# for convert_fx (PyTorch keeps its own state there too, e.g. _observed_node_names).
_BACKEND_TEXT_ATTR = "_fuselage_backend_config_text"
_MAPPING_TEXT_ATTR = "_fuselage_qconfig_mapping_text"
_QAT_ATTR = "_fuselage_is_qat"  # set on prepare_qat_fx's model
# The path of the fuselage config file prepare_fx was given (None for a PyTorch config):
# only such a file declares lowering rules of its own, which convert_fx lowers with.
_BACKEND_FILE_ATTR = "_fuselage_backend_config_file"
# Set on a prepare_fx model whose qconfigs are fake-quantizes (PyTorch inserts them, and
# keeps the float modules): convert_fx reads their observers.
_FAKE_QUANTIZE_ATTR = "_fuselage_fake_quantize"


def _core():
    # Imported on use: fuselage.export / to_torch work without the compiled extension.
    from fuselage import _core as core

    return core


def _refuse(value, name):
    if value is not None and value != {} and not _is_empty_custom_config(value):
        raise ConfigTranslationError(
            f"quantize_fx: {name} is not supported by fuselage (got {value!r}); pass None")


_PRESERVED_ATTR = "_fuselage_preserved_attributes"  # prepare_fx's, carried to convert_fx


# The settings of each custom config fuselage takes besides preserved_attributes, into the
# dict `io` of _preserved_attributes: lists, and the custom module class mappings (dicts).
_TAKEN = {
    "prepare_custom_config": ["input_quantized_idxs", "output_quantized_idxs",
                              "non_traceable_module_name", "non_traceable_module_class",
                              "float_to_observed_custom_module_class",
                              "standalone_module_name", "standalone_module_class"],
    "convert_custom_config": ["observed_to_quantized_custom_module_class"],
}
_CLASS_MAPPINGS = ("float_to_observed_custom_module_class",
                   "observed_to_quantized_custom_module_class")


def _preserved_attributes(config, name, io=None):
    """The `preserved_attributes` of a fuse / prepare / convert custom config (a dict or
    PyTorch's *CustomConfig); with `io` (a dict), the other settings fuselage takes
    (_TAKEN: quantized inputs and outputs, fuselage._quantized_io; non-traceable modules;
    custom module classes, fuselage._custom_modules) go into it. Any other non-empty
    setting is refused by name."""
    if config is None:
        return []
    d = dict(config) if isinstance(config, dict) else dict(config.to_dict()) \
        if callable(getattr(config, "to_dict", None)) else None
    if d is None:
        _refuse(config, name)
        return []
    attributes = list(d.pop("preserved_attributes", None) or [])
    taken = ["preserved_attributes"]
    if io is not None:
        taken += _TAKEN[name]
        for key in _TAKEN[name]:
            value = d.pop(key, None)
            io[key] = dict(value or {}) if key in _CLASS_MAPPINGS else list(value or [])
    rest = {k: v for k, v in d.items() if v}
    if rest:
        raise ConfigTranslationError(
            f"quantize_fx: {name} settings {sorted(rest)} are not supported by fuselage "
            f"(got {rest!r}); only {', '.join(taken)}")
    return attributes


def _non_traceable(io):
    """prepare_custom_config's non-traceable modules as the exporter takes them: (names,
    classes), kept as opaque modules (the engine never looks inside, as PyTorch's tracer
    never traces into them)."""
    from fuselage import _custom_modules, _standalone

    names, classes = _standalone.leaves(io)
    return (list(io.get("non_traceable_module_name") or []) + names,
            list(io.get("non_traceable_module_class") or []) + _custom_modules.float_classes(io) +
            classes)


def _preserve(result, source, attributes):
    """PyTorch's preserved_attributes: each named attribute of `source` set on `result`."""
    for attribute in attributes:
        if hasattr(source, attribute):
            setattr(result, attribute, getattr(source, attribute))
    return result


def _is_empty_custom_config(value):
    to_dict = getattr(value, "to_dict", None)
    return callable(to_dict) and not any(to_dict().values())


def _is_config_file(backend_config):
    return isinstance(backend_config, str) or hasattr(backend_config, "__fspath__")


def _config_file_text(path):
    """The text of a fuselage backend config file."""
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


def _backend_source(backend_config):
    """The name the engine gives the backend config: a config file's path, which names it in
    the engine's errors; None (the engine's default) for a translated PyTorch config, which
    has no file."""
    return os.fspath(backend_config) if _is_config_file(backend_config) else None


def _backend_config_object(backend_config):
    if isinstance(backend_config, dict):
        from torch.ao.quantization.backend_config import BackendConfig

        backend_config = BackendConfig.from_dict(backend_config)
    return backend_config if backend_config is not None else get_native_backend_config()


def _backend_text(backend_config, is_qat=False, user_types=None, for_fusion=False):
    """The engine's text of `backend_config`; `user_types` maps the user's fused module
    classes to the engine types they stand for (fuselage._user_fusers.engine_types), and
    a text `for_fusion` leaves their entries out (_translate.backend_config_to_text)."""
    if _is_config_file(backend_config):
        if is_qat:
            raise ConfigTranslationError(
                "prepare_qat_fx: backend_config is a fuselage config file; quantization-aware "
                "training needs a PyTorch BackendConfig (its QAT modules and fusers)")
        return _config_file_text(backend_config)
    return _translate.backend_config_to_text(_backend_config_object(backend_config), is_qat,
                                             user_types, for_fusion)


def _mapping_object(qconfig_mapping):
    if isinstance(qconfig_mapping, dict):
        qconfig_mapping = QConfigMapping.from_dict(qconfig_mapping)
    if not isinstance(qconfig_mapping, QConfigMapping):
        raise ConfigTranslationError(
            f"quantize_fx: qconfig_mapping is a {type(qconfig_mapping).__name__}; expected a "
            "torch.ao.quantization.QConfigMapping (or its dict form)")
    return qconfig_mapping


def _mapping_text(qconfig_mapping, is_qat=False):
    return _translate.qconfig_mapping_to_text(_mapping_object(qconfig_mapping), is_qat)


def _expect_eval_batch_norms(model, function):
    """A model in training mode is prepared as PyTorch prepares it, except that a batch norm
    in training mode is refused: fuselage folds it into its conv with its running
    statistics (PyTorch's fuse_conv_bn_eval, which asserts eval mode), and one left
    unfused would calibrate on batch statistics while its running ones change."""
    if not model.training:
        return
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            raise ConfigTranslationError(
                f"{function}: batch norm '{name}' is in training mode; post-training "
                "quantization folds it with its running statistics (PyTorch's fusion "
                "asserts eval mode too): call model.eval() first, or prepare_qat_fx for "
                "quantization-aware training")


def fuse_fx(model, fuse_custom_config=None, backend_config=None):
    """The model with the backend config's fusion patterns fused (PyTorch's fuse_fx)."""
    preserved = _preserved_attributes(fuse_custom_config, "fuse_custom_config")
    _expect_eval_batch_norms(model, "fuse_fx")
    core = _core()
    m = core.from_torch(model)
    core.fuse(m, config_text=_backend_text(backend_config, for_fusion=True),
              config_source=_backend_source(backend_config))
    fused = _user_fusers.fuse(core.to_torch(m, consume=True), _user_fusions(backend_config),
                              is_qat=False)
    return _preserve(fused.train(model.training), model, preserved)


def _user_fusions(backend_config, is_qat=False):
    """The entries whose fuser is the user's own, which fuselage._user_fusers runs."""
    if _is_config_file(backend_config):
        return {}
    return _translate.user_fusions(_backend_config_object(backend_config), is_qat)


def prepare_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None,
               _equalization_config=None, backend_config=None):
    """Fuses and inserts observers (PyTorch's prepare_fx); returns a GraphModule with
    PyTorch's observer modules, calibrated by running it."""
    _refuse(_equalization_config, "_equalization_config")
    _expect_eval_batch_norms(model, "prepare_fx")
    io = {}
    preserved = _preserved_attributes(prepare_custom_config, "prepare_custom_config", io)
    # example_inputs are PyTorch's required argument; like PyTorch 1.13's prepare_fx,
    # fuselage does not need to run the model to prepare it (recording shapes would run a
    # copy of it: most of prepare_fx's time on a large graph).
    del example_inputs
    from fuselage import _prepared

    # A fake-quantize qconfig (a QAT one) in post-training prepare_fx: as in PyTorch, the
    # fake-quantizes go where the observers would and the modules stay float.
    from fuselage import _qat

    fake = _qat.has_fake_quantize(_mapping_object(qconfig_mapping))
    prepared = prepare_with_report(model, qconfig_mapping, backend_config,
                                   mapping_is_qat=fake, non_traceable=_non_traceable(io))[0]
    if fake:
        _qat.fake_quantize_observers(prepared, _mapping_object(qconfig_mapping))
        setattr(prepared, _FAKE_QUANTIZE_ATTR, True)
    # PyTorch's layout (observers on the root as activation_post_process_<n>), in the
    # model's mode, as PyTorch's prepared model is (a dropout keeps dropping).
    from fuselage import _quantized_io

    _preserve(prepared, model, preserved)
    setattr(prepared, _PRESERVED_ATTR, preserved)
    _prepared.flatten_observers(prepared)
    _quantized_io.after_prepare(prepared, io.get("input_quantized_idxs"),
                                io.get("output_quantized_idxs"),
                                qconfig_mapping=_mapping_object(qconfig_mapping))
    from fuselage import _module_qconfigs

    _module_qconfigs.set_module_qconfigs(prepared, _mapping_object(qconfig_mapping))
    from fuselage import _custom_modules

    _custom_modules.after_prepare(prepared, io)
    from fuselage import _standalone

    _standalone.after_prepare(prepared, io, _mapping_object(qconfig_mapping), backend_config,
                              prepare_fx)
    return prepared.train(model.training)


def prepare_qat_fx(model, qconfig_mapping, example_inputs, prepare_custom_config=None,
                   backend_config=None):
    """Fuses and inserts fake-quantizes for quantization-aware training (PyTorch's
    prepare_qat_fx): returns a GraphModule of PyTorch's fake-quantize and QAT modules
    (nniqat.ConvBnReLU2d, nnqat.Linear, ...; batch norms still training) where fuselage's
    prepare placed the observers. Train it, then convert_fx(prepared.eval())."""
    from fuselage import _qat, _quantized_io

    io = {}
    preserved = _preserved_attributes(prepare_custom_config, "prepare_custom_config", io)
    del example_inputs  # as in prepare_fx
    _qat.refuse_shared_modules(model, _non_traceable(io))
    prepared, _ = prepare_with_report(model, qconfig_mapping, backend_config, is_qat=True,
                                      non_traceable=_non_traceable(io))
    _qat.restore_parameters(prepared, model)
    _qat.to_qat(prepared, _mapping_object(qconfig_mapping),
                None if backend_config is None else _backend_config_object(backend_config))
    setattr(prepared, _QAT_ATTR, True)
    from fuselage import _prepared

    _prepared.flatten_observers(prepared)  # PyTorch's layout, as prepare_fx's
    _preserve(prepared, model, preserved)
    setattr(prepared, _PRESERVED_ATTR, preserved)
    _quantized_io.after_prepare(prepared, io.get("input_quantized_idxs"),
                                io.get("output_quantized_idxs"), "prepare_qat_fx",
                                _mapping_object(qconfig_mapping))
    return prepared.train(model.training)


def prepare_with_report(model, qconfig_mapping, backend_config, is_qat=False,
                        flow=("prepare_fx", "convert_fx"), mapping_is_qat=None,
                        non_traceable=None, fold_batch_norms=False, after_prepare=None,
                        keep_engine_model=False):
    """prepare_fx's GraphModule (prepare_qat_fx's before its fake-quantizes, `is_qat`) and
    fuselage's prepare report (every op kept float, by node name, with the reason). When
    nothing is quantized a UserWarning says why, naming the `flow`'s prepare and convert
    functions. `mapping_is_qat` (default: is_qat) reads the mapping's fake-quantizes as the
    observers they wrap. `non_traceable`: (module names, module classes) never traced into.
    `fold_batch_norms`: the engine folds each functional batch norm on constants into its
    conv first (fuselage.pt2e: as torchao's prepare_pt2e). `model` may be the engine's
    Model already (fuselage._exported.to_engine's), which the call then consumes.
    `after_prepare(core, model, report)` edits the engine's prepared model before it
    crosses to torch. With `keep_engine_model` the prepared GraphModule keeps it
    (sharing its tensors' memory), so convert does not read the graph back
    (_kept_engine_model)."""
    core = _core()
    fusions = _user_fusions(backend_config, is_qat)
    # With fusers of the user's, the entries for the modules they return are written once
    # they have run (_fuse_by_user).
    text = _backend_text(backend_config, is_qat, for_fusion=bool(fusions))
    source = _backend_source(backend_config)
    mapping = _mapping_text(qconfig_mapping, is_qat if mapping_is_qat is None else mapping_is_qat)
    m = model if isinstance(model, core.Model) else \
        core.from_torch(model, non_traceable=non_traceable)
    if fold_batch_norms:
        core.fold_batch_norms(m)
    core.fuse(m, config_text=text, config_source=source)
    fused_by_user = None
    if fusions:
        m, text, fused_by_user = _fuse_by_user(core, m, fusions, backend_config, is_qat)
    report = core.prepare(m, config_text=text, config_source=source,
                          qconfig_mapping_text=mapping)
    _refuse_fixed_qparams_qconfigs(report, flow[0])
    if report.quantized_ops == 0:
        _warn_nothing_quantized(report, *flow)
    if after_prepare is not None:
        after_prepare(core, m, report)
    keep = keep_engine_model and fused_by_user is None
    prepared = core.to_torch(m, consume=not keep, share=keep)
    if keep:
        prepared.__dict__[ENGINE_MODEL_ATTR] = (m, _graph_signature(prepared))
    if fused_by_user is not None:
        _user_fusers.restore(prepared, fused_by_user)
    setattr(prepared, _BACKEND_TEXT_ATTR, text)
    setattr(prepared, _BACKEND_FILE_ATTR, source)
    setattr(prepared, _MAPPING_TEXT_ATTR, mapping)
    from fuselage import _convert_mapping

    setattr(prepared, _convert_mapping.ENTRIES_ATTR, _convert_mapping.to_json(
        _convert_mapping.entries(_mapping_object(qconfig_mapping),
                                 is_qat if mapping_is_qat is None else mapping_is_qat)))
    return prepared, report


# The engine's model of a prepared GraphModule, kept by prepare (keep_engine_model) with
# the signature of the graph it gave (_graph_signature): convert converts a copy of it
# instead of reading the GraphModule back (_kept_engine_model). A copy of the GraphModule
# (deepcopy, pickle: fuselage._importer.TreeKeepingGraphModule) does not carry it.
from fuselage._importer import ENGINE_MODEL_ATTR  # noqa: E402


def _graph_signature(gm):
    """What must not change between prepare and convert for the kept engine model to
    stand for `gm`: every node's name, op, target and inputs, and the class of every
    module a node calls."""
    signature = []
    for node in gm.graph.nodes:
        target = node.target if isinstance(node.target, str) else id(node.target)
        called = type(gm.get_submodule(node.target)) if node.op == "call_module" else None
        signature.append((node.name, node.op, target, called,
                          tuple(n.name for n in node.all_input_nodes)))
    return tuple(signature)


def _kept_engine_model(graph_module):
    """A copy of the engine's model prepare kept for `graph_module` (ENGINE_MODEL_ATTR),
    with the tensors of the observers it calls as calibration left them; None where there
    is none or the graph changed since."""
    kept = graph_module.__dict__.get(ENGINE_MODEL_ATTR)
    if kept is None:
        return None
    model, signature = kept
    if _graph_signature(graph_module) != signature:
        return None
    from fuselage import _modules, _names
    from fuselage._prepared import _is_observer_module

    updates = []
    seen = set()
    for node in graph_module.graph.nodes:
        if node.op != "call_module" or node.target in seen:
            continue
        seen.add(node.target)
        module = graph_module.get_submodule(node.target)
        if _is_observer_module(module):
            contents = _modules.describe(module, _names.module_type_name(type(module)),
                                         f"module '{node.target}'")
            updates += [(f"{node.target}.{name}", tensor.detach())
                        for name, tensor in contents.tensors]
    m = model.copy()
    m.set_tensors(updates)
    return m


def _fuse_by_user(core, m, fusions, backend_config, is_qat):
    """The engine's fused model `m` with the user's fusers run on it (fuselage._user_fusers):
    (the engine model to prepare, holding the engine forms of the user's fused modules; the
    backend config's text for it; the torch model holding the user's fused modules)."""
    fused = core.to_torch(m, consume=True)
    recipes = {}
    _user_fusers.fuse(fused, fusions, is_qat, recipes=recipes)
    if recipes and is_qat:
        raise ConfigTranslationError(
            f"prepare_qat_fx: the user's fuser of node(s) {', '.join(sorted(recipes))} is not "
            "supported for quantization-aware training by fuselage; prepare_fx takes it")
    setattr(fused, _user_fusers.RECIPES_ATTR, recipes)
    text = _backend_text(backend_config, is_qat, _user_fusers.engine_types(fused))
    with _user_fusers.engine_forms(fused):
        return core.from_torch(fused), text, fused


def _refuse_fixed_qparams_qconfigs(report, prepare):
    """PyTorch 1.13's prepare_fx raises ValueError for a fixed-qparams op (sigmoid, tanh,
    ...) whose qconfig is not its fixed-qparams one; so does fuselage's (PyTorch 2's warns
    and keeps the op float, as fuselage does for its configs)."""
    refused = _core().KeptFloat.Cause.QCONFIG_REFUSED_BY_PYTORCH
    bad = [k for k in report.kept_float if k.cause == refused]
    if bad:
        raise ConfigTranslationError(
            f"{prepare}: node '{bad[0].node}' ({bad[0].op}): {bad[0].reason}; use the "
            "qconfigs of get_default_qconfig_mapping for fixed-qparams ops" +
            (f" ({len(bad) - 1} more such nodes)" if len(bad) > 1 else ""))


def _warn_nothing_quantized(report, prepare, convert, shown=5):
    reasons = "; ".join(f"{k.node} ({k.op}): {k.reason}" for k in report.kept_float[:shown])
    more = len(report.kept_float) - shown
    warnings.warn(
        f"{prepare}: the qconfig mapping and backend config quantize no op, so {convert} "
        "will return the model float" + (f". Kept float: {reasons}" if reasons else "") +
        (f"; and {more} more" if more > 0 else ""), UserWarning, stacklevel=3)


def _has_observers(graph_module):
    """Whether prepare placed observers, or weight plans only (weight-only embeddings:
    no node calls an observer, as in PyTorch's prepare_fx)."""
    from fuselage._prepared import _is_observer_module
    return any(n.op == "call_module" and _is_observer_module(graph_module.get_submodule(n.target))
               for n in graph_module.graph.nodes) or \
        any(name.rsplit(".", 1)[-1].startswith("weight_post_process_") and
            _is_observer_module(m) for name, m in graph_module.named_modules())


def _convert(graph_module, convert_custom_config, qconfig_mapping, backend_config, lower,
             drop_requantizing_quantizes=True, fold_weights=False):
    """convert_fx / convert_to_reference_fx; with `fold_weights` (fuselage.pt2e's reference
    form) each quantize of a constant weight is computed by the engine and the reference
    reads the quantized tensor (fuselage._core.fold_constant_quantizes)."""
    custom = {}
    preserved = _preserved_attributes(convert_custom_config, "convert_custom_config",
                                      custom) + \
        list(getattr(graph_module, _PRESERVED_ATTR, None) or [])
    from fuselage import _custom_modules, _quantized_io

    with _quantized_io.converting(graph_module) as io:
        converted = _convert_graph(graph_module, qconfig_mapping, backend_config, lower,
                                   drop_requantizing_quantizes, fold_weights)
    converted = _custom_modules.finish(graph_module, io.finish(converted), custom)
    from fuselage import _standalone

    converted = _standalone.finish(graph_module, converted,
                                   convert_fx if lower else convert_to_reference_fx)
    return _preserve(converted, graph_module, preserved)


def _engine_model(core, graph_module):
    """The engine's model of a prepared model: a QAT one's fake-quantizes and QAT modules
    as the observers and float modules they wrap (fuselage._qat.observed), a user's fused
    modules as their engine forms (fuselage._user_fusers)."""
    if getattr(graph_module, _QAT_ATTR, False) or \
            getattr(graph_module, _FAKE_QUANTIZE_ATTR, False):
        from fuselage import _qat

        with _qat.observed(graph_module):
            return core.from_torch(graph_module)
    with _user_fusers.engine_forms(graph_module):
        return core.from_torch(graph_module)


def _narrow(graph_module, qconfig_mapping):
    """(the prepared model to convert, module paths of the weighted ops kept float) for a
    convert-time qconfig_mapping, which may only narrow prepare's, with PyTorch's meaning
    (fuselage._convert_mapping)."""
    from fuselage import _convert_mapping

    is_qat = getattr(graph_module, _QAT_ATTR, False) or \
        getattr(graph_module, _FAKE_QUANTIZE_ATTR, False)
    prepared_with = getattr(graph_module, _MAPPING_TEXT_ATTR, None)
    prepared_entries = getattr(graph_module, _convert_mapping.ENTRIES_ATTR, None)
    if prepared_with is None or not isinstance(prepared_entries, str):
        raise ConfigTranslationError(
            "convert_fx: qconfig_mapping given for a model fuselage.quantize_fx's prepare_fx "
            "did not prepare (no prepare-time mapping to compare it with); pass None")
    text = _mapping_text(qconfig_mapping, is_qat)
    if text == prepared_with:
        return graph_module, set()
    _convert_mapping.check(_convert_mapping.from_json(prepared_entries),
                           _convert_mapping.entries(_mapping_object(qconfig_mapping), is_qat),
                           "convert_fx")
    core = _core()
    none = _convert_mapping.none_at_convert(
        core, graph_module, getattr(graph_module, _BACKEND_TEXT_ATTR), text,
        lambda gm: _engine_model(core, gm))
    return _convert_mapping.narrowed(graph_module, none)


def _convert_graph(graph_module, qconfig_mapping, backend_config, lower,
                   drop_requantizing_quantizes=True, fold_weights=False):
    kept_float = set()
    if qconfig_mapping is not None:
        graph_module, kept_float = _narrow(graph_module, qconfig_mapping)
    text = getattr(graph_module, _BACKEND_TEXT_ATTR, None)
    if backend_config is not None and text is not None and \
            _backend_text(backend_config, getattr(graph_module, _QAT_ATTR, False),
                          _user_fusers.engine_types(graph_module)) != text:
        raise ConfigTranslationError(
            "convert_fx: backend_config differs from the one given to prepare_fx")
    if getattr(graph_module, _MAPPING_TEXT_ATTR, None) is not None and \
            not _has_observers(graph_module):
        # fuselage's prepare_fx quantized nothing (and warned why): as PyTorch's convert
        # does, the model comes back float.
        return graph_module
    core = _core()
    if getattr(graph_module, _QAT_ATTR, False):
        return _convert_qat(core, graph_module, lower, kept_float,
                            drop_requantizing_quantizes)
    m = _kept_engine_model(graph_module)
    kept = m is not None
    if not kept:
        m = _engine_model(core, graph_module)
    _convert_as_pytorch(core, m)
    if fold_weights:
        core.fold_constant_quantizes(m)
    if lower:
        _lower(core, m, graph_module, drop_requantizing_quantizes)
    # A copy of the kept model shares its buffers with the prepared GraphModule's tensors
    # (the folded weights): they go over shared, as torchao's reference shares the
    # prepared model's parameters, where consuming would copy them (94 MB on resnet50).
    return core.to_torch(m, consume=not kept, share=kept)


def _lower(core, model, prepared, drop_requantizing_quantizes=True):
    """Lowers `model` in place, as `prepared` (the prepare_fx model) records: with the
    lowering rules of the fuselage config file it was prepared with
    (backend_configs/declared_types.h), which belong to that config (a translated PyTorch
    config declares none, so it is not parsed again); and the ops whose qconfig was None
    keep their binary-op and weighted-functional patterns float, as PyTorch's
    should_skip_lowering does. A pass-through op (pool, flatten, ...) whose quantize
    requantizes drops it as PyTorch does, or with drop_requantizing_quantizes=False keeps
    dequantize -> op -> quantize (the engine's NativeLoweringOptions)."""
    source = getattr(prepared, _BACKEND_FILE_ATTR, None)
    if source is None:
        core.lower(model, drop_requantizing_quantizes=drop_requantizing_quantizes)
    else:
        core.lower(model, config_text=getattr(prepared, _BACKEND_TEXT_ATTR),
                   config_source=source,
                   drop_requantizing_quantizes=drop_requantizing_quantizes)


def _convert_as_pytorch(core, m, shown=5):
    """The engine's convert with PyTorch's rule for an observer that saw no value: scale
    1.0 and zero point 0, and a UserWarning naming it (PyTorch warns too; fuselage's CLI
    refuses such a model)."""
    # Dynamic quantization's reduce_range, as PyTorch's convert chooses it: by the engine
    # torch runs on now.
    import torch

    report = core.convert(m, uncalibrated_as_pytorch=True,
                          dynamic_reduce_range=torch.backends.quantized.engine in
                          ("fbgemm", "x86"))
    if report.uncalibrated:
        names = ", ".join(report.uncalibrated[:shown])
        more = len(report.uncalibrated) - shown
        warnings.warn(
            f"convert_fx: {len(report.uncalibrated)} observer(s) saw no value ({names}"
            + (f" and {more} more" if more > 0 else "") + "): converted with PyTorch's "
            "defaults, scale 1.0 and zero point 0; calibrate the prepared model first for "
            "meaningful quantization parameters", UserWarning, stacklevel=4)
    return report


def _convert_qat(core, graph_module, lower, kept_float=(), drop_requantizing_quantizes=True):
    """convert_fx of a model prepare_qat_fx returned: the engine converts it as a prepared
    model of observers and float modules (fuselage._qat.observed), the QAT weight qparams
    are written into its reference modules (not into the float modules of `kept_float`, a
    convert-time qconfig_mapping's None), then it lowers."""
    from fuselage import _qat

    with _qat.observed(graph_module) as weight_qparams:
        m = core.from_torch(graph_module)
    _convert_as_pytorch(core, m)
    reference = core.to_torch(m, consume=True)
    _qat.set_weight_qparams(reference, {path: qparams for path, qparams in
                                        weight_qparams.items() if path not in kept_float})
    if not lower:
        return reference
    m = core.from_torch(reference)
    _lower(core, m, graph_module, drop_requantizing_quantizes)
    return core.to_torch(m, consume=True)


def convert_fx(graph_module, convert_custom_config=None, _remove_qconfig=True,
               qconfig_mapping=None, backend_config=None):
    """A calibrated prepared model converted and lowered to native quantized ops
    (PyTorch's convert_fx): a runnable GraphModule on PyTorch's quantized kernels."""
    return _convert(graph_module, convert_custom_config, qconfig_mapping, backend_config,
                    lower=True)


def convert_to_reference_fx(graph_module, convert_custom_config=None, _remove_qconfig=True,
                            qconfig_mapping=None, backend_config=None):
    """A calibrated prepared model converted to a reference quantized model
    (dequantize -> float op -> quantize), PyTorch's convert_to_reference_fx."""
    return _convert(graph_module, convert_custom_config, qconfig_mapping, backend_config,
                    lower=False)
