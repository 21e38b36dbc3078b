"""fuselage.FusedSubgraph as a torch module: a fused node that replays the nodes it was fused
from, in order, over its children (runtime/fused_subgraph.cc is the C++ kernel; the step
format is patterns/fusion_rule.h's). A multi-output pattern (`-> $b`) fuses into one, and so
does any pattern whose fused_module is "fuselage.FusedSubgraph".

    glu = fuselage.nn.FusedSubgraph(
        steps=[("call_method", "chunk", [("input", 0), ("const", 2)], [("dim", ("const", -1))]),
               ("call_function", "operator.getitem", [("step", 0), ("const", 0)], []),
               ("call_function", "operator.getitem", [("step", 0), ("const", 1)], []),
               ("call_function", "torch.sigmoid", [("step", 2)], []),
               ("call_function", "operator.mul", [("step", 1), ("step", 3)], [])],
        outputs=[4])
    y = glu(x)                       # a * sigmoid(b), a, b = x.chunk(2, dim=-1)

A step is (op, target, args, kwargs): op one of call_module (target: a child's name),
call_function (target: a function name, graph/NAMING.md) or call_method (target: a method of
its first arg); args a list of refs, kwargs a list of (name, ref). A ref is ("input", i),
("step", j) (an earlier step's result), ("const", value), or ("list" | "tuple" | "slice",
[refs]). `outputs` lists the step indices returned: one gives that value, several a tuple.

The steps run on PyTorch's own ops, which fuselage's kernels mirror, so the module's output
equals fuselage's interpreter on the same input (float ops to rounding; see
tests/python/test_fused_subgraph_to_torch.py).

A fused module type a backend config declares (fused_module_type) is the same module: fusion
writes the declaration's steps on each module of the type, so the model file carries them and
`of_type("user.ConvBnAddReLU2d")` is a FusedSubgraph subclass named after the type, needing
no config to run, export or pickle.
"""

import threading

import torch.nn as nn

from fuselage import _names
from fuselage.errors import ModuleError

__all__ = ["FusedSubgraph", "of_type"]

_OPS = ("call_module", "call_function", "call_method")
_REF_TAGS = ("input", "step", "const", "list", "tuple", "slice")


def _check_ref(ref, step, where):
    if not (isinstance(ref, (tuple, list)) and len(ref) == 2 and ref[0] in _REF_TAGS):
        raise ModuleError(f"{where}: step {step}: a ref is a (tag, value) tuple with tag one of "
                          f"{', '.join(_REF_TAGS)}; got {ref!r:.80}")
    tag, value = ref
    if tag == "input" and not (isinstance(value, int) and value >= 0):
        raise ModuleError(f"{where}: step {step}: ref {ref!r}: expected an input index >= 0")
    if tag == "step" and not (isinstance(value, int) and 0 <= value < step):
        raise ModuleError(f"{where}: step {step}: ref {ref!r}: expected an index of an earlier "
                          f"step (below {step})")
    if tag in ("list", "tuple", "slice"):
        if not isinstance(value, (list, tuple)):
            raise ModuleError(f"{where}: step {step}: ref {tag}: expected a list of refs")
        if tag == "slice" and len(value) != 3:
            raise ModuleError(f"{where}: step {step}: a slice ref has 3 parts; got {len(value)}")
        for item in value:
            _check_ref(item, step, where)


def check_steps(steps, outputs, where):
    """Refuses steps / outputs the C++ kernel would refuse, naming the step."""
    if not isinstance(steps, (list, tuple)):
        raise ModuleError(f"{where}: 'steps' must be a list; got {type(steps).__name__}")
    for i, spec in enumerate(steps):
        if not (isinstance(spec, (tuple, list)) and len(spec) == 4 and spec[0] in _OPS
                and isinstance(spec[1], str) and isinstance(spec[2], (list, tuple))
                and isinstance(spec[3], (list, tuple))):
            raise ModuleError(f"{where}: step {i}: expected (op, target, args, kwargs) with op "
                              f"one of {', '.join(_OPS)}; got {spec!r:.120}")
        op, target, args, kwargs = spec
        if op == "call_function" and _names.known_function(target) is None:
            raise ModuleError(f"{where}: step {i}: call_function target '{target}' is not a "
                              "function fuselage knows (backend_configs/known_functions.cc) "
                              "with a Python callable")
        for ref in args:
            _check_ref(ref, i, where)
        for kw in kwargs:
            if not (isinstance(kw, (tuple, list)) and len(kw) == 2 and isinstance(kw[0], str)):
                raise ModuleError(f"{where}: step {i}: a kwarg is a (name, ref) tuple; got "
                                  f"{kw!r:.80}")
            _check_ref(kw[1], i, where)
    if not isinstance(outputs, (list, tuple)) or not outputs or not all(
            isinstance(o, int) and not isinstance(o, bool) and 0 <= o < len(steps)
            for o in outputs):
        raise ModuleError(f"{where}: 'outputs' must be a non-empty list of step indices below "
                          f"{len(steps)}; got {outputs!r:.80}")


def _resolve(ref, inputs, done, where, step):
    tag, value = ref
    if tag == "input":
        if value >= len(inputs):
            raise ModuleError(f"{where}: step {step}: reads input {value}, but the module was "
                              f"called with {len(inputs)}")
        return inputs[value]
    if tag == "step":
        return done[value]
    if tag == "const":
        return value  # lists, tuples and slices of constants are already Python values
    items = [_resolve(item, inputs, done, where, step) for item in value]
    if tag == "list":
        return items
    if tag == "tuple":
        return tuple(items)
    return slice(*items)


def run_steps(module, steps, outputs, inputs, where):
    """The outputs of `steps` run over `module`'s children on `inputs`."""
    done = []
    for i, (op, target, arg_refs, kwarg_refs) in enumerate(steps):
        args = [_resolve(r, inputs, done, where, i) for r in arg_refs]
        kwargs = {name: _resolve(r, inputs, done, where, i) for name, r in kwarg_refs}
        if op == "call_module":
            child = module._modules.get(target)
            if child is None:
                raise ModuleError(f"{where}: step {i}: no child '{target}'")
            done.append(child(*args, **kwargs))
        elif op == "call_function":
            done.append(_names.known_function(target)(*args, **kwargs))
        else:
            if not args:
                raise ModuleError(f"{where}: step {i}: call_method '{target}' has no object "
                                  "to call it on")
            done.append(getattr(args[0], target)(*args[1:], **kwargs))
    if len(outputs) == 1:
        return done[outputs[0]]
    return tuple(done[o] for o in outputs)


class FusedSubgraph(nn.Module):
    """Replays `steps` over its children; returns the steps listed in `outputs`. Children
    are added after construction (add_module), named as call_module steps name them.
    `type_name` is the fuselage module type it stands for: fuselage.FusedSubgraph, or a
    declared type's (a subclass made by of_type)."""

    type_name = "fuselage.FusedSubgraph"

    def __init__(self, steps, outputs):
        super().__init__()
        check_steps(steps, outputs, self.type_name)
        self.steps = steps
        self.outputs = outputs

    def __reduce_ex__(self, protocol):
        if type(self) is FusedSubgraph:
            return super().__reduce_ex__(protocol)
        # A subclass made at run time (of_type) is found again by its type name.
        return (_new_of_type, (self.type_name,), self.__dict__.copy())

    def forward(self, *inputs):
        return run_steps(self, self.steps, self.outputs, inputs, self.type_name)


_lock = threading.Lock()
_classes = {}  # declared type name -> FusedSubgraph subclass


def of_type(type_name):
    """The FusedSubgraph subclass standing for the fuselage module type `type_name` (a type
    a backend config declares, "user.ConvBnAddReLU2d"), made once per name."""
    if type_name == FusedSubgraph.type_name:
        return FusedSubgraph
    with _lock:
        cls = _classes.get(type_name)
        if cls is None:
            cls = type(type_name.rsplit(".", 1)[-1], (FusedSubgraph,), {
                "__module__": __name__,
                "__qualname__": type_name,
                "__doc__": f"{type_name}: a fused module type declared in a backend config, "
                           "running the steps its model carries.",
                "type_name": type_name,
            })
            _classes[type_name] = cls
        return cls


def _new_of_type(type_name):
    cls = of_type(type_name)
    return cls.__new__(cls)
