"""fuselage's placement of observers written as torchao's quantization annotations.

fuselage.pt2e.Quantizer's annotate() has fuselage prepare the FX form of the exported
graph (fuselage._exported.to_fx_dialect keeps every node's name) and reads back where the
observers went: an observer on the output of op `p` read by ops `u1, u2` becomes
`output_qspec` on `p` and `input_qspec_map[p]` on `u1` and `u2`, all one spec, which
torchao's prepare_pt2e shares implicitly (the same tensor, an equal spec); where another
op (or the graph's output) reads `p` float, `input_qspec_map[p]` on `u1` and `u2` only,
so that it keeps reading the float value; an observer
module used at several places (a pool or cat sharing its input's parameters) becomes one
spec and SharedQuantizationSpecs pointing to its first place. The annotations carry the
observer's class (torchao's class of the same name), dtype, range, scheme and axis, so
torchao builds the observer fuselage would have. For quantization-aware training
(fuselage.pt2e.prepare_qat_pt2e) each observer is wrapped in the torchao fake-quantize of
the class the QAT qconfig mapping wraps it in (fuselage._qat's factories), and the value
of a conv whose training batch norm fuselage's prepare did not see is the batch norm's
(`sources`).
"""

import operator

import torch

from fuselage.errors import ConfigTranslationError


def _observer_of(gm, node):
    """The observer module `node` calls, or None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_module":
        return None
    from torch.ao.quantization.observer import ObserverBase
    module = gm.get_submodule(node.target)
    return module if isinstance(module, ObserverBase) else None


def _spec_of(observer, where, fake_quantize=None):
    """The torchao QuantizationSpec that builds `observer` (a torch.ao observer module),
    wrapped in the torchao fake-quantize of `fake_quantize`'s class (a torch.ao
    fake-quantize that wraps such an observer) if given."""
    from torchao.quantization.pt2e import fake_quantize as torchao_fake_quantizes
    from torchao.quantization.pt2e import observer as torchao_observers
    from torchao.quantization.pt2e.quantizer import (FixedQParamsQuantizationSpec,
                                                     QuantizationSpec)
    name = type(observer).__name__
    if name == "FixedQParamsObserver":
        return FixedQParamsQuantizationSpec(
            dtype=observer.dtype, scale=float(observer.scale), zero_point=int(observer.zero_point),
            quant_min=observer.quant_min, quant_max=observer.quant_max, qscheme=observer.qscheme)
    cls = getattr(torchao_observers, name, None)
    if not isinstance(cls, type):
        raise ConfigTranslationError(
            f"{where}: observer {name} has no torchao counterpart "
            "(torchao.quantization.pt2e.observer); use MinMaxObserver, HistogramObserver, "
            "MovingAverageMinMaxObserver or their per-channel forms")
    # quant_min / quant_max are already the reduced range where reduce_range was asked.
    extra = {"eps": float(observer.eps)} if hasattr(observer, "eps") else {}
    if hasattr(observer, "averaging_constant"):
        extra["averaging_constant"] = observer.averaging_constant
    if hasattr(observer, "bins"):
        extra["bins"] = observer.bins
    ctr = cls.with_args(**extra)
    if fake_quantize is not None:
        fq_name = type(fake_quantize).__name__
        fq_cls = getattr(torchao_fake_quantizes, fq_name, None)
        if not isinstance(fq_cls, type):
            raise ConfigTranslationError(
                f"{where}: fake-quantize {fq_name} has no torchao counterpart "
                "(torchao.quantization.pt2e.fake_quantize); use FakeQuantize or "
                "FusedMovingAvgObsFakeQuantize")
        ctr = fq_cls.with_args(observer=cls, **extra)
    return QuantizationSpec(
        dtype=observer.dtype, observer_or_fake_quant_ctr=ctr,
        quant_min=observer.quant_min, quant_max=observer.quant_max, qscheme=observer.qscheme,
        ch_axis=getattr(observer, "ch_axis", None))


def _input_reading(user, source):
    """The input of aten node `user` that carries `source`'s value: `source` itself or
    the getitem of its output 0 (an op whose FX form returns only its first output)."""
    for arg in user.all_input_nodes:
        if arg is source or (arg.op == "call_function" and arg.target is operator.getitem and
                             arg.args[0] is source and arg.args[1] == 0):
            return arg
    return None


def _read_float(prepared, value):
    """Whether an op or the graph's output reads `value` unobserved in `prepared`: a
    value quantized for its int8 readers only. Its observer is then annotated on those
    readers' inputs alone: as an output_qspec, torchao's convert gives every reader the
    dequantized value (a sigmoid after a conv-relu that a conv also reads, which
    X86InductorQuantizer keeps float)."""
    return any(_observer_of(prepared, user) is None for user in value.users)


def annotate(aten_gm, prepared, sources=None, fake_quantize=None):
    """Writes `node.meta["quantization_annotation"]` on the nodes of `aten_gm` for each
    observer fuselage placed in `prepared` (fuselage's prepare of aten_gm's FX form).
    `sources`: {node name in `prepared`: name of the aten node whose value it stands for}
    (a conv for its training batch norm). `fake_quantize(observer, where, is_weight)`: the
    torch.ao fake-quantize to wrap the observer in, or None (fuselage._qat._Factories)."""
    sources = sources or {}
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec
    aten = {n.name: n for n in aten_gm.graph.nodes}
    annotations = {}
    first_place = {}  # id(observer module) -> the edge or node it was first annotated at

    def annotation(node):
        if node not in annotations:
            annotations[node] = QuantizationAnnotation(_annotated=True)
        return annotations[node]

    def aten_node(name, where):
        node = aten.get(name)
        if node is None:
            raise ConfigTranslationError(f"{where}: node '{name}' of fuselage's prepared "
                                         "graph has no node of that name in the exported graph")
        return node

    for node in prepared.graph.nodes:
        observer = _observer_of(prepared, node)
        if observer is None:
            continue
        where = f"observer '{node.target}'"
        value = node.args[0]
        while _observer_of(prepared, value) is not None:
            value = value.args[0]
        source = aten_node(sources.get(value.name, value.name), where)
        shared = first_place.get(id(observer))
        fake = None
        if shared is None and fake_quantize is not None:
            fake = fake_quantize(observer, where, value.op == "get_attr")
        spec = SharedQuantizationSpec(shared) if shared is not None else \
            _spec_of(observer, where, fake)
        anchor = None
        if source.op == "call_function" and source.target is not operator.getitem and \
                not _read_float(prepared, value):
            annotation(source).output_qspec = spec
            anchor = source
        for user in node.users:
            if user.op == "output" or _observer_of(prepared, user) is not None:
                continue
            reader = aten_node(user.name, where)
            edge_source = _input_reading(reader, source)
            if edge_source is None:
                raise ConfigTranslationError(
                    f"{where}: exported node '{reader.name}' does not read '{source.name}'")
            annotation(reader).input_qspec_map[edge_source] = spec
            anchor = anchor or (edge_source, reader)
        if shared is None and anchor is not None:
            first_place[id(observer)] = anchor
    for node, value in annotations.items():
        # In the order of the node's inputs: torchao's QAT rewrite of conv-bn reads a
        # conv's input_qspec_map by position (input, then weight).
        order = {arg: i for i, arg in enumerate(node.all_input_nodes)}
        value.input_qspec_map = dict(sorted(value.input_qspec_map.items(),
                                            key=lambda item: order.get(item[0], len(order))))
        node.meta["quantization_annotation"] = value
    return aten_gm
