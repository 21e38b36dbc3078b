"""The names fuselage gives PyTorch's dtypes, qschemes, module classes and functions
(graph/NAMING.md), both ways.

Module types are PyTorch's import alias plus the class name: `nn.Conv2d`,
`nni.ConvReLU2d`, `nnq.Conv2d`, `nniq.ConvReLU2d`, `nnqr.Conv2d`, observers and
fake-quantize modules by bare class name, `GraphModule` for the root and `nn.Module` for a
plain container. A class is only given a name if that name resolves back to the very same
class, so a name always rebuilds what was exported.

call_function targets are the qualified name torch.fx records (`_operator.` spelled
`operator.`), with the functional ops PyTorch implements in C (`torch.conv2d`,
`torch._C._nn.linear`) spelled as the `torch.nn.functional` names users write. Again a
name is only used if importing it gives back the same callable.
"""

import builtins
import functools
import importlib
import os
import uuid
import weakref

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.quantized as nnq
import torch.ao.nn.quantized.dynamic as nnqd
import torch.ao.nn.quantized.reference as nnqr
import torch.ao.quantization as tq
import torch.ao.quantization.fake_quantize as tq_fake_quantize
import torch.ao.quantization.observer as tq_observer
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.intrinsic.quantized as nniq  # torch 1.13 has no torch.ao.nn.intrinsic.quantized
import torch.nn.intrinsic.quantized.dynamic as nniqd
from torch.fx.node import _get_qualified_name

from fuselage._proto import model_pb2

# ---- dtypes ------------------------------------------------------------------------------

_DTYPE_TO_PROTO_NAME = {
    torch.float32: "FLOAT32",
    torch.int8: "INT8",
    torch.uint8: "UINT8",
    torch.int32: "INT32",
    torch.int64: "INT64",
    torch.qint8: "QINT8",
    torch.quint8: "QUINT8",
    torch.qint32: "QINT32",
    torch.bool: "BOOL",
    torch.float16: "FLOAT16",  # a dtype arg only: the file cannot store float16 tensors
}
_dtype_to_proto = None
_proto_to_dtype = None


def _dtype_tables():
    global _dtype_to_proto, _proto_to_dtype
    if _dtype_to_proto is None:
        enum = model_pb2().DType
        _dtype_to_proto = {d: enum.Value(n) for d, n in _DTYPE_TO_PROTO_NAME.items()}
        _proto_to_dtype = {v: d for d, v in _dtype_to_proto.items()}
    return _dtype_to_proto, _proto_to_dtype


def dtype_to_proto(dtype):
    """The model.proto DType value of a torch dtype, or None if the file has none."""
    return _dtype_tables()[0].get(dtype)


def proto_to_dtype(value):
    """The torch dtype of a model.proto DType value, or None if unknown."""
    return _dtype_tables()[1].get(value)


# Tensors whose bytes the file can hold (graph/dtype.h DTypeSize != 0).
STORABLE_DTYPES = frozenset(d for d in _DTYPE_TO_PROTO_NAME if d is not torch.float16)

# ---- qschemes (module attributes carry them as strings, e.g. "torch.per_tensor_affine") --

_QSCHEMES = {
    str(q): q for q in (torch.per_tensor_affine, torch.per_channel_affine,
                        torch.per_tensor_symmetric, torch.per_channel_symmetric,
                        torch.per_channel_affine_float_qparams)
}


def qscheme_name(qscheme) -> str:
    return str(qscheme)


def qscheme_from_name(name):
    """The torch.qscheme named `name`, or None."""
    return _QSCHEMES.get(name)


# ---- module types ------------------------------------------------------------------------

ROOT_TYPE = "GraphModule"
CONTAINER_TYPE = "nn.Module"

# Prefix -> the namespace a class of that prefix must be found in. Order matters for
# export: the first namespace holding the class names it.
_NAMESPACES = (
    ("nn.", nn),
    ("nni.", nni),
    ("nnq.", nnq),
    ("nniq.", nniq),
    ("nnqr.", nnqr),
    ("nnqd.", nnqd),
    ("nniqd.", nniqd),
)
_BARE_NAMESPACES = (tq_observer, tq_fake_quantize)
# QuantStub / DeQuantStub keep their full path (module_schema.cc registers them so).
_STUB_PREFIX = "torch.ao.quantization."
_STUBS = {tq.QuantStub, tq.DeQuantStub}

_class_names = {}


@functools.lru_cache(maxsize=None)
def _fuselage_classes():
    """fuselage's own modules for the fused types PyTorch 1.13 lacks (fuselage.nn)."""
    import fuselage.nn as fnn
    import fuselage.nn.quantized as fnnq

    return {"nni.ConvAdd2d": fnn.ConvAdd2d, "nni.ConvAddReLU2d": fnn.ConvAddReLU2d,
            "nni.ConvAct2d": fnn.ConvAct2d, "nni.ConvBnAdd2d": fnn.ConvBnAdd2d,
            "nni.ConvBnAddReLU2d": fnn.ConvBnAddReLU2d,
            "nniq.ConvAdd2d": fnnq.ConvAdd2d, "nniq.ConvAddReLU2d": fnnq.ConvAddReLU2d,
            "fuselage.FusedSubgraph": fnn.FusedSubgraph}


def is_fuselage_module(module):
    """Whether `module` is one of fuselage's own module classes (fuselage.nn), a declared
    type's FusedSubgraph among them."""
    import fuselage.nn as fnn

    return type(module) in _fuselage_class_set() or isinstance(module, fnn.FusedSubgraph)


@functools.lru_cache(maxsize=None)
def _fuselage_class_set():
    return frozenset(_fuselage_classes().values())


def module_type_name(cls):
    """fuselage's name of a module class, or None if it has none (a user's own class)."""
    if cls in _class_names:
        return _class_names[cls]
    import fuselage.nn as fnn

    name = None
    own = [n for n, c in _fuselage_classes().items() if c is cls]
    if own:
        name = own[0]
    elif isinstance(cls, type) and issubclass(cls, fnn.FusedSubgraph):
        name = cls.type_name
    elif cls is nn.Module:
        name = CONTAINER_TYPE
    elif cls in _STUBS:
        name = _STUB_PREFIX + cls.__name__
    else:
        for prefix, namespace in _NAMESPACES:
            if getattr(namespace, cls.__name__, None) is cls:
                name = prefix + cls.__name__
                break
        else:
            for namespace in _BARE_NAMESPACES:
                if getattr(namespace, cls.__name__, None) is cls and cls.__module__ == namespace.__name__:
                    name = cls.__name__
                    break
    _class_names[cls] = name
    return name


def module_class(type_name):
    """The torch class of a fuselage module type name, or None if it names none."""
    if type_name in (ROOT_TYPE, CONTAINER_TYPE):
        return nn.Module
    own = _fuselage_classes().get(type_name)
    if own is not None:
        return own
    if type_name.startswith(_STUB_PREFIX):
        cls = getattr(tq, type_name[len(_STUB_PREFIX):], None)
        return cls if cls in _STUBS else None
    for prefix, namespace in _NAMESPACES:
        if type_name.startswith(prefix):
            cls = getattr(namespace, type_name[len(prefix):], None)
            return cls if isinstance(cls, type) and issubclass(cls, nn.Module) else None
    if "." not in type_name:
        for namespace in _BARE_NAMESPACES:
            cls = getattr(namespace, type_name, None)
            if isinstance(cls, type) and issubclass(cls, nn.Module):
                return cls
    return None


# ---- call_function targets ---------------------------------------------------------------

_function_names = {}
_functions = {}


def resolve_function(name):
    """The callable a call_function target name denotes, or None. Bare names are builtins
    (torch.fx records `getattr`, not `builtins.getattr`)."""
    if name in _functions:
        return _functions[name]
    found = None
    if "." not in name:
        found = getattr(builtins, name, None)
    else:
        parts = name.split(".")
        # Import the longest importable module prefix, then walk attributes.
        for split in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for attr in parts[split:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                continue
            found = obj
            break
    if found is not None and not callable(found):
        found = None
    _functions[name] = found
    return found


def known_function(name):
    """The callable of a call_function target a model file names, if FunctionRegistry knows
    it (backend_configs/known_functions.cc: what export accepts and the C++ side runs),
    else None. Reading a file never imports or calls anything else it names
    (`builtins.exec`, `os.system`)."""
    from fuselage import _registry

    if name not in _registry.functions():
        return None
    return resolve_function(name)


def function_name(fn):
    """fuselage's name of a call_function target, or None if no importable name gives it
    back (a lambda, a function of __main__ or a local scope)."""
    try:
        return _function_names[fn]
    except KeyError:
        pass
    except TypeError:  # unhashable callable object
        return _compute_function_name(fn)
    name = _compute_function_name(fn)
    _function_names[fn] = name
    return name


def _fx_qualified_name(fn):
    """torch.fx's qualified name of `fn` as the engine spells functions (`_operator.add` as
    `operator.add`, a bare builtin `getattr` as `builtins.getattr`: FunctionRegistry wants
    qualified names, and resolve_function reads both); None when torch.fx cannot name it
    (no __name__ / module)."""
    try:
        name = _get_qualified_name(fn)
    except Exception:  # torch.fx raises for objects without __name__ / a module
        return None
    if name.startswith("_operator."):
        name = "operator." + name[len("_operator."):]
    return name if "." in name else "builtins." + name


def _compute_function_name(fn):
    name = _fx_qualified_name(fn)
    if name is None:
        return None
    module, _, short = name.rpartition(".")
    if module in ("torch", "torch._C._nn") and getattr(F, short, None) is fn:
        name = "torch.nn.functional." + short
    if name.startswith("__main__.") or "<" in name:
        return None
    return name if resolve_function(name) is fn else None


# ---- opaque functions ---------------------------------------------------------------------
# A function FunctionRegistry does not know (`operator.eq`, `torch._assert`, a user's
# @torch.fx.wrap function) crosses to the engine as an opaque node (graph/node.h
# kOpaqueMeta): its target is torch.fx's qualified name of the function, and the callable
# stays here, on the Python side, so to_torch gives back the very function the model
# called. A file never brings a callable of its own: to_torch resolves an opaque target only
# among the functions exported in this process, never by importing a name the file gives
# (`os.system`). Two different callables of one qualified name (two closures `inner`, a
# function defined again in a notebook) get distinct names: the later one `name#2`, ...
_opaque_functions = {}  # name -> callable
_opaque_names = {}  # id(callable) -> (callable, name); the callable keeps the id its own


def opaque_function_name(fn):
    """The name an opaque node of the call_function target `fn` gets (torch.fx's qualified
    name, `_operator` spelled `operator`), remembering `fn` under it for to_torch; None for
    a callable torch.fx cannot name (no __name__)."""
    known = _opaque_names.get(id(fn))
    if known is not None:
        return known[1]
    name = _fx_qualified_name(fn)
    if name is None:
        return None
    unique, n = name, 1
    while unique in _opaque_functions:
        n += 1
        unique = f"{name}#{n}"
    _opaque_functions[unique] = fn
    _opaque_names[id(fn)] = (fn, unique)
    return unique


def opaque_function(name):
    """The callable an opaque node named `name` calls, if it was exported in this process,
    else None."""
    return _opaque_functions.get(name)


# A module the engine has no type for (a user's class torch.fx keeps as a leaf: a
# non-traceable module of prepare_custom_config) is an opaque module the same way: the
# engine's tree holds an empty container naming it, the module object stays here, weakly
# (it lives as long as the models holding it), under a key no other process can produce.
_opaque_modules = weakref.WeakValueDictionary()
_PROCESS_KEY = f"{os.getpid()}-{uuid.uuid4().hex}"


def opaque_module_key(module):
    """The key an opaque module is written under, remembering `module` for to_torch."""
    key = f"{_PROCESS_KEY}:{id(module)}"
    _opaque_modules[key] = module
    return key


def opaque_module(key):
    """The module an opaque module's key names, if it was exported in this process and
    still lives, else None."""
    return _opaque_modules.get(key) if isinstance(key, str) else None


def qualified_class_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def is_graph_module(module):
    return isinstance(module, torch.fx.GraphModule)
