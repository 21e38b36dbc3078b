"""Quantization-aware training through fuselage: PyTorch's fake-quantize and QAT modules in
the places fuselage's prepare chose (prepare_qat_fx), and back to a prepared model of
observers and float modules for fuselage's convert (convert_fx).

fuselage places the observers: the QAT qconfig mapping is translated with each
fake-quantize written as the observer it wraps (_translate, is_qat=True), the backend
config's batch-norm fusers keep the batch norm (nni.ConvBnReLU2d & co.), and the engine's
fuse and prepare run as for post-training quantization. Then the modules become PyTorch's:

  - every observer module a node calls becomes a fresh fake-quantize of the mapping's
    factory that wraps an observer of that kind and those arguments (one per module, so
    an observer two nodes share stays one shared fake-quantize, as in PyTorch);
  - every weighted op fuselage planned to quantize (a weight plan in the observer
    container, quantize/prepared_model.h) is swapped for its QAT module,
    `qat_module.from_float(module)` of the backend config's QAT mapping (nniqat.ConvBnReLU2d,
    nnqat.Linear, ...; fuselage's own fused types, which a PyTorch config cannot map
    unless the user names them, map to fuselage.nn.qat: ConvBnAddReLU2d keeps training
    its batch norm), with the module's qconfig resolved as PyTorch's QAT swap resolves it
    (global, then object type and module name along the module's path);

so training runs PyTorch's own modules. The weight plans stay (no node calls them):
convert reads them.

For convert, `observed(gm)` swaps back, in place and undone on exit: each fake-quantize for
the observer it holds (its statistics give the activation qparams, as PyTorch's convert
asks the fake-quantize, which asks that observer), each QAT module for its `to_float()`
(the batch norm folded into the conv with its running statistics), and gives the weight
qparams PyTorch's convert computes: a copy of the module's weight fake-quantize run once
more on the folded weight, then asked for its qparams. fuselage's convert computes weight
qparams with a fresh observer, so `set_weight_qparams` writes these into the reference
modules it made.

Not done as PyTorch does (each is a documented difference): a module PyTorch's QAT swap
would swap but fuselage does not quantize (its dtype configs unsatisfied) stays float
rather than training with fake-quantized weights; the user's model is not changed by
convert_fx (PyTorch swaps its QAT modules for float ones and updates the weight
fake-quantizes).
"""

import contextlib
import copy

import torch
import torch.ao.nn.intrinsic as nni
from torch.ao.quantization.backend_config import get_native_backend_config
from torch.ao.quantization.backend_config.utils import get_module_to_qat_module
from torch.ao.quantization.fake_quantize import FakeQuantizeBase
import torch.ao.quantization.observer as tq_observer

from fuselage import _prepared
from fuselage.errors import ConfigTranslationError


def _observer_key(observer):
    """What tells two observer modules apart for fuselage: the class and the fields its
    translation (_translate) writes."""
    fields = [type(observer)]
    for name in ("dtype", "qscheme", "quant_min", "quant_max", "reduce_range",
                 "averaging_constant"):
        fields.append(getattr(observer, name, None))
    if isinstance(observer, (tq_observer.PerChannelMinMaxObserver,)):
        fields.append(observer.ch_axis)
    eps = getattr(observer, "eps", None)
    fields.append(float(eps.reshape(-1)[0]) if isinstance(eps, torch.Tensor) else eps)
    if isinstance(observer, tq_observer.FixedQParamsObserver):
        fields.append(float(observer.scale.reshape(-1)[0]))
        fields.append(int(observer.zero_point.reshape(-1)[0]))
    return tuple(fields)


def _qconfigs(qconfig_mapping):
    """Every qconfig of the mapping (None ones left out), in its order."""
    found = [qconfig_mapping.global_qconfig]
    for table in (qconfig_mapping.object_type_qconfigs,
                  qconfig_mapping.module_name_regex_qconfigs,
                  qconfig_mapping.module_name_qconfigs,
                  qconfig_mapping.module_name_object_type_order_qconfigs):
        found.extend(table.values())
    return [q for q in found if q is not None]


class _Factories:
    """The mapping's factories by the observer they make: the fake-quantize factory whose
    observer has that key, or None for a plain observer (kept as it is, as PyTorch keeps an
    observer a QAT qconfig names, e.g. PReLU's HistogramObserver). Activation factories
    and weight factories (for the get_attr weights of functional conv / linear) apart.
    Two different activation factories wrapping the same observer are refused; for
    weights the first in the mapping's order (the global qconfig's) is taken: the default
    mappings give the fixed-qparams ops, which have no weight, a FakeQuantize wrapping the
    observer the global FusedMovingAvgObsFakeQuantize wraps."""

    def __init__(self, qconfig_mapping, function="prepare_qat_fx"):
        self._function = function  # named in the errors
        self._by_key = {"activation": {}, "weight": {}}
        seen = set()
        for qconfig in _qconfigs(qconfig_mapping):
            for field in ("activation", "weight"):
                factory = getattr(qconfig, field)
                if (field, id(factory)) in seen:
                    continue
                seen.add((field, id(factory)))
                made = factory()
                fake = isinstance(made, FakeQuantizeBase)
                key = _observer_key(made.activation_post_process if fake else made)
                value = factory if fake else None
                table = self._by_key[field]
                if key in table:
                    if field == "activation" and repr(table[key]) != repr(value):
                        raise ConfigTranslationError(
                            "%s: the qconfig mapping has two activation factories "
                            "that wrap the same observer (%r and %r); fuselage places "
                            "observers by their kind and arguments, so it cannot tell which "
                            "one a node gets" % (function, table[key], value))
                    continue
                table[key] = value

    def fake_quantize(self, observer, where, is_weight=False):
        """A fresh fake-quantize for `observer`, or None to keep the observer."""
        key = _observer_key(observer)
        table = self._by_key["weight" if is_weight else "activation"]
        if key in table:
            factory = table[key]
            return None if factory is None else factory()
        if isinstance(observer, tq_observer.FixedQParamsObserver):
            # The backend config's fixed output qparams (sigmoid, tanh, ...) under a qconfig
            # that names none: PyTorch's _overwrite_output_fake_quantize.
            from torch.ao.quantization.fake_quantize import FixedQParamsFakeQuantize

            return FixedQParamsFakeQuantize(observer=tq_observer.FixedQParamsObserver.with_args(
                scale=float(observer.scale.reshape(-1)[0]),
                zero_point=int(observer.zero_point.reshape(-1)[0]), dtype=observer.dtype,
                quant_min=observer.quant_min, quant_max=observer.quant_max))
        raise ConfigTranslationError(
            "%s: %s: no %s factory of the qconfig mapping makes the observer "
            "fuselage placed there (%r)"
            % (self._function, where, "weight" if is_weight else "activation", observer))


def _parent(root, path):
    parent, _, name = path.rpartition(".")
    return (root.get_submodule(parent) if parent else root), name


def _module_qconfig(gm, target, qconfig_mapping):
    """The qconfig PyTorch's QAT swap gives the module at `target` (propagate_qconfig_ on
    the flattened mapping: global, then along the path each module's type, fused types
    taking their parts' common type entry, and each module's name)."""
    by_type = qconfig_mapping.object_type_qconfigs
    by_name = qconfig_mapping.module_name_qconfigs
    qconfig = qconfig_mapping.global_qconfig
    module, path = gm, ""
    for part in target.split("."):
        path = part if not path else path + "." + part
        module = getattr(module, part)
        if type(module) in by_type:
            qconfig = by_type[type(module)]
        elif isinstance(module, nni._FusedModule) and by_type:
            parts = [by_type.get(type(m)) for m in module.children()]
            if parts and parts[0] is not None and all(p is parts[0] for p in parts):
                qconfig = parts[0]
        qconfig = by_name.get(path, qconfig)
    return qconfig


def has_fake_quantize(qconfig_mapping):
    """Whether a qconfig of the mapping makes a fake-quantize (activation or weight), read
    from its factory's class. Nothing is built: as in PyTorch, an entry for a module the
    model does not have is never constructed, whatever its arguments."""
    from fuselage._translate import _unwrap
    for q in _qconfigs(qconfig_mapping):
        for field in ("activation", "weight"):
            cls = _unwrap(getattr(q, field), field)[0]
            if isinstance(cls, type) and issubclass(cls, FakeQuantizeBase):
                return True
    return False


def fake_quantize_observers(gm, qconfig_mapping):
    """prepare_fx of a mapping with fake-quantize qconfigs: each observer fuselage placed
    in the prepared GraphModule `gm` becomes the fake-quantize of the mapping that wraps it
    (in place), as PyTorch's prepare_fx inserts them; the modules stay float (no QAT
    swap) and the weight plans stay observers, as convert computes a weight's qparams by
    the same observer."""
    factories = _Factories(qconfig_mapping, "prepare_fx")
    modules = dict(gm.named_modules())
    replaced = set()
    for node in gm.graph.nodes:
        if node.op != "call_module" or node.target in replaced:
            continue
        module = modules[node.target]
        if _prepared._is_observer_module(module):
            replaced.add(node.target)
            weight = bool(node.args) and getattr(node.args[0], "op", None) == "get_attr"
            fake = factories.fake_quantize(module, "node '%s'" % node.name, weight)
            if fake is not None:
                parent, name = _parent(gm, node.target)
                setattr(parent, name, fake)


def _plans(gm):
    """{node name: plan module} of the weight plans fuselage's prepare left in the
    observer container."""
    container = getattr(gm, _prepared.CONTAINER, None)
    if container is None:
        return {}
    return {m.node: m for name, m in container.named_children()
            if name.startswith(_prepared.PLAN_PREFIX) and isinstance(getattr(m, "node", None), str)}


def _fuselage_qat_modules():
    """{fuselage's fused float module: its QAT module} (fuselage.nn.qat)."""
    import fuselage.nn as fnn
    return {fnn.ConvBnAdd2d: fnn.qat.ConvBnAdd2d, fnn.ConvBnAddReLU2d: fnn.qat.ConvBnAddReLU2d}


def to_qat(gm, qconfig_mapping, backend_config):
    """Makes the prepared GraphModule `gm` (fuselage's observers, fused float modules) a
    QAT model in place: PyTorch's fake-quantizes and QAT modules (see the module
    docstring)."""
    factories = _Factories(qconfig_mapping)
    to_qat_module = _fuselage_qat_modules()
    to_qat_module.update(get_module_to_qat_module(
        backend_config if backend_config is not None else get_native_backend_config()))
    modules = dict(gm.named_modules())
    replaced = {}
    plans = _plans(gm)
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        module = modules[node.target]
        if _prepared._is_observer_module(module):
            if node.target not in replaced:
                weight = bool(node.args) and getattr(node.args[0], "op", None) == "get_attr"
                fake = factories.fake_quantize(module, "node '%s'" % node.name, weight)
                replaced[node.target] = fake
                if fake is not None:
                    parent, name = _parent(gm, node.target)
                    setattr(parent, name, fake)
        elif node.name in plans and node.target not in replaced:
            replaced[node.target] = _swap_weighted(gm, node, module, plans[node.name],
                                                   to_qat_module, qconfig_mapping)


def _swap_weighted(gm, node, module, plan, to_qat_module, qconfig_mapping):
    qat_class = to_qat_module.get(type(module))
    if qat_class is None:
        # No QAT form (nn.PReLU): PyTorch's swap leaves it, and convert quantizes its
        # weight as after calibration, with the qconfig's weight observer.
        return module
    qconfig = _module_qconfig(gm, node.target, qconfig_mapping)
    if qconfig is None:
        raise ConfigTranslationError(
            "prepare_qat_fx: node '%s' is quantized but PyTorch's QAT swap resolves no "
            "qconfig for module '%s' (a module_name_regex or module_name_object_type_order "
            "entry? QAT resolves a module's qconfig by its type and name only)"
            % (node.name, node.target))
    parts = list(module.modules())  # a fused module's from_float reads its child's qconfig
    for part in parts:
        part.qconfig = qconfig
    try:
        qat = qat_class.from_float(module)
    finally:
        for part in parts:
            del part.qconfig
    if _observer_key(qat.weight_fake_quant.activation_post_process) != _observer_key(plan):
        raise ConfigTranslationError(
            "prepare_qat_fx: node '%s': the weight fake-quantize of its module's qconfig "
            "(%r) is not the weight observer fuselage planned for it (%r); the module's "
            "qconfig and the node's differ" % (node.name, qat.weight_fake_quant, plan))
    parent, name = _parent(gm, node.target)
    setattr(parent, name, qat)
    return qat


def restore_parameters(gm, model):
    """The tensors a get_attr node of `gm` reads that are parameters of `model` (a
    functional conv / linear's weight and bias) made parameters again: the engine's model
    holds tensors, and the prepared model gives them back as plain tensors, which
    training would not update."""
    parameters = dict(model.named_parameters())
    for node in gm.graph.nodes:
        if node.op != "get_attr" or node.target not in parameters:
            continue
        owner, name = _parent(gm, node.target)
        value = getattr(owner, name)
        if isinstance(value, torch.nn.Parameter) or not isinstance(value, torch.Tensor):
            continue
        owner._buffers.pop(name, None)
        owner.__dict__.pop(name, None)
        owner.register_parameter(name, torch.nn.Parameter(
            value, requires_grad=parameters[node.target].requires_grad))


def refuse_shared_modules(model, non_traceable=None):
    """A module with parameters that the model calls more than once is a
    ConfigTranslationError: fuselage's prepare gives each call its own copy, which
    training would make differ, where PyTorch's QAT trains the one module."""
    from fuselage import _exporter

    gm = _exporter._as_graph_module(model, non_traceable)
    calls = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    for target, count in calls.items():
        if count > 1 and any(True for _ in gm.get_submodule(target).parameters()):
            raise ConfigTranslationError(
                "prepare_qat_fx: module '%s' is called %d times; fuselage's prepare gives "
                "each call its own copy of its parameters, which quantization-aware "
                "training would train apart (PyTorch trains the one module): not supported"
                % (target, count))


def is_qat_module(module):
    return hasattr(module, "weight_fake_quant") and hasattr(module, "to_float")


@contextlib.contextmanager
def observed(gm):
    """Within the block, `gm` (a model prepare_qat_fx returned, trained) is a prepared model
    of observers and float modules for fuselage's convert (see the module docstring); the
    block gets {module path: (scale, zero_point)} of the weights. `gm` is as it was after
    the block."""
    replaced = []  # (parent, name, original)
    weight_qparams = {}
    skip = None
    swapped = {}  # id(fake-quantize) -> its observer: one instance under two names stays one
    try:
        for path, module in list(gm.named_modules(remove_duplicate=False)):
            if skip is not None and (path + ".").startswith(skip):
                continue
            if id(module) in swapped:
                swap = swapped[id(module)]
            elif isinstance(module, FakeQuantizeBase):
                swap = module.activation_post_process
            elif is_qat_module(module):
                swap = module.to_float()
                weighted = swap[0] if isinstance(swap, nni._FusedModule) else swap
                weight_fake_quant = copy.deepcopy(module.weight_fake_quant)
                with torch.no_grad():
                    weight_fake_quant(weighted.weight)
                weight_qparams[path] = weight_fake_quant.calculate_qparams()
            else:
                continue
            swapped[id(module)] = swap
            skip = path + "."
            parent, name = _parent(gm, path)
            replaced.append((parent, name, module))
            setattr(parent, name, swap)
        yield weight_qparams
    finally:
        for parent, name, original in reversed(replaced):
            setattr(parent, name, original)


def set_weight_qparams(reference, weight_qparams):
    """Writes the QAT weight qparams into the reference modules fuselage's convert made
    (`reference`, a GraphModule; a fused module's child 0 is the reference module)."""
    for path, (scale, zero_point) in weight_qparams.items():
        module = reference.get_submodule(path)
        if isinstance(module, nni._FusedModule):
            module = module[0]
        old_scale, old_zero_point = module.weight_scale, module.weight_zero_point
        if old_scale.numel() != scale.numel():
            raise ConfigTranslationError(
                "convert_fx: module '%s': %d weight scales from the QAT weight fake-quantize, "
                "%d in the reference module" % (path, scale.numel(), old_scale.numel()))
        module.weight_scale = scale.detach().to(old_scale.dtype).reshape(old_scale.shape)
        module.weight_zero_point = zero_point.detach().to(old_zero_point.dtype).reshape(
            old_zero_point.shape)
