"""fuselage.pt2e: PyTorch 2's quantization flow on a torch.export graph, run by fuselage.

    gm = torch.export.export(model.eval(), (x,)).module()
    prepared = fuselage.pt2e.prepare_pt2e(gm, "x86")   # was: torchao's prepare_pt2e(gm, quantizer)
    for batch in loader:                                # calibration: run it
        prepared(batch)
    reference = fuselage.pt2e.convert_pt2e(prepared)   # quantized_decomposed q/dq, int8 weights

torchao's prepare_pt2e / convert_pt2e signatures, fuselage's passes: the aten graph is read
into fuselage's FX form (fuselage._exported), batch norms fold into the convs before them
(as prepare_pt2e folds them), and fuselage's prepare / convert place and read PyTorch's own
observers by the backend config and qconfig mapping ("x86": X86InductorQuantizer's op set,
convs and linears with their unary and residual-add tails, pools, flatten, cat; per-channel
int8 weights, uint8 activations; a value quantized for its int8 readers only). convert_pt2e
gives torchao's reference form: quantized_decomposed quantize / dequantize per tensor
around the float aten ops, each weight an int8 constant read by dequantize_per_channel.
"xnnpack" is XNNPACKQuantizer's default (int8 activations, int8 per-tensor symmetric
weights, its op set, every quantized op's output observed).
lower_pt2e_quantized_to_x86 turns a reference into stock PyTorch's oneDNN int8 ops,
lower_to_fuselage into fuselage's native ones.

fuselage.pt2e.Quantizer is the same decision as a torchao Quantizer: under torchao's own
prepare_pt2e / convert_pt2e it annotates what fuselage's engine matched in the backend
config (built-in or a config file whose patterns are written over aten ops).

Quantization-aware training: prepare_qat_pt2e(gm, "x86") on a model exported in training
mode is torchao's prepare_qat_pt2e with fuselage's Quantizer(is_qat=True): fuselage's
engine decides where the fake-quantizes go (each conv with its training batch norm seen as
the conv), torchao rewrites each conv-bn for training (the weight scaled by the batch
norm's factor, then fake-quantized, as nniqat.ConvBn2d) and inserts torchao's
fake-quantizes of X86InductorQuantizer's QAT config (get_default_x86_inductor_quantization_
config(is_qat=True)). convert_pt2e of the trained model is torchao's. It needs torchao.
As X86InductorQuantizer's QAT patterns do, the output of a conv-bn(-relu / -add) is
fake-quantized whatever reads it (its post-training ones observe a value for its int8
readers only). Where the placement differs: a functional relu joins its conv-bn as
nn.ReLU does (X86InductorQuantizer matches nn.ReLU modules only, so after torch.relu it
fake-quantizes the batch norm's output and the relu's apart).

Where it differs from torchao's X86InductorQuantizer: a module called from several places
(torchvision's resnets reuse one ReLU per block) is quantized, where X86InductorQuantizer
raises "Input partition has more than one output node"; a mul of two same-shape tensors,
which X86InductorQuantizer quantizes, stays float.
"""

import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
import operator
import sys
import warnings

import torch
import torch.fx
import torch.nn.functional as F

from fuselage import _exported, quantize_fx
from fuselage.errors import ConfigTranslationError

try:  # the engine, loaded with this module as torchao's flow loads its own
    from fuselage import _core  # noqa: F401
except ImportError:  # lower_pt2e_quantized_to_x86 works without it; prepare_pt2e says so
    pass

__all__ = ["Quantizer", "prepare_pt2e", "prepare_qat_pt2e", "convert_pt2e",
           "lower_pt2e_quantized_to_x86", "lower_to_fuselage"]

try:
    from torchao.quantization.pt2e.quantizer import Quantizer as _TorchaoQuantizer
except ImportError:  # torchao is optional: fuselage's own prepare_pt2e does not need it
    _TorchaoQuantizer = object


def _x86_configs(is_qat=False):
    """The FX flow's x86 mapping with X86InductorQuantizer's default observers where the
    mapping has its default qconfig: activations over the whole uint8 range
    (HistogramObserver, reduce_range=False: FX's x86 default halves it for fbgemm's
    overflow), weights symmetric int8 per output channel. With is_qat its QAT config's
    fake-quantizes (get_default_x86_inductor_quantization_config(is_qat=True)):
    FusedMovingAvgObsFakeQuantize of a moving-average min-max observer, per channel for
    the weights, eps 2^-12."""
    from torch.ao.quantization import QConfig, get_default_qconfig, get_default_qconfig_mapping
    from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
    from torch.ao.quantization.fake_quantize import FusedMovingAvgObsFakeQuantize
    from torch.ao.quantization.observer import (HistogramObserver,
                                                MovingAverageMinMaxObserver,
                                                MovingAveragePerChannelMinMaxObserver,
                                                PerChannelMinMaxObserver)
    inductor = QConfig(
        activation=HistogramObserver.with_args(reduce_range=False),
        weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                  qscheme=torch.per_channel_symmetric))
    if is_qat:
        inductor = QConfig(
            activation=FusedMovingAvgObsFakeQuantize.with_args(
                observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                dtype=torch.quint8, eps=2 ** -12),
            weight=FusedMovingAvgObsFakeQuantize.with_args(
                observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                dtype=torch.qint8, qscheme=torch.per_channel_symmetric, eps=2 ** -12))
    fx_default = get_default_qconfig("x86")
    mapping = get_default_qconfig_mapping("x86").set_global(inductor)
    for object_type, qconfig in list(mapping.object_type_qconfigs.items()):
        if qconfig == fx_default:
            mapping.set_object_type(object_type, inductor)
    return mapping, _with_conv_activations(_torchao_x86_op_set(get_x86_backend_config()))


# X86InductorQuantizer's default op set: convs and linears with their fusions, and the
# int8-in-int8-out ops (torchao's int8_in_int8_out_ops) quantized after them.
_WEIGHTED = {"conv1d", "conv2d", "conv3d", "linear"}
_SINGLE_OPS = _WEIGHTED | {"maxpool1d", "maxpool2d", "maxpool3d", "max_pool1d", "max_pool2d",
                           "max_pool3d", "avgpool1d", "avgpool2d", "avgpool3d", "avg_pool1d",
                           "avg_pool2d", "avg_pool3d", "adaptiveavgpool1d", "adaptiveavgpool2d",
                           "adaptiveavgpool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                           "adaptive_avg_pool3d", "flatten", "cat"}


def _pattern_ops(pattern):
    if isinstance(pattern, tuple):
        return [op for item in pattern for op in _pattern_ops(item)]
    return [getattr(pattern, "__name__", str(pattern)).lower()]


def _is_weighted(op):
    return op in _WEIGHTED or op.startswith(("conv", "linear")) and "transpose" not in op


def _torchao_x86_op_set(backend):
    """`backend` with only the entries of X86InductorQuantizer's default op set: an op
    alone if it is a conv, linear (or their fused modules), pool, flatten or cat; a
    several-op pattern if it holds a conv or linear, and (add, relu), which a relu after a
    conv's residual add joins. The FX config quantizes standalone add, mul, hardsigmoid,
    norms, ... too, which torchao leaves float (0.7 to 3 dB of SQNR on mobilenet_v3,
    efficientnet and convnext)."""
    def keep(ops):
        if len(ops) == 1:
            return ops[0] in _SINGLE_OPS or _is_weighted(ops[0])
        return any(_is_weighted(op) for op in ops) or sorted(ops) == ["add", "relu"]
    return _narrowed(backend, backend.name, keep)


def _narrowed(backend, name, keep):
    """A BackendConfig `name` of the entries of `backend` whose pattern's ops (lower-case
    names, _pattern_ops) `keep` accepts."""
    from torch.ao.quantization.backend_config import BackendConfig
    kept = BackendConfig(name)
    for config in backend.configs:
        pattern = config.pattern if config.pattern is not None else config._pattern_complex_format
        if keep(_pattern_ops(pattern)):
            kept.set_backend_pattern_config(config)
    return kept


# ExecuTorch's XNNPACKQuantizer's static op set (its STATIC_OPS): conv / linear with their
# relu (batch norm folded first), adaptive_avg_pool2d, add / mul with their relu, cat; and
# the ops its propagate_annotation makes share their input's parameters.
_XNNPACK_OPS = {"conv1d", "conv2d", "linear", "relu", "relu_", "adaptive_avg_pool2d",
                "adaptiveavgpool2d", "add", "mul", "cat", "hardtanh", "hardtanh_", "max_pool2d",
                "maxpool2d", "mean", "permute", "squeeze", "view", "flatten"}


def _xnnpack_configs():
    """XNNPACKQuantizer's default (get_symmetric_quantization_config()): int8 activations
    over [-128, 127] (HistogramObserver, eps 2^-12), int8 weights symmetric per tensor over
    [-127, 127], on the FX flow's qnnpack config narrowed to XNNPACKQuantizer's op set. Its
    quantized ops observe their outputs whatever reads them, as the FX flow does."""
    from torch.ao.quantization import QConfig, QConfigMapping
    from torch.ao.quantization.backend_config import get_qnnpack_backend_config
    from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver
    qconfig = QConfig(
        activation=HistogramObserver.with_args(dtype=torch.qint8, quant_min=-128,
                                               quant_max=127, eps=2 ** -12),
        weight=MinMaxObserver.with_args(dtype=torch.qint8, quant_min=-127, quant_max=127,
                                        qscheme=torch.per_tensor_symmetric, eps=2 ** -12))
    backend = _narrowed(get_qnnpack_backend_config(), "xnnpack", lambda ops: all(
        op in _XNNPACK_OPS or op.startswith(("conv", "linear", "batchnorm"))
        and "transpose" not in op for op in ops))
    return QConfigMapping().set_global(qconfig), _scalar_binaries_observed_apart(backend)


def _scalar_binaries_observed_apart(backend):
    """`backend` with an add or mul of one tensor and a scalar observing its output apart
    from its input, as XNNPACKQuantizer annotates them (an input and an output qspec).
    The FX config shares one observer between the two (its num_tensor_args_to_observation
    _type): y * 0.5 then quantized at y's scale lost a bit, 5 dB on conv-mul-conv."""
    from torch.ao.quantization.backend_config import ObservationType
    for config in backend.configs:
        by_count = config._num_tensor_args_to_observation_type
        if by_count.get(1) == ObservationType.OUTPUT_SHARE_OBSERVER_WITH_INPUT:
            by_count[1] = ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT
    return backend


def _with_conv_activations(backend):
    """`backend` with a functional conv followed by hardtanh (relu6), hardswish or silu
    observed once, after the activation, as X86InductorQuantizer's unary fusions are: the
    FX config quantizes the conv's output before a relu6 too, over a range the clamp then
    halves (about 3 dB of SQNR on mobilenet_v2)."""
    from torch.ao.quantization.backend_config import BackendPatternConfig, ObservationType
    conv_relu = next(c for c in backend.configs if c.pattern == (F.conv2d, F.relu))
    for conv in (F.conv1d, F.conv2d, F.conv3d):
        for activation in (F.hardtanh, F.hardtanh_, F.relu6, F.hardswish, F.silu):
            backend.set_backend_pattern_config(
                BackendPatternConfig((conv, activation))
                .set_observation_type(ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT)
                .set_dtype_configs(conv_relu.dtype_configs)
                ._set_input_type_to_index(conv_relu._input_type_to_index))
    return _with_conv_add(backend, conv_relu)


def _with_conv_add(backend, conv_relu):
    """`backend` with a conv or linear read only by an add observed as one op with the add
    (its output not observed; the add's other input and output are), as
    X86InductorQuantizer's binary fusions are; a relu after the add then joins as after
    any add. The FX config quantizes the conv's output before the add too: about 1 dB of
    SQNR on mobilenet_v2 and convnext."""
    from torch.ao.quantization.backend_config import BackendPatternConfig, ObservationType
    from torch.ao.quantization.utils import MatchAllNode
    for weighted in (F.conv1d, F.conv2d, F.conv3d, F.linear):
        for pattern in ((operator.add, weighted, MatchAllNode),
                        (operator.add, MatchAllNode, weighted)):
            backend.set_backend_pattern_config(
                BackendPatternConfig()._set_pattern_complex_format(pattern)
                .set_observation_type(ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT)
                .set_dtype_configs(conv_relu.dtype_configs))
    return backend


class Quantizer(_TorchaoQuantizer):
    """A torchao Quantizer whose annotations are fuselage's pattern matching: torchao's own
    prepare_pt2e / convert_pt2e run unchanged, observing what fuselage's backend config
    declares.

        from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, convert_pt2e
        quantizer = fuselage.pt2e.Quantizer("my_backend.textproto")   # or "x86"
        prepared = prepare_pt2e(gm, quantizer)

    `backend_config` is "x86" (X86InductorQuantizer's op set and observers), "xnnpack"
    (XNNPACKQuantizer's), a fuselage config file (.textproto), or a PyTorch BackendConfig;
    `qconfig_mapping` defaults to the x86 mapping. annotate() prepares the graph's FX form
    with fuselage's engine and writes each observer it placed as an annotation
    (fuselage._annotate); fuselage.pt2e.prepare_pt2e takes the same object.

    With is_qat=True, for torchao's prepare_qat_pt2e (or fuselage.pt2e.prepare_qat_pt2e)
    on a model exported in training mode: the default mapping is X86InductorQuantizer's
    QAT config, each observer is annotated wrapped in its fake-quantize, and a conv read
    only by its training batch norm is placed as the conv with the batch norm's value
    (torchao then rewrites the pair for training).

    An aten op fuselage does not read makes annotate() raise ExportError naming the node
    and op; with unknown_ops="float" it is left unannotated (float), as torchao's own
    quantizers leave what they do not match, and a UserWarning names each such node."""

    def __init__(self, backend_config="x86", qconfig_mapping=None, is_qat=False,
                 unknown_ops="refuse"):
        if _TorchaoQuantizer is object:
            raise ConfigTranslationError("fuselage.pt2e.Quantizer needs torchao "
                                         "(pip install torchao)")
        super().__init__()
        self.backend_config = backend_config
        self.qconfig_mapping = qconfig_mapping
        self.is_qat = is_qat
        self.unknown_ops = _exported.check_unknown_ops(unknown_ops, "fuselage.pt2e.Quantizer")
        if is_qat and self.backend_config == "xnnpack" and qconfig_mapping is None:
            raise ConfigTranslationError(
                "fuselage.pt2e.Quantizer: is_qat=True with \"xnnpack\" is not supported "
                "(fuselage has XNNPACKQuantizer's post-training config only); use \"x86\" "
                "or give a QAT qconfig_mapping")

    def configs(self):
        """(qconfig mapping, backend config, per_reader) this quantizer prepares with: a
        built-in's, or the x86 mapping and per-reader quantization with a config of the
        user's."""
        builtin = self.backend_config if self.backend_config in _BUILTIN else "x86"
        if getattr(self, "is_qat", False) and builtin == "x86":
            mapping, backend, per_reader = _x86_configs(is_qat=True) + (True,)
        else:
            mapping, backend, per_reader = _BUILTIN[builtin]()
        if self.backend_config not in _BUILTIN:
            backend = self.backend_config
        return (self.qconfig_mapping if self.qconfig_mapping is not None else mapping,
                backend, per_reader)

    def annotate(self, model):
        from fuselage import _annotate
        flow = ("fuselage.pt2e.Quantizer", "convert_pt2e")
        unknown_ops = getattr(self, "unknown_ops", "refuse")
        kept = _exported.ops_outside_table(model) if unknown_ops == "float" else []
        if getattr(self, "is_qat", False):
            annotated = _annotate_qat(model, self.configs(), flow, unknown_ops)
        else:
            fx = _exported.to_fx_dialect(model, unknown_ops).eval()
            annotated = _annotate.annotate(model, _prepare(fx, self.configs(), flow))
        _warn_kept_float(kept, flow[0])  # once the model is annotated: a refusal says why
        return annotated

    def validate(self, model):
        pass


def _configs(quantizer):
    """(qconfig mapping, backend config, per_reader) for prepare_pt2e's `quantizer`: "x86"
    (or None), "xnnpack", fuselage's Quantizer, or torchao's X86InductorQuantizer with its
    default global config. `per_reader`: a value is quantized only for its int8 readers
    (X86InductorQuantizer's way), else for all of them (XNNPACKQuantizer's)."""
    if quantizer is None or quantizer in _BUILTIN:
        return _BUILTIN[quantizer or "x86"]()
    if isinstance(quantizer, Quantizer):
        if quantizer.is_qat:
            raise ConfigTranslationError(
                "prepare_pt2e: fuselage.pt2e.Quantizer(is_qat=True) is a quantization-aware "
                "training quantizer; use fuselage.pt2e.prepare_qat_pt2e (or torchao's)")
        return quantizer.configs()
    if type(quantizer).__name__ == "X86InductorQuantizer":
        if _x86_inductor_is_qat(quantizer, "prepare_pt2e"):
            raise ConfigTranslationError(
                "prepare_pt2e: X86InductorQuantizer has a QAT config (is_qat=True); use "
                "fuselage.pt2e.prepare_qat_pt2e for quantization-aware training")
        return _BUILTIN["x86"]()
    raise ConfigTranslationError(
        f"prepare_pt2e: quantizer is a {type(quantizer).__name__}; fuselage reads \"x86\", "
        "\"xnnpack\", fuselage.pt2e.Quantizer or torchao's X86InductorQuantizer")


def _x86_inductor_is_qat(quantizer, function):
    """Whether X86InductorQuantizer `quantizer`'s global config is a QAT one; a dynamic
    or reduced-range one, which fuselage does not read, is refused by name."""
    config = getattr(quantizer, "global_config", None)
    if config is None:
        return False
    act = getattr(config, "input_activation", None)
    if act is not None and (getattr(act, "is_dynamic", False) or act.quant_max != 255):
        raise ConfigTranslationError(
            f"{function}: X86InductorQuantizer's global config is dynamic or reduce_range=True "
            "(activations over [0, 127]); fuselage reads its default static config only")
    return bool(getattr(config, "is_qat", False))


_BUILTIN = {"x86": lambda: (*_x86_configs(), True),
            "xnnpack": lambda: (*_xnnpack_configs(), False)}


def _prepare(fx, configs, flow, is_qat=False, always_observed=(), fold_batch_norms=False,
             keep_engine_model=False):
    """fuselage's prepare of the FX form `fx` (or the engine's Model of it,
    _exported.to_engine) with `configs` (_configs' triple); with
    is_qat the mapping's fake-quantizes read as the observers they wrap. The outputs of
    the nodes named in `always_observed` stay observed for all their readers. With
    `fold_batch_norms` the engine first folds each inference batch norm on constants into
    the conv before it, as torchao's prepare_pt2e folds them (fuselage._core.
    fold_batch_norms: w' = w * g / sqrt(v + eps) per output channel, b' = (b - m) /
    sqrt(v + eps) * g + beta, in PyTorch's float32 order). With `keep_engine_model` the
    prepared model keeps the engine's (quantize_fx.prepare_with_report), for convert."""
    mapping, backend, per_reader = configs

    def for_quantized_readers_only(core, m, report):
        # As torchao's quantizers quantize a value per reader (an input_qspec_map entry):
        # the readers the report keeps float, and the graph's output, read the float
        # value; an op that shares its input's observer (a pool, flatten, cat) is
        # quantized only after a quantized op, as torchao's int8-in-int8-out ops are. The
        # FX flow quantizes a quantized op's output for all its readers.
        core.observe_for_quantized_readers_only(m, report, sorted(always_observed))

    prepared, _ = quantize_fx.prepare_with_report(
        fx, mapping, backend, flow=flow, mapping_is_qat=is_qat,
        fold_batch_norms=fold_batch_norms,
        after_prepare=for_quantized_readers_only if per_reader else None,
        keep_engine_model=keep_engine_model)
    return prepared


_ATEN_CONVS = ("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")


def _without_training_batch_norms(aten_gm, function):
    """A copy of the exported training graph `aten_gm` for fuselage's prepare to place
    quantization on, and {conv node name: batch norm node name}: each training
    aten.batch_norm whose input is a conv read by nothing else is taken out (the conv
    stands for it, as torchao's QAT rewrite makes the pair one op) and the increments of
    the batch norms' num_batches_tracked with it. Any other training batch norm is a
    ConfigTranslationError naming it."""
    import copy
    gm = copy.deepcopy(aten_gm)
    sources = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if str(node.target) == "aten.add_.Tensor" and getattr(node.args[0], "op", None) == \
                "get_attr" and node.args[0].target.endswith("num_batches_tracked") and \
                not node.users:
            gm.graph.erase_node(node)
            continue
        if str(node.target) != "aten.batch_norm.default" or len(node.args) < 6 or \
                not node.args[5]:
            continue
        conv = node.args[0]
        if not (isinstance(conv, torch.fx.Node) and str(conv.target) in _ATEN_CONVS and
                len(conv.users) == 1):
            raise ConfigTranslationError(
                f"{function}: batch norm '{node.name}' is in training mode and does not "
                "follow a conv read by it alone; fuselage's quantization-aware training "
                "takes a training batch norm only after its conv")
        node.replace_all_uses_with(conv)
        gm.graph.erase_node(node)
        sources[conv.name] = node.name
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, sources


# The ops X86InductorQuantizer's QAT annotation joins to a conv-bn (a unary after it, a
# binary add, a relu after that add), by the name of the FX form's target.
_CONV_BN_TAILS = {"relu", "relu_", "hardtanh", "hardtanh_", "relu6", "hardswish", "silu"}


def _conv_bn_pattern_ends(fx, sources):
    """The names of the nodes of `fx` that end a conv-bn pattern (the convs of `sources`
    with the unary, add, add-relu after them): X86InductorQuantizer's QAT patterns
    annotate their outputs whatever reads them, where its post-training ones observe a
    value for its int8 readers only."""
    def only_user(node):
        return next(iter(node.users)) if len(node.users) == 1 else None

    def name(node):
        return getattr(node.target, "__name__", str(node.target))

    ends = set()
    for node in fx.graph.nodes:
        if node.name not in sources:
            continue
        ends.add(node.name)
        user = only_user(node)
        if user is None:
            continue
        if name(user) in _CONV_BN_TAILS:
            ends.add(user.name)
        elif name(user) in ("add", "add_"):
            ends.add(user.name)
            tail = only_user(user)
            if tail is not None and name(tail) in _CONV_BN_TAILS:
                ends.add(tail.name)
    return ends


def _annotate_qat(model, configs, flow, unknown_ops="refuse"):
    """fuselage.pt2e.Quantizer(is_qat=True).annotate: fuselage's prepare of the training
    graph without its conv batch norms (_without_training_batch_norms), each observer
    annotated in the fake-quantize the mapping wraps it in (fuselage._qat's factories)."""
    from fuselage import _annotate, _qat
    stripped, sources = _without_training_batch_norms(model, flow[0])
    fx = _exported.to_fx_dialect(stripped, unknown_ops).eval()
    prepared = _prepare(fx, configs, flow, is_qat=True,
                        always_observed=_conv_bn_pattern_ends(fx, sources))
    factories = _qat._Factories(configs[0], flow[0])
    return _annotate.annotate(model, prepared, sources=sources,
                              fake_quantize=factories.fake_quantize)


def prepare_qat_pt2e(model, quantizer="x86"):
    """torchao's prepare_qat_pt2e with fuselage's placement: the exported training-mode
    `model` (torch.export's .module()) with torchao's fake-quantizes where fuselage's
    engine observes, each conv-bn rewritten by torchao for training. `quantizer`: "x86"
    (or None), fuselage.pt2e.Quantizer, or torchao's X86InductorQuantizer with
    get_default_x86_inductor_quantization_config(is_qat=True). Train it, then
    convert_pt2e (torchao's convert runs)."""
    try:
        from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e as torchao_prepare
    except ImportError:
        raise ConfigTranslationError(
            "fuselage.pt2e.prepare_qat_pt2e needs torchao (pip install torchao): torchao "
            "rewrites each conv-bn for training") from None
    if quantizer is None or quantizer == "x86":
        quantizer = Quantizer("x86", is_qat=True)
    elif isinstance(quantizer, Quantizer):
        if not quantizer.is_qat:
            quantizer = Quantizer(quantizer.backend_config, quantizer.qconfig_mapping,
                                  is_qat=True, unknown_ops=quantizer.unknown_ops)
    elif type(quantizer).__name__ == "X86InductorQuantizer":
        if not _x86_inductor_is_qat(quantizer, "prepare_qat_pt2e"):
            raise ConfigTranslationError(
                "prepare_qat_pt2e: X86InductorQuantizer has a post-training config; set "
                "get_default_x86_inductor_quantization_config(is_qat=True)")
        quantizer = Quantizer("x86", is_qat=True)
    else:
        raise ConfigTranslationError(
            f"prepare_qat_pt2e: quantizer is {quantizer!r:.80}; fuselage reads \"x86\", "
            "fuselage.pt2e.Quantizer or torchao's X86InductorQuantizer with a QAT config")
    return torchao_prepare(model, quantizer)


def _prepared_by_torchao(model):
    """Whether `model` was prepared by torchao's prepare_pt2e / prepare_qat_pt2e (its
    observers and fake-quantizes are torchao's classes; fuselage's prepare_pt2e places
    torch.ao's)."""
    return any(type(m).__module__.startswith("torchao.") for m in model.modules())


def prepare_pt2e(model, quantizer="x86", unknown_ops="refuse"):
    """The exported `model` (torch.export's ExportedProgram .module(), or the program)
    with batch norms folded and PyTorch's observers placed by fuselage: a GraphModule the
    user calibrates by running it. An aten op fuselage does not read is an ExportError
    naming the node and op; with unknown_ops="float" it stays float, as torchao leaves
    an op its quantizer does not annotate, and a UserWarning names each such node."""
    from fuselage._importer import compile_once
    configs = _configs(quantizer)
    # Once: an ExportedProgram builds a new GraphModule at each .module() call.
    exported = _exported.graph_module_of(model)
    kept = _exported.ops_outside_table(exported) \
        if _exported.check_unknown_ops(unknown_ops, "prepare_pt2e") == "float" else []
    with compile_once(), _collector_paused():
        prepared = _prepare(_exported.to_engine(exported, unknown_ops), configs,
                            ("prepare_pt2e", "convert_pt2e"), fold_batch_norms=True,
                            keep_engine_model=True)
        prepared = _finished(_with_outputs_of(prepared, exported))
        prepared.meta[_EXPORTED_SHAPES] = _exported.value_shapes(exported)
    _warn_kept_float(kept, "prepare_pt2e")  # once prepared: a refusal (fill_) says why
    return prepared


# GraphModule.meta key of a prepared model: the shapes torch.export recorded for its
# values (_exported.value_shapes), which convert_pt2e gives its reference's nodes, so that
# lowering it without example inputs still tells a residual from a broadcast add.
_EXPORTED_SHAPES = "fuselage_exported_shapes"


def _warn_kept_float(kept, function, shown=5):
    """A UserWarning naming the nodes of `kept` ((node, op) pairs) kept float as asked."""
    if not kept:
        return
    named = ", ".join(f"{node} ({op})" for node, op in kept[:shown])
    more = f" and {len(kept) - shown} more" if len(kept) > shown else ""
    warnings.warn(f"{function}: {len(kept)} op(s) fuselage does not read kept float "
                  f"(unknown_ops=\"float\"): {named}{more}", UserWarning, stacklevel=3)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for the block (as it was before, after): a
    full collection walks every object of the process, torch.export's graphs and their
    metadata included, and one fell inside prepare_pt2e on the 10^3-node network: 2-5 s
    of its 5-14 s (gc.callbacks, load 9-12). Reference counting still frees what the
    block drops; what is left in cycles waits for the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _finished(gm):
    """`gm` with its code compiled, if it waits for it (fuselage._importer.compile_once:
    one compile per public call, not one per intermediate step)."""
    from fuselage._importer import DeferredGraphModule
    return gm.finished() if isinstance(gm, DeferredGraphModule) else gm


def convert_pt2e(model):
    """A calibrated prepare_pt2e model as torchao's reference form: quantized_decomposed
    q/dq ops around the float aten ops, weights int8 constants. A model torchao prepared
    (prepare_qat_pt2e's, trained; or torchao's prepare_pt2e with fuselage's Quantizer) is
    converted by torchao's convert_pt2e, batch norms folded. torchao's
    lower_pt2e_quantized_to_x86 lowers it as it lowers its own (see
    _enable_torchao_x86_lowering)."""
    from fuselage._importer import compile_once
    _enable_torchao_x86_lowering()
    if _prepared_by_torchao(model):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e as torchao_convert
        return torchao_convert(model)
    with compile_once(), _collector_paused():
        reference = quantize_fx._convert(model, None, None, None, lower=False,
                                         fold_weights=True)
        reference = _with_outputs_of(_exported.restore_aten(reference, every_q_dq=True), model)
        _exported.give_shapes(reference, getattr(model, "meta", {}).get(_EXPORTED_SHAPES, {}))
        return _finished(reference)


_TORCHAO_LOWERING = "torchao.quantization.pt2e.lowering"
_X86_INDUCTOR_QUANTIZER = "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer"


def _enable_torchao_x86_lowering():
    """Registers torchao's x86 weight-prepack passes for torchao's
    lower_pt2e_quantized_to_x86, which relies on them but does not register them:
    importing X86InductorQuantizer's module does, so a user quantizing with fuselage
    instead got a lowered model with no int8 op in it, silently (resnet18, mobilenet_v2
    and efficientnet_b0 through torchao 0.18's lowering: 0 onednn ops). That import costs
    about 1 s (5 s with Inductor's own, on a busy machine), so it happens only when
    torchao's lowering module is imported: now if it already is, else right after it."""
    if _X86_INDUCTOR_QUANTIZER in sys.modules:
        return
    if _TORCHAO_LOWERING in sys.modules:
        importlib.import_module(_X86_INDUCTOR_QUANTIZER)
    elif not any(isinstance(f, _RegisterAfterTorchaoLowering) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterTorchaoLowering())


class _RegisterAfterTorchaoLowering(importlib.abc.MetaPathFinder):
    """An import hook, used once: when torchao's lowering module is imported, it imports
    X86InductorQuantizer's module right after (_enable_torchao_x86_lowering)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TORCHAO_LOWERING:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def run_then_register(module):
            run_module(module)
            try:
                importlib.import_module(_X86_INDUCTOR_QUANTIZER)
            except ImportError:  # a torchao without it: its lowering is the user's to try
                pass

        spec.loader.exec_module = run_then_register
        return spec


def _with_outputs_of(gm, original):
    """`gm` (whose graph returns its flat outputs as a tuple) taking and returning what
    `original` (torch.export's .module(), or a model this function gave) does: its pytree
    of inputs and outputs (one tensor, a dict, ...), as torchao's prepare_pt2e and
    convert_pt2e keep it."""
    info = getattr(original.graph._codegen, "pytree_info", None)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if info is None or info.in_spec is None or info.out_spec is None or \
            info.in_spec.num_leaves != len(placeholders):
        return gm
    gm.graph._codegen = torch.fx.graph._PyTreeCodeGen(
        torch.fx.graph._PyTreeInfo(placeholders, info.in_spec, info.out_spec))
    gm.recompile()
    return gm


def lower_to_fuselage(reference, example_inputs=None):
    """fuselage's Model (fuselage._core) of a PT2E reference model (torchao's convert_pt2e
    or fuselage's) with each dequantize -> op -> quantize group fuselage lowers as one
    native quantized op (conv, conv-relu, linear, add-relu, pools passing their input's
    parameters through), run by fuselage's kernels; `fuselage._core.to_torch` gives the
    lowered graph back to PyTorch (its quantized ops), the rest in aten."""
    from fuselage import _core
    model = _exported.from_exported(reference, example_inputs)
    _core.lower(model)
    return model


def lower_pt2e_quantized_to_x86(model, example_inputs=None):
    """A PT2E reference model (torchao's convert_pt2e or fuselage's) with its quantized
    convs and linears as the oneDNN int8 ops torchao's `lower_pt2e_quantized_to_x86`
    gives (onednn.qconv_pointwise, qconv2d_pointwise.binary for a conv with its residual
    add, qlinear_pointwise), weights prepacked, the rest as the reference has it: it runs
    on stock PyTorch, without fuselage and without quantized dtypes. `example_inputs`, in
    torchao's signature, give each conv's input shape, for which its weight is packed
    (without them a conv may run many times slower); the graph is not exported again.
    `model` is not changed."""
    from fuselage import _onednn
    return _onednn.lower_to_onednn(model, example_inputs)
