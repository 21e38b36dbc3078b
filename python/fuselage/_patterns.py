"""Patterns written as Python functions (issue 21 item 6), as torch.fx.subgraph_rewriter
and PT2E users write them, traced with torch.fx into fuselage's config syntax (the complex
format of patterns/pattern.h):

    >>> fuselage.pattern_from_function(lambda x: x * torch.sigmoid(x), (torch.randn(2),))
    '(mul, $x, (torch.sigmoid, $x))'

How each traced node is written:
  - a placeholder used once is `MatchAllNode`; one used more than once is `$name`, the named
    wildcard (every `$x` is the same node). An op whose args are all single-use
    placeholders (and no kwargs) is written as a bare leaf, its args unchecked, as
    PyTorch's own patterns are: `(ReLU, (BatchNorm2d, Conv2d))`, not `(Conv2d, MatchAllNode)`
    (which would also make the input an extra input of the fused module);
  - call_module: the module's type leaf (`Conv2d` for nn.Conv2d, `nni.ConvReLU2d`, ...);
  - call_function / call_method: `add`, `mul`, `relu` (every spelling), `F.x` for
    torch.nn.functional, `torch.x`, `operator.x`, `method:x`, `function:q.x`;
  - a constant arg N is `MatchAllNode` at its position plus the predicate `[argN == c]` on
    the op (pattern positions are ops; constants are compared by predicates); a kwarg that
    differs from the function's default is allowed with that value only: `{alpha=2}`.
Anything else (several outputs, get_attr, a non-placeholder node used twice, a module or
function with no fuselage name) raises PatternError naming the node.
"""

import inspect
import operator

import torch
import torch.fx
import torch.nn.functional as F

from fuselage import _names
from fuselage.errors import PatternError

_MATCH_ALL = "MatchAllNode"
# Leaves that name every spelling of the op (pattern.h: add, mul, relu).
_FUNCTION_LEAVES = {
    operator.add: "add", torch.add: "add",
    operator.mul: "mul", torch.mul: "mul",
    torch.relu: "relu", F.relu: "relu",
}
_METHOD_LEAVES = {"add": "add", "mul": "mul", "relu": "relu"}


def pattern_from_function(fn, example_inputs=None):
    """The pattern text (complex format) of `fn`'s traced graph.

    `fn` is a function or an nn.Module whose forward is the pattern (a torch.fx.GraphModule
    is taken as traced, so a custom tracer's leaf modules stay modules); `example_inputs` (a
    tuple) is checked by running `fn` on it once, so a function that does not run is refused
    here rather than giving a pattern. Raises PatternError naming the node that cannot be
    written."""
    if example_inputs is not None:
        try:
            fn(*tuple(example_inputs))
        except Exception as e:
            raise PatternError(f"pattern function does not run on its example inputs: {e}") from e
    if isinstance(fn, torch.fx.GraphModule):  # already traced (perhaps by the user's own tracer)
        return _Writer(fn).write()
    try:
        traced = torch.fx.symbolic_trace(fn)
    except Exception as e:
        raise PatternError(f"pattern function cannot be traced by torch.fx: {e}") from e
    return _Writer(traced).write()


class _Writer:
    def __init__(self, gm):
        self._gm = gm
        self._graph = gm.graph

    def write(self):
        outputs = [n for n in self._graph.nodes if n.op == "output"]
        result = outputs[0].args[0]
        if isinstance(result, (tuple, list)):
            if len(result) != 1:
                raise PatternError(
                    f"node '{outputs[0].name}': the function returns {len(result)} values; a "
                    "pattern has one output")
            result = result[0]
        if not isinstance(result, torch.fx.Node):
            raise PatternError(f"node '{outputs[0].name}': the function returns the constant "
                               f"{result!r}; a pattern's output must be an op")
        if result.op == "placeholder":
            raise PatternError(f"node '{result.name}': the function returns its input; a "
                               "pattern's outermost position must be an op")
        for node in self._graph.nodes:
            uses = _use_count(node)
            if node.op not in ("placeholder", "output") and node is not result and uses > 1:
                raise PatternError(
                    f"node '{node.name}': used {uses} times; only inputs "
                    "(placeholders) may be shared in a pattern")
        return self._position(result)

    def _position(self, node):
        if node.op == "placeholder":
            return f"${node.name}" if self._uses(node) > 1 else _MATCH_ALL
        if node.op == "get_attr":
            raise PatternError(f"node '{node.name}': reads attribute '{node.target}'; a pattern "
                               "cannot hold a parameter or buffer")
        leaf = self._leaf(node)
        kwargs = self._kwargs(node)
        for key, value in kwargs.items():
            if isinstance(value, torch.fx.Node):
                raise PatternError(f"node '{node.name}': kwarg '{key}' is node '{value.name}'; "
                                   "a pattern matches only positional args of other nodes")
        args = list(node.args)  # a call_method's receiver is its arg 0, as in fuselage
        predicates = []
        items = []
        for i, arg in enumerate(args):
            if isinstance(arg, torch.fx.Node):
                items.append(self._position(arg))
            elif isinstance(arg, (tuple, list)) and any(isinstance(a, torch.fx.Node) for a in arg):
                raise PatternError(f"node '{node.name}': arg {i} is a list of nodes; a "
                                   "pattern position has single nodes as args")
            else:
                predicates.append(f"arg{i} == {_constant(node, arg)}")
                items.append(_MATCH_ALL)
        text = leaf
        if kwargs:
            text += "{" + ", ".join(f"{k}={_constant(node, v)}" for k, v in kwargs.items()) + "}"
        if predicates:
            text += "[" + ", ".join(predicates) + "]"
        bare = not kwargs and not predicates and all(
            isinstance(a, torch.fx.Node) and a.op == "placeholder" and self._uses(a) == 1
            for a in args)
        if bare:
            return text
        return "(" + ", ".join([text] + items) + ")"

    def _uses(self, placeholder):
        return _use_count(placeholder)

    def _leaf(self, node):
        if node.op == "call_module":
            module = self._gm.get_submodule(node.target)
            name = _names.module_type_name(type(module))
            if name is None:
                raise PatternError(f"node '{node.name}': module '{node.target}' is a "
                                   f"{type(module).__qualname__}, which has no fuselage name")
            return name[len("nn."):] if name.startswith("nn.") else name
        if node.op == "call_method":
            return _METHOD_LEAVES.get(node.target, f"method:{node.target}")
        if node.op == "call_function":
            leaf = _FUNCTION_LEAVES.get(node.target)
            if leaf is not None:
                return leaf
            name = _names.function_name(node.target)
            if name is None:
                raise PatternError(f"node '{node.name}': function {node.target!r} has no "
                                   "importable name fuselage can record")
            if name.startswith("torch.nn.functional."):
                return "F." + name[len("torch.nn.functional."):]
            if name.startswith("torch.") or name.startswith("operator."):
                return name
            return f"function:{name}"
        raise PatternError(f"node '{node.name}': op '{node.op}' cannot be a pattern position")

    def _kwargs(self, node):
        """The node's kwargs that differ from the callable's defaults (torch.fx records
        F.relu's inplace=False even when the function did not write it)."""
        defaults = {}
        if node.op == "call_function":
            try:
                defaults = {k: p.default for k, p in inspect.signature(node.target).parameters.items()
                            if p.default is not inspect.Parameter.empty}
            except (TypeError, ValueError):  # builtins without a signature
                defaults = {}
        return {k: v for k, v in node.kwargs.items() if k not in defaults or defaults[k] != v}


def _use_count(node):
    """How many args (at any depth) read `node`: torch.fx's `users` counts `s * s` once."""
    seen = []

    def note(arg):
        if arg is node:
            seen.append(arg)
        return arg

    for user in node.users:
        torch.fx.node.map_arg((user.args, user.kwargs), note)
    return len(seen)


def _constant(node, value):
    """`value` in the pattern syntax's constant form (pattern.h)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if "'" in value:
            raise PatternError(f"node '{node.name}': string {value!r} holds a quote, which the "
                               "pattern syntax cannot write")
        return f"'{value}'"
    if isinstance(value, torch.dtype):
        return str(value)  # torch.float32
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_constant(node, v) for v in value) + ")"
    raise PatternError(f"node '{node.name}': constant {value!r} of type {type(value).__name__} "
                       "cannot be written in a pattern")
