"""fuselage.to_torch: a runnable torch.fx.GraphModule from a fuselage model file.

Modules become PyTorch's own classes (nn.Conv2d, nni.ConvReLU2d, nnqr.Conv2d,
nnq.Conv2d, nniq.ConvReLU2d, observers, ...; fuselage._modules), call_function targets the
callables their names import to (torch.ops.quantized.add_relu, operator.add, ...), so a
graph fuselage produced runs on PyTorch's kernels. The file is checked as it is read:
errors name the node or module and the field.

The result is in eval mode. Node meta the file carries is kept in node.meta["fuselage"].
"""

import contextlib
import contextvars
import copy
import warnings

import torch
import torch.fx
from google.protobuf import text_format

from fuselage import _exported, _modules, _names, _packed
from fuselage._limits import LIMITS, MAX_FILE_BYTES, NODE_NAME
from fuselage._proto import is_text_path, model_path, model_pb2
from fuselage._values import (OPAQUE_META, OPAQUE_MODULE_ATTR, OUTPUT_DICTS_META,
                              OUTPUT_KEYS_META, adopt_tensor, check_string, read_arg,
                              read_tensor, rebuild_output_dicts)
from fuselage.errors import ModelFileError

_FORMAT_VERSION = 1
_MAX_MODULE_DEPTH = LIMITS["max_module_depth"]
_MAX_NODES = LIMITS["max_nodes"]


def _named_args(entries, nodes, where):
    result = {}
    for entry in entries:
        check_string(entry.name, where, "name")
        if not entry.name:
            raise ModelFileError(f"{where}: an entry has an empty name")
        if entry.name in result:
            raise ModelFileError(f"{where}: '{entry.name}' appears twice")
        result[entry.name] = read_arg(entry.value, nodes, f"{where}['{entry.name}']")
    return result


def _build_module(pm, path, depth, handed=None):
    where = f"module '{path}'" if path else "root module"
    if depth > _MAX_MODULE_DEPTH:
        raise ModelFileError(f"{where}: modules nest deeper than {_MAX_MODULE_DEPTH}")
    check_string(pm.type, where, "type")
    if not pm.type:
        raise ModelFileError(f"{where}: field 'type' is empty")
    seen = set()

    def member(name, kind):
        check_string(name, where, kind)
        if not name or "." in name:
            raise ModelFileError(f"{where}: {kind} name '{name}' must be non-empty without '.'")
        if name in seen:
            raise ModelFileError(f"{where}: duplicate member name '{name}'")
        seen.add(name)
        return name

    if handed is None:
        tensors = {member(t.name, "tensor"): read_tensor(t.tensor, f"{where} tensor '{t.name}'")
                   for t in pm.tensors}
    else:  # Model.take_parts: the tensors come beside the structure, in its order
        tensors = {}
        for t in pm.tensors:
            name = member(t.name, "tensor")
            item = next(handed, None)
            if item is None:
                raise ModelFileError(f"{where} tensor '{name}': the handed-over tensors ran "
                                     "out before the structure's")
            tensors[name] = adopt_tensor(item, f"{where} tensor '{name}'")
    attributes = {}
    for a in pm.attributes:
        attributes[member(a.name, "attribute")] = read_arg(a.value, None,
                                                           f"{where} attribute '{a.name}'")
    if pm.type == _names.CONTAINER_TYPE and OPAQUE_MODULE_ATTR in attributes:
        return _opaque_module(attributes[OPAQUE_MODULE_ATTR], attributes.get("opaque_class"),
                              where)
    children = {}
    for c in pm.children:
        child_path = f"{path}.{c.name}" if path else c.name
        children[member(c.name, "child")] = _build_module(c.module, child_path, depth + 1,
                                                          handed)
    return _modules.build(pm.type, tensors, attributes, children, where)


def _opaque_module(key, class_name, where):
    """The module object an opaque module stands for (the exported one itself, as PyTorch's
    prepared model shares its modules with the model it was given)."""
    module = _names.opaque_module(key)
    if module is None:
        raise ModelFileError(
            f"{where}: an opaque module (a {class_name} the engine has no type for) that no "
            "live model of this process holds; fuselage gives an opaque module back only in "
            "the process that exported it")
    return module


def _call_function_target(name, opaque, where):
    """The callable of a call_function node: a function fuselage knows, or for an opaque
    node (meta `opaque`) the function exported under that name in this process; a file
    never makes to_torch import what it names."""
    target = _names.opaque_function(name) if opaque else _names.known_function(name)
    if target is not None:
        return target
    if opaque:
        raise ModelFileError(
            f"{where}: call_function target '{name}' is an opaque node (a function the engine "
            "does not know) that no model exported in this process calls; fuselage gives an "
            "opaque node back only in the process that exported it, and never imports a "
            "function a file names")
    raise ModelFileError(f"{where}: call_function target '{name}' is not a function "
                         "fuselage knows (backend_configs/known_functions.cc) with a Python "
                         "callable")


def _build_graph(pg):
    pb = model_pb2()
    op_names = {
        pb.PLACEHOLDER: "placeholder", pb.GET_ATTR: "get_attr",
        pb.CALL_FUNCTION: "call_function", pb.CALL_MODULE: "call_module",
        pb.CALL_METHOD: "call_method", pb.OUTPUT: "output",
    }
    graph = torch.fx.Graph()
    nodes = {}
    output_seen = None
    if len(pg.nodes) > _MAX_NODES:
        raise ModelFileError(f"model: {len(pg.nodes)} nodes; the limit is {_MAX_NODES}")
    for i, pn in enumerate(pg.nodes):
        check_string(pn.name, f"node #{i}", "name")
        if not pn.name:
            raise ModelFileError(f"node #{i}: field 'name' is empty")
        if not NODE_NAME.match(pn.name):
            raise ModelFileError(f"node #{i}: field 'name' is '{pn.name[:64]}'; expected an "
                                 "identifier ([A-Za-z_][A-Za-z0-9_]*)")
        where = f"node '{pn.name}'"
        check_string(pn.target, where, "target")
        if pn.name in nodes:
            raise ModelFileError(f"{where}: field 'name' is used by an earlier node")
        op = op_names.get(pn.op)
        if op is None:
            raise ModelFileError(f"{where}: field 'op' is {pn.op}; expected one of placeholder, "
                                 "get_attr, call_function, call_module, call_method, output")
        if output_seen is not None:
            raise ModelFileError(f"{where} comes after the output node '{output_seen}'")
        if not pn.target:
            raise ModelFileError(f"{where}: field 'target' is empty")
        target = pn.target
        meta = _named_args(pn.meta, None, f"{where} meta") if pn.meta else {}
        if op == "call_function":
            target = _call_function_target(pn.target, meta.get(OPAQUE_META) is True, where)
        args = tuple(read_arg(a, nodes, f"{where} args[{j}]") for j, a in enumerate(pn.args))
        kwargs = _named_args(pn.kwargs, nodes, f"{where} kwargs")
        if op == "output" and len(args) == 1 and OUTPUT_KEYS_META in meta:
            meta[OUTPUT_DICTS_META] = [[[], meta.pop(OUTPUT_KEYS_META)]]  # an earlier file's
        if op == "output" and len(args) == 1 and OUTPUT_DICTS_META in meta:
            args = (rebuild_output_dicts(args[0], meta[OUTPUT_DICTS_META], where),)
        node = graph.create_node(op, target, args, kwargs, name=pn.name)
        if meta:
            node.meta["fuselage"] = meta
        if op == "output":
            output_seen = pn.name
        nodes[pn.name] = node
    if output_seen is None:
        raise ModelFileError("the graph has no output node")
    return graph


_COMPILE_ONCE = contextvars.ContextVar("fuselage_compile_once", default=False)
_PENDING = "_fuselage_code_pending"  # set on a module whose code is not compiled yet


@contextlib.contextmanager
def compile_once():
    """Within it, a DeferredGraphModule built here compiles its code (torch.fx's
    recompile: generating Python source from the graph and exec'ing it, about 0.3 s per
    10^3 nodes) only when something needs it: its first call or `finished()` (its
    `.code` is not there before; TorchScript compiles that property, so it stays torch's).
    A public call (prepare_pt2e, convert_pt2e) passes the graph through several
    intermediate GraphModules and edits, each of which compiled its code for nothing."""
    token = _COMPILE_ONCE.set(True)
    try:
        yield
    finally:
        _COMPILE_ONCE.reset(token)


class DeferredGraphModule(torch.fx.GraphModule):
    """A GraphModule whose code, if it was built within compile_once(), is compiled when
    first needed. Only a module never compiled waits: once compiled, torch.fx binds its
    forward and __call__ on the module's own class, and every recompile is immediate."""

    def __init__(self, *args, **kwargs):
        if _COMPILE_ONCE.get():
            self.__dict__[_PENDING] = True
        super().__init__(*args, **kwargs)

    def recompile(self):
        if self.__dict__.get(_PENDING) and _COMPILE_ONCE.get():
            return None
        self.__dict__.pop(_PENDING, None)
        return super().recompile()

    def finished(self):
        """This module with its code compiled (what a public call returns)."""
        if self.__dict__.get(_PENDING):
            self.__dict__.pop(_PENDING)
            super().recompile()
        return self

    # torch.fx binds its own __call__ and forward on the module's class when it compiles;
    # its __call__ then reaches this one through super() to run nn.Module's.
    def __call__(self, *args, **kwargs):
        if self.__dict__.get(_PENDING):
            return self.finished()(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self.finished().forward(*args, **kwargs)

    def __reduce__(self):
        self.finished()
        return super().__reduce__()


class TreeKeepingGraphModule(DeferredGraphModule):
    """A GraphModule that keeps its whole module tree through copy.deepcopy, pickle and
    torch.save, including what no node refers to: a prepared model's weight plans
    (fuselage._prepared), which convert needs. PyTorch 1.13's GraphModule rebuilds itself
    from its graph there and drops them, so a copied prepared model converted its convs and
    linears silently float; PyTorch 2's keeps them, and nothing is then missing to add."""

    def __deepcopy__(self, memo):
        shell = torch.nn.Module()
        shell.__dict__ = copy.deepcopy(_without_engine_model(self.__dict__), memo)
        return _keep_tree(TreeKeepingGraphModule(shell, shell.__dict__["_graph"]),
                          shell.__dict__)

    # A converted model's packed weights (functional conv / linear) are in its state dict
    # and load from it, as in PyTorch's QuantizedGraphModule.
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        _packed.save_packed_weights(self, destination, prefix)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        _packed.load_packed_weights(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        inline = _inline_activation_qparams(self)
        if inline is not None:
            # PyTorch's converted model keeps these as buffers, so its state dict carries
            # them; here the weights would arrive without the scales calibrated with them.
            warnings.warn(
                f"load_state_dict: node '{inline}' (and any other quantize or quantized op "
                "of this converted model) holds its activation scale and zero point inline "
                "in the graph, not in the state dict: they stay this model's. Load into a "
                "model converted from the same calibration, or save and load the whole "
                "model (torch.save).", UserWarning, stacklevel=3)

    def __reduce__(self):
        kept = self.__dict__.pop(ENGINE_MODEL_ATTR, None)
        try:
            rebuild, args = super().__reduce__()
        finally:
            if kept is not None:
                self.__dict__[ENGINE_MODEL_ATTR] = kept
        body = {k: v for k, v in _without_engine_model(self.__dict__).items() if k != "_graph"}
        return (_rebuild_keeping_tree, (rebuild, args, body))


# The engine's model prepare kept for this very GraphModule (quantize_fx.
# prepare_with_report's keep_engine_model; it shares the GraphModule's tensors' memory),
# which a copy does not carry: convert reads the copy back instead.
ENGINE_MODEL_ATTR = "_fuselage_engine_model"


def _without_engine_model(body):
    return {k: v for k, v in body.items() if k != ENGINE_MODEL_ATTR}


def _inline_activation_qparams(gm):
    """The name of the first node of `gm` whose activation quantization parameters are
    inline numbers (fuselage's converted form, graph/NAMING.md): a quantize_per_tensor
    with a number for its scale, or a torch.ops.quantized op with an output scale; None
    if there is none."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.quantize_per_tensor and len(node.args) > 1 and \
                isinstance(node.args[1], (int, float)):
            return node.name
        if str(node.target).startswith("quantized.") and (
                "output_scale" in node.kwargs or
                any(isinstance(a, float) for a in node.args[1:])):
            return node.name
    return None


def _keep_modules_and_buffers(gm, modules, buffers):
    """`gm` given the top-level `modules` and `buffers` its graph does not refer to (a
    module it holds only part of, such as the observer container, is replaced by the
    whole one, whose leaves are the same objects)."""
    for name, child in modules.items():
        setattr(gm, name, child)
    for name, tensor in buffers.items():
        if name not in gm._buffers:
            gm.register_buffer(name, tensor)


def _keep_tree(gm, body):
    """`gm` given every top-level module, buffer and attribute of the __dict__ `body` it
    lacks."""
    _keep_modules_and_buffers(gm, body["_modules"], body["_buffers"])
    for name, value in body.items():
        if name not in gm.__dict__:
            gm.__dict__[name] = value
    return gm


def _rebuild_keeping_tree(rebuild, args, body):
    gm = rebuild(*args)
    return _keep_tree(TreeKeepingGraphModule(gm, gm.graph), body)


def from_proto(model, tensors=None):
    """The GraphModule of a model.proto `Model` message (see `to_torch`). `tensors`: the
    list Model.take_parts handed over beside a structure without tensor bytes."""
    if model.format_version != _FORMAT_VERSION:
        raise ModelFileError(f"model: format_version is {model.format_version}; expected "
                             f"{_FORMAT_VERSION}")
    if model.root.type != _names.ROOT_TYPE:
        raise ModelFileError(f"root module: field 'type' is '{model.root.type}'; expected "
                             f"'{_names.ROOT_TYPE}'")
    handed = iter(tensors) if tensors is not None else None
    root = _build_module(model.root, "", 0, handed)
    if handed is not None and next(handed, None) is not None:
        raise ModelFileError("model: more tensors were handed over than the structure lists")
    graph = _build_graph(model.graph)
    try:
        gm = TreeKeepingGraphModule(root, graph)
    except Exception as e:  # a call_module / get_attr target missing from the module tree
        raise ModelFileError(f"model: the graph does not fit its module tree: {e}") from e
    # GraphModule copies only what the graph refers to; keep the whole tree, as exported.
    _keep_modules_and_buffers(gm, root._modules, root._buffers)
    return _packed.pack_functional_ops(_exported.restore_aten(gm)).eval()


def _read_bytes(path):
    """The bytes of the model file `path`, at most the C++ loader's limit; every OSError
    (missing, a directory, unreadable) is a ModelFileError naming the path."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # bounded: /dev/zero or a pipe cannot run on
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such model file") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path}: is a directory, not a model file") from None
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read the model file: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ModelFileError(f"{path}: the model file is larger than the limit of "
                             f"{MAX_FILE_BYTES} bytes")
    return data


def _parse(path, data):
    model = model_pb2().Model()
    try:
        if is_text_path(path):
            text_format.Parse(data.decode("utf-8"), model)
        else:
            model.ParseFromString(data)
    except Exception as e:  # DecodeError, ParseError, UnicodeDecodeError, RecursionError...
        raise ModelFileError(f"{path}: not a fuselage model file (protobuf parse failed: "
                             f"{e})") from None
    return model


def to_torch(path):
    """Rebuilds a runnable torch.fx.GraphModule from the fuselage model file `path` (the
    text form if it ends in .textproto or .pbtxt, as in the C++ loader). Raises
    ModelFileError, naming the path and the node or module and field, for a missing,
    unreadable, truncated or malformed file, one past the C++ loader's limits
    (fuselage._limits), or one naming a module type or function PyTorch does not have.
    A module of a type a backend config declares carries its steps and becomes a
    fuselage.nn.FusedSubgraph subclass named after the type: no config is needed."""
    path = model_path(path, ModelFileError)  # str, bytes or os.PathLike
    core = _engine()
    if core is None:
        model, tensors = _parse(path, _read_bytes(path)), None
    else:
        # One set of limits: what the C++ loader refuses, to_torch refuses with its message.
        structure, tensors = core.Model.load(path).take_parts()
        model = model_pb2().Model.FromString(structure)
    try:
        return from_proto(model, tensors)
    except ModelFileError as e:
        raise ModelFileError(f"{path}: {e}") from e


def _engine():
    """fuselage._core, or None where the compiled extension is not built."""
    try:
        from fuselage import _core
    except ImportError:
        return None
    return _core
