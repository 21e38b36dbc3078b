"""Functional quantized conv / linear between fuselage's form and PyTorch's packed form.

fuselage writes a lowered F.conv2d / F.linear (+ relu) with its weight as a tensor:
    quantized.conv2d_relu(x_q, w_q, bias, stride, padding, dilation, groups,
                          output_scale=s, output_zero_point=z)
    quantized.linear(x_q, w_q, bias, output_scale=s, output_zero_point=z)
    quantized.linear_dynamic(x, w_q, bias, reduce_range)     (dynamic; also _relu_dynamic)
PyTorch's kernels of the same names take the weight prepacked for the engine:
    quantized.conv2d_relu(x_q, packed, s, z),  packed = quantized.conv2d_prepack(w_q, bias, ...)
    quantized.linear_dynamic(x, packed, reduce_range),  packed = quantized.linear_prepack(w_q, bias)
to_torch packs (`pack_functional_ops`) so the GraphModule runs on PyTorch; export unpacks
(`unpack_functional_ops`) so a converted model, fuselage's or PyTorch's, goes into a file
of tensors. A lowered F.conv2d with its residual add,
    quantized.conv2d_add_relu(x_q, accumulator_q, w_q, bias, stride, padding, dilation,
                              groups, output_scale=s, output_zero_point=z)
becomes a call of fuselage.nn.quantized.ConvAddReLU2d, fuselage's kernel in PyTorch
(PyTorch's own conv2d_add runs on the onednn engine only).
"""

import copy

import torch
import torch.fx

from fuselage._values import attribute

# op name -> (spatial dims, or 0 for linear)
_OPS = {f"{base}{tail}": dims
        for base, dims in (("conv1d", 1), ("conv2d", 2), ("conv3d", 3), ("linear", 0))
        for tail in ("", "_relu")}
_PACKED_PREFIX = "_packed_weight_"
# The dynamic ones: (x, weight, bias, reduce_range) -> (x, packed, reduce_range).
_DYNAMIC_OPS = ("linear_dynamic", "linear_relu_dynamic")


def _op_name(node, names=tuple(_OPS)):
    """The key among `names` of a call_function to torch.ops.quantized.<op>, else None."""
    if node.op != "call_function":
        return None
    for name in names:
        op = getattr(torch.ops.quantized, name, None)
        if op is not None and node.target in (op, getattr(op, "default", None)):
            return name
    return None


def constant_of(gm, arg):
    """The tensor (or None) of `arg` when it is None or a get_attr of a tensor; a sentinel
    otherwise."""
    if arg is None:
        return None
    if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
        value = attribute(gm, arg.target)
        if isinstance(value, torch.Tensor):
            return value
    return NOT_CONSTANT


NOT_CONSTANT = object()


def _free_name(gm, prefix):
    i = 0
    while hasattr(gm, f"{prefix}{i}"):
        i += 1
    return f"{prefix}{i}"


def _ints(value, dims, default):
    if value is None:
        return [default] * dims
    if isinstance(value, int):
        return [value] * dims
    return [int(v) for v in value]


def _pack(name, weight, bias, args, kwargs):
    dims = _OPS[name]
    if dims == 0:
        return torch.ops.quantized.linear_prepack(weight, bias)

    def conv_arg(index, key, default):
        value = args[index] if len(args) > index else kwargs.get(key)
        return _ints(value, dims, default)
    groups = args[6] if len(args) > 6 else kwargs.get("groups", 1)
    prepack = getattr(torch.ops.quantized, f"conv{dims}d_prepack")
    return prepack(weight, bias, conv_arg(3, "stride", 1), conv_arg(4, "padding", 0),
                   conv_arg(5, "dilation", 1), int(groups))


def _conv_add_kind(node):
    """fuselage.nn.quantized's module class for a call_function to
    torch.ops.quantized.conv2d_add[_relu], else None."""
    if node.op != "call_function":
        return None
    from fuselage.nn import quantized as fnnq
    for name, cls in (("conv2d_add", fnnq.ConvAdd2d), ("conv2d_add_relu", fnnq.ConvAddReLU2d)):
        op = getattr(torch.ops.quantized, name, None)
        if op is not None and node.target in (op, getattr(op, "default", None)):
            return cls
    return None


def _conv_add_as_module(gm, node, cls):
    """Rewrites the conv2d_add[_relu] call `node` into a call of a `cls` module holding its
    weight, bias and parameters; False (nothing changed) if the weight is not constant."""
    args, kwargs = node.args, node.kwargs
    weight, bias = constant_of(gm, args[2]), constant_of(gm, args[3] if len(args) > 3 else None)
    if not isinstance(weight, torch.Tensor) or bias is NOT_CONSTANT:
        return False
    conv_args = args[2:]  # in F.conv2d's positions from the weight on: one helper reads both
    stride, padding, dilation = (
        _ints(conv_args[i] if len(conv_args) > i else kwargs.get(key), 2, default)
        for i, key, default in ((2, "stride", 1), (3, "padding", 0), (4, "dilation", 1)))
    groups = int(conv_args[5] if len(conv_args) > 5 else kwargs.get("groups", 1))
    module = cls(weight.shape[1] * groups, weight.shape[0], tuple(weight.shape[2:]),
                 stride=stride, padding=padding, dilation=dilation, groups=groups,
                 bias=bias is not None)
    module.set_weight_bias(weight, bias)
    module.scale, module.zero_point = float(kwargs["output_scale"]), int(kwargs["output_zero_point"])
    name = _free_name(gm, "_conv_add_")
    gm.add_submodule(name, module)
    replaced = list(args[2:4])
    node.op, node.target = "call_module", name
    node.args, node.kwargs = (args[0], args[1]), {}
    _erase_unused_get_attrs(gm.graph, replaced)
    return True


def _packed_prefix(node, weight_node, traced):
    """PyTorch's fold_weight names a packed weight `<module path>_packed_weight_<i>`, the
    module path (dots as underscores) the one whose forward called the op: the node's meta
    `module_path` (graph/NAMING.md; none on the root's calls). A graph without that meta
    (`traced` False: no node has it) gets the path of the module holding the weight instead
    (`mods1.0.w` -> `mods1_0_packed_weight_`)."""
    meta = node.meta.get("fuselage", {})
    if "module_path" in meta:
        path = meta["module_path"]
    elif traced:
        path = ""  # a call without the meta in a traced graph is the root's
    else:
        path = weight_node.target.rpartition(".")[0] \
            if isinstance(weight_node, torch.fx.Node) else ""
    return path.replace(".", "_") + _PACKED_PREFIX


def save_packed_weights(module, destination, prefix):
    """The packed weights of `module` (script objects, neither parameters nor buffers)
    into the state dict `destination`, as PyTorch's QuantizedGraphModule puts them."""
    for name, value in list(vars(module).items()):
        if _PACKED_PREFIX in name and isinstance(value, torch._C.ScriptObject):
            destination[prefix + name] = value


def load_packed_weights(module, state_dict, prefix):
    """Each packed weight of the state dict for `module` replaces the module's, and is
    taken out of `state_dict`, so load_state_dict does not call it unexpected."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        name = key[len(prefix):]
        if _PACKED_PREFIX in name and "." not in name and \
                isinstance(state_dict[key], torch._C.ScriptObject):
            setattr(module, name, state_dict.pop(key))


def pack_functional_ops(gm):
    """Rewrites, in place, each functional quantized conv / linear of `gm` written in
    fuselage's form whose weight and bias are attributes into PyTorch's packed form (a
    conv2d_add into fuselage.nn.quantized's module). A weight computed in the graph is left
    as it is (lowering never writes one). The packed weights are named as PyTorch names
    them; a TreeKeepingGraphModule puts them in its state dict (save_packed_weights)."""
    changed = False
    packed_targets = []
    traced = any("module_path" in n.meta.get("fuselage", {}) for n in gm.graph.nodes)
    for node in list(gm.graph.nodes):
        if _op_name(node, _DYNAMIC_OPS) is not None:
            if _pack_dynamic(gm, node, traced, packed_targets):
                changed = True
            continue
        conv_add = _conv_add_kind(node)
        if conv_add is not None and "output_scale" in node.kwargs and len(node.args) >= 3:
            changed = _conv_add_as_module(gm, node, conv_add) or changed
            continue
        name = _op_name(node)
        if name is None or "output_scale" not in node.kwargs or len(node.args) < 2:
            continue
        args, kwargs = node.args, dict(node.kwargs)
        weight = constant_of(gm, args[1])
        bias = constant_of(gm, args[2] if len(args) > 2 else kwargs.get("bias"))
        if not isinstance(weight, torch.Tensor) or bias is NOT_CONSTANT:
            continue
        packed_name = _free_name(gm, _packed_prefix(node, args[1], traced))
        setattr(gm, packed_name, _pack(name, weight, bias, args, kwargs))
        with gm.graph.inserting_before(node):
            packed = gm.graph.get_attr(packed_name)
        replaced = list(args[1:3]) + [kwargs.get("bias")]
        node.args = (args[0], packed, kwargs["output_scale"], kwargs["output_zero_point"])
        node.kwargs = {}
        packed_targets += [a.target for a in replaced
                           if isinstance(a, torch.fx.Node) and a.op == "get_attr"]
        _erase_unused_get_attrs(gm.graph, replaced)
        changed = True
    if changed:
        _drop_packed_sources(gm, packed_targets)
        gm.recompile()
    return gm


def _pack_dynamic(gm, node, traced, packed_targets):
    """pack_functional_ops for a dynamic linear in fuselage's form (x, w_q, bias,
    reduce_range): PyTorch's (x, packed, reduce_range). False if its weight or bias is not
    constant."""
    if len(node.args) != 4 or node.kwargs:
        return False
    x, weight_node, bias_node, reduce_range = node.args
    weight, bias = constant_of(gm, weight_node), constant_of(gm, bias_node)
    if not isinstance(weight, torch.Tensor) or bias is NOT_CONSTANT:
        return False
    packed_name = _free_name(gm, _packed_prefix(node, weight_node, traced))
    setattr(gm, packed_name, torch.ops.quantized.linear_prepack(weight, bias))
    with gm.graph.inserting_before(node):
        packed = gm.graph.get_attr(packed_name)
    node.args = (x, packed, reduce_range)
    packed_targets += [a.target for a in (weight_node, bias_node)
                       if isinstance(a, torch.fx.Node) and a.op == "get_attr"]
    _erase_unused_get_attrs(gm.graph, [weight_node, bias_node])
    return True


_PLAIN_MODULE_KEYS = frozenset(vars(torch.nn.Module()))


def _drop_packed_sources(gm, targets):
    """Removes the weight and bias tensors at `targets` that packing made unread (no node
    reads them), and each module that is left empty by it and that no node calls or reads
    from (a plain container of nothing), as PyTorch's converted GraphModule keeps only what
    its graph reads: the copies would double the weights' memory, show in the state dict,
    and an nn.Sequential of emptied modules does not script."""
    used = set()
    for n in gm.graph.nodes:
        if n.op in ("get_attr", "call_module"):
            parts = n.target.split(".")
            used.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    for target in dict.fromkeys(targets):
        if target in used:
            continue
        path, _, name = target.rpartition(".")
        try:
            owner = gm.get_submodule(path)
        except AttributeError:
            continue
        if name in owner._buffers:
            del owner._buffers[name]
        elif name in owner._parameters:
            del owner._parameters[name]
        elif isinstance(owner.__dict__.get(name), torch.Tensor):
            del owner.__dict__[name]
        while path and path not in used:
            module = gm.get_submodule(path)
            if module._buffers or module._parameters or module._modules or \
                    set(vars(module)) - _PLAIN_MODULE_KEYS:
                break
            parent, _, child = path.rpartition(".")
            delattr(gm.get_submodule(parent), child)
            path = parent


def _erase_unused_get_attrs(graph, args):
    for arg in args:
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" and not arg.users:
            graph.erase_node(arg)


def _unpacked_args(name, packed):
    """(weight, bias, the conv's stride, padding, dilation, groups) of `packed`."""
    dims = _OPS[name]
    if dims == 0:
        weight, bias = torch.ops.quantized.linear_unpack(packed)
        return weight, bias, ()
    weight, bias = getattr(torch.ops.quantized, f"conv{dims}d_unpack")(packed)
    # A conv1d is packed as a conv2d of height 1: its parameters carry a leading 1 / 0.
    return weight, bias, (list(packed.stride())[-dims:], list(packed.padding())[-dims:],
                          list(packed.dilation())[-dims:], int(packed.groups()))


def unpack_functional_ops(gm):
    """`gm`, or a copy sharing its modules and tensors, in which every functional quantized
    conv / linear in PyTorch's packed form is in fuselage's form, its weight and bias new
    attributes. The caller's module is not changed."""
    nodes = [n for n in gm.graph.nodes
             if (_op_name(n) is not None and len(n.args) == 4 or
                 _op_name(n, _DYNAMIC_OPS) is not None and len(n.args) == 3)
             and isinstance(n.args[1], torch.fx.Node) and n.args[1].op == "get_attr"
             and isinstance(attribute(gm, n.args[1].target), torch._C.ScriptObject)]
    if not nodes:
        return gm
    from fuselage._importer import TreeKeepingGraphModule, _keep_tree
    graph = copy.deepcopy(gm.graph)
    copy_of = {n.name: n for n in graph.nodes}
    result = _keep_tree(TreeKeepingGraphModule(gm, graph), gm.__dict__)
    for original in nodes:
        node = copy_of[original.name]
        dynamic = _op_name(node) is None
        name = "linear" if dynamic else _op_name(node)
        x, packed, *rest = node.args
        weight, bias, conv_args = _unpacked_args(name, attribute(gm, packed.target))
        with graph.inserting_before(node):
            weight_name = _free_name(result, f"{node.name}_weight_")
            result.register_buffer(weight_name, weight)
            weight_node = graph.get_attr(weight_name)
            bias_node = None
            if bias is not None:
                bias_name = _free_name(result, f"{node.name}_bias_")
                result.register_buffer(bias_name, bias)
                bias_node = graph.get_attr(bias_name)
        if dynamic:  # rest: (reduce_range,)
            node.args = (x, weight_node, bias_node) + tuple(rest)
            _erase_unused_get_attrs(graph, [packed])
            continue
        node.args = (x, weight_node, bias_node) + tuple(conv_args)
        node.kwargs = {"output_scale": rest[0], "output_zero_point": rest[1]}
        _erase_unused_get_attrs(graph, [packed])
    for target in {n.args[1].target for n in nodes}:
        if not any(n.op == "get_attr" and n.target == target for n in graph.nodes):
            result.__dict__.pop(target, None)
    result.recompile()
    return result
