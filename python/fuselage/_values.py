"""Conversion of the values a model file holds — args, attributes, tensors — between
PyTorch objects and model.proto messages.

Errors: every function that can meet a value the file cannot hold raises
`fuselage.errors.ExportError` / `ModelFileError` with `where` (the node or module and the
field) in the message.
"""

import math
import sys

import numpy as np
import torch
import torch.fx

from fuselage import _names
from fuselage._limits import LIMITS, MAX_SCALE
from fuselage._proto import model_pb2
from fuselage.errors import ExportError, ModelFileError


def attribute(root, target):
    """The value a get_attr `target` ("layer1.0.conv.weight") names under `root`, or None
    where a part of the path is missing."""
    value = root
    for part in target.split("."):
        value = getattr(value, part, None)
    return value

MAX_ARG_DEPTH = LIMITS["max_arg_depth"]
MAX_STRING_LENGTH = LIMITS["max_string_length"]
MAX_TENSOR_RANK = LIMITS["max_tensor_rank"]
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Output node meta: the dicts the output holds (itself, or nested in lists, tuples and other
# dicts), which the file stores as tuples of their values: a list of [path, keys], `path`
# the item indices that lead from the output's arg to the tuple, `keys` the dict's keys in
# order (the exporter writes it, to_torch rebuilds the dicts; the C++ side runs tuples).
OUTPUT_DICTS_META = "output_dicts"
# What files of an earlier version have instead, for a dict that is the whole output: its
# keys (read as [[[], keys]]).
OUTPUT_KEYS_META = "output_keys"
# Node meta `opaque` = True: a call of a function the engine does not know, kept in the
# graph (graph/node.h kOpaqueMeta); the callable stays on the Python side (_names).
OPAQUE_META = "opaque"
# Node meta["fuselage"] `shape`: the shape torch.export recorded for the value of the
# exported node of the same name (fuselage._exported.give_shapes), where the graph fuselage
# gives back no longer carries torch.export's values.
SHAPE_META = "shape"
# The attribute of the empty container that stands for an opaque module (a user's module
# class the engine has no type for): the key the Python side keeps the module under (_names).
OPAQUE_MODULE_ATTR = "opaque_module"

# Storage of each tensor dtype in the file (little-endian, row-major).
_NUMPY_STORAGE = {
    torch.float32: np.dtype("<f4"),
    torch.int8: np.dtype("i1"),
    torch.uint8: np.dtype("u1"),
    torch.int32: np.dtype("<i4"),
    torch.int64: np.dtype("<i8"),
    torch.bool: np.dtype("?"),
    torch.qint8: np.dtype("i1"),
    torch.quint8: np.dtype("u1"),
    torch.qint32: np.dtype("<i4"),
}


# ---- args and attributes: PyTorch -> proto -----------------------------------------------

def _check_export_string(value, where):
    # What the C++ loader would refuse is not written (check_string, below, is the reader's).
    size = len(value.encode("utf-8"))
    if size > MAX_STRING_LENGTH:
        raise ExportError(f"{where}: a string of {size} bytes; a model file holds at most "
                          f"{MAX_STRING_LENGTH}")


def write_arg(out, value, where, depth=0):
    """Fills the proto Arg `out` from a torch.fx arg (Node references by name)."""
    if isinstance(value, torch.fx.Node):
        out.node = value.name
    elif value is None:
        out.none = True
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ExportError(f"{where}: int {value} does not fit in 64 bits")
        out.int_value = value
    elif isinstance(value, float):
        out.float_value = value
    elif isinstance(value, str):
        _check_export_string(value, where)
        out.string_value = value
    elif isinstance(value, torch.dtype):
        code = _names.dtype_to_proto(value)
        if code is None:
            raise ExportError(f"{where}: dtype {value} has no fuselage equivalent "
                              "(float32, float16, int8, uint8, int32, int64, qint8, quint8, "
                              "qint32, bool)")
        out.dtype_value = code
    elif isinstance(value, slice):  # x[-2:] records slice(-2, None, None)
        if depth >= MAX_ARG_DEPTH:  # a slice nests as a list does
            raise ExportError(f"{where}: lists nest deeper than {MAX_ARG_DEPTH}")
        out.slice.SetInParent()
        for part, item in zip(("start", "stop", "step"), (value.start, value.stop, value.step)):
            if not (item is None or isinstance(item, torch.fx.Node)
                    or (isinstance(item, int) and not isinstance(item, bool))):
                raise ExportError(f"{where}: slice {part} {item!r:.80} is a "
                                  f"{type(item).__name__}; expected None, an int or a node")
            write_arg(out.slice.items.add(), item, f"{where} slice {part}", depth + 1)
    elif value is Ellipsis:  # x[..., 0]
        out.ellipsis = True
    elif isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        out.torch_object = torch_object_text(value)  # torch.export's device=cpu
    elif isinstance(value, (list, tuple)):  # torch.Size and fx's immutable_list included
        if depth >= MAX_ARG_DEPTH:
            raise ExportError(f"{where}: lists nest deeper than {MAX_ARG_DEPTH}")
        items = out.list if isinstance(value, list) else out.tuple
        items.SetInParent()  # an empty list is still a list, not "no value"
        for item in value:
            write_arg(items.items.add(), item, where, depth + 1)
    else:
        raise ExportError(f"{where}: a value of type {type(value).__name__} ({value!r:.80}) "
                          "cannot be stored in a model file (supported: None, bool, int, "
                          "float, str, dtype, node, list, tuple, slice, Ellipsis, "
                          "torch.device, torch.layout, torch.memory_format)")


def torch_object_text(value):
    """The model file's text of a torch device, layout or memory format (graph/model.proto
    Arg.torch_object): "device:cpu", "layout:strided", "memory_format:channels_last"."""
    if isinstance(value, torch.device):
        return f"device:{value}"
    kind = "layout" if isinstance(value, torch.layout) else "memory_format"
    return f"{kind}:{str(value).removeprefix('torch.')}"


_TORCH_OBJECT_TYPES = {"layout": torch.layout, "memory_format": torch.memory_format}


def read_torch_object(text, where):
    """The torch object of a model file's torch_object `text` (torch_object_text's form,
    which the C++ loader has checked): a device torch knows, or the layout / memory format
    torch names so; anything else is a ModelFileError."""
    kind, _, name = text.partition(":")
    if kind == "device":
        try:
            return torch.device(name)
        except RuntimeError as e:
            raise ModelFileError(f"{where}: torch_object '{text}' is not a device torch "
                                 f"knows ({e})") from None
    value = getattr(torch, name, None) if kind in _TORCH_OBJECT_TYPES else None
    if not isinstance(value, _TORCH_OBJECT_TYPES.get(kind, ())):
        raise ModelFileError(f"{where}: torch_object '{text}' is not a torch device, layout "
                             "or memory format")
    return value


def attribute_value(value):
    """The storable form of a module attribute, or raises TypeError. qschemes become their
    name ("torch.per_tensor_affine", as graph/NAMING.md says)."""
    if isinstance(value, torch.qscheme):
        return _names.qscheme_name(value)
    if isinstance(value, (list, tuple)):
        converted = [attribute_value(v) for v in value]
        return converted if isinstance(value, list) else tuple(converted)
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, slice):  # a FusedSubgraph step's constant (x[:, 1:])
        return slice(*(attribute_value(v) for v in (value.start, value.stop, value.step)))
    if isinstance(value, torch.dtype) and _names.dtype_to_proto(value) is not None:
        return value
    raise TypeError(type(value).__name__)


# ---- args and attributes: proto -> PyTorch ----------------------------------------------

def check_string(value, where, field):
    """Refuses a string the C++ loader refuses: longer than max_string_length bytes
    (UTF-8; protobuf has already refused invalid UTF-8)."""
    size = len(value.encode("utf-8"))
    if size > MAX_STRING_LENGTH:
        raise ModelFileError(f"{where}: field '{field}' is {size} bytes; the limit is "
                             f"{MAX_STRING_LENGTH}")
    return value


def read_arg(arg, nodes, where, depth=0):
    """The Python value of a proto Arg; `nodes` maps names to already built fx Nodes (None
    for a constant context, where a node reference is an error). Lists and tuples nest at
    most max_arg_depth deep, as in the C++ loader."""
    kind = arg.WhichOneof("value")
    if kind == "node":
        if nodes is None:
            raise ModelFileError(f"{where}: must not refer to a node")
        try:
            return nodes[arg.node]
        except KeyError:
            raise ModelFileError(f"{where}: refers to node '{arg.node}', which does not come "
                                 "before it") from None
    if kind == "none":
        return None
    if kind == "bool_value":
        return arg.bool_value
    if kind == "int_value":
        return arg.int_value
    if kind == "float_value":
        return arg.float_value
    if kind == "string_value":
        return check_string(arg.string_value, where, "string_value")
    if kind == "dtype_value":
        dtype = _names.proto_to_dtype(arg.dtype_value)
        if dtype is None:
            raise ModelFileError(f"{where}: unknown dtype value {arg.dtype_value}")
        return dtype
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch_object":
        return read_torch_object(check_string(arg.torch_object, where, "torch_object"), where)
    if kind == "slice":
        # As the C++ loader checks it: start, stop, step, each None, an int or a node.
        if depth >= MAX_ARG_DEPTH:
            raise ModelFileError(f"{where}: args nest deeper than {MAX_ARG_DEPTH}")
        items = arg.slice.items
        if len(items) != 3:
            raise ModelFileError(f"{where}: field 'slice' has {len(items)} items; expected 3 "
                                 "(start, stop, step)")
        parts = []
        for part, item in zip(("start", "stop", "step"), items):
            if item.WhichOneof("value") not in ("none", "int_value", "node"):
                raise ModelFileError(f"{where} slice {part}: expected None, an int or a node")
            parts.append(read_arg(item, nodes, f"{where} slice {part}", depth + 1))
        return slice(*parts)
    if kind in ("list", "tuple"):
        if depth >= MAX_ARG_DEPTH:
            raise ModelFileError(f"{where}: args nest deeper than {MAX_ARG_DEPTH}")
        items = [read_arg(a, nodes, f"{where}[{i}]", depth + 1)
                 for i, a in enumerate(getattr(arg, kind).items)]
        return items if kind == "list" else tuple(items)
    raise ModelFileError(f"{where}: arg has no value")


# ---- tensors ----------------------------------------------------------------------------

def write_tensor(out, tensor, where):
    """Fills the proto Tensor `out`: bytes row-major little-endian; a quantized tensor
    stores its integer representation plus qscheme, scales, zero points and axis."""
    t, storage = _write_tensor_header(out, tensor, where)
    array = storage.contiguous().numpy()
    if sys.byteorder != "little":
        array = array.astype(_NUMPY_STORAGE[t.dtype])
    out.data = array.tobytes()


def _write_tensor_header(out, tensor, where):
    """Fills everything of the proto Tensor `out` but its bytes; returns the tensor (on
    the CPU, detached) and its storage (the integer representation if quantized)."""
    pb = model_pb2()
    t = tensor.detach()
    if t.dim() > MAX_TENSOR_RANK:
        raise ExportError(f"{where}: a tensor of rank {t.dim()}; a model file holds at most "
                          f"rank {MAX_TENSOR_RANK}")
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype not in _NUMPY_STORAGE:
        raise ExportError(f"{where}: tensor dtype {t.dtype} cannot be stored (float32, int8, "
                          "uint8, int32, int64, bool, qint8, quint8, qint32)")
    storage = t
    if t.is_quantized:
        scheme = t.qscheme()
        if scheme == torch.per_tensor_affine:
            out.qscheme = pb.PER_TENSOR_AFFINE
            out.scales.append(float(t.q_scale()))
            out.zero_points.append(int(t.q_zero_point()))
        elif scheme == torch.per_channel_affine:
            out.qscheme = pb.PER_CHANNEL_AFFINE
            out.scales.extend(t.q_per_channel_scales().tolist())
            out.zero_points.extend(t.q_per_channel_zero_points().tolist())
            out.axis = int(t.q_per_channel_axis())
        else:
            raise ExportError(f"{where}: quantization scheme {scheme} is not supported "
                              "(per_tensor_affine, per_channel_affine)")
        storage = t.int_repr()
    out.dtype = _names.dtype_to_proto(t.dtype)
    out.shape.extend(t.shape)
    return t, storage


def handoff_tensor(out, tensor, where):
    """For the in-memory handoff (fuselage._core.from_torch): fills the proto Tensor `out`
    as write_tensor does but without its bytes, and returns the tensor to pass beside
    the structure; the engine reads its memory in place (Model.from_parts)."""
    t, _ = _write_tensor_header(out, tensor, where)
    return t


_QUANTIZED_DTYPES = {"torch.qint8": torch.qint8, "torch.quint8": torch.quint8,
                     "torch.qint32": torch.qint32}


def adopt_tensor(handed, where):
    """The torch tensor of one object Model.take_parts handed over (a numpy array or a
    QuantizedArray over the engine's buffer): torch.from_numpy shares its memory, and the
    array keeps the engine's buffer alive as long as the tensor lives."""
    values = getattr(handed, "values", None)
    if values is None:
        # An empty tensor gets storage of its own: a per-channel observer not yet run holds
        # min_val = [] and resize_()s it on its first batch, which the engine's memory
        # (not resizable) refuses.
        return torch.from_numpy(handed).clone() if handed.size == 0 else \
            torch.from_numpy(handed)
    dtype = _QUANTIZED_DTYPES.get(handed.dtype)
    if dtype is None:
        raise ModelFileError(f"{where}: a quantized tensor of dtype {handed.dtype}")
    ints = torch.from_numpy(values)
    if handed.axis is None:
        return torch._make_per_tensor_quantized_tensor(ints, handed.scale, handed.zero_point)
    return torch._make_per_channel_quantized_tensor(
        ints, torch.from_numpy(handed.scale), torch.from_numpy(handed.zero_point), handed.axis)


_QUANTIZED_RANGES = {torch.qint8: (-128, 127), torch.quint8: (0, 255),
                     torch.qint32: (-(1 << 31), (1 << 31) - 1)}


def _check_quantization_parameters(pt, dtype, where):
    """The C++ loader's checks (graph/serialization.cc), with its messages: every scale in
    (0, MAX_SCALE], every zero point within the dtype's range."""
    for i, s in enumerate(pt.scales):
        if not 0 < s <= MAX_SCALE:
            raise ModelFileError(f"{where}: field 'scales[{i}]' is {s}; expected a scale in "
                                 f"(0, {MAX_SCALE:g}]")
    lo, hi = _QUANTIZED_RANGES[dtype]
    for i, z in enumerate(pt.zero_points):
        if not lo <= z <= hi:
            raise ModelFileError(f"{where}: field 'zero_points[{i}]' is {z}; expected within "
                                 f"[{lo}, {hi}] for {dtype}")


def read_tensor(pt, where):
    """The torch tensor of a proto Tensor, checked against its declared shape and dtype."""
    pb = model_pb2()
    dtype = _names.proto_to_dtype(pt.dtype)
    if dtype not in _NUMPY_STORAGE:
        raise ModelFileError(f"{where}: field 'dtype' is {pt.dtype}; expected a storable dtype")
    shape = tuple(pt.shape)
    if len(shape) > MAX_TENSOR_RANK:
        raise ModelFileError(f"{where}: field 'shape' has rank {len(shape)}; the limit is "
                             f"{MAX_TENSOR_RANK}")
    if any(d < 0 for d in shape):
        raise ModelFileError(f"{where}: field 'shape' {list(shape)} has a negative dimension")
    storage = _NUMPY_STORAGE[dtype]
    numel = math.prod(shape)
    if len(pt.data) != numel * storage.itemsize:
        raise ModelFileError(f"{where}: field 'data' has {len(pt.data)} bytes; expected "
                             f"{numel * storage.itemsize} for {dtype} shape {list(shape)}")
    array = np.frombuffer(pt.data, dtype=storage).reshape(shape)
    if sys.byteorder != "little":
        array = array.astype(storage.newbyteorder("="))
    values = torch.from_numpy(array.copy())  # own the memory: the proto may go away
    quantized = dtype in (torch.qint8, torch.quint8, torch.qint32)
    if pt.qscheme == pb.QSCHEME_NONE:
        if quantized:
            raise ModelFileError(f"{where}: field 'qscheme' is none; a {dtype} tensor needs one")
        return values
    if not quantized:
        raise ModelFileError(f"{where}: has quantization parameters but dtype {dtype} is not "
                             "quantized")
    _check_quantization_parameters(pt, dtype, where)
    if pt.qscheme == pb.PER_TENSOR_AFFINE:
        if len(pt.scales) != 1 or len(pt.zero_points) != 1:
            raise ModelFileError(f"{where}: per-tensor quantization needs exactly 1 scale and "
                                 f"1 zero_point; got {len(pt.scales)} and {len(pt.zero_points)}")
        return torch._make_per_tensor_quantized_tensor(values, pt.scales[0], pt.zero_points[0])
    if pt.qscheme == pb.PER_CHANNEL_AFFINE:
        if not 0 <= pt.axis < len(shape):
            raise ModelFileError(f"{where}: field 'axis' is {pt.axis}; expected 0 <= axis < "
                                 f"{len(shape)}")
        channels = shape[pt.axis]
        if len(pt.scales) != channels or len(pt.zero_points) != channels:
            raise ModelFileError(f"{where}: per-channel quantization needs {channels} scales "
                                 f"and zero_points; got {len(pt.scales)} and "
                                 f"{len(pt.zero_points)}")
        return torch._make_per_channel_quantized_tensor(
            values, torch.tensor(list(pt.scales), dtype=torch.float64),
            torch.tensor(list(pt.zero_points), dtype=torch.int64), pt.axis)
    raise ModelFileError(f"{where}: field 'qscheme' is {pt.qscheme}; expected 0, 1 or 2")


# ---- dicts in an output ------------------------------------------------------------------

def flatten_output_dicts(value, where):
    """(value with every dict replaced by the tuple of its values, the OUTPUT_DICTS_META
    entries saying where they were); a dict key that is not a str is an ExportError."""
    dicts = []

    def flatten(item, path, depth):
        if depth > MAX_ARG_DEPTH:
            raise ExportError(f"{where}: the output nests deeper than {MAX_ARG_DEPTH}")
        if isinstance(item, dict):
            keys = list(item.keys())
            for key in keys:
                if not isinstance(key, str):
                    raise ExportError(f"{where}: a dict output has key {key!r:.80} of type "
                                      f"{type(key).__name__}; only str keys can be stored")
            dicts.append([list(path), keys])
            item = tuple(item[k] for k in keys)
        if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
            flat = [flatten(x, path + (i,), depth + 1) for i, x in enumerate(item)]
            return flat if isinstance(item, list) else tuple(flat)
        return item

    return flatten(value, (), 0), dicts


def rebuild_output_dicts(value, dicts, where):
    """The output `value` with the tuples OUTPUT_DICTS_META `dicts` names made dicts again;
    a malformed entry is a ModelFileError."""
    by_path = {}
    for entry in dicts if isinstance(dicts, list) else [None]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)
                and all(isinstance(i, int) and not isinstance(i, bool) for i in entry[0])
                and isinstance(entry[1], list) and all(isinstance(k, str) for k in entry[1])
                and len(set(entry[1])) == len(entry[1]) and tuple(entry[0]) not in by_path):
            raise ModelFileError(f"{where}: meta '{OUTPUT_DICTS_META}' must be a list of "
                                 "[path, keys], distinct paths of ints and distinct str keys")
        by_path[tuple(entry[0])] = entry[1]
    found = set()

    def rebuild(item, path):
        if isinstance(item, (list, tuple)):
            rebuilt = [rebuild(x, path + (i,)) for i, x in enumerate(item)]
            keys = by_path.get(path)
            if keys is not None:
                if not isinstance(item, tuple) or len(keys) != len(item):
                    raise ModelFileError(f"{where}: meta '{OUTPUT_DICTS_META}' names "
                                         f"{len(keys)} keys at {list(path)}, where the "
                                         f"output holds a {type(item).__name__} of {len(item)}")
                found.add(path)
                return dict(zip(keys, rebuilt))
            return rebuilt if isinstance(item, list) else tuple(rebuilt)
        return item

    value = rebuild(value, ())
    missing = set(by_path) - found
    if missing:
        raise ModelFileError(f"{where}: meta '{OUTPUT_DICTS_META}' names {list(min(missing))}, "
                             "which is not a tuple of the output")
    return value
