"""fuselage.pt2e: PyTorch 2's quantization flow on a torch.export graph, run by fuselage.

    gm = torch.export.export(model.eval(), (x,)).module()
    prepared = fuselage.pt2e.prepare_pt2e(gm, "x86")   # was: torchao's prepare_pt2e(gm, quantizer)
    for batch in loader:                                # calibration: run it
        prepared(batch)
    reference = fuselage.pt2e.convert_pt2e(prepared)   # quantized_decomposed q/dq, int8 weights

torchao's prepare_pt2e / convert_pt2e signatures, fuselage's passes: the aten graph is read
into fuselage's FX form (fuselage._exported), batch norms fold into the convs before them
(as prepare_pt2e folds them), and fuselage's prepare / convert place and read PyTorch's own
observers by the x86 backend config and qconfig mapping (conv / linear with their relu,
add, cat, pools; per-channel int8 weights, uint8 activations). convert_pt2e gives torchao's
reference form: quantized_decomposed quantize / dequantize per tensor around the float
aten ops, each weight an int8 constant read by dequantize_per_channel.

fuselage.pt2e.Quantizer is the same decision as a torchao Quantizer: under torchao's own
prepare_pt2e / convert_pt2e it annotates what fuselage's engine matched in the backend
config (built-in or a config file whose patterns are written over aten ops).

Where it differs from torchao's X86InductorQuantizer: the x86 qconfig mapping of the FX
flow decides what is quantized, so an op's output is quantized where FX quantizes it (every
conv's), not only where its user is quantized; a module called from several places
(torchvision's resnets reuse one ReLU per block) is quantized, where
X86InductorQuantizer raises "Input partition has more than one output node".
"""

import operator

import torch
import torch.fx
import torch.nn.functional as F

from fuselage import _exported
from fuselage._packed import NOT_CONSTANT, constant_of
from fuselage.errors import ConfigTranslationError

__all__ = ["Quantizer", "prepare_pt2e", "convert_pt2e", "lower_to_fuselage"]

try:
    from torchao.quantization.pt2e.quantizer import Quantizer as _TorchaoQuantizer
except ImportError:  # torchao is optional: fuselage's own prepare_pt2e does not need it
    _TorchaoQuantizer = object


def _x86_configs():
    """The FX flow's x86 mapping with X86InductorQuantizer's default observers where the
    mapping has its default qconfig: activations over the whole uint8 range
    (HistogramObserver, reduce_range=False: FX's x86 default halves it for fbgemm's
    overflow), weights symmetric int8 per output channel."""
    from torch.ao.quantization import QConfig, get_default_qconfig, get_default_qconfig_mapping
    from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
    from torch.ao.quantization.observer import HistogramObserver, PerChannelMinMaxObserver
    inductor = QConfig(
        activation=HistogramObserver.with_args(reduce_range=False),
        weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                  qscheme=torch.per_channel_symmetric))
    fx_default = get_default_qconfig("x86")
    mapping = get_default_qconfig_mapping("x86").set_global(inductor)
    for object_type, qconfig in list(mapping.object_type_qconfigs.items()):
        if qconfig == fx_default:
            mapping.set_object_type(object_type, inductor)
    return mapping, _with_conv_activations(get_x86_backend_config())


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

    `backend_config` is "x86" (the FX flow's x86 config with X86InductorQuantizer's
    observers), a fuselage config file (.textproto), or a PyTorch BackendConfig;
    `qconfig_mapping` defaults to the x86 mapping. annotate() prepares the graph's FX form
    with fuselage's engine and writes each observer it placed as an annotation
    (fuselage._annotate); fuselage.pt2e.prepare_pt2e takes the same object."""

    def __init__(self, backend_config="x86", qconfig_mapping=None):
        if _TorchaoQuantizer is object:
            raise ConfigTranslationError("fuselage.pt2e.Quantizer needs torchao "
                                         "(pip install torchao)")
        super().__init__()
        self.backend_config = backend_config
        self.qconfig_mapping = qconfig_mapping

    def configs(self):
        """(qconfig mapping, backend config) this quantizer prepares with."""
        mapping, backend = _x86_configs()
        if self.backend_config != "x86":
            backend = self.backend_config
        return (self.qconfig_mapping if self.qconfig_mapping is not None else mapping), backend

    def annotate(self, model):
        from fuselage import _annotate, quantize_fx
        mapping, backend = self.configs()
        fx = _exported.to_fx_dialect(model).eval()
        prepared = quantize_fx.prepare_fx(fx, mapping, None, backend_config=backend)
        return _annotate.annotate(model, _float_graph_outputs(prepared))

    def validate(self, model):
        pass


def _configs(quantizer):
    """(qconfig mapping, backend config) for prepare_pt2e's `quantizer`: "x86" (or None),
    fuselage's Quantizer, or torchao's X86InductorQuantizer with its default global
    config."""
    if quantizer is None or quantizer == "x86":
        return _x86_configs()
    if isinstance(quantizer, Quantizer):
        return quantizer.configs()
    if type(quantizer).__name__ == "X86InductorQuantizer":
        global_config = getattr(quantizer, "global_config", None)
        if global_config is not None and getattr(global_config, "is_qat", False):
            raise ConfigTranslationError("prepare_pt2e: a QAT quantization config is not "
                                         "supported (post-training only)")
        return _x86_configs()
    raise ConfigTranslationError(
        f"prepare_pt2e: quantizer is a {type(quantizer).__name__}; fuselage reads \"x86\", "
        "fuselage.pt2e.Quantizer or torchao's X86InductorQuantizer")


def _fold_conv_batch_norm(gm):
    """Each F.batch_norm (inference) whose input is an F.conv1d/2d/3d read by nothing else,
    all parameters constants, folded into a new weight and bias of the conv, as torchao's
    prepare_pt2e folds it: w' = w * g / sqrt(v + eps) per output channel, b' = (b - m) *
    g / sqrt(v + eps) + beta."""
    convs = (F.conv1d, F.conv2d, F.conv3d)
    for bn in list(gm.graph.nodes):
        if bn.op != "call_function" or bn.target is not F.batch_norm:
            continue
        conv = bn.args[0]
        if not (isinstance(conv, torch.fx.Node) and conv.target in convs and
                len(conv.users) == 1 and len(bn.args) >= 8 and bn.args[5] is False):
            continue
        _, mean, var, gamma, beta, _, _, eps = bn.args[:8]
        values = [constant_of(gm, a) for a in (conv.args[1], mean, var, gamma, beta)]
        bias = constant_of(gm, conv.args[2] if len(conv.args) > 2 else None)
        if any(v is NOT_CONSTANT for v in values) or bias is NOT_CONSTANT:
            continue
        weight, mean, var, gamma, beta = values
        with torch.no_grad():
            factor = torch.rsqrt(var.float() + eps)
            if gamma is not None:
                factor = factor * gamma
            shape = [-1] + [1] * (weight.dim() - 1)
            new_weight = weight * factor.reshape(shape)
            new_bias = (bias if bias is not None else torch.zeros_like(mean)) - mean
            new_bias = new_bias * factor + (beta if beta is not None else 0)
        args = list(conv.args) + [None] * max(0, 3 - len(conv.args))
        args[1] = _exported.add_constant(gm, f"{conv.name}_weight_folded",
                                         new_weight.detach(), conv)
        args[2] = _exported.add_constant(gm, f"{conv.name}_bias_folded", new_bias.detach(),
                                         conv)
        conv.args = tuple(args)
        bn.replace_all_uses_with(conv)
        gm.graph.erase_node(bn)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def prepare_pt2e(model, quantizer="x86"):
    """The exported `model` (torch.export's ExportedProgram .module(), or the program)
    with batch norms folded and PyTorch's observers placed by fuselage: a GraphModule the
    user calibrates by running it."""
    from fuselage import quantize_fx
    mapping, backend = _configs(quantizer)
    fx = _fold_conv_batch_norm(_exported.to_fx_dialect(model)).eval()
    return _float_graph_outputs(quantize_fx.prepare_fx(fx, mapping, None,
                                                       backend_config=backend))


def _float_graph_outputs(prepared):
    """`prepared` without the observers only the graph's outputs read: torchao's
    quantizers quantize a value for the ops that read it, so a model's outputs stay
    float (the FX flow quantizes them too, a last rounding of the logits)."""
    from fuselage._annotate import _observer_of
    for node in list(prepared.graph.nodes):
        if _observer_of(prepared, node) is not None and node.users and \
                all(user.op == "output" for user in node.users):
            node.replace_all_uses_with(node.args[0])
            prepared.graph.erase_node(node)
            if not any(n.op == "call_module" and n.target == node.target
                       for n in prepared.graph.nodes):
                prepared.delete_submodule(node.target)
    prepared.recompile()
    return prepared


def _fold_quantized_weights(gm):
    """Each torch.quantize_per_channel / quantize_per_tensor of constants (a weight)
    computed ahead: a quantized constant in its place."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (torch.quantize_per_channel,
                                                             torch.quantize_per_tensor):
            continue
        values = [constant_of(gm, a) if isinstance(a, torch.fx.Node) else a for a in node.args]
        if any(v is NOT_CONSTANT for v in values) or not isinstance(values[0], torch.Tensor) or \
                values[0].is_quantized or node.args[0].op != "get_attr":
            continue
        with torch.no_grad():
            quantized = node.target(*values)
        constant = _exported.add_constant(gm, f"{node.name}_weight", quantized, node)
        node.replace_all_uses_with(constant)
        gm.graph.erase_node(node)
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


def convert_pt2e(model):
    """A calibrated prepare_pt2e model as torchao's reference form: quantized_decomposed
    q/dq ops around the float aten ops, weights int8 constants."""
    from fuselage import quantize_fx
    reference = quantize_fx.convert_to_reference_fx(model)
    _fold_quantized_weights(reference)
    return _exported.restore_aten(reference, every_q_dq=True)


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
