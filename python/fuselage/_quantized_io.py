"""prepare_custom_config's input_quantized_idxs / output_quantized_idxs, as PyTorch's prepare_fx
and convert_fx take them: the model's inputs at those positions arrive quantized, its outputs
at those positions leave quantized.

fuselage's engine prepares and converts the model as if every input and output were float;
around it:
  - prepare_fx (after_prepare): the observer prepare put on a quantized input is taken out of
    the graph (the input needs none: it brings its own parameters), and kept beside it;
  - convert_fx (converting): the observer is put back for the engine's convert, which
    then quantizes the input; the quantize of the input is removed from the result, so the
    input's own quantized tensor feeds what read it (nnq modules read its parameters;
    a reference model dequantizes it). A quantized output's final dequantize is removed.
An input no quantized op reads (no observer after it) is refused by name: fuselage would
otherwise hand a float op a quantized tensor. An output prepare did not observe gets an
observer of the global qconfig, as PyTorch inserts one.
"""

import torch

from fuselage.errors import ConfigTranslationError

ATTR = "_fuselage_quantized_io"  # kept in __dict__: (removed observers, output positions)


def _is_observer(gm, node):
    from fuselage._prepared import _is_observer_module
    return node.op == "call_module" and _is_observer_module(gm.get_submodule(node.target))


def _placeholders(graph):
    return [n for n in graph.nodes if n.op == "placeholder"]


def _outputs(graph):
    """The output node and its values (one value, the items of a tuple / list, or the values
    of a dict, in its order)."""
    out = next(n for n in graph.nodes if n.op == "output")
    value = out.args[0]
    if isinstance(value, dict):
        return out, list(value.values())
    return out, (list(value) if isinstance(value, (tuple, list)) else [value])


def _packed_as(old, values):
    """`values` in the container `old` was (see _outputs)."""
    if isinstance(old, dict):
        return dict(zip(old.keys(), values))
    return type(old)(values) if isinstance(old, (tuple, list)) else values[0]


def _delete_module(gm, target):
    parent, _, name = target.rpartition(".")
    owner = gm.get_submodule(parent) if parent else gm
    delattr(owner, name)


def _add_module(gm, target, module):
    parent, _, name = target.rpartition(".")
    (gm.get_submodule(parent) if parent else gm).add_module(name, module)


def _observe_output(prepared, value, i, qconfig_mapping, function):
    """An observer (a fake-quantize for QAT) of the mapping's global qconfig inserted after
    output `value`, which no quantized op produces, as PyTorch's prepare_fx inserts one
    for an output it is told is quantized; returns its node."""
    qconfig = getattr(qconfig_mapping, "global_qconfig", None)
    if qconfig is None or not isinstance(value, torch.fx.Node):
        raise ConfigTranslationError(
            f"{function}: output {i} is in output_quantized_idxs but no op quantizes it and "
            "the qconfig mapping has no global qconfig to observe it with")
    from fuselage._prepared import OBSERVER_PREFIX

    names = {name for name, _ in prepared.named_children()}
    target = next(f"{OBSERVER_PREFIX}{n}" for n in range(len(names) + 1)
                  if f"{OBSERVER_PREFIX}{n}" not in names)
    prepared.add_module(target, qconfig.activation())
    with prepared.graph.inserting_after(value):
        observer = prepared.graph.call_module(target, (value,))
    return observer


def after_prepare(prepared, input_idxs, output_idxs, function="prepare_fx",
                  qconfig_mapping=None):
    """Takes the observers of the quantized inputs out of `prepared` (in place) and makes
    sure the quantized outputs are observed (an output no quantized op produces gets an
    observer of `qconfig_mapping`'s global qconfig, as in PyTorch)."""
    input_idxs, output_idxs = list(input_idxs or []), list(output_idxs or [])
    if not input_idxs and not output_idxs:
        return prepared
    graph = prepared.graph
    placeholders = _placeholders(graph)
    removed = {}
    for i in input_idxs:
        if not 0 <= i < len(placeholders):
            raise ConfigTranslationError(
                f"{function}: input_quantized_idxs has {i}; the model has "
                f"{len(placeholders)} inputs")
        ph = placeholders[i]
        observers = [u for u in ph.users if _is_observer(prepared, u)]
        if not observers or len(ph.users) != len(observers):
            raise ConfigTranslationError(
                f"{function}: input {i} ('{ph.name}') is in input_quantized_idxs but "
                "not every op reading it is quantized by the qconfig mapping; fuselage "
                "would hand a float op a quantized tensor")
        obs = observers[0]
        for other in observers[1:]:
            other.replace_all_uses_with(obs)
            graph.erase_node(other)
        obs.replace_all_uses_with(ph)
        graph.erase_node(obs)
        module = prepared.get_submodule(obs.target)
        if not any(n.op == "call_module" and n.target == obs.target for n in graph.nodes):
            _delete_module(prepared, obs.target)
        removed[ph.name] = (obs.target, module)
    out, values = _outputs(graph)
    for i in output_idxs:
        if not 0 <= i < len(values):
            raise ConfigTranslationError(
                f"{function}: output_quantized_idxs has {i}; the model has "
                f"{len(values)} outputs")
        v = values[i]
        if not (isinstance(v, torch.fx.Node) and _is_observer(prepared, v)):
            values[i] = _observe_output(prepared, v, i, qconfig_mapping, function)
            out.args = (_packed_as(out.args[0], values),)
    prepared.__dict__[ATTR] = (removed, output_idxs)
    prepared.recompile()
    return prepared


class converting:
    """Puts the quantized inputs' observers back into `gm` for the engine's convert, and
    takes them out again on leaving; `finish(converted)` makes the converted model's
    quantized inputs and outputs quantized."""

    def __init__(self, gm):
        self.gm = gm
        self.removed, self.output_idxs = gm.__dict__.get(ATTR, ({}, []))
        self.inserted = []

    def __enter__(self):
        graph = self.gm.graph
        by_name = {n.name: n for n in _placeholders(graph)}
        for name, (target, module) in self.removed.items():
            ph = by_name[name]
            try:
                self.gm.get_submodule(target)
            except AttributeError:
                _add_module(self.gm, target, module)
            with graph.inserting_after(ph):
                obs = graph.call_module(target, (ph,))
            for user in list(ph.users):
                if user is not obs:
                    user.replace_input_with(ph, obs)
            self.inserted.append(obs)
        if self.inserted:
            self.gm.recompile()
        return self

    def __exit__(self, *exc):
        graph = self.gm.graph
        for obs in self.inserted:
            obs.replace_all_uses_with(obs.args[0])
            graph.erase_node(obs)
            if not any(n.op == "call_module" and n.target == obs.target for n in graph.nodes):
                _delete_module(self.gm, obs.target)
        if self.inserted:
            self.gm.recompile()
        return False

    def finish(self, converted):
        if not self.removed and not self.output_idxs:
            return converted
        graph = converted.graph
        names = set(self.removed)
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.quantize_per_tensor and \
                    isinstance(node.args[0], torch.fx.Node) and node.args[0].name in names:
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
        out, values = _outputs(graph)
        changed = False
        for i in self.output_idxs:
            v = values[i]
            if isinstance(v, torch.fx.Node) and (
                    (v.op == "call_method" and v.target == "dequantize") or
                    (v.op == "call_function" and v.target is torch.dequantize)):
                values[i] = v.args[0]
                changed = True
        if changed:
            out.args = (_packed_as(out.args[0], values),)
        graph.eliminate_dead_code()
        converted.recompile()
        return converted
