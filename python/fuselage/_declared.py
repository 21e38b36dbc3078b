"""Fused module types a backend config declares (fused_module_type,
backend_configs/declared_types.h), on the PyTorch side: one torch class per declared type,
a fuselage.nn.DeclaredModule running the declared steps.

    fuselage.to_torch("fused.fsl", config="conv_add_relu_new_type.textproto")

A model file names a declared type and the config that declared it (attribute
`declared_in`), not its composition: as in the C++ runtime, the config must be loaded to
rebuild it. Declarations are process-wide, as in C++: loading the same declaration again is
fine, a different one under a name already declared is a ModelFileError naming both configs.

A declaration's steps become FusedSubgraph steps (fuselage.nn.subgraph): `child: k` is
("call_module", "k", ...), `op: "add"` ("call_function", "operator.add", ...) by the op
table of backend_configs/declared_types.cc (kCompositeOps, read from that source, so the
two cannot drift), `input { arg: i }` ("input", i) and `input { step: j }` ("step", j); the
last step is the output.
"""

import os
import re
import threading
from pathlib import Path

from google.protobuf import text_format

from fuselage._proto import backend_config_pb2
from fuselage.errors import ModelFileError

_lock = threading.Lock()
_classes = {}  # type name -> DeclaredModule subclass
_BUILTIN_NAMESPACES = ("nn", "nni", "nnq", "nniq", "nnqr", "torch", "fuselage")
_OP_ENTRY = re.compile(r'\{"([^"]+)",\s*"([^"]+)",\s*\d+\}')


def _composite_ops():
    """kCompositeOps of backend_configs/declared_types.cc: op name -> call_function target."""
    path = Path(__file__).resolve().parent.parent.parent / "backend_configs" / "declared_types.cc"
    text = path.read_text(encoding="utf-8")
    start = text.index("kCompositeOps[] = {")
    table = text[start:text.index("};", start)]
    return dict(_OP_ENTRY.findall(table))


def _op_target(op, ops):
    if op in ops:
        return ops[op]
    return op if op in ops.values() else None


def _steps_of(decl, source, ops):
    where = f"{source}: fused_module_type '{decl.name}'"
    steps = []
    for i, step in enumerate(decl.step):
        refs = []
        for ref in step.input:
            kind = ref.WhichOneof("source")
            if kind is None:
                raise ModelFileError(f"{where}: field 'step[{i}].input': needs arg or step")
            refs.append(("input", ref.arg) if kind == "arg" else ("step", ref.step))
        callee = step.WhichOneof("callee")
        if callee == "child":
            if not 0 <= step.child < len(decl.child):
                raise ModelFileError(f"{where}: field 'step[{i}].child': {step.child} is not "
                                     f"below the {len(decl.child)} children")
            steps.append(("call_module", str(step.child), refs, []))
        elif callee == "op":
            target = _op_target(step.op, ops)
            if target is None:
                raise ModelFileError(f"{where}: field 'step[{i}].op': unknown op '{step.op}'; "
                                     f"expected one of {', '.join(ops)}")
            steps.append(("call_function", target, refs, []))
        else:
            raise ModelFileError(f"{where}: field 'step[{i}]': needs a child or an op")
    if not steps:
        raise ModelFileError(f"{where}: field 'step': the composition has no step")
    return tuple(steps)


def _make_class(decl, source, ops):
    from fuselage.nn.subgraph import DeclaredModule, check_steps

    name = decl.name
    space = name.split(".", 1)[0] if "." in name else ""
    if not space or space in _BUILTIN_NAMESPACES:
        raise ModelFileError(f"{source}: fused_module_type '{name}': field 'name': expected "
                             "a dotted name outside the built-in namespaces "
                             f"({', '.join(_BUILTIN_NAMESPACES)})")
    steps = _steps_of(decl, source, ops)
    try:
        check_steps(steps, [len(steps) - 1], f"{source}: fused_module_type '{name}'")
    except ValueError as e:
        raise ModelFileError(str(e)) from None
    cls = type(name.rsplit(".", 1)[1], (DeclaredModule,), {
        "__module__": "fuselage._declared",
        "__qualname__": name,
        "__doc__": f"{name}, declared in {source} (fused_module_type).",
        "type_name": name,
        "declared_steps": steps,
        "num_inputs": decl.num_inputs,
        "children_types": tuple(decl.child),
        "source": source,
    })
    return cls


def _same(a, b):
    return (a.declared_steps == b.declared_steps and a.num_inputs == b.num_inputs
            and a.children_types == b.children_types)


def load(config_path):
    """Declares, for to_torch and export, every fused_module_type of the backend config
    file `config_path` (text form). Returns the type names it declares. Raises
    ModelFileError naming the config and entry for an unreadable file or a bad
    declaration; on error nothing is declared."""
    source = os.fspath(config_path)
    try:
        with open(source, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ModelFileError(f"{source}: cannot read the backend config: "
                             f"{e.strerror or e}") from None
    config = backend_config_pb2().BackendConfigFile()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ModelFileError(f"{source}: not a backend config file: {e}") from None
    ops = _composite_ops()
    made = [_make_class(decl, source, ops) for decl in config.fused_module_type]
    with _lock:
        for cls in made:
            existing = _classes.get(cls.type_name)
            if existing is not None and not _same(existing, cls):
                raise ModelFileError(
                    f"{source}: fused_module_type '{cls.type_name}' is already declared "
                    f"differently in '{existing.source}'")
        for cls in made:
            _classes.setdefault(cls.type_name, cls)
    return [cls.type_name for cls in made]


def declared_class(type_name):
    """The torch class of a declared type, or None if no loaded config declares it."""
    with _lock:
        return _classes.get(type_name)


def new_instance(type_name, source):
    """An empty module of the declared type `type_name` (unpickling; its state comes
    after), its config `source` loaded first if no loaded config declares the type."""
    cls = declared_class(type_name)
    if cls is None:
        load(source)
        cls = declared_class(type_name)
    if cls is None:
        raise ModelFileError(f"{source}: declares no fused_module_type '{type_name}'")
    return cls.__new__(cls)


def declared_name(cls):
    """The type name of a declared type's torch class, or None."""
    name = getattr(cls, "type_name", None)
    return name if name is not None and declared_class(name) is cls else None


def missing_declaration_hint(type_name, attributes):
    """What to do when `type_name` has no class: the config its module names, if any."""
    config = attributes.get("declared_in")
    if isinstance(config, str) and config:
        return (f" (it is declared by the backend config '{config}' (fused_module_type): "
                f"pass it, fuselage.to_torch(path, config='{config}'))")
    if "." in type_name and type_name.split(".", 1)[0] not in _BUILTIN_NAMESPACES:
        return (" (a type outside the built-in namespaces is declared by a backend config's "
                "fused_module_type: pass that config, fuselage.to_torch(path, config=...))")
    return ""


__all__ = ["load", "declared_class", "declared_name"]
