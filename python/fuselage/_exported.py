"""fuselage.from_exported: a torch.export program into fuselage's graph, and back out.

    ep = torch.export.export(model.eval(), (x,))
    model = fuselage.from_exported(ep)       # fuselage._core.Model: fuse, quantize, run, save
    gm = fuselage._core.to_torch(model)      # the same aten calls, runnable in PyTorch

torch.export writes aten ops (`aten.conv2d.default`, `aten.add_.Tensor`, ...). fuselage's
engine has one internal form per op, FX's (DESIGN.md, "Front ends"): an aten conv is the
functional conv fuselage already fuses and quantizes. `to_fx_dialect` rewrites each aten
call into that form and keeps the aten spelling in the node's meta (`aten`), so
`restore_aten` (run by to_torch) writes it back: a model goes out in its own dialect.

An op outside the table is refused naming the node and op; an in-place op whose input is
read after it (the mutation would matter) is refused too, as is one mutating an input or
a parameter.
"""

import operator

import torch
import torch.fx
import torch.nn.functional as F

from fuselage.errors import ExportError

ATEN_META = "aten"
_aten = torch.ops.aten


def _same(args, kwargs):
    return args, kwargs


def _batch_norm_to_fx(args, kwargs):
    # aten: (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    # F:    (input, running_mean, running_var, weight, bias, training, momentum, eps)
    x, weight, bias, mean, var, training, momentum, eps = args[:8]
    return (x, mean, var, weight, bias, training, momentum, eps), {}


def _batch_norm_to_aten(args, kwargs):
    x, mean, var, weight, bias, training, momentum, eps = args
    return (x, weight, bias, mean, var, training, momentum, eps, False), {}


def _no_training_batch_norm_to_fx(args, kwargs):
    # _native_batch_norm_legit_no_training(input, weight, bias, mean, var, momentum, eps)
    x, weight, bias, mean, var, momentum, eps = args
    return (x, mean, var, weight, bias, False, momentum, eps), {}


def _no_training_batch_norm_to_aten(args, kwargs):
    x, mean, var, weight, bias, _, momentum, eps = args
    return (x, weight, bias, mean, var, momentum, eps), {}


def _pool_to_fx(args, kwargs):
    # aten writes an omitted stride as []; F takes None for "the kernel size".
    args = list(args)
    if len(args) > 2 and args[2] == []:
        args[2] = None
    return tuple(args), kwargs


def _pool_to_aten(args, kwargs):
    args = list(args)
    if len(args) > 2 and args[2] is None:
        args[2] = []
    return tuple(args), kwargs


def _layer_norm_to_fx(args, kwargs):
    return tuple(args[:5]), {}  # drops cudnn_enable


def _without_alpha(name):
    def to_fx(args, kwargs):
        if kwargs.get("alpha", 1) != 1:
            raise ValueError(f"{name} with alpha={kwargs['alpha']}")
        return tuple(args), {}
    return to_fx


class _Op:
    """One aten op's FX form: the target and the two argument conversions."""

    def __init__(self, fx, to_fx=_same, to_aten=_same, in_place=False,
                 first_output_only=False):
        self.fx, self.to_fx, self.to_aten, self.in_place = fx, to_fx, to_aten, in_place
        # The aten op returns a tuple whose item 0 the FX form returns (a batch norm's
        # output beside its saved statistics): getitem 0 of it becomes the node itself.
        self.first_output_only = first_output_only


def _table():
    ops = {}

    def add(name, fx, to_fx=_same, to_aten=_same, in_place_name=None,
            first_output_only=False):
        ops[name] = _Op(fx, to_fx, to_aten, first_output_only=first_output_only)
        if in_place_name is not None:
            ops[in_place_name] = _Op(fx, to_fx, to_aten, in_place=True)

    for dims in ("1d", "2d", "3d"):
        add(f"aten.conv{dims}.default", getattr(F, f"conv{dims}"))
    add("aten.linear.default", F.linear)
    add("aten.relu.default", torch.relu, in_place_name="aten.relu_.default")
    add("aten.add.Tensor", operator.add, _without_alpha("aten.add"),
        in_place_name="aten.add_.Tensor")
    add("aten.mul.Tensor", operator.mul, in_place_name="aten.mul_.Tensor")
    add("aten.batch_norm.default", F.batch_norm, _batch_norm_to_fx, _batch_norm_to_aten)
    add("aten._native_batch_norm_legit_no_training.default", F.batch_norm,
        _no_training_batch_norm_to_fx, _no_training_batch_norm_to_aten,
        first_output_only=True)
    add("aten.adaptive_avg_pool2d.default", F.adaptive_avg_pool2d)
    add("aten.max_pool2d.default", F.max_pool2d, _pool_to_fx, _pool_to_aten)
    add("aten.avg_pool2d.default", F.avg_pool2d, _pool_to_fx, _pool_to_aten)
    add("aten.flatten.using_ints", torch.flatten)
    add("aten.view.default", torch.reshape)
    add("aten.reshape.default", torch.reshape)
    add("aten.mean.dim", torch.mean)
    add("aten.cat.default", torch.cat)
    add("aten.permute.default", torch.permute)
    add("aten.hardswish.default", F.hardswish, in_place_name="aten.hardswish_.default")
    add("aten.hardsigmoid.default", F.hardsigmoid, in_place_name="aten.hardsigmoid_.default")
    add("aten.hardtanh.default", F.hardtanh, in_place_name="aten.hardtanh_.default")
    add("aten.silu.default", F.silu, in_place_name="aten.silu_.default")
    add("aten.sigmoid.default", torch.sigmoid, in_place_name="aten.sigmoid_.default")
    add("aten.gelu.default", F.gelu)
    add("aten.layer_norm.default", F.layer_norm, _layer_norm_to_fx)
    add("aten.dropout.default", F.dropout, in_place_name="aten.dropout_.default")
    return ops


_OPS = _table()
_NO_OP = _Op(None)


def aten_name(target):
    """'aten.conv2d.default' for torch.ops.aten.conv2d.default; None for other targets."""
    if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten":
        return f"aten.{target._schema.name.split('::', 1)[1]}.{target._overloadname}"
    return None


def _aten_op(name):
    """torch.ops.aten.<op>.<overload> for 'aten.<op>.<overload>'."""
    _, op, overload = name.split(".")
    return getattr(getattr(_aten, op), overload)


def _read_after(value, node, order):
    """Whether a node after `node` reads `value` (an in-place op's input)."""
    return any(order[user] > order[node] for user in value.users if user is not node)


def _check_in_place(node, order, where):
    mutated = node.args[0] if node.args else None
    if not isinstance(mutated, torch.fx.Node):
        return
    if mutated.op in ("placeholder", "get_attr"):
        raise ExportError(f"{where}: it writes in place into {mutated.op} '{mutated.name}', "
                          "an input or parameter; fuselage's graphs do not mutate those")
    if _read_after(mutated, node, order):
        raise ExportError(f"{where}: it writes in place into '{mutated.name}', which a later "
                          "node reads; export the model without the in-place op")


def _copy_tensors(source, root, targets):
    """`root` given each get_attr target of `source` at the same dotted path, in plain
    nn.Module containers (parameters stay parameters)."""
    for target in targets:
        value = source
        for part in target.split("."):
            value = getattr(value, part)
        *path, leaf = target.split(".")
        holder = root
        for part in path:
            if not hasattr(holder, part):
                holder.add_module(part, torch.nn.Module())
            holder = getattr(holder, part)
        if isinstance(value, torch.nn.Parameter):
            holder.register_parameter(leaf, value)
        elif isinstance(value, torch.Tensor):
            holder.register_buffer(leaf, value)
        else:
            raise ExportError(f"get_attr '{target}' is a {type(value).__name__}; fuselage "
                              "reads tensors")


def to_fx_dialect(program):
    """A torch.fx.GraphModule in fuselage's FX form of `program` (an ExportedProgram or
    what its .module() returns): aten calls rewritten, each keeping its aten spelling in
    node.meta["fuselage"]["aten"], export's input / output pytree handling and guards
    left out (the graph takes the flat inputs and returns the flat outputs as a tuple)."""
    gm = program.module() if hasattr(program, "module") and \
        not isinstance(program, torch.nn.Module) else program
    if not isinstance(gm, torch.fx.GraphModule):
        raise ExportError(f"from_exported: expected a torch.export.ExportedProgram or its "
                          f".module(); got {type(program).__name__}")
    graph = torch.fx.Graph()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    env = {}
    get_attrs = []
    first_output_only = set()  # exported nodes whose FX form returns only their output 0
    for node in gm.graph.nodes:
        where = f"node '{node.name}'"
        if node.op == "call_module":
            if node.users:
                raise ExportError(f"{where}: a call_module ('{node.target}') in an exported "
                                  "program; fuselage reads aten ops")
            continue  # export's _guards_fn: checks on the inputs, nothing to compute
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        if node.op == "call_function" and node.target is operator.getitem and \
                node.args[0] in first_output_only:
            # The first output of an op whose FX form returns only that one.
            if node.args[1] != 0:
                raise ExportError(f"{where}: reads output {node.args[1]} of "
                                  f"'{node.args[0].name}', whose FX form has only output 0")
            env[node] = args[0]
            continue
        if node.op == "call_function":
            new = _fx_call(graph, node, args, kwargs, order, where)
            if _OPS.get(aten_name(node.target), _NO_OP).first_output_only:
                first_output_only.add(node)
        elif node.op in ("placeholder", "output", "get_attr"):
            new = graph.create_node(node.op, node.target, args, kwargs, name=node.name)
            if node.op == "get_attr":
                get_attrs.append(node.target)
        else:
            raise ExportError(f"{where}: op '{node.op}' in an exported program")
        env[node] = new
    root = torch.nn.Module()
    _copy_tensors(gm, root, get_attrs)
    return torch.fx.GraphModule(root, graph, "GraphModule")


def _fx_call(graph, node, args, kwargs, order, where):
    if node.target is operator.getitem:
        return graph.create_node("call_function", operator.getitem, args, kwargs,
                                 name=node.name)
    name = aten_name(node.target)
    op = _OPS.get(name)
    if op is None:
        raise ExportError(f"{where}: op '{name or node.target}' is not one fuselage reads "
                          f"from torch.export (it reads {', '.join(sorted(_OPS))})")
    if op.in_place:
        _check_in_place(node, order, where)
    try:
        fx_args, fx_kwargs = op.to_fx(tuple(args), dict(kwargs))
    except (ValueError, TypeError) as e:
        raise ExportError(f"{where}: {name} with these arguments cannot be read: {e}") from None
    new = graph.create_node("call_function", op.fx, fx_args, fx_kwargs, name=node.name)
    new.meta["fuselage"] = {ATEN_META: name}
    stack = node.meta.get("nn_module_stack")
    if stack:
        from fuselage._exporter import MODULE_PATH_META
        new.meta[MODULE_PATH_META] = list(stack.values())[-1][0]
    return new


def restore_aten(gm):
    """Rewrites, in place, each node of `gm` whose meta names an aten op back into that
    call (to_torch: a model read from torch.export goes out as aten)."""
    changed = False
    for node in gm.graph.nodes:
        name = node.meta.get("fuselage", {}).get(ATEN_META)
        if node.op != "call_function" or name not in _OPS:
            continue
        op = _OPS[name]
        if node.target is not op.fx:
            continue  # a pass rewrote it (quantized, fused): its own form now
        node.args, node.kwargs = op.to_aten(tuple(node.args), dict(node.kwargs))
        node.target = _aten_op(name)
        if op.first_output_only:
            with gm.graph.inserting_after(node):
                first = gm.graph.call_function(operator.getitem, (node, 0))
            node.replace_all_uses_with(first, delete_user_cb=lambda user: user is not first)
        changed = True
    if changed:
        gm.recompile()
    return gm


def from_exported(program, example_inputs=None):
    """fuselage's Model (fuselage._core) of a torch.export program: an ExportedProgram or
    its .module(). `example_inputs` records shapes as for fuselage.export. Raises
    ExportError naming the node for an op fuselage does not read."""
    from fuselage import _core
    return _core.from_torch(to_fx_dialect(program), example_inputs)
