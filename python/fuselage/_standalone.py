"""Standalone modules, as PyTorch's prepare_fx / convert_fx take them: prepare_custom_config's
standalone_module_name / standalone_module_class, entries (name or class, qconfig mapping,
example inputs, the module's own prepare_custom_config, backend config), None meaning the
parent's.

A standalone module is quantized on its own, as a model of its own (its own prepare_fx and
convert_fx, recursively), and its parent sees one call: the engine gets it as an opaque
module (traced as a leaf, fuselage._exporter). Its interface, the input_quantized_idxs /
output_quantized_idxs of its own config, says which of its inputs and outputs are quantized:
  - prepare_fx (after_prepare): the module replaced by its own prepared model; a quantized
    input observed in the parent (by the observer a quantized op already reads it through,
    else a new one of the parent's global qconfig);
  - convert_fx (finish): the module replaced by its own converted model; in the parent, the
    dequantize before a quantized input taken out, a dequantize put after a quantized output.
"""

import torch

from fuselage.errors import ConfigTranslationError

ATTR = "_fuselage_standalone_modules"  # on the prepared parent: {path: (inputs, outputs)}


def _entries(prepare_config):
    return list((prepare_config or {}).get("standalone_module_name") or []), \
        list((prepare_config or {}).get("standalone_module_class") or [])


def leaves(prepare_config):
    """(names, classes) of the standalone modules: traced as leaves in the parent."""
    by_name, by_class = _entries(prepare_config)
    return [e[0] for e in by_name], [e[0] for e in by_class]


def _entry_for(path, module, prepare_config):
    by_name, by_class = _entries(prepare_config)
    for entry in by_name:
        if entry[0] == path:
            return entry
    for entry in by_class:
        if type(module) is entry[0]:
            return entry
    return None


def _interface(config):
    if config is None:
        return {}
    return dict(config) if isinstance(config, dict) else dict(config.to_dict())


def after_prepare(prepared, prepare_config, qconfig_mapping, backend_config, prepare_fx):
    """Replaces each standalone module of `prepared` (in place) by its own prepared model
    (`prepare_fx`, fuselage's, with its entry's settings) and observes its quantized inputs
    in the parent."""
    from fuselage import _custom_modules

    by_name, by_class = _entries(prepare_config)
    if not by_name and not by_class:
        return prepared
    graph = prepared.graph
    interfaces = {}
    for node in list(graph.nodes):
        if node.op != "call_module" or node.target in interfaces:
            continue
        module = prepared.get_submodule(node.target)
        entry = _entry_for(node.target, module, prepare_config)
        if entry is None:
            continue
        _, mapping, example_inputs, config, backend = (tuple(entry) + (None,) * 5)[:5]
        interface = _interface(config)
        inputs = list(interface.get("input_quantized_idxs") or [])
        outputs = list(interface.get("output_quantized_idxs") or [])
        standalone = prepare_fx(module, mapping if mapping is not None else qconfig_mapping,
                                example_inputs, prepare_custom_config=config,
                                backend_config=backend if backend is not None else
                                backend_config)
        parent, _, name = node.target.rpartition(".")
        setattr(prepared.get_submodule(parent) if parent else prepared, name, standalone)
        order = {n: i for i, n in enumerate(graph.nodes)}
        for i in inputs:
            if not 0 <= i < len(node.args) or not isinstance(node.args[i], torch.fx.Node):
                raise ConfigTranslationError(
                    f"prepare_fx: standalone module '{node.target}' has input_quantized_idxs "
                    f"{i}; node '{node.name}' has no tensor input there")
            arg = node.args[i]
            if _custom_modules._is_observer(prepared, arg):
                continue
            observer = next((u for u in arg.users if _custom_modules._is_observer(prepared, u)
                             and order.get(u, len(order)) < order[node]), None) or \
                _custom_modules._new_observer(prepared, arg,
                                              getattr(qconfig_mapping, "global_qconfig", None),
                                              f"'{node.target}' (node '{node.name}')")
            node.replace_input_with(arg, observer)
        interfaces[node.target] = (inputs, outputs)
    prepared.__dict__[ATTR] = interfaces
    prepared.recompile()
    return prepared


def _is_dequantize(node):
    return (node.op == "call_method" and node.target == "dequantize") or \
        (node.op == "call_function" and node.target is torch.dequantize)


def finish(prepared, converted, convert_fx):
    """The converted parent with each standalone module converted on its own and its quantized
    inputs and outputs passed quantized (see the module docstring)."""
    interfaces = prepared.__dict__.get(ATTR) or {}
    if not interfaces:
        return converted
    graph = converted.graph
    done = set()
    for node in list(graph.nodes):
        if node.op != "call_module" or node.target not in interfaces:
            continue
        inputs, outputs = interfaces[node.target]
        if node.target not in done:
            parent, _, name = node.target.rpartition(".")
            owner = converted.get_submodule(parent) if parent else converted
            setattr(owner, name, convert_fx(converted.get_submodule(node.target)))
            done.add(node.target)
        for i in inputs:
            arg = node.args[i]
            if isinstance(arg, torch.fx.Node) and _is_dequantize(arg):
                node.replace_input_with(arg, arg.args[0])
                if not arg.users:
                    graph.erase_node(arg)
        if outputs:  # one output: the module's value itself
            with graph.inserting_after(node):
                dequantize = graph.call_method("dequantize", (node,))
            for user in list(node.users):
                if user is not dequantize:
                    user.replace_input_with(node, dequantize)
    converted.recompile()
    return converted
