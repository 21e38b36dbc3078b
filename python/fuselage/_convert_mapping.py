"""convert_fx's qconfig_mapping, with PyTorch's meaning: it may only narrow prepare's.

    prepared = prepare_fx(model, mapping, example_inputs)
    ...
    convert_fx(prepared, qconfig_mapping=QConfigMapping()       # the same keys as prepare's,
               .set_object_type(torch.add, qconfig)             # each the same qconfig
               .set_object_type(nn.Linear, None)                # or None: kept float
               .set_module_name("block.0", None))               # keys of its own, too

PyTorch 1.13's rule (torch/ao/quantization/fx/qconfig_mapping_utils.py,
_compare_prepare_convert_qconfig_mappings and convert's per-node check): the global qconfig
is the same; every object-type, module-name and module-name-regex key of prepare's mapping
is in the convert mapping, with the same qconfig or None; and no node gets a qconfig other
than its prepare-time one or None (fuselage: a key of the convert mapping's own must be
None). Anything else is a ConfigTranslationError naming the key.

Which nodes the convert mapping sets to None is resolved by the engine, as prepare resolved
the prepare-time mapping: fuselage's prepare runs over the prepared model with its
observers taken out and the convert mapping, and reports the ops whose qconfig is None
(PrepareReport kept_float, cause QCONFIG_NONE). Then, on a copy of the prepared model, as
PyTorch's convert does with those nodes:
  - an observer whose input and users all have a None qconfig is removed (no quantize /
    dequantize pair: PyTorch's _replace_observer_with_quantize_dequantize_node skips it);
    placeholders, get_attrs and the output count as None, as in PyTorch's node map;
  - a weighted op with a None qconfig keeps its float module (its weight plan is removed:
    PyTorch's convert_weighted_module returns before the reference module);
  - such an op is marked as prepare marks one (node meta `qconfig_none`), so lowering
    leaves it float (PyTorch's should_skip_lowering).
"""

import copy
import json

from fuselage import _translate
from fuselage.errors import ConfigTranslationError

# On a prepared GraphModule: its prepare-time mapping's entries (`entries`), as JSON text
# (to_json / from_json): deepcopy and pickle keep a string, and torch.jit.script takes it
# as a module attribute (a dict of tuple keys it cannot type).
ENTRIES_ATTR = "_fuselage_qconfig_mapping_entries"


def entries(mapping, is_qat):
    """{key: the qconfig's text, or None} of a QConfigMapping: ("global",),
    ("object_type", name), ("module_name", name), ("module_name_regex", regex),
    ("module_name_object_type_order", name, type name, index)."""
    def text(qconfig, what):
        return None if qconfig is None else \
            "\n".join(_translate._qconfig_lines(qconfig, what, is_qat))

    out = {("global",): text(mapping.global_qconfig, "global")}
    for object_type, q in mapping.object_type_qconfigs.items():
        what = "object_type %r" % (object_type,)
        out[("object_type", _translate._object_type_name(object_type, what))] = text(q, what)
    for regex, q in mapping.module_name_regex_qconfigs.items():
        out[("module_name_regex", regex)] = text(q, "module_name_regex %r" % regex)
    for name, q in mapping.module_name_qconfigs.items():
        out[("module_name", name)] = text(q, "module_name %r" % name)
    for (name, object_type, index), q in \
            mapping.module_name_object_type_order_qconfigs.items():
        what = "module_name_object_type_order %r" % ((name, object_type, index),)
        out[("module_name_object_type_order", name,
             _translate._object_type_name(object_type, what), index)] = text(q, what)
    return out


def to_json(entries_):
    return json.dumps([[list(key), qconfig] for key, qconfig in entries_.items()])


def from_json(text):
    return {tuple(key): qconfig for key, qconfig in json.loads(text)}


def _key_text(key):
    return key[0] if len(key) == 1 else "%s %s" % (key[0], ", ".join(map(repr, key[1:])))


def check(prepared_entries, convert_entries, convert):
    """PyTorch's rule between the prepare-time and the convert-time mapping (the module
    docstring); raises ConfigTranslationError naming the first key that breaks it."""
    if convert_entries[("global",)] != prepared_entries[("global",)]:
        raise ConfigTranslationError(
            f"{convert}: qconfig_mapping's global qconfig differs from the one given to "
            "prepare_fx; PyTorch requires the same (a convert-time mapping may only set "
            "entries to None)")
    for key, qconfig in prepared_entries.items():
        if key[0] in ("global", "module_name_object_type_order"):
            continue  # PyTorch compares object types, module names and regexes only
        if key not in convert_entries:
            raise ConfigTranslationError(
                f"{convert}: qconfig_mapping has no key {_key_text(key)}, which the one given "
                "to prepare_fx has; PyTorch requires every prepare-time key, with the same "
                "qconfig or None")
        if convert_entries[key] is not None and convert_entries[key] != qconfig:
            raise ConfigTranslationError(
                f"{convert}: qconfig_mapping's qconfig for {_key_text(key)} differs from the "
                "one given to prepare_fx; PyTorch allows the same qconfig or None")
    for key, qconfig in convert_entries.items():
        # PyTorch checks a key of the convert mapping's own node by node (the same qconfig
        # as at prepare, or None); fuselage takes such keys set to None only.
        if key not in prepared_entries and qconfig is not None:
            raise ConfigTranslationError(
                f"{convert}: qconfig_mapping's key {_key_text(key)} is not in the one given "
                "to prepare_fx; fuselage takes a convert-time key of its own only set to None "
                "(to keep ops float)")


def _is_observer(module):
    from fuselage._prepared import _is_observer_module
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase

    return _is_observer_module(module) or isinstance(module, FakeQuantizeBase)


def _observer_nodes(gm):
    return [n for n in gm.graph.nodes
            if n.op == "call_module" and _is_observer(gm.get_submodule(n.target))]


def none_at_convert(core, gm, config_text, mapping_text, export):
    """Names of the ops of prepared model `gm` whose qconfig under `mapping_text` (the
    convert mapping's text) is None, as the engine's prepare resolves it with the backend
    config `config_text` `gm` was prepared with. `export(gm)` is the engine model of a torch
    GraphModule (the caller's from_torch, with the swaps its kind of prepared model
    needs)."""
    from fuselage import _prepared

    float_gm = copy.deepcopy(gm)
    for node in _observer_nodes(float_gm):
        node.replace_all_uses_with(node.args[0])
        float_gm.graph.erase_node(node)
    container = getattr(gm, _prepared.FLAT_ATTR, None) or _prepared.CONTAINER
    if hasattr(float_gm, _prepared.FLAT_ATTR):
        delattr(float_gm, _prepared.FLAT_ATTR)
    if hasattr(float_gm, container):
        delattr(float_gm, container)  # the weight plans: prepare plans afresh
    float_gm.recompile()
    m = export(float_gm)
    report = core.prepare(m, config_text=config_text, qconfig_mapping_text=mapping_text)
    none = core.KeptFloat.Cause.QCONFIG_NONE
    return {k.node for k in report.kept_float if k.cause == none}


def narrowed(gm, none_nodes):
    """A copy of prepared model `gm` with the ops in `none_nodes` kept float, as PyTorch's
    convert keeps them (the module docstring), and the module paths of the weighted ops
    so kept."""
    from fuselage import _prepared

    gm = copy.deepcopy(gm)
    data = ("placeholder", "get_attr", "output")

    def is_none(node):
        return node.op in data or node.name in none_nodes

    for node in _observer_nodes(gm):
        if is_none(node.args[0]) and all(is_none(u) for u in node.users):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    kept_modules = set()
    for node in gm.graph.nodes:
        if node.name in none_nodes:
            node.meta.setdefault("fuselage", {})["qconfig_none"] = True
            if node.op == "call_module":
                kept_modules.add(node.target)
    container = getattr(gm, getattr(gm, _prepared.FLAT_ATTR, None) or _prepared.CONTAINER,
                        None)
    if container is not None:
        for name, plan in list(container.named_children()):
            if name.startswith(_prepared.PLAN_PREFIX) and getattr(plan, "node", None) in \
                    none_nodes:
                delattr(container, name)
    gm.graph.lint()
    gm.recompile()
    return gm, kept_modules
