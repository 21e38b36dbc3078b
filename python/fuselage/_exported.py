"""fuselage.from_exported: a torch.export program into fuselage's graph, and back out.

    ep = torch.export.export(model.eval(), (x,))
    model = fuselage.from_exported(ep)       # fuselage._core.Model: fuse, quantize, run, save
    gm = fuselage._core.to_torch(model)      # the same aten calls, runnable in PyTorch

torch.export writes aten ops (`aten.conv2d.default`, `aten.add_.Tensor`, ...). fuselage's
engine has one internal form per op, FX's (DESIGN.md, "Front ends"): an aten conv is the
functional conv fuselage already fuses and quantizes. `to_fx_dialect` rewrites each aten
call into that form and keeps the aten spelling in the node's meta (`aten`), so
`restore_aten` (run by to_torch) writes it back: a model goes out in its own dialect.

An op outside the table is refused naming the node and op, or, where the caller asks
(unknown_ops="float"), kept as it is: an opaque node the engine leaves float (its prepare
report names it) and gives back as the same aten call. An in-place op whose input is read
after it (the mutation would matter) is refused, as is one mutating an input or a
parameter, and an unknown op that mutates anything.
"""

import importlib
import operator

import torch
import torch.fx
import torch.nn.functional as F

from fuselage._values import OPAQUE_META, SHAPE_META, attribute
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
    add("aten.relu.default", F.relu, in_place_name="aten.relu_.default")
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
    """'aten.conv2d.default' for torch.ops.aten.conv2d.default (and likewise for
    quantized_decomposed ops); None for other targets."""
    if isinstance(target, torch._ops.OpOverload) and \
            target.namespace in ("aten", "quantized_decomposed"):
        return f"{target.namespace}.{target._schema.name.split('::', 1)[1]}." \
               f"{target._overloadname}"
    return None


def _aten_op(name):
    """torch.ops.<namespace>.<op>.<overload> for '<namespace>.<op>.<overload>'."""
    namespace, op, overload = name.split(".")
    if namespace == "quantized_decomposed":
        # PyTorch's own definition of the namespace (torchao's PT2E reuses it), which a
        # process that never imported torchao has not loaded.
        importlib.import_module("torch.ao.quantization.fx._decomposed")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


# PT2E's q/dq ops (torchao's convert_pt2e) hold plain uint8 / int8 tensors; fuselage's FX
# form holds quantized tensors: torch.quantize_per_tensor and .dequantize(), a weight a
# quantized attribute. The full range of the dtype only: fuselage's quantize clamps there.
_QUANTIZE = "quantized_decomposed.quantize_per_tensor.default"
_DEQUANTIZE = "quantized_decomposed.dequantize_per_tensor.default"
_DEQUANTIZE_PER_CHANNEL = "quantized_decomposed.dequantize_per_channel.default"
_Q_DQ = (_QUANTIZE, _DEQUANTIZE, _DEQUANTIZE_PER_CHANNEL)
_QUANTIZED_DTYPES = {torch.uint8: torch.quint8, torch.int8: torch.qint8}
_PLAIN_DTYPES = {quantized: plain for plain, quantized in _QUANTIZED_DTYPES.items()}


def _whole_range(plain):
    info = torch.iinfo(plain)
    return info.min, info.max
QPARAMS_META = "pt2e_qparams"  # a dequantize's (scale, zero_point, quant_min, quant_max, dtype)


def _quantized_dtype(qmin, qmax, dtype, where):
    if dtype not in _QUANTIZED_DTYPES:
        raise ExportError(f"{where}: dtype {dtype}; fuselage reads torch.uint8 and torch.int8")
    quantized, (low, high) = _QUANTIZED_DTYPES[dtype], _whole_range(dtype)
    if (qmin, qmax) != (low, high):
        raise ExportError(f"{where}: quant range [{qmin}, {qmax}]; fuselage reads the whole "
                          f"range of {dtype}, [{low}, {high}]")
    return quantized


def _read_after(value, node, order):
    """Whether a node after `node` reads `value` (an in-place op's input)."""
    return any(order[user] > order[node] for user in value.users if user is not node)


# What an op outside the table becomes: "refuse" (an ExportError naming the node and op)
# or "float" (an opaque node, kept float and reported).
UNKNOWN_OPS = ("refuse", "float")


def check_unknown_ops(unknown_ops, function):
    """`unknown_ops` if it is one of UNKNOWN_OPS, else an ExportError naming `function`."""
    if unknown_ops not in UNKNOWN_OPS:
        raise ExportError(f"{function}: unknown_ops is {unknown_ops!r}; expected \"refuse\" "
                          "(an op fuselage does not read is an error) or \"float\" (it is kept "
                          "float and reported)")
    return unknown_ops


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
        value = attribute(source, target)
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


def to_fx_dialect(program, unknown_ops="refuse"):
    """A torch.fx.GraphModule in fuselage's FX form of `program` (an ExportedProgram or
    what its .module() returns): aten calls rewritten, each keeping its aten spelling in
    node.meta["fuselage"]["aten"], export's input / output pytree handling and guards
    left out (the graph takes the flat inputs and returns the flat outputs as a tuple).
    An op outside the table as `unknown_ops` says (UNKNOWN_OPS)."""
    gm = graph_module_of(program)
    if not isinstance(gm, torch.fx.GraphModule):
        raise ExportError(f"from_exported: expected a torch.export.ExportedProgram or its "
                          f".module(); got {type(program).__name__}")
    graph, weights = _read_graph(gm, keep_modules=False, unknown_ops=unknown_ops)
    used = {n.target for n in graph.nodes if n.op == "get_attr"}
    root = torch.nn.Module()
    _copy_tensors(gm, root, [t for t in used if t not in weights.quantized])
    for name, tensor in weights.quantized.items():
        root.register_buffer(name, tensor)
    from fuselage._importer import DeferredGraphModule
    return DeferredGraphModule(root, graph, "GraphModule")


def read_aten(gm):
    """`gm`, or where it calls aten / quantized_decomposed ops (a model fuselage gave back
    in torch.export's dialect, then prepared or calibrated), a copy sharing its modules and
    tensors with those calls in fuselage's FX form (fuselage.export reads through this)."""
    if not any(n.op == "call_function" and aten_name(n.target) is not None and
               not _is_opaque(n) for n in gm.graph.nodes):
        return gm
    from fuselage._importer import TreeKeepingGraphModule, _keep_tree
    graph, weights = _read_graph(gm, keep_modules=True)
    result = _keep_tree(TreeKeepingGraphModule(gm, graph), gm.__dict__)
    for name, tensor in weights.quantized.items():
        result.register_buffer(name, tensor)
    return result


class _Record:
    """One node of the FX form as the model file writes it (fuselage._exporter reads these
    fields of a torch.fx Node), without a torch.fx graph around it; args refer to the
    exported program's nodes, which carry the FX form's names."""

    __slots__ = ("name", "op", "target", "args", "kwargs", "meta")

    def __init__(self, name, op, target, args, kwargs, meta):
        self.name, self.op, self.target = name, op, target
        self.args, self.kwargs, self.meta = args, kwargs, meta


def to_engine(program, unknown_ops="refuse"):
    """fuselage's Model (fuselage._core) of `program` (an ExportedProgram or its
    .module()): what _core.from_torch(to_fx_dialect(program)) gives, written from the
    exported graph's FX form as records (fx_records), without building it in torch.fx
    first (on a graph of 10^3 nodes that graph, then read again node by node, was a fifth
    of prepare_pt2e). A program holding PT2E q/dq ops goes through to_fx_dialect."""
    from fuselage import _core, _exporter
    gm = graph_module_of(program)
    records = fx_records(gm, keep_modules=False, unknown_ops=unknown_ops) \
        if isinstance(gm, torch.fx.GraphModule) else None
    if records is None:
        return _core.from_torch(to_fx_dialect(program, unknown_ops))
    root = torch.nn.Module()
    _copy_tensors(gm, root, list(dict.fromkeys(r.target for r in records if r.op == "get_attr")))
    tensors = []
    structure = _exporter.to_proto_of_records(root, records, tensors).SerializeToString()
    return _core.Model.from_parts(structure, tensors)


def fx_records(gm, keep_modules, unknown_ops="refuse"):
    """The FX form of `gm`'s graph (as _read_graph builds it) as _Records, which
    fuselage._exporter writes as it writes torch.fx nodes; None where that form needs
    more than a rewrite per node (PT2E q/dq ops, whose weights become new attributes:
    to_fx_dialect / read_aten), or, with `keep_modules`, where the graph calls no aten op
    (it is the FX form already)."""
    nodes = gm.graph.nodes
    names = [aten_name(n.target) if n.op == "call_function" else None for n in nodes]
    if any(name in _Q_DQ for name in names) or \
            keep_modules and not any(names):
        return None
    records = []
    env = {}
    order = {node: i for i, node in enumerate(nodes)}
    first_output_only = set()
    for node, name in zip(nodes, names):
        where = f"node '{node.name}'"
        if node.op == "call_module" and not keep_modules:
            if node.users:
                raise ExportError(f"{where}: a call_module ('{node.target}') in an exported "
                                  "program; fuselage reads aten ops")
            continue  # export's _guards_fn, as in _read_graph
        if node.op == "call_function" and node.target is operator.getitem and \
                node.args[0] in first_output_only:
            if node.args[1] != 0:
                raise ExportError(f"{where}: reads output {node.args[1]} of "
                                  f"'{node.args[0].name}', whose FX form has only output 0")
            env[node] = env[node.args[0]]
            continue
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        if node.op == "call_function" and (not keep_modules or name is not None):
            target, args, kwargs, meta = _fx_form(node, args, kwargs, order, where,
                                                  unknown_ops)
            if _OPS.get(name, _NO_OP).first_output_only:
                first_output_only.add(node)
        elif node.op in ("placeholder", "output", "get_attr") or keep_modules:
            target, meta = node.target, node.meta
        else:
            raise ExportError(f"{where}: op '{node.op}' in an exported program")
        env[node] = node
        records.append(_Record(node.name, node.op, target, args, kwargs, meta))
    return records


def _read_graph(gm, keep_modules, unknown_ops="refuse"):
    """The FX-form graph of `gm`'s graph and the quantized weights it adds. Without
    `keep_modules` (an exported program) a call_module is export's input guard, dropped,
    and another op kind is refused; with it (a model fuselage gave back) they stay."""
    graph = torch.fx.Graph()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    env = {}
    weights = _Weights()
    first_output_only = set()  # exported nodes whose FX form returns only their output 0
    for node in gm.graph.nodes:
        where = f"node '{node.name}'"
        if node.op == "call_module" and not keep_modules:
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
        if node.op == "call_function" and aten_name(node.target) in _Q_DQ:
            new = _fx_q_dq(gm, graph, node, args, weights, where)
        elif node.op == "call_function" and (not keep_modules or
                                             aten_name(node.target) is not None):
            new = _fx_call(graph, node, args, kwargs, order, where, unknown_ops)
            if _OPS.get(aten_name(node.target), _NO_OP).first_output_only:
                first_output_only.add(node)
        elif node.op in ("placeholder", "output", "get_attr") or keep_modules:
            new = graph.create_node(node.op, node.target, args, kwargs, name=node.name)
            new.meta = dict(node.meta)
        else:
            raise ExportError(f"{where}: op '{node.op}' in an exported program")
        env[node] = new
    for n in reversed(list(graph.nodes)):  # what a quantized weight replaced
        if n.op == "get_attr" and not n.users and n.target in weights.replaced:
            graph.erase_node(n)
    return graph, weights


class _Weights:
    """The quantized weight attributes the FX form adds (name -> tensor), and the get_attr
    targets they replace (int8 values, scales, zero points)."""

    def __init__(self):
        self.quantized = {}
        self.replaced = set()


def _attr_of(gm, node, where, what):
    if not (isinstance(node, torch.fx.Node) and node.op == "get_attr"):
        raise ExportError(f"{where}: its {what} is not a constant (get_attr)")
    return attribute(gm, node.target)


def _fx_q_dq(gm, graph, node, args, weights, where):
    """The FX form of a PT2E quantize / dequantize: torch.quantize_per_tensor and
    .dequantize(), a dequantized constant weight as the dequantize of a quantized
    attribute. The q/dq arguments stay in meta for restore_aten."""
    name = aten_name(node.target)
    meta = {ATEN_META: name}
    if name == _QUANTIZE:
        x, scale, zero_point, qmin, qmax, dtype = node.args
        quantized = _quantized_dtype(qmin, qmax, dtype, where)
        new = graph.create_node("call_function", torch.quantize_per_tensor,
                                (args[0], float(scale), int(zero_point), quantized), {},
                                name=node.name)
        new.meta["fuselage"] = meta
        return new
    source = node.args[0]
    if name == _DEQUANTIZE:
        _, scale, zero_point, qmin, qmax, dtype = node.args
        quantized = _quantized_dtype(qmin, qmax, dtype, where)
        meta[QPARAMS_META] = [float(scale), int(zero_point), int(qmin), int(qmax), str(dtype)]
        if source.op == "get_attr":  # a weight quantized per tensor
            ints = _attr_of(gm, source, where, "input")
            weight = torch._make_per_tensor_quantized_tensor(ints, float(scale),
                                                             int(zero_point))
            return _dequantized_weight(graph, node, weight, source, weights, meta)
        new = graph.create_node("call_method", "dequantize", (args[0],), {}, name=node.name)
        new.meta["fuselage"] = meta
        return new
    _, scales, zero_points, axis, qmin, qmax, dtype = node.args
    _quantized_dtype(qmin, qmax, dtype, where)
    meta[QPARAMS_META] = [None, None, int(qmin), int(qmax), str(dtype)]
    ints = _attr_of(gm, source, where, "input")
    weight = torch._make_per_channel_quantized_tensor(
        ints, _attr_of(gm, scales, where, "scales").double(),
        _attr_of(gm, zero_points, where, "zero points").long(), int(axis))
    weights.replaced.update((scales.target, zero_points.target))
    return _dequantized_weight(graph, node, weight, source, weights, meta)


def _dequantized_weight(graph, node, weight, source, weights, meta):
    weights.replaced.add(source.target)
    name = f"{node.name}_weight"
    weights.quantized[name] = weight
    held = graph.create_node("get_attr", name, (), {})
    new = graph.create_node("call_method", "dequantize", (held,), {}, name=node.name)
    new.meta["fuselage"] = meta
    return new


def _fx_call(graph, node, args, kwargs, order, where, unknown_ops):
    target, args, kwargs, meta = _fx_form(node, args, kwargs, order, where, unknown_ops)
    new = graph.create_node("call_function", target, args, kwargs, name=node.name)
    new.meta.update(meta)
    return new


def _fx_form(node, args, kwargs, order, where, unknown_ops):
    """(target, args, kwargs, meta) of the FX form of the exported call_function `node`
    whose arguments, mapped to the FX form's nodes, are `args` and `kwargs`."""
    if node.target is operator.getitem:
        return operator.getitem, args, kwargs, {}
    name = aten_name(node.target)
    if _outside_table(node):
        return _opaque_form(node, args, kwargs, name, where, unknown_ops)
    op = _OPS[name]
    if op.in_place:
        _check_in_place(node, order, where)
    try:
        fx_args, fx_kwargs = op.to_fx(tuple(args), dict(kwargs))
    except (ValueError, TypeError) as e:
        raise ExportError(f"{where}: {name} with these arguments cannot be read: {e}") from None
    meta = {"fuselage": {ATEN_META: name}}
    stack = node.meta.get("nn_module_stack")
    if stack:
        from fuselage._exporter import MODULE_PATH_META
        meta[MODULE_PATH_META] = list(stack.values())[-1][0]
    return op.fx, fx_args, fx_kwargs, meta


def _opaque_form(node, args, kwargs, name, where, unknown_ops):
    """The FX form of a call of an op outside the table: the call as it is, an opaque
    node for the engine (float, given back as this very op), where the caller asked for
    that or fuselage made it one before (a model it gave back); else an ExportError."""
    if unknown_ops != "float" and not _is_opaque(node):
        raise ExportError(f"{where}: op '{name or node.target}' is not one fuselage reads "
                          f"from torch.export (it reads {', '.join(sorted(_OPS))}); "
                          "unknown_ops=\"float\" keeps such ops float")
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.is_mutable:
        raise ExportError(f"{where}: op '{name}' writes into its arguments; fuselage keeps "
                          "an op it does not read float only where it computes a new value")
    meta = {"fuselage": {OPAQUE_META: True}}
    stack = node.meta.get("nn_module_stack")
    if stack:
        from fuselage._exporter import MODULE_PATH_META
        meta[MODULE_PATH_META] = list(stack.values())[-1][0]
    return node.target, args, kwargs, meta


def ops_outside_table(program):
    """(node name, op) of each call in `program` (an ExportedProgram or its .module()) of
    an aten op fuselage does not read: what unknown_ops="float" keeps float."""
    return [(n.name, aten_name(n.target) or str(n.target))
            for n in graph_module_of(program).graph.nodes
            if n.op == "call_function" and _outside_table(n)]


def _outside_table(call):
    """Whether the exported call_function `call` is of an op fuselage does not read: one
    unknown_ops refuses or keeps float (_opaque_form)."""
    name = aten_name(call.target)
    return call.target is not operator.getitem and name not in _OPS and name not in _Q_DQ


def value_shapes(gm):
    """{node name: shape} of the tensor values torch.export recorded in `gm`
    (node.meta["val"]), for give_shapes."""
    return {n.name: tuple(n.meta["val"].shape) for n in gm.graph.nodes
            if isinstance(n.meta.get("val"), torch.Tensor)}


def give_shapes(gm, shapes):
    """Each node of `gm` named as a node of `shapes` (value_shapes of the program it came
    from) gets that shape in node.meta["fuselage"][SHAPE_META]: fuselage keeps the
    exported nodes' names, and a value folded away (a batch norm) leaves its shape to the
    node that now stands for it, the conv, whose output has the same shape."""
    for node in gm.graph.nodes:
        if node.name in shapes:
            node.meta.setdefault("fuselage", {})[SHAPE_META] = shapes[node.name]


def graph_module_of(program):
    """The GraphModule of `program`: an ExportedProgram's .module(), or `program` itself
    (that .module(), a model fuselage gave back, or something from_exported refuses)."""
    return program.module() if hasattr(program, "module") and \
        not isinstance(program, torch.nn.Module) else program


def _is_opaque(node):
    """Whether fuselage made `node` an opaque node (an op outside the table kept float)."""
    return bool(node.meta.get("fuselage", {}).get(OPAQUE_META))


def _meta_name(node):
    return node.meta.get("fuselage", {}).get(ATEN_META)


def _is_kept_dequantize(node, exported_only):
    """A .dequantize() (read from a PT2E dequantize and still one, if `exported_only`)."""
    return node.op == "call_method" and node.target == "dequantize" and \
        (not exported_only or _meta_name(node) in (_DEQUANTIZE, _DEQUANTIZE_PER_CHANNEL))


def _replace(gm, node, op, target, args):
    """A new node for `node` (op, target, args), with its name, meta and users."""
    with gm.graph.inserting_before(node):
        new = gm.graph.create_node(op, target, args, {})
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    name = node.name
    gm.graph.erase_node(node)
    if hasattr(new, "_rename"):
        new._rename(name)
    return new


def add_constant(gm, name, tensor, before):
    """A get_attr node, before `before`, of `tensor` registered on `gm` as a buffer under
    `name` (or `name_1`, ... where taken)."""
    target = name
    i = 0
    while hasattr(gm, target):
        i += 1
        target = f"{name}_{i}"
    gm.register_buffer(target, tensor)
    with gm.graph.inserting_before(before):
        # Not graph.get_attr: its check that the target exists walks the module tree
        # (1 ms a call on resnet50), and the buffer was just registered.
        return gm.graph.create_node("get_attr", target)


def _restore_q_dq(gm, exported_only=True):
    """PT2E's q/dq calls back where the FX form still has every quantize's users as
    dequantizes (a pass that lowered them keeps its own form): those read from an exported
    program (`exported_only`), or every one (a reference model fuselage's convert wrote)."""
    changed = False
    erased = set()
    read = set()  # the quantized weights read as int8 / uint8 values
    for node in list(gm.graph.nodes):
        if node in erased:
            continue
        if node.op == "call_function" and node.target is torch.quantize_per_tensor and \
                (not exported_only or _meta_name(node) == _QUANTIZE) and node.users and \
                all(_is_kept_dequantize(u, exported_only) for u in node.users) and \
                node.args[3] in _PLAIN_DTYPES:
            x, scale, zero_point, quantized = node.args
            scale, zero_point = _number(gm, scale), _number(gm, zero_point)
            plain = _PLAIN_DTYPES[quantized]
            low, high = _whole_range(plain)
            for user in list(node.users):
                _replace(gm, user, "call_function", _aten_op(_DEQUANTIZE),
                         (node, scale, zero_point, low, high, plain))
                erased.add(user)
            node.target = _aten_op(_QUANTIZE)
            node.args = (x, scale, zero_point, low, high, plain)
            changed = True
        elif _is_kept_dequantize(node, exported_only) and node.args[0].op == "get_attr":
            weight = _attr_of(gm, node.args[0], f"node '{node.name}'", "input")
            if not isinstance(weight, torch.Tensor) or not weight.is_quantized:
                continue
            plain = _PLAIN_DTYPES[weight.dtype]
            low, high = _whole_range(plain)
            ints = add_constant(gm, f"{node.name}_int", _stored_values(weight), node)
            read.add(node.args[0].target)
            if weight.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                args = (ints, weight.q_scale(), weight.q_zero_point(), low, high, plain)
                op = _DEQUANTIZE
            else:
                scales = add_constant(gm, f"{node.name}_scale",
                                   weight.q_per_channel_scales().float(), node)
                zero_points = add_constant(gm, f"{node.name}_zero_point",
                                        weight.q_per_channel_zero_points(), node)
                args = (ints, scales, zero_points, weight.q_per_channel_axis(), low, high, plain)
                op = _DEQUANTIZE_PER_CHANNEL
            _replace(gm, node, "call_function", _aten_op(op), args)
            changed = True
    for node in list(gm.graph.nodes):  # the quantized weights no node reads any more
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    # ... go: their int8 / uint8 values share their memory (_stored_values), and torch.save
    # refuses one memory saved as two types.
    for target in read - {n.target for n in gm.graph.nodes if n.op == "get_attr"}:
        path, _, name = target.rpartition(".")
        owner = gm.get_submodule(path) if path else gm
        if name in owner._buffers:
            del owner._buffers[name]
    return changed


def _stored_values(weight):
    """weight.int_repr() (a quantized tensor's stored int8 / uint8 values) without the
    copy where it is contiguous: a plain tensor over the same memory (a copy of resnet50's
    25 M weights cost 0.15-0.6 s)."""
    if not weight.is_contiguous():
        return weight.int_repr()
    return torch.empty(0, dtype=_PLAIN_DTYPES[weight.dtype]).set_(
        weight.untyped_storage(), weight.storage_offset(), weight.size(), weight.stride())


def _number(gm, value):
    """A quantize's scale / zero point as a Python number (fuselage's convert may hold it
    in a one-element tensor attribute)."""
    if isinstance(value, torch.fx.Node) and value.op == "get_attr":
        value = _attr_of(gm, value, f"node '{value.name}'", "value")
    return value.item() if isinstance(value, torch.Tensor) else value


def restore_aten(gm, every_q_dq=False):
    """Rewrites, in place, each node of `gm` whose meta names an aten op back into that
    call (to_torch: a model read from torch.export goes out as aten). With `every_q_dq`
    (a reference model fuselage converted from an exported program, into torchao's
    reference form), every quantize read only by dequantizes and every dequantized
    quantized constant becomes quantized_decomposed q/dq ops, not only those read from
    the program."""
    changed = _restore_q_dq(gm, exported_only=not every_q_dq)
    for node in gm.graph.nodes:
        name = _meta_name(node)
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


def from_exported(program, example_inputs=None, unknown_ops="refuse"):
    """fuselage's Model (fuselage._core) of a torch.export program: an ExportedProgram or
    its .module(). `example_inputs` records shapes as for fuselage.export. An op fuselage
    does not read raises ExportError naming the node and op, or with
    unknown_ops="float" stays float: an opaque node that the prepare report lists as
    kept float and to_torch gives back as the same aten call."""
    from fuselage import _core
    check_unknown_ops(unknown_ops, "from_exported")
    return _core.from_torch(to_fx_dialect(program, unknown_ops), example_inputs)
