"""Custom module classes, as PyTorch's prepare_fx / convert_fx take them:
prepare_custom_config's float_to_observed_custom_module_class and convert_custom_config's
observed_to_quantized_custom_module_class ({"static": {float class: observed class}}).

A custom module is one op of quantized input and output whose body fuselage never sees: the
engine gets it as an opaque module (traced as a leaf, fuselage._exporter) and keeps it float.
Around the engine, as PyTorch places them:
  - prepare_fx (after_prepare): each tensor input of the module observed (an observer of its
    qconfig inserted where no quantized op already observes it) and its output observed;
    the module swapped for `observed_class.from_float(module)`;
  - convert_fx (converting): the observer after each observed module is kept; on the
    converted model, the dequantize before the module and the quantize after it are taken
    out (it reads and returns quantized tensors), and the module becomes
    `quantized_class.from_observed(observed)` with that observer as its
    `activation_post_process`. A "dynamic" entry swaps the module at convert only.
"""

import copy

import torch

from fuselage.errors import ConfigTranslationError

ATTR = "_fuselage_custom_modules"  # on the prepared model: the observed modules' paths


def _classes(config, key, mode):
    mapping = (config or {}).get(key) or {}
    return dict(mapping.get(mode) or {})


def float_classes(prepare_config):
    """The float classes prepare swaps (static entries), traced as leaves."""
    return list(_classes(prepare_config, "float_to_observed_custom_module_class", "static"))


def _is_observer(gm, node):
    from fuselage._prepared import _is_observer_module
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase
    if node.op != "call_module":
        return False
    module = gm.get_submodule(node.target)
    return _is_observer_module(module) or isinstance(module, FakeQuantizeBase)


def _new_observer(gm, source, module_qconfig, where):
    from fuselage._prepared import OBSERVER_PREFIX
    if module_qconfig is None:
        raise ConfigTranslationError(f"prepare_fx: custom module {where} has no qconfig; "
                                     "a custom module class is quantized with its qconfig")
    names = set(gm._modules)
    target = next(f"{OBSERVER_PREFIX}{n}" for n in range(len(names) + 1)
                  if f"{OBSERVER_PREFIX}{n}" not in names)
    gm.add_module(target, module_qconfig.activation())
    with gm.graph.inserting_after(source):
        return gm.graph.call_module(target, (source,))


def after_prepare(prepared, prepare_config):
    """Observes each static custom module's inputs and output and swaps it for its observed
    class (in place); records the observed modules' paths for convert."""
    classes = _classes(prepare_config, "float_to_observed_custom_module_class", "static")
    if not classes:
        return prepared
    graph = prepared.graph
    paths = []
    for node in list(graph.nodes):
        if node.op != "call_module":
            continue
        module = prepared.get_submodule(node.target)
        observed_class = classes.get(type(module))
        if observed_class is None:
            continue
        where = f"'{node.target}' (node '{node.name}')"
        qconfig = getattr(module, "qconfig", None)
        order = {n: i for i, n in enumerate(graph.nodes)}
        for arg in list(node.all_input_nodes):
            if _is_observer(prepared, arg):
                continue
            # An observer a quantized op already reads the value through (placed before
            # this node), else a new one.
            observer = next((u for u in arg.users if _is_observer(prepared, u) and
                             order.get(u, len(order)) < order[node]), None) or \
                _new_observer(prepared, arg, qconfig, where)
            node.replace_input_with(arg, observer)
        if not any(_is_observer(prepared, u) for u in node.users):
            observer = _new_observer(prepared, node, qconfig, where)
            for user in list(node.users):
                if user is not observer:
                    user.replace_input_with(node, observer)
        observed = observed_class.from_float(module)
        parent, _, name = node.target.rpartition(".")
        setattr(prepared.get_submodule(parent) if parent else prepared, name, observed)
        paths.append(node.target)
    prepared.__dict__[ATTR] = paths
    prepared.recompile()
    return prepared


def _output_observers(gm):
    """path of each observed custom module -> (a copy of) the observer of its output."""
    out = {}
    for path in gm.__dict__.get(ATTR, []):
        for node in gm.graph.nodes:
            if node.op == "call_module" and node.target == path:
                users = [u for u in node.users if _is_observer(gm, u)]
                if users:
                    out[path] = copy.deepcopy(gm.get_submodule(users[0].target))
    return out


def _is_dequantize(node):
    return (node.op == "call_method" and node.target == "dequantize") or \
        (node.op == "call_function" and node.target is torch.dequantize)


def finish(prepared, converted, convert_config):
    """The converted model with its custom modules quantized (see the module docstring)."""
    static = _classes(convert_config, "observed_to_quantized_custom_module_class", "static")
    dynamic = _classes(convert_config, "observed_to_quantized_custom_module_class", "dynamic")
    if not static and not dynamic:
        return converted
    observers = _output_observers(prepared)
    graph = converted.graph
    for node in list(graph.nodes):
        if node.op != "call_module":
            continue
        module = converted.get_submodule(node.target)
        parent, _, name = node.target.rpartition(".")
        owner = converted.get_submodule(parent) if parent else converted
        if type(module) in dynamic:
            setattr(owner, name, dynamic[type(module)].from_observed(module))
            continue
        if type(module) not in static or node.target not in observers:
            continue
        for arg in list(node.all_input_nodes):
            if _is_dequantize(arg):
                node.replace_input_with(arg, arg.args[0])
                if not arg.users:
                    graph.erase_node(arg)
        # The quantize after it goes: its readers (quantized ops, or the dequantize the
        # engine put before float readers) take the module's own quantized output.
        for user in list(node.users):
            if user.op == "call_function" and user.target in (
                    torch.quantize_per_tensor, torch.quantize_per_channel):
                user.replace_all_uses_with(node)
                graph.erase_node(user)
        module.activation_post_process = observers[node.target]
        setattr(owner, name, static[type(module)].from_observed(module))
    converted.recompile()
    return converted
