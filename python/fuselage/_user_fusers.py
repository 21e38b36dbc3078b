"""A user's own fuser method, run as PyTorch's fuse_fx runs it.

    def fuse_conv_bn_relu(is_qat, relu, add_pattern):   # the user's, PyTorch's signature
        _, bn_pattern, _ = add_pattern
        bn, conv = bn_pattern
        return MyConvBnAddReLU(conv, bn)
    BackendPatternConfig((nn.ReLU, (torch.add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode)))
        .set_fuser_method(fuse_conv_bn_relu)._set_root_node_getter(...)
        ._set_extra_inputs_getter(...)

The engine matches the pattern, as for any entry, and fuses each match into a
fuselage.FusedSubgraph (fuselage._translate writes the entry so): a module that holds the
matched modules and records how the matched nodes were wired (its `steps`). This module
then does what PyTorch's fuse does with a match
(torch/ao/quantization/fx/fuse_handler.py, DefaultFuseHandler.fuse):

  - the matched pattern, each op position replaced by its module (call_module), its
    function or method name (call_function / call_method; F.relu by an nn.ReLU), and each
    MatchAllNode position by the module or function of the node it matched, else
    MatchAllNode, is passed to the fuser: `fuser(is_qat, *matched)`;
  - the module the fuser returns replaces the FusedSubgraph at the root's module path;
  - the fused node's args are the root node's args, then the extra inputs, and its kwargs
    the root's.

So the fused module is whatever the user's fuser returns (a plain nn.Conv2d, a
_FusedModule subclass of the user's), exactly as in PyTorch's fused model.

prepare_fx goes on to quantize it. The engine cannot run or lower a class of the user's,
but it knows what the match computes: the pattern is one fuselage fuses itself (PyTorch's
native fusers: conv-bn, conv-bn-relu, linear-relu, ...; fuselage.fusers: conv-bn-add-relu
and its kin), whose fused type the engine quantizes and lowers (nni.ConvAddReLU2d: both
inputs quantized). So each user fused module stands, for the engine, for that type: its
*engine form* is built from the modules it holds (the batch norm folded into the conv by
that fuser), the user's BackendPatternConfig for the class (observation, dtype configs,
root and reference module) is translated for that type, and the engine prepares, converts
and lowers the engine form. The prepared model holds the user's module again (its forward
is what calibration runs, as in PyTorch); the recipe of its engine form is kept on the
prepared GraphModule (RECIPES_ATTR: plain data, so deepcopy and pickle keep it), and
convert_fx builds the engine form from the module's children again (engine_forms). A fused
module that drops a matched module with state (a fuser returning the conv alone, without
its batch norm) or a pattern fuselage does not fuse itself is refused by prepare_fx, naming
it; fuse_fx takes both. prepare_qat_fx refuses a user's fuser that fused something (its
fused module would have to train: not done yet).
"""

import contextlib
import functools
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization.utils import MatchAllNode

from fuselage import _names
from fuselage.errors import ConfigTranslationError

# The add and mul spellings (graph/NAMING.md). The engine matches them in either operand
# order (commutativity is an op property), so a match may bind the pattern's args to the
# step's args swapped; and one pattern element matches every spelling of its op.
_ADD_MUL = {"torch.add", "operator.add", "torch.mul", "operator.mul", "add", "mul"}


def _same_function(a, b):
    """Whether function names `a` and `b` name one op for the matcher."""
    return a == b or (a in _ADD_MUL and b in _ADD_MUL and
                      a.rsplit(".", 1)[-1] == b.rsplit(".", 1)[-1])


class _Match:
    """One fused node's match: the user's `matched` structure, and each pattern path's
    binding (a FusedSubgraph ref: ("step", j), ("input", i) or ("const", v))."""

    def __init__(self, gm, node, subgraph):
        self.gm, self.node, self.subgraph = gm, node, subgraph
        self.steps = subgraph.steps
        self.bindings = {}

    def where(self):
        return f"node '{self.node.name}' (pattern {self.node.meta['fuselage']['pattern']!r})"

    def value(self, ref):
        """A ref's value outside the fused module: a node of the graph or a constant."""
        tag, value = ref
        if tag == "input":
            return self.node.args[value]
        if tag == "const":
            return value
        if tag in ("list", "tuple"):
            items = [self.value(r) for r in value]
            return items if tag == "list" else tuple(items)
        raise ConfigTranslationError(
            f"user fuser: {self.where()}: an argument of the root or an extra input is "
            f"computed inside the fused pattern ({ref!r}); PyTorch feeds the fused node only "
            "values from outside it")

    def bind(self, pattern, ref, path):
        """Binds `pattern` (at `path`) to `ref`; returns the user's matched structure for it,
        or None if it does not fit (the caller tries the other operand order)."""
        if isinstance(pattern, (tuple, list)):
            head, args = pattern[0], pattern[1:]
        else:
            head, args = pattern, ()
        if head is MatchAllNode:
            self.bindings[path] = ref
            return self._match_all(ref)
        if ref[0] != "step":
            return None
        op, target, step_args, _ = self.steps[ref[1]]
        element = self._element(head, op, target)
        if element is None or len(step_args) < len(args):
            return None
        orders = [list(range(len(args)))]
        if len(args) == 2 and target in _ADD_MUL:
            orders.append([1, 0])
        for order in orders:
            saved = dict(self.bindings)
            parts = [self.bind(a, step_args[k], f"{path}.{i}" if path else str(i))
                     for i, (a, k) in enumerate(zip(args, order))]
            if all(p is not None for p in parts):
                self.bindings[path] = ref
                return (element, *parts) if isinstance(pattern, (tuple, list)) else element
            self.bindings = saved
        return None

    def _element(self, head, op, target):
        if op == "call_module":
            module = self.subgraph._modules.get(target)
            if isinstance(head, type) and type(module) is head:
                return module
            return None
        if op == "call_method":
            return target if head == target else None
        function = _names.known_function(target)
        head_name = _names.function_name(head)
        if function is None or head_name is None or not _same_function(head_name, target):
            return None
        if function is F.relu:
            relu = nn.ReLU()
            relu.training = self.gm.training
            return relu
        return function

    def _match_all(self, ref):
        """What PyTorch's get_modules gives a MatchAllNode position: the module or function
        of the node it matched, else MatchAllNode."""
        if ref[0] == "input":
            arg = self.node.args[ref[1]]
            if getattr(arg, "op", None) == "call_module":
                return self.gm.get_submodule(arg.target)
            if getattr(arg, "op", None) in ("call_function", "call_method"):
                return arg.target
        return MatchAllNode


def _set_module(gm, path, module):
    parent, _, name = path.rpartition(".")
    setattr(gm.get_submodule(parent) if parent else gm, name, module)


def fuse(gm, fusions, is_qat, recipes=None):
    """Runs the user's fusers (fuselage._translate.user_fusions: {pattern name: UserFusion})
    on `gm`, the torch GraphModule of the engine's fusion, in place; returns `gm`. With
    `recipes` (a dict), each fused module's engine-form recipe goes into it by module path
    (prepare_fx; refused, naming the node, where there is none)."""
    if not fusions:
        return gm
    changed = False
    for node in list(gm.graph.nodes):
        name = (node.meta.get("fuselage") or {}).get("pattern") \
            if node.op == "call_module" else None
        fusion = fusions.get(name)
        if fusion is None:
            continue
        match = _Match(gm, node, gm.get_submodule(node.target))
        matched = match.bind(fusion.pattern, ("step", match.subgraph.outputs[0]), "")
        if matched is None:
            raise ConfigTranslationError(
                f"user fuser: {match.where()}: the fused nodes do not bind to the pattern "
                "(an internal error: please report it)")
        root = match.bindings.get(fusion.root)
        if root is None or root[0] != "step" or match.steps[root[1]][0] != "call_module":
            raise ConfigTranslationError(
                f"user fuser: {match.where()}: the root position {fusion.root!r} is not a "
                "module call; PyTorch puts the fused module at the root module's path")
        _, _, root_args, root_kwargs = match.steps[root[1]]
        args = [match.value(r) for r in root_args]
        for path in fusion.extras:
            if path not in match.bindings:
                raise ConfigTranslationError(
                    f"user fuser: {match.where()}: extra input {path!r} is no position of "
                    "the pattern")
            args.append(match.value(match.bindings[path]))
        kwargs = {k: match.value(r) for k, r in root_kwargs}
        fuser = fusion.fuser
        fused = fuser(is_qat, *matched) if isinstance(matched, tuple) else \
            fuser(is_qat, matched)
        if not isinstance(fused, nn.Module):
            raise ConfigTranslationError(
                f"user fuser: {match.where()}: fuser {getattr(fuser, '__qualname__', fuser)} "
                f"returned {type(fused).__name__}; expected an nn.Module")
        if recipes is not None:
            recipes[node.target] = _recipe(fusion, matched, fused, match.where())
        _set_module(gm, node.target, fused)
        node.args, node.kwargs = tuple(args), kwargs
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm



# ---- engine forms ------------------------------------------------------------------------

# On a prepared GraphModule: {module path: Recipe} of its user fused modules.
RECIPES_ATTR = "_fuselage_user_fused_modules"


class Recipe:
    """How to build a user fused module's engine form: `fuser` (a fuser fuselage knows, a
    module-level function) called as `fuser(False, *structure)`, where `structure` is the
    matched pattern with each leaf ("child", path in the user's module), ("module", a
    stateless module such as nn.ReLU) or ("value", a function or MatchAllNode)."""

    __slots__ = ("fuser", "structure")

    def __init__(self, fuser, structure):
        self.fuser, self.structure = fuser, structure

    def __getstate__(self):
        return {"fuser": self.fuser, "structure": self.structure}

    def __setstate__(self, state):
        self.fuser, self.structure = state["fuser"], state["structure"]

    def build(self, module):
        """The engine form of `module` (a user fused module this recipe was made for)."""
        def rebuild(leaf):
            if isinstance(leaf, list):
                return tuple(rebuild(x) for x in leaf)
            kind, value = leaf
            if kind == "child":
                return module.get_submodule(value) if value else module
            return value
        return self.fuser(False, *rebuild(self.structure))


def _same_op(a, b):
    adds = (torch.add, operator.add)
    muls = (torch.mul, operator.mul)
    return a is b or (a in adds and b in adds) or (a in muls and b in muls)


def _same_pattern(a, b):
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and \
            len(a) == len(b) and all(_same_pattern(x, y) for x, y in zip(a, b))
    return _same_op(a, b)


@functools.lru_cache(maxsize=1)
def _engine_fusers():
    """[(complex-format pattern, fuser)] of the fusions fuselage performs itself: PyTorch's
    native backend config's, and fuselage.fusers' conv-add family (the residual either
    operand of the add)."""
    from torch.ao.quantization.backend_config import get_native_backend_config

    from fuselage import _translate, fusers

    out = []
    configs = get_native_backend_config().configs
    for i, cfg in enumerate(configs.values() if isinstance(configs, dict) else configs):
        if cfg.fuser_method is not None:
            out.append((_translate._pattern_of(cfg, "native entry %d" % i)[2], cfg.fuser_method))
    conv_bn = (nn.BatchNorm2d, nn.Conv2d)
    for conv, add_fuser, relu_fuser in ((conv_bn, fusers.fuse_conv_bn_add,
                                         fusers.fuse_conv_bn_add_relu),
                                        (nn.Conv2d, fusers.fuse_conv_add,
                                         fusers.fuse_conv_add_relu)):
        for operands in ((conv, MatchAllNode), (MatchAllNode, conv)):
            out.append(((torch.add, *operands), add_fuser))
            out.append(((nn.ReLU, (torch.add, *operands)), relu_fuser))
    return out


def _engine_fuser(pattern):
    for candidate, fuser in _engine_fusers():
        if _same_pattern(pattern, candidate):
            return fuser
    return None


def _recipe(fusion, matched, fused, where):
    fuser = _engine_fuser(fusion.pattern)
    if fuser is None:
        raise ConfigTranslationError(
            f"prepare_fx: {where}: the module {type(fused).__qualname__} the user's fuser "
            "returned cannot be quantized by fuselage: fuselage quantizes a user's fused "
            "module as the fusion of the same pattern it performs itself (PyTorch's native "
            "backend config's, fuselage.fusers'), and it fuses no such pattern")
    held = {id(m): name for name, m in fused.named_modules()}

    def leaf(p, value):
        if isinstance(p, (tuple, list)):
            return [leaf(x, v) for x, v in zip(p, value)]
        if p is MatchAllNode:
            return ("value", MatchAllNode)
        if isinstance(value, nn.Module):
            if id(value) in held:
                return ("child", held[id(value)])
            if next(value.parameters(), None) is None and next(value.buffers(), None) is None:
                return ("module", value)
            raise ConfigTranslationError(
                f"prepare_fx: {where}: the module {type(fused).__qualname__} the user's fuser "
                f"returned does not hold the matched {type(value).__qualname__} (it has "
                "parameters or buffers the fused op needs); fuselage quantizes the fused "
                "module from the matched modules it holds")
        return ("value", value)

    return Recipe(fuser, leaf(fusion.pattern, matched))


def engine_types(gm):
    """{user fused module class: the engine's name of its engine form's type} over the user
    fused modules of `gm` (a GraphModule with RECIPES_ATTR). Refuses two classes of one
    engine type (one backend config entry each) and one class of two."""
    from fuselage import _translate

    types = {}
    for path, recipe in (getattr(gm, RECIPES_ATTR, None) or {}).items():
        module = gm.get_submodule(path)
        name = _translate._module_name(type(recipe.build(module)))
        if types.setdefault(type(module), name) != name:
            raise ConfigTranslationError(
                f"prepare_fx: the user's fused modules of class {type(module).__qualname__} "
                f"stand for two fuselage types ({types[type(module)]}, {name}); fuselage "
                "quantizes each class as one")
    by_type = {}
    for cls, name in types.items():
        other = by_type.setdefault(name, cls)
        if other is not cls:
            raise ConfigTranslationError(
                f"prepare_fx: the user's fused module classes {other.__qualname__} and "
                f"{cls.__qualname__} both stand for fuselage's {name}; give the two patterns "
                "one fused module class")
    return types


@contextlib.contextmanager
def engine_forms(gm):
    """Within the block, each user fused module of `gm` (RECIPES_ATTR) is replaced by its
    engine form, for the exporter; `gm` is as it was after the block."""
    replaced = []
    try:
        for path, recipe in (getattr(gm, RECIPES_ATTR, None) or {}).items():
            module = gm.get_submodule(path)
            form = recipe.build(module)
            for name in ("qconfig", "training"):
                if hasattr(module, name):
                    setattr(form, name, getattr(module, name))
            _set_module(gm, path, form)
            replaced.append((path, module))
        yield gm
    finally:
        for path, module in reversed(replaced):
            _set_module(gm, path, module)


def restore(prepared, fused_gm):
    """Puts the user fused modules of `fused_gm` back into `prepared` (the engine's prepared
    model of their engine forms) at their paths, and their recipes on it."""
    recipes = getattr(fused_gm, RECIPES_ATTR, None) or {}
    for path in recipes:
        module = fused_gm.get_submodule(path)
        form = prepared.get_submodule(path)
        if hasattr(form, "qconfig"):
            module.qconfig = form.qconfig
        _set_module(prepared, path, module)
    if recipes:
        setattr(prepared, RECIPES_ATTR, dict(recipes))
    return prepared


__all__ = ["fuse", "engine_forms", "engine_types", "restore", "RECIPES_ATTR"]
