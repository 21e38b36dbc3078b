"""PyTorch's QConfigMapping and BackendConfig as fuselage's declarative text formats.

    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.backend_config import get_qnnpack_backend_config
    from fuselage._translate import backend_config_to_text, qconfig_mapping_to_text

    open("mapping.textproto", "w").write(
        qconfig_mapping_to_text(get_default_qconfig_mapping("qnnpack")))
    open("config.textproto", "w").write(backend_config_to_text(get_qnnpack_backend_config()))
    # fuselage quantize model.fsl --backend=qnnpack --config=config.textproto \
    #     --qconfig-mapping=mapping.textproto -o q.fsl

The texts are quantize/qconfig_mapping.proto (QConfigMappingFile) and
backend_configs/backend_config.proto (BackendConfigFile) in protobuf text format; the C++
loaders validate them again. Both functions are pure: they read the PyTorch objects (and
call the config's root-node / extra-inputs getters on marker objects), nothing else.
Whatever the formats cannot express is a ConfigTranslationError naming it: a custom
observer class, a dynamic observer other than PlaceholderObserver, an object type without a
fuselage name, a fuser method that is not callable, a getter that does more than pick
pattern positions. A fuser of the user's own is run by Python (fuselage._user_fusers). A
dynamic PlaceholderObserver (PyTorch 2's is_dynamic=True, 1.13's compute_dtype) is written
with `is_dynamic: true`.

Quantization-aware training (fuselage.quantize_fx.prepare_qat_fx) translates with
is_qat=True: a fake-quantize (FakeQuantize, FusedMovingAvgObsFakeQuantize,
FixedQParamsFakeQuantize) becomes the observer it wraps, with the arguments it gives that
observer (fuselage places observers; fuselage._qat puts the fake-quantizes in their
places), and the batch-norm fusers give PyTorch's QAT fused types (nni.ConvBnReLU2d, ...)
with the batch norm kept, where for inference they fold it; fuselage.fusers' conv-bn-add(-relu)
fusers likewise give nni.ConvBnAdd2d / nni.ConvBnAddReLU2d. Without is_qat a fake-quantize
is a ConfigTranslationError.

Not translated, on purpose: BackendPatternConfig.qat_module (fuselage._qat reads it from
the PyTorch config), _overwrite_output_fake_quantize, and the entries whose pattern is a
QAT module (nnqat.Conv2d, nniqat.ConvBn2d, ...), which never match a model before the QAT
swap.
"""

import functools
import inspect
import math

import torch
import torch.ao.quantization.fuser_method_mappings as fmm
# PyTorch 2's BackendConfig.set_backend_pattern_config calls this module without importing
# it, so get_qnnpack_backend_config() fails unless something imported it before.
import torch.ao.quantization.backend_config.utils  # noqa: F401
import torch.ao.quantization.observer as obs
import torch.nn as nn

from fuselage import _names
from fuselage.errors import ConfigTranslationError

try:
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase
except ImportError:  # pragma: no cover - every supported PyTorch has it
    FakeQuantizeBase = ()
from torch.ao.quantization.backend_config import ObservationType
from torch.ao.quantization.utils import MatchAllNode

__all__ = ["qconfig_mapping_to_text", "backend_config_to_text", "user_fusions", "UserFusion"]


# ---- text ---------------------------------------------------------------------------

def _quote(s):
    """A protobuf text-format string literal: UTF-8 bytes, non-printable ones as octal
    escapes (the parser rebuilds the bytes, so any text survives)."""
    try:
        data = s.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigTranslationError(
            "%r is not valid text: it holds a lone surrogate, which UTF-8 cannot encode"
            % s) from None
    out = []
    for b in data:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def _number(x):
    if isinstance(x, bool):
        raise TypeError("bool is not a number here")
    if isinstance(x, torch.Tensor):
        x = x.item()
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError("%r is not finite" % x)
        return repr(x)  # shortest text that reads back as the same double
    return str(int(x))


def _dtype(d):
    return str(d)  # "torch.quint8": the loaders read it


# ---- observers and qconfigs ---------------------------------------------------------------

# PyTorch observer class -> (fuselage kind, the constructor arguments the kind takes).
_KINDS = {}


def _kind(cls_name, fields):
    cls = getattr(obs, cls_name, None)
    if cls is not None:
        _KINDS[cls] = (cls_name.lstrip("_"), fields)


_AFFINE = ("dtype", "qscheme", "reduce_range", "quant_min", "quant_max", "eps")
_kind("MinMaxObserver", _AFFINE)
_kind("MovingAverageMinMaxObserver", _AFFINE + ("averaging_constant",))
_kind("PerChannelMinMaxObserver", _AFFINE + ("ch_axis",))
_kind("MovingAveragePerChannelMinMaxObserver", _AFFINE + ("averaging_constant", "ch_axis"))
_kind("HistogramObserver", _AFFINE + ("bins", "upsample_rate"))
_kind("PlaceholderObserver", ("dtype", "quant_min", "quant_max", "is_dynamic"))
_kind("NoopObserver", ("dtype",))
_kind("FixedQParamsObserver", ("dtype", "qscheme", "quant_min", "quant_max", "scale",
                               "zero_point"))
_kind("ReuseInputObserver", ())
_kind("_ReuseInputObserver", ())  # its name in some PyTorch versions

# Constructor arguments that carry nothing the formats need when they have these values.
# PyTorch 2's PlaceholderObserver takes qscheme=None and eps=None (unset, as 1.13's
# PlaceholderObserver has no such arguments).
_INERT = {"factory_kwargs": (None,), "custom_op_name": ("",), "compute_dtype": (None,),
          "is_dynamic": (False,), "memoryless": (False,), "qscheme": (None,), "eps": (None,)}


def _unwrap(factory, what):
    """(class, {argument: value}) of an observer factory: a class, or the
    `with_args(...)` partials PyTorch builds (outer arguments override inner ones)."""
    kwargs = {}
    args = ()
    while True:
        if isinstance(factory, obs._PartialWrapper):
            if factory.callable_args:
                raise ConfigTranslationError(
                    "%s: with_callable_args(%s) is not supported; give plain values with "
                    "with_args" % (what, ", ".join(sorted(factory.callable_args))))
            factory = factory.p
        elif isinstance(factory, functools.partial):
            kwargs = {**factory.keywords, **kwargs}
            if factory.args:
                args = factory.args + args
            factory = factory.func
        else:
            break
    return factory, args, kwargs


def _fake_quantize_observer(cls, args, kwargs, what):
    """(observer class, args, kwargs) that the fake-quantize class `cls`, built with
    `args` / `kwargs`, gives its activation_post_process: FakeQuantize and
    FusedMovingAvgObsFakeQuantize pass the observer their quant_min / quant_max (when both
    are set) and every other keyword; FixedQParamsFakeQuantize builds its observer as
    is."""
    signature = _signature(cls)
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError as e:
        raise ConfigTranslationError("%s: %s arguments: %s" % (what, cls.__qualname__, e)) \
            from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            values.update(values.pop(param.name, {}))
    observer = values.pop("observer", None)
    if observer is None:
        raise ConfigTranslationError("%s: %s has no observer" % (what, cls.__qualname__))
    if cls.__name__ == "FixedQParamsFakeQuantize":
        extra = {}
    else:
        quant_min, quant_max = values.pop("quant_min", None), values.pop("quant_max", None)
        extra = dict(values)
        if quant_min is not None and quant_max is not None:
            extra.update(quant_min=quant_min, quant_max=quant_max)
        if extra.get("is_dynamic") is False:
            del extra["is_dynamic"]
    inner_cls, inner_args, inner_kwargs = _unwrap(observer, what + " observer")
    return inner_cls, inner_args, {**inner_kwargs, **extra}


_signatures = {}


def _signature(cls):
    """inspect.signature(cls), once per observer class (0.2-0.5 ms a call: a qconfig
    mapping names the same two classes dozens of times)."""
    signature = _signatures.get(cls)
    if signature is None:
        signature = _signatures[cls] = inspect.signature(cls)
    return signature


def _observer_text(factory, what, is_qat=False):
    cls, args, kwargs = _unwrap(factory, what)
    if is_qat and FakeQuantizeBase and isinstance(cls, type) and \
            issubclass(cls, FakeQuantizeBase):
        cls, args, kwargs = _fake_quantize_observer(cls, args, kwargs, what)
    if not isinstance(cls, type):
        raise ConfigTranslationError(
            "%s: %r is not an observer class or its with_args(...); expected one of %s"
            % (what, cls, ", ".join(sorted(k for k, _ in _KINDS.values()))))
    if FakeQuantizeBase and issubclass(cls, FakeQuantizeBase):
        raise ConfigTranslationError(
            "%s: %s is a fake-quantize (quantization-aware training): use "
            "fuselage.quantize_fx.prepare_qat_fx for it, or an observer such as "
            "HistogramObserver for post-training quantization"
            % (what, cls.__qualname__))
    if cls not in _KINDS:
        raise ConfigTranslationError(
            "%s: observer class %s.%s is not supported (a custom observer cannot be run "
            "by fuselage); expected one of %s"
            % (what, cls.__module__, cls.__qualname__,
               ", ".join(sorted(k for k, _ in _KINDS.values()))))
    kind, fields = _KINDS[cls]
    signature = _signature(cls)
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError as e:
        raise ConfigTranslationError("%s: %s arguments: %s" % (what, kind, e)) from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    # Arguments that land in the constructor's **kwargs are checked like named ones.
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            values.update(values.pop(param.name, {}))
    if values.get("is_dynamic") is True or values.get("compute_dtype") is not None:
        # Dynamic quantization: PyTorch 2 says is_dynamic=True, 1.13 a compute_dtype.
        # Only a placeholder (the input is quantized at run time) can be dynamic.
        if kind != "PlaceholderObserver":
            raise ConfigTranslationError(
                "%s: %s(is_dynamic / compute_dtype): only PlaceholderObserver can be "
                "dynamic" % (what, kind))
        values.pop("compute_dtype", None)
        values["is_dynamic"] = True
    lines = ["kind: " + _quote(kind)]
    for name, value in values.items():
        if name in _INERT and value in _INERT[name]:
            continue
        if name not in fields:
            raise ConfigTranslationError(
                "%s: %s argument %s=%r is not supported" % (what, kind, name, value))
        if value is None:
            continue  # quant_min / quant_max unset
        try:
            if name == "dtype":
                text = _quote(_dtype(value))
            elif name == "qscheme":
                text = _quote(_names.qscheme_name(value))
            elif name in ("reduce_range", "is_dynamic"):
                text = "true" if value else "false"
            else:
                text = _number(value)
        except (TypeError, ValueError, KeyError) as e:
            raise ConfigTranslationError(
                "%s: %s argument %s=%r: %s" % (what, kind, name, value, e)) from None
        lines.append("%s: %s" % (name, text))
    return lines


def _qconfig_lines(qconfig, what, is_qat=False):
    """The body of a QConfigValue: `none: true`, or activation and weight."""
    if qconfig is None:
        return ["none: true"]
    if type(qconfig).__name__ == "QConfigDynamic" or not hasattr(qconfig, "activation") \
            or not hasattr(qconfig, "weight"):
        raise ConfigTranslationError(
            "%s: %r is not a static QConfig(activation=..., weight=...); dynamic "
            "quantization is not supported" % (what, qconfig))
    lines = []
    for field in ("activation", "weight"):
        body = _observer_text(getattr(qconfig, field), "%s.%s" % (what, field), is_qat)
        lines.append("%s { %s }" % (field, " ".join(body)))
    return lines


def _object_type_name(object_type, what):
    """fuselage's name of a QConfigMapping object type (graph/NAMING.md): a module class,
    a function, or a method name string."""
    if isinstance(object_type, str):
        return object_type
    if isinstance(object_type, type) and issubclass(object_type, nn.Module):
        name = _module_name(object_type)
    elif callable(object_type):
        name = _names.function_name(object_type)
    else:
        name = None
    if name is None:
        raise ConfigTranslationError(
            "%s: object type %r has no fuselage name (graph/NAMING.md); expected a torch.nn "
            "module class, an importable function or a method name" % (what, object_type))
    return name


def qconfig_mapping_to_text(qconfig_mapping, is_qat=False) -> str:
    """The QConfigMappingFile text (quantize/qconfig_mapping.proto) of a PyTorch
    QConfigMapping: global, object types, module-name regexes, module names and
    module-name / object-type / index entries, in the mapping's order; `None` becomes
    `none: true`. With is_qat, a fake-quantize is written as the observer it wraps.
    Raises ConfigTranslationError naming the entry and what is unsupported."""
    for attr in ("global_qconfig", "object_type_qconfigs", "module_name_regex_qconfigs",
                 "module_name_qconfigs", "module_name_object_type_order_qconfigs"):
        if not hasattr(qconfig_mapping, attr):
            raise ConfigTranslationError(
                "expected a torch.ao.quantization.QConfigMapping, got %s (no %s)"
                % (type(qconfig_mapping).__name__, attr))
    out = ["# proto-file: quantize/qconfig_mapping.proto",
           "# proto-message: fuselage.config.QConfigMappingFile"]

    def block(header, key_lines, qconfig, what):
        out.append(header + " {")
        out.extend("  " + k for k in key_lines)
        out.append("  qconfig {")
        out.extend("    " + line for line in _qconfig_lines(qconfig, what + ".qconfig", is_qat))
        out.append("  }")
        out.append("}")

    if qconfig_mapping.global_qconfig is not None:
        out.append("global {")
        out.extend("  " + line for line in _qconfig_lines(qconfig_mapping.global_qconfig,
                                                          "global", is_qat))
        out.append("}")
    for i, (object_type, q) in enumerate(qconfig_mapping.object_type_qconfigs.items()):
        what = "object_type[%d] %r" % (i, object_type)
        block("object_type", ["object_type: " + _quote(_object_type_name(object_type, what))],
              q, what)
    for i, (regex, q) in enumerate(qconfig_mapping.module_name_regex_qconfigs.items()):
        block("module_name_regex", ["regex: " + _quote(regex)], q,
              "module_name_regex[%d] %r" % (i, regex))
    for i, (name, q) in enumerate(qconfig_mapping.module_name_qconfigs.items()):
        if name == "":
            continue  # PyTorch never consults it (_get_module_name_qconfig stops at the root)
        block("module_name", ["module_name: " + _quote(name)], q, "module_name[%d] %r" % (i, name))
    for i, ((name, object_type, index), q) in enumerate(
            qconfig_mapping.module_name_object_type_order_qconfigs.items()):
        what = "module_name_object_type_order[%d] %r" % (i, (name, object_type, index))
        block("module_name_object_type_order",
              ["module_name: " + _quote(name),
               "object_type: " + _quote(_object_type_name(object_type, what)),
               "index: %d" % index], q, what)
    return "\n".join(out) + "\n"


# ---- backend configs ---------------------------------------------------------------------

def _module_name(cls):
    name = _names.module_type_name(cls)
    if name is None and cls.__module__.split(".")[:2] == ["fuselage", "nn"]:
        # fuselage.nn's float modules of the fused ops PyTorch lacks (ConvAddReLU2d, ...)
        # are the nni. types of graph/NAMING.md.
        name = "nni." + cls.__name__
    return name


def _element_name(p, what):
    """One pattern position in the text syntax of patterns/pattern.h."""
    if p is MatchAllNode:
        return "MatchAllNode"
    if isinstance(p, str):
        return "method:" + p
    if isinstance(p, type) and issubclass(p, nn.Module):
        name = _module_name(p)
    elif callable(p):
        name = _names.function_name(p)
    else:
        name = None
    if name is None:
        raise ConfigTranslationError(
            "%s: pattern element %r has no fuselage name (graph/NAMING.md)" % (what, p))
    return name


def _pattern_text(p, what):
    if isinstance(p, (tuple, list)):
        if not p:
            raise ConfigTranslationError("%s: empty pattern" % what)
        return "(" + ", ".join(_pattern_text(x, what) for x in p) + ")"
    return _element_name(p, what)


# patterns/pattern.h Pattern::kMaxPositions: the most elements one pattern may have.
_MAX_PATTERN_POSITIONS = 64


def _check_pattern_size(pattern, what):
    """Counts the pattern's elements without recursing (a pattern nested thousands deep
    would exhaust Python's stack); more than the C++ limit is refused."""
    positions, pending = 0, [pattern]
    while pending:
        p = pending.pop()
        if isinstance(p, (tuple, list)):
            pending.extend(p)
        else:
            positions += 1
        if positions > _MAX_PATTERN_POSITIONS or len(pending) > _MAX_PATTERN_POSITIONS:
            raise ConfigTranslationError(
                "%s: the pattern has more than %d elements (the limit of patterns/pattern.h)"
                % (what, _MAX_PATTERN_POSITIONS))


def _pattern_of(cfg, what):
    """(pattern, format, complex-format pattern) of a BackendPatternConfig. PyTorch 1.13's
    `pattern` is the reversed nested (complex) format; later versions keep that in
    `_pattern_complex_format` and use `pattern` for the simple format (execution order)."""
    simple, format_, nested = _pattern_formats(cfg, what)
    _check_pattern_size(simple, what)
    _check_pattern_size(nested, what)
    return simple, format_, nested


def _pattern_formats(cfg, what):
    if hasattr(cfg, "_pattern_complex_format"):
        complex_pattern = getattr(cfg, "_pattern_complex_format")
        if complex_pattern is not None:
            return complex_pattern, "COMPLEX", complex_pattern
        simple = cfg.pattern
        if simple is None:
            raise ConfigTranslationError("%s: the config has no pattern" % what)
        if isinstance(simple, (tuple, list)) and len(simple) > 1:
            nested = simple[0]
            for element in simple[1:]:
                nested = (element, nested)
            return simple, "SEQUENCE", nested
        return simple, "COMPLEX", simple
    if getattr(cfg, "pattern", None) is None:
        raise ConfigTranslationError("%s: the config has no pattern" % what)
    return cfg.pattern, "COMPLEX", cfg.pattern


class _PatternPosition:
    """What a root-node / extra-inputs getter is called with in place of a matched node:
    it knows its position's path (backend_config.proto) and refuses everything else."""

    __slots__ = ("_path",)

    def __init__(self, path):
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name):
        raise AttributeError(
            "a pattern position has no attribute %r: the getter may only pick positions "
            "of the pattern, not look at the nodes" % name)

    def __setattr__(self, name, value):
        raise AttributeError("a pattern position cannot be changed")

    def __repr__(self):
        return "<pattern position %r>" % self._path


def _marked(p, path=""):
    """The complex pattern `p` with every position replaced by its _PatternPosition."""
    if isinstance(p, (tuple, list)):
        args = [_marked(a, "%s.%d" % (path, i) if path else str(i)) for i, a in enumerate(p[1:])]
        return (_PatternPosition(path), *args)
    return _PatternPosition(path)


def _call_getter(getter, nested, what, field):
    try:
        return getter(_marked(nested))
    except ConfigTranslationError:
        raise
    except Exception as e:
        raise ConfigTranslationError(
            "%s: %s %s failed on the pattern's positions (%s: %s); a getter may only pick "
            "positions of the pattern it is given" % (what, field, _qualname(getter),
                                                      type(e).__name__, e)) from None


def _qualname(fn):
    return "%s.%s" % (getattr(fn, "__module__", "?"),
                      getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn))))


def _position_path(value, getter, what, field):
    if not isinstance(value, _PatternPosition):
        raise ConfigTranslationError(
            "%s: %s %s returned %r; expected one position of the pattern it was given"
            % (what, field, _qualname(getter), value))
    return value._path


# PyTorch 1.13's fuse_conv_bn_relu returns the fused conv-relu of the conv's
# dimensionality (its own table).
_CONV_RELU = {nn.Conv1d: "nni.ConvReLU1d", nn.Conv2d: "nni.ConvReLU2d",
              nn.Conv3d: "nni.ConvReLU3d"}
# fuselage.fusers (python/fuselage/fusers.py), by name: (fuser kind, fused module type).
_FUSELAGE_FUSERS = {
    "fuse_conv_add": ("WRAP_IN_SEQUENCE", "nni.ConvAdd2d"),
    "fuse_conv_bn_add": ("FOLD_BN_THEN_WRAP", "nni.ConvAdd2d"),
    "fuse_conv_add_relu": ("WRAP_IN_SEQUENCE", "nni.ConvAddReLU2d"),
    "fuse_conv_bn_add_relu": ("FOLD_BN_THEN_WRAP", "nni.ConvAddReLU2d"),
}
# Their quantization-aware-training forms (is_qat): the batch norm kept, wrapped with the
# conv (fuselage.nn.ConvBnAdd2d / ConvBnAddReLU2d, trained by fuselage.nn.qat).
_FUSELAGE_QAT_FUSERS = {
    "fuse_conv_bn_add": ("WRAP_IN_SEQUENCE", "nni.ConvBnAdd2d"),
    "fuse_conv_bn_add_relu": ("WRAP_IN_SEQUENCE", "nni.ConvBnAddReLU2d"),
}
_FMM = fmm.__name__
# PyTorch's batch-norm fusers with is_qat=True keep the batch norm (it trains): the fused
# type by the type of the conv / linear, as fuser_method_mappings builds it.
_QAT_FUSED = {
    "fuse_conv_bn": {nn.Conv1d: "nni.ConvBn1d", nn.Conv2d: "nni.ConvBn2d",
                     nn.Conv3d: "nni.ConvBn3d"},
    "fuse_conv_bn_relu": {nn.Conv1d: "nni.ConvBnReLU1d", nn.Conv2d: "nni.ConvBnReLU2d",
                          nn.Conv3d: "nni.ConvBnReLU3d"},
    "fuse_linear_bn": {nn.Linear: "nni.LinearBn1d"},
}


# The fuser kind of a fuser fuselage does not know (a user's own function): the engine
# fuses each match into fuselage.FusedSubgraph, which records the matched modules and how
# they were wired, and fuselage._user_fusers calls the fuser on them (user_fusions).
_USER_FUSER = "USER"


class _NoQatForm(ConfigTranslationError):
    """A fuser PyTorch refuses with is_qat=True (fuse_convtranspose_bn): its entry is left
    out of a QAT translation, so the pattern stays unfused."""


def _closure(fn):
    names = fn.__code__.co_freevars
    return {n: c.cell_contents for n, c in zip(names, fn.__closure__ or ())}


def _fuser(fuser, nested, what, is_qat=False):
    """(fuser kind, fused module type or "") of a fuser method, as fuselage's fusion pass
    does it for inference: batch norm folded into the conv / linear, or the matched
    modules wrapped in the fused container. With is_qat, as PyTorch's fusers do it for
    quantization-aware training: a batch norm is kept, wrapped with the conv / linear in
    nni.ConvBn2d & co. PyTorch's own fusers are recognized by identity (reverse2 / reverse3
    / (reverse_)sequential_wrapper2 unwrapped), fuselage's by qualified name."""
    module = getattr(fuser, "__module__", None)
    qualname = getattr(fuser, "__qualname__", "")
    if module == "fuselage.fusers" and qualname in _FUSELAGE_FUSERS:
        if not is_qat:
            return _FUSELAGE_FUSERS[qualname]
        if qualname not in _FUSELAGE_QAT_FUSERS:
            raise ConfigTranslationError(
                "%s: fuselage.fusers.%s has no QAT form (conv-add without a batch norm); "
                "prepare_qat_fx takes fuse_conv_bn_add and fuse_conv_bn_add_relu"
                % (what, qualname))
        return _FUSELAGE_QAT_FUSERS[qualname]
    if module == _FMM and hasattr(fuser, "__code__"):
        outer = qualname.split(".<locals>.")[0].lstrip("_")
        cells = _closure(fuser)
        if outer in ("reverse2", "reverse3") and "f" in cells:
            return _fuser(cells["f"], nested, what, is_qat)
        if outer in ("sequential_wrapper2", "reverse_sequential_wrapper2") and "sequential" in cells:
            name = _module_name(cells["sequential"])
            if name is None:
                raise ConfigTranslationError(
                    "%s: fuser method wraps in %r, which has no fuselage name"
                    % (what, cells["sequential"]))
            return "WRAP_IN_SEQUENCE", name
    if is_qat:
        for name, fused_types in _QAT_FUSED.items():
            if fuser is getattr(fmm, name, None):
                for root, fused in fused_types.items():
                    if _contains(nested, root):
                        return "WRAP_IN_SEQUENCE", fused
                raise ConfigTranslationError("%s: %s on a pattern without %s" % (
                    what, name, " or ".join(c.__name__ for c in fused_types)))
        if fuser is getattr(fmm, "fuse_convtranspose_bn", None):
            raise _NoQatForm("%s: PyTorch has no QAT form of conv-transpose + batch norm"
                             % what)
    for plain in ("fuse_conv_bn", "fuse_linear_bn", "fuse_convtranspose_bn"):
        if fuser is getattr(fmm, plain, None):
            return "FOLD_BN_THEN_WRAP", ""
    if fuser is getattr(fmm, "fuse_conv_bn_relu", None):
        for conv, fused in _CONV_RELU.items():
            if _contains(nested, conv):
                return "FOLD_BN_THEN_WRAP", fused
        raise ConfigTranslationError("%s: fuse_conv_bn_relu on a pattern without a conv" % what)
    if callable(fuser):
        # A fuser of the user's: Python runs it on the matched modules after the engine's
        # fusion (fuselage._user_fusers), as PyTorch's fuse_fx does.
        return _USER_FUSER, ""
    raise ConfigTranslationError(
        "%s: fuser method %r is not callable; expected a function (is_qat, *matched) -> "
        "module" % (what, fuser))


def _contains(p, element):
    if isinstance(p, (tuple, list)):
        return any(_contains(x, element) for x in p)
    return p is element


def _observation(value, what):
    if value == ObservationType.OUTPUT_SHARE_OBSERVER_WITH_INPUT:
        return "OUTPUT_SHARE_OBSERVER_WITH_INPUT"
    if value == ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT:
        return "OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT"
    # PyTorch 2's entries for the tensor-info methods shape and size.
    not_observed = getattr(ObservationType, "INPUT_OUTPUT_NOT_OBSERVED", None)
    if not_observed is not None and value == not_observed:
        return "INPUT_OUTPUT_NOT_OBSERVED"
    raise ConfigTranslationError("%s: observation type %r is not supported" % (what, value))


def _constrained_lines(c, what):
    if c is None:
        return []
    dtype = getattr(c, "dtype", None)
    lines = [] if dtype is None else ["dtype: " + _quote(_dtype(dtype))]
    for field in ("quant_min_lower_bound", "quant_max_upper_bound", "scale_min_lower_bound",
                  "scale_max_upper_bound", "scale_exact_match", "zero_point_exact_match"):
        value = getattr(c, field, None)
        if value is not None:
            lines.append("%s: %s" % (field, _number(value)))
    return lines


def _dtype_config_lines(d, what):
    lines = []
    for field, attr in (("input", "input_dtype_with_constraints"),
                        ("output", "output_dtype_with_constraints"),
                        ("weight", "weight_dtype_with_constraints")):
        body = _constrained_lines(getattr(d, attr, None), "%s.%s" % (what, field))
        if body:
            lines.append("%s { %s }" % (field, " ".join(body)))
    if getattr(d, "bias_dtype", None) is not None:
        lines.append("bias: " + _quote(_dtype(d.bias_dtype)))
    if getattr(d, "is_dynamic", False):
        lines.append("is_dynamic: true")
    return lines


def _entry_lines(cfg, index, is_qat=False, type_name=None):
    """The entry's lines; `type_name` is the engine's name of a user's fused module class
    that is the entry's pattern (_user_module_class)."""
    what = "backend pattern config [%d]" % index
    pattern, fmt, nested = _pattern_of(cfg, what)
    if type_name is not None:
        what = "backend pattern config [%d] %s (as %s)" % (index, _qualname(pattern),
                                                          type_name)
        lines = ["pattern: " + _quote(type_name)]
    else:
        what = "backend pattern config [%d] %s" % (index, _pattern_text(pattern, what))
        lines = ["pattern: " + _quote(_pattern_text(pattern, what))]
    if fmt == "SEQUENCE":
        # Named by the nested form, as PyTorch 1.13 writes the same pattern: the name is
        # what fused modules record as their provenance, so it does not change with the
        # format a PyTorch version keeps.
        lines.insert(0, "name: " + _quote(_pattern_text(nested, what)))
        lines.append("format: SEQUENCE")
    observation = _observation(cfg.observation_type, what)
    if observation != "OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT":
        lines.append("observation_type: " + observation)
    for i, d in enumerate(cfg.dtype_configs):
        body = _dtype_config_lines(d, "%s dtype_config[%d]" % (what, i))
        lines.append("dtype_config { %s }" % " ".join(body))
    for field in ("root_module", "reference_quantized_module"):
        cls = getattr(cfg, field, None)
        if cls is None:
            continue
        name = _module_name(cls)
        if name is None:
            raise ConfigTranslationError(
                "%s: %s %r has no fuselage name (graph/NAMING.md)" % (what, field, cls))
        lines.append("%s: %s" % (field, _quote(name)))
    if cfg.fuser_method is not None:
        kind, fused = _fuser(cfg.fuser_method, nested, what, is_qat)
        root, extras = _root_path(cfg, nested, what), _extra_paths(cfg, nested, what)
        if kind == _USER_FUSER:
            # Named so that fuselage._user_fusers finds its fused nodes (their "pattern"
            # meta); the fused node's args are set there, as PyTorch sets them.
            lines[0:1 if lines[0].startswith("name: ") else 0] = [
                "name: " + _quote(_user_fusion_name(cfg, index, pattern, what))]
            kind, fused, extras = "WRAP_IN_SEQUENCE", "fuselage.FusedSubgraph", []
            if root is None:
                root = _pytorch_default_root_path(nested)
        lines.append("fuser: " + kind)
        if fused:
            lines.append("fused_module: " + _quote(fused))
        if root is not None:
            lines.append("root: " + _quote(root))
        lines.extend("extra_input: " + _quote(extra) for extra in extras or ())
    index_of = getattr(cfg, "_input_type_to_index", None) or {}
    for key, value in index_of.items():
        if key not in ("weight", "bias"):
            raise ConfigTranslationError(
                "%s: _input_type_to_index key %r is not supported; expected weight, bias"
                % (what, key))
        lines.append("%s_arg_index: %d" % (key, value))
    for count, observation_type in (getattr(cfg, "_num_tensor_args_to_observation_type", None)
                                    or {}).items():
        lines.append("num_tensor_args_observation { num_tensor_args: %d observation_type: %s }"
                     % (count, _observation(observation_type, what)))
    observed = getattr(cfg, "_input_output_observed", None)
    if observed is not None and not observed:
        lines.append("input_output_observed: false")
    fixed = getattr(cfg, "_overwrite_output_observer", None)
    if fixed is not None:
        cls, args, kwargs = _unwrap(fixed, what + " output observer")
        if cls is not obs.FixedQParamsObserver:
            raise ConfigTranslationError(
                "%s: output observer %r is not supported; expected a FixedQParamsObserver"
                % (what, cls))
        bound = inspect.signature(cls).bind_partial(*args, **kwargs)
        if "scale" not in bound.arguments or "zero_point" not in bound.arguments:
            raise ConfigTranslationError("%s: FixedQParamsObserver needs scale and zero_point"
                                         % what)
        lines.append("fixed_output_qparams { scale: %s zero_point: %s }"
                     % (_number(float(bound.arguments["scale"])),
                        _number(bound.arguments["zero_point"])))
    return lines


def _root_path(cfg, nested, what):
    """The path of the position the entry's root node getter picks, or None (no getter)."""
    getter = getattr(cfg, "_root_node_getter", None)
    if getter is None:
        return None
    return _position_path(_call_getter(getter, nested, what, "root node getter"), getter,
                          what, "root node getter")


def _extra_paths(cfg, nested, what):
    """The paths of the positions the entry's extra inputs getter picks, or None (no
    getter)."""
    getter = getattr(cfg, "_extra_inputs_getter", None)
    if getter is None:
        return None
    extras = _call_getter(getter, nested, what, "extra inputs getter")
    if not isinstance(extras, (list, tuple)):
        raise ConfigTranslationError(
            "%s: extra inputs getter %s returned %r; expected a list of positions of the "
            "pattern" % (what, _qualname(getter), extras))
    return [_position_path(extra, getter, what, "extra inputs getter") for extra in extras]


def _pytorch_default_root_path(nested):
    """PyTorch's default_root_node_getter: the last arg, followed down to an op (for
    (ReLU, (add, MatchAllNode, (BatchNorm2d, Conv2d))) the Conv2d). fuselage's own default
    follows arg 0 instead (patterns/fusion_rule.h); a user's fuser gets PyTorch's."""
    path, node = [], nested
    while isinstance(node, (tuple, list)) and len(node) > 1:
        path.append(str(len(node) - 2))
        node = node[-1]
    return ".".join(path)


def _user_fusion_name(cfg, index, pattern, what):
    return "%s fused by %s [entry %d]" % (_pattern_text(pattern, what),
                                         _qualname(cfg.fuser_method), index)


class UserFusion:
    """A pattern entry whose fuser is the user's own (fuselage._user_fusers runs it): the
    fuser, the complex-format pattern, and the paths of its root and extra inputs (PyTorch's
    defaults: the default root node getter's position, no extra inputs)."""

    __slots__ = ("fuser", "pattern", "root", "extras")

    def __init__(self, fuser, pattern, root, extras):
        self.fuser, self.pattern, self.root, self.extras = fuser, pattern, root, extras


def _fusion_entries(configs, is_qat):
    """(index, entry, its name, pattern, nested pattern, fuser kind, fused type) of each
    entry with a fuser method that has a form in this flow (QAT or not); entries over QAT
    modules left out (_matches_qat_modules)."""
    for i, cfg in enumerate(configs):
        if cfg.fuser_method is None or _matches_qat_modules(cfg):
            continue
        what = "backend pattern config [%d]" % i
        pattern, _, nested = _pattern_of(cfg, what)
        try:
            kind, fused_type = _fuser(cfg.fuser_method, nested, what, is_qat)
        except _NoQatForm:
            continue
        yield i, cfg, what, pattern, nested, kind, fused_type


def user_fusions(backend_config, is_qat=False):
    """{fused nodes' "pattern" meta: UserFusion} for the entries of `backend_config`
    (PyTorch's BackendConfig, or None) whose fuser fuselage does not know, named as
    backend_config_to_text names them."""
    configs = getattr(backend_config, "configs", None) or []
    if isinstance(configs, dict):
        configs = list(configs.values())
    out = {}
    for i, cfg, what, pattern, nested, kind, _ in _fusion_entries(configs, is_qat):
        if kind != _USER_FUSER:
            continue
        root = _root_path(cfg, nested, what)
        out[_user_fusion_name(cfg, i, pattern, what)] = UserFusion(
            cfg.fuser_method, nested,
            _pytorch_default_root_path(nested) if root is None else root,
            _extra_paths(cfg, nested, what) or [])
    return out


def _is_qat_class(p):
    return isinstance(p, type) and "qat" in p.__module__.split(".")


def _matches_qat_modules(cfg):
    """Whether the entry's pattern holds a QAT module (nnqat.Conv2d, nniqat.ConvBn2d):
    those exist only in a model prepared for quantization-aware training, which fuselage
    does not do, so such entries can never match and are left out."""
    pattern = getattr(cfg, "_pattern_complex_format", None) or getattr(cfg, "pattern", None)
    return _contains_if(pattern, _is_qat_class)


def _contains_if(p, predicate):
    if isinstance(p, (tuple, list)):
        return any(_contains_if(x, predicate) for x in p)
    return predicate(p)


def _user_module_class(cfg):
    """The entry's pattern if it is a module class of the user's (no fuselage name: the
    fused module a user's fuser returns), else None."""
    pattern = getattr(cfg, "_pattern_complex_format", None) or getattr(cfg, "pattern", None)
    if isinstance(pattern, type) and issubclass(pattern, nn.Module) and \
            _module_name(pattern) is None:
        return pattern
    return None


def backend_config_to_text(backend_config, is_qat=False, user_types=None,
                           for_fusion=False) -> str:
    """The BackendConfigFile text (backend_configs/backend_config.proto) of a PyTorch
    BackendConfig: a complete config (no base) named as the BackendConfig, one `pattern`
    entry per BackendPatternConfig in its order, except entries for QAT modules
    (_matches_qat_modules), with root and reference modules written on fused-module
    entries and entries added for fused types only a fusion entry names
    (_fused_module_roots). With is_qat, the fusers are PyTorch's QAT ones (batch norm
    kept: _fuser) and an entry whose fuser has none is left out. An entry whose fuser is
    the user's own fuses into fuselage.FusedSubgraph, named as user_fusions names it; an
    entry whose pattern is a module class of the user's (the fused module such a fuser
    returns) is written for the engine type `user_types` maps it to
    (fuselage._user_fusers), or refused as any unnamed type; with for_fusion (a text to
    fuse with, before the user's fusers ran) such entries are left out. Raises
    ConfigTranslationError naming the entry and what the format cannot express."""
    configs = getattr(backend_config, "configs", None)
    if configs is None:
        raise ConfigTranslationError(
            "expected a torch.ao.quantization.backend_config.BackendConfig, got %s"
            % type(backend_config).__name__)
    if isinstance(configs, dict):  # PyTorch 1.13: pattern -> config
        configs = list(configs.values())
    for i, cfg in enumerate(configs):  # before anything walks the patterns recursively
        _pattern_of(cfg, "backend pattern config [%d]" % i)
    out = ["# proto-file: backend_configs/backend_config.proto",
           "# proto-message: fuselage.config.BackendConfigFile"]
    if getattr(backend_config, "name", ""):
        out.append("name: " + _quote(backend_config.name))
    fused = _fused_module_roots(configs, is_qat)
    emitted = set()
    # The engine types the user's fused modules stand for take the user's entries for them.
    user_lines = {"pattern: " + _quote(t) for t in (user_types or {}).values()}
    for i, cfg in enumerate(configs):
        if _matches_qat_modules(cfg):
            continue
        user_class = _user_module_class(cfg)
        if user_class is not None and for_fusion:
            continue  # the user's fusers have not run yet
        try:
            lines = _entry_lines(cfg, i, is_qat, (user_types or {}).get(user_class))
        except _NoQatForm:
            continue
        if user_class is None and lines[0] in user_lines:
            continue
        out.append("pattern {")
        emitted.add(lines[0])
        if getattr(cfg, "root_module", None) is None and lines[0] in fused:
            lines.extend(fused[lines[0]][1])
        out.extend("  " + line for line in lines)
        out.append("}")
    for line, (dtype_lines, root_lines) in fused.items():
        if line in emitted or not dtype_lines:
            continue
        out.append("pattern {")
        out.extend("  " + x for x in [line] + dtype_lines + root_lines)
        out.append("}")
    return "\n".join(out) + "\n"


def _element_at(nested, path):
    """The pattern element (module class, function, ...) at dotted `path` of a complex
    pattern ("" = the outermost op)."""
    node = nested
    for part in path.split(".") if path else []:
        node = node[1 + int(part)]
    return node[0] if isinstance(node, (tuple, list)) else node


def _default_root_path(nested):
    path, node = [], nested
    while isinstance(node, (tuple, list)) and len(node) > 1:
        path.append("0")
        node = node[1]
    return ".".join(path)


def _fused_module_roots(configs, is_qat=False):
    """{`pattern: "<fused type>"` line: (dtype_config lines, root / reference lines)} for
    every fused module type a fusion entry produces whose root position's module type has
    a reference module.

    PyTorch's convert quantizes a fused module by looking its child 0's type up among the
    configs' root modules (so its own entry for nni.ConvReLU2d has no root module), where
    fuselage's prepare reads root and reference module from the fused type's entry: the
    translation writes them there. A fused type with no entry at all (the issue's
    conv-bn-add-relu into nni.ConvAddReLU2d, which PyTorch 1.13 then leaves float) gets
    one, with the fusion entry's dtype configs, so fuselage quantizes it as they say."""
    references = {}
    for cfg in configs:
        pattern = getattr(cfg, "pattern", None)
        ref = getattr(cfg, "reference_quantized_module", None)
        if isinstance(pattern, type) and ref is not None:
            references.setdefault(pattern, ref)
    fused = {}
    for _, cfg, what, _, nested, _, fused_type in _fusion_entries(configs, is_qat):
        if not fused_type:
            continue
        getter = getattr(cfg, "_root_node_getter", None)
        root_path = (_position_path(_call_getter(getter, nested, what, "root node getter"),
                                    getter, what, "root node getter")
                     if getter is not None else _default_root_path(nested))
        root = _element_at(nested, root_path)
        if root not in references:
            continue
        line = "pattern: " + _quote(fused_type)
        dtype_lines = ["dtype_config { %s }" % " ".join(
            _dtype_config_lines(d, "%s dtype_config[%d]" % (what, j)))
            for j, d in enumerate(cfg.dtype_configs)]
        root_lines = ["root_module: " + _quote(_module_name(root)),
                      "reference_quantized_module: " + _quote(_module_name(references[root]))]
        if line not in fused or (not fused[line][0] and dtype_lines):
            fused[line] = (dtype_lines, root_lines)
    return fused
