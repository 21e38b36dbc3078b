"""fuselage.export: a PyTorch model as a fuselage model file (graph/model.proto).

The graph is torch.fx's: an nn.Module is traced by torch.fx's default tracer (with
fuselage.nn's modules as leaves), a GraphModule (including what prepare_fx,
convert_to_reference_fx and convert_fx return) is taken as is. A traced module's torch
containers (Sequential, ModuleList, ModuleDict), which the traced tree holds as plain
modules, are written as the containers they were, with every child in place. A prepare_fx
model's observers and weight plans are written as fuselage's prepare writes them
(fuselage._prepared). Every node is written in graph order with its name, op, target,
args and kwargs; every module of the tree with its tensors, attributes and children
(fuselage._modules). Nothing is written until everything was checked, so an unsupported
model leaves no file behind.

Cost: one pass over the nodes and one over the modules; per-node work does not depend on
the size of the graph (name lookups are cached per distinct target).
"""

import builtins
import copy
import operator
import os
import stat
import tempfile

import torch
import torch.fx
from google.protobuf import text_format
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from fuselage import _exported, _modules, _names, _packed, _prepared, _registry
from fuselage.nn import subgraph as fuselage_subgraph
from fuselage._limits import LIMITS, MAX_FILE_BYTES
from fuselage._proto import is_text_path, model_path, model_pb2
from fuselage._values import (OPAQUE_META, OPAQUE_MODULE_ATTR, OUTPUT_DICTS_META,
                              OUTPUT_KEYS_META, attribute, flatten_output_dicts,
                              handoff_tensor, write_arg, write_tensor)
from fuselage.errors import ExportError

_MAX_MODULE_DEPTH = LIMITS["max_module_depth"]
_UNUSED = object()  # a container's child that the traced tree lacks
MODULE_PATH_META = "module_path"  # graph/NAMING.md
INPUT_FIELD_META = "input_field"  # [structured input's name, key] of a flattened input


class _Tracer(torch.fx.Tracer):
    """torch.fx's default tracer, with fuselage's own modules (fuselage.nn) kept as
    leaves, as torch.fx keeps torch.nn's: they are fuselage module types. It records, on
    every call_function / call_method node, the path of the module whose forward made the
    call (node.meta["module_path"], graph/NAMING.md), as PyTorch's QuantizationTracer
    records node_name_to_scope: a QConfigMapping entry for a module name applies to the
    functions its forward calls.

    `non_traceable` = (module names, module classes): modules kept as leaves, never traced
    into, as PyTorch's QuantizationTracer keeps prepare_custom_config's non-traceable
    modules; the engine gets each as an opaque module."""

    def __init__(self, non_traceable=None):
        super().__init__()
        self._scope = ""
        names, classes = non_traceable or ((), ())
        self._leaf_names, self._leaf_classes = frozenset(names), tuple(classes)

    def is_leaf_module(self, m, qualname):
        if _names.is_fuselage_module(m) or qualname in self._leaf_names or \
                type(m) in self._leaf_classes:
            return True
        return super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        outer = self._scope
        self._scope = self.path_of_module(m)
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self._scope = outer

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if kind in ("call_function", "call_method") and self._scope:
            node.meta[MODULE_PATH_META] = self._scope
        return node


def _as_graph_module(module, non_traceable=None):
    if isinstance(module, torch.fx.GraphModule):
        return module
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"export: expected a torch.nn.Module or torch.fx.GraphModule; got "
                          f"{type(module).__name__}")
    try:
        tracer = _Tracer(non_traceable)
        graph = tracer.trace(module)
        return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)
    except Exception as e:
        raise ExportError(f"export: torch.fx cannot trace {type(module).__qualname__}: {e}") from e


def _shape_meta(gm, example_inputs):
    """node name -> (shape, dtype) of every node producing one tensor, found by running a
    copy of the module (running it may update observers or batch-norm statistics; the
    caller's module must stay as it was)."""
    if example_inputs is None:
        return {}
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    probe = copy.deepcopy(gm)
    try:
        with torch.no_grad():
            ShapeProp(probe).propagate(*example_inputs)
    except Exception as e:
        raise ExportError(f"export: running the model on example_inputs failed: {e}") from e
    meta = {}
    for node in probe.graph.nodes:
        tm = node.meta.get("tensor_meta")
        if isinstance(tm, TensorMetadata):
            meta[node.name] = (list(tm.shape), tm.dtype)
    return meta


def _is_named_tuple(value):
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _field_key(example, access):
    """The key (a dict key or a named tuple's field name) that the node `access` reads
    from the structured input `example`, or None if `access` is not a plain field read."""
    if len(access.args) != 2 or access.kwargs:
        return None
    key = access.args[1]
    if isinstance(example, dict) and access.target is operator.getitem:
        return key if isinstance(key, str) and key in example else None
    if _is_named_tuple(example):
        fields = type(example)._fields
        if access.target is builtins.getattr and key in fields:
            return key
        if (access.target is operator.getitem and isinstance(key, int)
                and not isinstance(key, bool) and -len(fields) <= key < len(fields)):
            return fields[key]
    return None


def _flatten_structured_inputs(graph, example_inputs):
    """(graph, {input node: [(key, reading node)]}) for the inputs that example_inputs
    give as a dict (str keys) or a named tuple: the C++ side runs tensors, so each field
    the model reads becomes an input of its own, in the example's key order (the order
    `fuselage run` takes them in); fields never read are left out. Where one field is read
    by several nodes, the returned graph is a copy in which the first read stands for all.
    An input used other than by reading fields is refused, naming the node."""
    if example_inputs is None or isinstance(example_inputs, torch.Tensor):
        return graph, {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    structured = [(n, ex) for n, ex in zip(placeholders, example_inputs)
                  if isinstance(ex, dict) or _is_named_tuple(ex)]
    if not structured:
        return graph, {}
    reads = {}
    for node, example in structured:
        by_key = {}
        for user in node.users:
            key = _field_key(example, user)
            if key is None:
                raise ExportError(
                    f"node '{user.name}': input '{node.name}' is a "
                    f"{'dict' if isinstance(example, dict) else 'named tuple'}, which "
                    f"fuselage takes apart into one input per field; expected only reads of "
                    f"its fields (x['key'], x.field, x[0]), got {user.op} {user.target}")
            by_key.setdefault(key, []).append(user)
        reads[node.name] = by_key
    if any(len(users) > 1 for by_key in reads.values() for users in by_key.values()):
        copied = torch.fx.Graph()
        output = copied.output(copied.graph_copy(graph, {}))  # graph_copy leaves it out
        output.meta = copy.copy(next(n for n in reversed(graph.nodes) if n.op == "output").meta)
        graph = copied
    fields = {}
    nodes = {n.name: n for n in graph.nodes}
    for node, example in structured:
        order = list(example.keys()) if isinstance(example, dict) else list(type(example)._fields)
        entries = []
        for key in order:
            readers = reads[node.name].get(key)
            if not readers:
                continue
            first = nodes[readers[0].name]
            for other in readers[1:]:
                duplicate = nodes[other.name]
                duplicate.replace_all_uses_with(first)
                graph.erase_node(duplicate)
            entries.append((key, first))
        fields[nodes[node.name]] = entries
    return graph, fields


# The torch containers whose class survives export: torch.fx's GraphModule replaces every
# module it only passes through with a plain nn.Module (fx's _copy_attr), so the traced
# tree alone would give `m.layer1[0]` back as a plain module without indexing.
_CONTAINER_CLASSES = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def _write_shape_meta(out, shape, where):
    """Node meta "shape" and, where the model format has the dtype, "dtype" of the value
    traced for the node; `shape` is (dims, dtype) or None (nothing traced)."""
    if shape is None:
        return
    dims, dtype = shape
    entry = out.meta.add()
    entry.name = "shape"
    write_arg(entry.value, dims, f"{where} meta")
    if _names.dtype_to_proto(dtype) is not None:
        entry = out.meta.add()
        entry.name = "dtype"
        write_arg(entry.value, dtype, f"{where} meta")


class _Exporter:
    def __init__(self, gm, source=None, tensors=None, records=None, read_records=False):
        """`source` is the nn.Module `gm` was traced from (None for a GraphModule given as
        is): where gm holds a plain module at a path where source holds a torch container,
        the container's class and all its children are written. With `records`
        (to_proto_of_records), `gm` is only the module tree and they are the graph; with
        `read_records` (no example inputs to trace shapes with), an aten graph's FX form
        is written from records too (_exported.fx_records)."""
        self.runnable = original = gm  # what PyTorch runs to find shapes (packed ops and all)
        if records is None and read_records:
            # An aten graph (a model fuselage.pt2e gave back) written from its FX form's
            # records, without building that form in torch.fx (read_aten).
            unpacked = _packed.unpack_functional_ops(gm)
            records = _exported.fx_records(unpacked, keep_modules=True)
            if records is not None:
                gm = unpacked
        if records is None:
            gm = _packed.unpack_functional_ops(_exported.read_aten(gm))
        self.records = records
        self.gm = gm
        self.source = source
        # The in-memory handoff (fuselage._core.from_torch): a list collecting the tensors,
        # in the order the file lists them, written as placeholders without bytes; None
        # writes every tensor's bytes into the file.
        self.tensors = tensors
        self.pb = model_pb2()
        self.op_codes = {
            "placeholder": self.pb.PLACEHOLDER, "get_attr": self.pb.GET_ATTR,
            "call_function": self.pb.CALL_FUNCTION, "call_module": self.pb.CALL_MODULE,
            "call_method": self.pb.CALL_METHOD, "output": self.pb.OUTPUT,
        }
        # A prepare_fx model: its root observers move into a container beside the weight
        # plans fuselage convert reads (fuselage._prepared).
        graph_module = isinstance(original, torch.fx.GraphModule)
        self.prepared = _prepared.layout(original) if graph_module else None
        # The paths of opaque modules (_child_type), written as empty containers naming
        # the module object (OPAQUE_MODULE_ATTR); the nodes calling them are opaque.
        self.opaque_modules = set()
        # call_module target -> name of the first node calling it (for error messages).
        self.callers = {}
        for node in original.graph.nodes if graph_module else records:
            if node.op == "call_module":
                self.callers.setdefault(node.target, node.name)

    def model(self, example_inputs):
        model = self.pb.Model()
        model.format_version = 1
        model.producer = f"fuselage.export (torch {torch.__version__})"
        self._write_module(self.gm, "", _names.ROOT_TYPE, model.root, 0, self.source)
        if self.records is not None:
            for node in self.records:
                self._write_node(node, model.graph.nodes.add(), None)
            return model
        shapes = _shape_meta(self.runnable, example_inputs)
        graph, fields = _flatten_structured_inputs(self.gm.graph, example_inputs)
        flattened = {access for accesses in fields.values() for _, access in accesses}
        nodes = model.graph.nodes
        for node in graph.nodes:
            if node in flattened:
                continue  # written as an input where its dict / named tuple was
            if node in fields:
                for key, access in fields[node]:
                    self._write_input_field(node, key, access, nodes.add(),
                                            shapes.get(access.name))
                continue
            self._write_node(node, nodes.add(), shapes.get(node.name))
        return model

    def _write_input_field(self, structured, key, access, out, shape):
        """One field of a dict / named-tuple input, written as an input (placeholder) of
        its own, named after the node that read it so its users need no change."""
        out.name = access.name
        out.op = self.pb.PLACEHOLDER
        out.target = access.name
        entry = out.meta.add()
        entry.name = INPUT_FIELD_META
        write_arg(entry.value, [structured.name, key], f"node '{access.name}' meta")
        _write_shape_meta(out, shape, f"node '{access.name}'")

    def _write_module(self, module, path, type_name, out, depth, source=None):
        where = f"module '{path}'" if path else "root module"
        if depth > _MAX_MODULE_DEPTH:
            raise ExportError(f"{where}: modules nest deeper than {_MAX_MODULE_DEPTH}")
        container = type(module) is torch.nn.Module and isinstance(source, _CONTAINER_CLASSES)
        if container:
            # A subclass (torchvision's Conv2dNormActivation is a Sequential) is written as
            # the torch container it extends: its own class has no fuselage type.
            base = next(c for c in _CONTAINER_CLASSES if isinstance(source, c))
            type_name = _names.module_type_name(base)
        out.type = type_name
        if path in self.opaque_modules:
            for name, value in ((OPAQUE_MODULE_ATTR, _names.opaque_module_key(module)),
                                ("opaque_class", _names.qualified_class_name(type(module)))):
                named = out.attributes.add()
                named.name = name
                write_arg(named.value, value, f"{where} attribute '{name}'")
            return
        contents = _modules.describe(module, type_name, where)
        if container:
            contents.children = self._container_children(module, source)
        moved = self.prepared.moved if self.prepared is not None and not path else {}
        if moved:
            contents.children = [(n, c) for n, c in contents.children
                                 if n not in moved and n != self.prepared.container]
        for name, tensor in contents.tensors:
            named = out.tensors.add()
            named.name = name
            if self.tensors is None:
                write_tensor(named.tensor, tensor, f"{where} tensor '{name}'")
            else:
                self.tensors.append(handoff_tensor(named.tensor, tensor,
                                                   f"{where} tensor '{name}'"))
        for name, value in contents.attributes:
            named = out.attributes.add()
            named.name = name
            write_arg(named.value, value, f"{where} attribute '{name}'")
        # Children are walked through _modules, not named_modules(): a module shared by
        # two paths (prepare_fx shares observers) must appear under both.
        for name, child in contents.children:
            child_path = f"{path}.{name}" if path else name
            named = out.children.add()
            named.name = name
            child_source = source._modules.get(name) if source is not None else None
            if child is _UNUSED:
                self._write_unused(child_source, child_path, named.module, depth + 1)
            else:
                self._write_module(child, child_path, self._child_type(child, child_path),
                                   named.module, depth + 1, child_source)
        if moved:
            named = out.children.add()
            named.name = self.prepared.container
            self._write_observer_container(named.module, depth + 1)

    def _write_observer_container(self, out, depth):
        """The container of a prepare_fx model's observers and weight plans
        (quantize/prepared_model.h)."""
        out.type = _names.CONTAINER_TYPE
        existing = self.prepared.existing
        if existing is not None:
            for name, child in existing._modules.items():
                if child is None or name in self.prepared.moved:
                    continue
                named = out.children.add()
                named.name = name
                child_path = f"{self.prepared.container}.{name}"
                self._write_module(child, child_path, self._child_type(child, child_path),
                                   named.module, depth + 1)
        for old, new in self.prepared.moved.items():
            named = out.children.add()
            named.name = old
            observer = self.gm.get_submodule(old)
            self._write_module(observer, new, self._child_type(observer, old), named.module,
                               depth + 1)
        for k, plan in enumerate(self.prepared.plans):
            named = out.children.add()
            named.name = f"{_prepared.PLAN_PREFIX}{k}"
            path = f"{self.prepared.container}.{named.name}"
            self._write_module(plan.observer, path, plan.observer_type, named.module, depth + 1)
            for key, value in (("node", plan.node), ("root_module", plan.root_module),
                               ("reference_module", plan.reference_module)):
                attribute = named.module.attributes.add()
                attribute.name = key
                write_arg(attribute.value, value, f"module '{path}' attribute '{key}'")

    @staticmethod
    def _container_children(module, source):
        """The children of a restored container in the container's own order. A child
        the traced tree lacks (no node uses it) is marked _UNUSED and written from the
        source: Sequential and ModuleList index by position, so `m.blocks[2]` must still
        be the third block."""
        return [(name, module._modules.get(name, _UNUSED))
                for name, child in source._modules.items() if child is not None]

    def _write_unused(self, source, path, out, depth):
        """Writes a module no node uses, from the source tree. If the file cannot hold
        it (a type without a schema), an empty plain module keeps its place instead:
        what export skipped before cannot make it fail now."""
        attempt = type(out)()
        handed = len(self.tensors) if self.tensors is not None else 0
        try:
            self._write_module(source, path, self._child_type(source, path), attempt, depth,
                               source)
        except ExportError:
            if self.tensors is not None:
                del self.tensors[handed:]  # the attempt's tensors are not in the file
            attempt = type(out)()
            attempt.type = _names.CONTAINER_TYPE
        out.CopyFrom(attempt)

    def _child_type(self, child, path):
        type_name = _names.module_type_name(type(child))
        caller = self.callers.get(path)
        if type_name is not None:
            if type_name not in _registry.module_types() and \
                    not isinstance(child, fuselage_subgraph.FusedSubgraph):
                where = f"node '{caller}': call_module target '{path}'" if caller else \
                    f"module '{path}'"
                raise ExportError(f"{where} is a {type_name}, which fuselage cannot represent "
                                  f"(no module schema is registered for it); "
                                  f"{_registry.MODULE_HOWTO}")
            return type_name
        if caller is not None:
            # A user's class torch.fx kept as a leaf: an opaque module (_names).
            self.opaque_modules.add(path)
            return _names.CONTAINER_TYPE
        # Never called: it only holds submodules or tensors other nodes reach.
        return _names.CONTAINER_TYPE

    def _write_node(self, node, out, shape):
        where = f"node '{node.name}'"
        out.name = node.name
        out.op = self.op_codes[node.op]
        out.target = self._target(node, where)
        if node.op == "call_module" and self.prepared is not None:
            out.target = self.prepared.moved.get(out.target, out.target)
        args = node.args
        dicts = []
        if node.op == "output" and len(args) == 1:
            flattened, dicts = flatten_output_dicts(args[0], where)
            args = (flattened,)
        for i, arg in enumerate(args):
            write_arg(out.args.add(), arg, f"{where} args[{i}]")
        for key, value in node.kwargs.items():
            kw = out.kwargs.add()
            kw.name = key
            write_arg(kw.value, value, f"{where} kwargs['{key}']")
        # The meta a model file gave this node (to_torch keeps it in node.meta["fuselage"]:
        # a fused node's `pattern`, a native node's `output_qparams`, ...) goes back as it
        # came, so a model fuselage fused or prepared survives a trip through torch.fx;
        # output keys, and shape and dtype when example inputs gave new ones, are written
        # afresh below.
        carried = dict(node.meta.get("fuselage", {}))
        for written_afresh in (OUTPUT_KEYS_META, OUTPUT_DICTS_META, OPAQUE_META):
            carried.pop(written_afresh, None)
        if dicts:
            carried[OUTPUT_DICTS_META] = dicts
        if (node.op == "call_function" and out.target not in _registry.functions()) or \
                (node.op == "call_module" and node.target in self.opaque_modules):
            carried[OPAQUE_META] = True
        if shape is not None:
            carried.pop("shape", None)
            carried.pop("dtype", None)
        if node.meta.get(MODULE_PATH_META) and node.op in ("call_function", "call_method"):
            carried[MODULE_PATH_META] = str(node.meta[MODULE_PATH_META])
        for key, value in carried.items():
            entry = out.meta.add()
            entry.name = key
            write_arg(entry.value, value, f"{where} meta '{key}'")
        _write_shape_meta(out, shape, where)

    def _target(self, node, where):
        if node.op == "call_function":
            name = _names.function_name(node.target)
            if name is not None and name in _registry.functions():
                return name
            # A function the engine does not know: an opaque node (_names' opaque
            # functions), the callable kept on this side.
            name = _names.opaque_function_name(node.target)
            if name is None:
                raise ExportError(
                    f"{where}: call_function target {node.target!r} is not a function "
                    "fuselage knows and has no qualified name to keep it by as an opaque node "
                    "(torch.fx cannot name it either); call a function instead, or "
                    f"{_registry.FUNCTION_HOWTO}")
            return name
        if node.op == "get_attr":
            self._check_attr(node, where)
        if not isinstance(node.target, str):
            raise ExportError(f"{where}: {node.op} target {node.target!r} is not a string")
        return node.target

    def _check_attr(self, node, where):
        obj = attribute(self.gm, node.target)
        if not isinstance(obj, (torch.Tensor, torch.nn.Module)):
            raise ExportError(
                f"{where}: get_attr target '{node.target}' is a {type(obj).__name__}; a model "
                "file can only refer to tensors and modules (of packed parameters, only those "
                "of functional quantized conv / linear are unpacked)")


def to_proto(module, example_inputs=None, tensors=None, non_traceable=None):
    """The model.proto `Model` message of `module` (see `export`). With a list `tensors`,
    the tensors are appended to it in file order and the message holds empty
    placeholders instead of their bytes (Model.from_parts takes both). `non_traceable`:
    (module names, module classes) traced as leaves (see _Tracer)."""
    gm = _as_graph_module(module, non_traceable)
    source = None if gm is module else module
    return _Exporter(gm, source, tensors,
                     read_records=example_inputs is None).model(example_inputs)


def to_proto_of_records(root, records, tensors=None):
    """The model.proto `Model` of the module tree `root` (an nn.Module) and the graph
    `records`: objects with a torch.fx Node's name, op, target, args, kwargs and meta
    (args referring to nodes by torch.fx Nodes of those names), in graph order. What
    to_proto writes for a GraphModule of that tree and graph, without one
    (fuselage._exported.to_engine); `tensors` as for to_proto."""
    return _Exporter(root, None, tensors, records).model(None)


def _write_atomically(path, data):
    """Replaces the file `path` with `data` as graph/file_io.h's WriteFileAtomically does: a
    temporary file in the same folder, written, flushed and fsynced, then renamed over
    `path`, so a reader never sees half a file and a failure leaves the old file as it was.
    A symlink is followed (its target is replaced); a device or FIFO (/dev/null) is written
    in place, never renamed over. Every OSError is an ExportError naming the path."""
    shown = os.fspath(path)
    try:
        info = os.stat(shown)
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise ExportError(f"cannot write '{shown}': {e.strerror}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ExportError(f"cannot write '{shown}': it is a directory, not a file")
    if info is not None and not stat.S_ISREG(info.st_mode):
        try:
            with open(shown, "wb") as f:
                f.write(data)
        except OSError as e:
            raise ExportError(f"cannot write '{shown}': {e.strerror}") from None
        return
    target = os.path.realpath(shown) if info is not None else os.path.abspath(shown)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise ExportError(f"cannot write '{shown}': the folder '{directory}' does not exist")
    try:
        fd, staged = tempfile.mkstemp(dir=directory, prefix=".fuselage-export-")
    except OSError as e:
        raise ExportError(f"cannot write '{shown}': cannot create a file in the folder "
                          f"'{directory}': {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; keep the replaced file's mode (and, where allowed, owner),
        # else the usual 0644.
        if info is not None and (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.chown(staged, info.st_uid, info.st_gid)
            except OSError:
                pass  # only root may give a file to another user
        os.chmod(staged, stat.S_IMODE(info.st_mode) if info is not None else 0o644)
        os.replace(staged, target)
    except BaseException as e:
        if os.path.exists(staged):
            os.unlink(staged)
        if isinstance(e, OSError):
            raise ExportError(f"cannot write '{shown}': {e.strerror or e}") from None
        raise


def export(module, example_inputs, path):
    """Writes `module` (an nn.Module, traced with torch.fx, or an fx.GraphModule) to the
    fuselage model file `path`, with every parameter and buffer: in protobuf text form if
    the name ends in .textproto or .pbtxt (as the C++ tool decides), else binary.

    example_inputs (a tensor or a tuple of them, or None) run a copy of the module to
    record each node's output shape and dtype as node meta `shape` / `dtype`; the module
    itself is not run or changed. An example input that is a dict (str keys) or a named
    tuple makes that input one input per field the model reads, in the example's key
    order (node meta `input_field` = [input name, key]; `fuselage run` takes them so). Raises ExportError, naming the node or module, for what
    the file cannot express, and for a file that cannot be written (a missing folder, a
    full disk); no file is written then, and an existing one keeps its contents.
    """
    text = is_text_path(model_path(path, ExportError))
    model = to_proto(module, example_inputs)
    if text:
        data = text_format.MessageToString(model).encode("utf-8")
    else:
        data = model.SerializeToString()
    if len(data) > MAX_FILE_BYTES:
        raise ExportError(f"cannot write '{os.fsdecode(path)}': the model is {len(data)} bytes; "
                          f"the C++ loader reads at most {MAX_FILE_BYTES}")
    _write_atomically(path, data)
    return path
