"""What a module holds in a model file, and how to rebuild it (graph/NAMING.md).

A module is written as its type name, named tensors, named attributes and named children:
- tensors: its parameters and buffers, and any tensor kept as a plain attribute (torch.fx
  stores traced constants that way);
- attributes: its public plain-valued fields (`in_channels`, `kernel_size`, `eps`,
  `scale`, ...) under PyTorch's own names; fields whose value the file cannot hold
  (callables, dicts, sets) are left out;
- children: its submodules, in order.

Three kinds differ from that:
- quantized modules (nnq.Conv2d, nniq.ConvReLU2d, nnq.Linear, ...) keep weight and bias
  packed for the backend: they are unpacked into tensors `weight` (quantized) and `bias`
  (float32), and the packed object is not written;
- observers keep `eps` as a one-element buffer; it is written as the float attribute
  `eps`;
- the root and plain containers carry no attributes.

Rebuilding calls the class's constructor with the attributes its signature names (so the
module derives whatever it derives from them), then assigns every tensor, child and
attribute, so the result holds exactly what the file holds. Parameters keep the shape the
constructor gives them; a file that disagrees is rejected.
"""

import collections
import functools
import inspect
import weakref

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.quantized as nnq
import torch.ao.quantization.fake_quantize as tq_fake_quantize
import torch.ao.quantization.observer as tq_observer
import torch.nn as nn
from torch.ao.nn.quantized.dynamic.modules.rnn import RNNBase as _DynamicRNNBase
from torch.ao.nn.quantized.modules.conv import _ConvNd as _QuantizedConvNd

from fuselage import _names
from fuselage._values import attribute_value
from fuselage.errors import ExportError, ModelFileError

_ScriptObject = torch._C.ScriptObject
_FusedModule = nni._FusedModule
_PACKED = (_QuantizedConvNd, nnq.Linear)
# Weight-only quantized embeddings keep a row-wise packed weight with float zero points:
# written as its values (uint8) and per-row weight_scale / weight_zero_point (float32).
_EMBEDDINGS = (nnq.Embedding, nnq.EmbeddingBag)
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# nnqd.LSTM / nnqd.GRU keep each layer's weights packed in a child; written as tensors
# weight_ih_l0 (quantized, or float32 for float16), bias_ih_l0, ... (PyTorch's names).
_DYNAMIC_RNNS = (_DynamicRNNBase,)


def _is_packed(cls):
    return issubclass(cls, _PACKED)


def _is_observer(cls):
    return issubclass(cls, (tq_observer.ObserverBase, tq_fake_quantize.FakeQuantizeBase))


# ---- export -------------------------------------------------------------------------------

class ModuleContents:
    """What one module contributes to the file (its children are listed, not described)."""

    __slots__ = ("tensors", "attributes", "children")

    def __init__(self):
        self.tensors = []     # (name, torch.Tensor)
        self.attributes = []  # (name, storable value)
        self.children = []    # (name, nn.Module)


def describe(module, type_name, where):
    """The tensors, attributes and children `module` of fuselage type `type_name` is
    written with. Raises ExportError for state the file cannot express."""
    cls = type(module)
    contents = ModuleContents()
    packed = _is_packed(cls) and type_name is not None
    if issubclass(cls, _DYNAMIC_RNNS) and type_name is not None:
        contents.tensors += [(k, v) for k, v in module.get_weight().items()]
        contents.tensors += [(k, v) for k, v in module.get_bias().items() if v is not None]
        contents.attributes += _plain_attributes(module)
        return contents
    if issubclass(cls, _EMBEDDINGS) and type_name is not None:
        weight = module.weight()
        contents.tensors += [("weight", weight.int_repr()),
                             ("weight_scale", weight.q_per_channel_scales().float()),
                             ("weight_zero_point", weight.q_per_channel_zero_points().float())]
        contents.attributes += _plain_attributes(module)
        return contents
    for name, value in module.__dict__.items():
        if isinstance(value, _ScriptObject) and not packed:
            raise ExportError(
                f"{where} ({type_name or cls.__qualname__}): keeps '{name}' as a TorchScript "
                "object (packed parameters) that fuselage cannot unpack")
    if packed:
        try:
            weight, bias = module.weight(), module.bias()
        except RuntimeError as e:  # PyTorch's engine cannot unpack what it packed
            raise ExportError(
                f"{where} ({type_name}): PyTorch's quantized engine "
                f"'{torch.backends.quantized.engine}' cannot unpack its packed weight ({e}); "
                "set torch.backends.quantized.engine to one that runs this op "
                "('x86' or 'fbgemm')") from None
        contents.tensors.append(("weight", weight))
        if bias is not None:
            contents.tensors.append(("bias", bias))
        if type_name.startswith("nnqd.") and "dtype" not in module.__dict__:
            # A dynamic module's weight dtype (qint8, or float16 kept as float32 values).
            contents.attributes.append(("dtype", attribute_value(module._packed_params.dtype)))
    else:
        for name, value in module._parameters.items():
            if value is not None:
                contents.tensors.append((name, value))
        for name, value in module._buffers.items():
            if value is not None and not (name == "eps" and _is_observer(cls)) and \
                    not _is_scalar_qparam_buffer(name, value) and \
                    not _is_fixed_qparam_buffer(cls, name, value):
                contents.tensors.append((name, value))
        for name, value in module.__dict__.items():
            if isinstance(value, torch.Tensor):
                contents.tensors.append((name, value))
        for name, child in module._modules.items():
            if child is not None:
                contents.children.append((name, child))
    if type_name in (_names.ROOT_TYPE, _names.CONTAINER_TYPE, "nn.Sequential", "nn.ModuleList",
                     "nn.ModuleDict"):
        return contents
    contents.attributes += _plain_attributes(module)
    if _is_observer(cls) and isinstance(module._buffers.get("eps"), torch.Tensor):
        contents.attributes.append(("eps", float(module._buffers["eps"].reshape(-1)[0])))
    for name, value in module._buffers.items():
        if _is_scalar_qparam_buffer(name, value) or _is_fixed_qparam_buffer(cls, name, value):
            contents.attributes.append((name, value.item()))
    if issubclass(cls, tq_observer.FixedQParamsObserver):
        # PyTorch's own FixedQParamsObserver (one a QAT model's FixedQParamsFakeQuantize
        # wraps) has no reduce_range nor eps: its range is its quant_min / quant_max.
        written = {name for name, _ in contents.attributes}
        for name, value in (("reduce_range", False), ("has_customized_qrange", True),
                            ("eps", float(torch.finfo(torch.float32).eps))):
            if name not in written:
                contents.attributes.append((name, value))
        # The engine's fixed-qparams observer is a min / max one that ignores its range.
        written = {name for name, _ in contents.tensors}
        for name, value in (("min_val", float("inf")), ("max_val", float("-inf"))):
            if name not in written:
                contents.tensors.append((name, torch.tensor(value)))
    return contents


def _plain_attributes(module):
    """The public plain-valued fields of `module` the file can hold, as (name, value)."""
    out = []
    for name, value in module.__dict__.items():
        if name.startswith("_") or name == "training" or isinstance(value, torch.Tensor):
            continue
        try:
            out.append((name, attribute_value(value)))
        except TypeError:
            pass  # not storable (a callable, a dict...): not part of the file's contract
    return out


def _is_fixed_qparam_buffer(cls, name, value):
    """FixedQParamsObserver keeps its `scale` / `zero_point` as shape-[1] buffers; the file
    holds them as attributes (the engine's observer schema), rebuilt into the buffers."""
    return issubclass(cls, tq_observer.FixedQParamsObserver) and name in ("scale", "zero_point") and \
        isinstance(value, torch.Tensor) and value.numel() == 1


def _is_scalar_qparam_buffer(name, value):
    """PyTorch 2's quantized modules (nnq.Hardswish, nnq.LayerNorm, ...) keep their output
    `scale` / `zero_point` as 0-dim buffers where 1.13 kept float / int attributes; the
    file holds them as attributes either way (graph/NAMING.md)."""
    return name in ("scale", "zero_point") and isinstance(value, torch.Tensor) and \
        value.dim() == 0


# ---- import -------------------------------------------------------------------------------

def _attribute_from_file(name, value):
    if name.endswith("qscheme") and isinstance(value, str):
        qscheme = _names.qscheme_from_name(value)
        if qscheme is not None:
            return qscheme
    return value


@functools.lru_cache(maxsize=None)
def _constructor_parameters(cls):
    """cls.__init__'s parameters after self (None if Python cannot say): one inspection per
    class, not per module (a large graph rebuilds thousands of modules of a few classes)."""
    try:
        parameters = tuple(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters) and parameters:
        # nn.LSTM(*args, **kwargs) and nnqd.LSTM pass them to their RNNBase after `mode`
        # (a GRU refuses proj_size, even 0).
        for base in cls.__mro__[1:]:
            if base.__name__ == "RNNBase":
                return tuple(p for p in _constructor_parameters(base) if p.name != "mode" and
                             (p.name != "proj_size" or cls.__name__ == "LSTM"))
    return parameters


# Constructor parameters a module keeps under another name: nnq.PReLU(output_scale,
# output_zero_point, num_parameters) stores them as `scale` and `zero_point`.
_STORED_AS = {"output_scale": "scale", "output_zero_point": "zero_point"}


def _constructor_kwargs(cls, tensors, attributes, where):
    """Keyword arguments for cls.__init__ taken from the file. Observers do not get
    quant_min/quant_max unless they were customized: PyTorch derives them from dtype and
    reduce_range, and passing the derived values back would reduce the range twice. The
    exact values are assigned after construction anyway."""
    parameters = _constructor_parameters(cls)
    if parameters is None:
        return {}
    skip = {"device", "factory_kwargs"}
    if _is_observer(cls) and not attributes.get("has_customized_qrange", True):
        skip |= {"quant_min", "quant_max"}
    kwargs = {}
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in skip:
            continue
        if p.name in attributes:
            kwargs[p.name] = _attribute_from_file(p.name, attributes[p.name])
        elif _STORED_AS.get(p.name) in attributes:
            stored = _STORED_AS[p.name]
            kwargs[p.name] = _attribute_from_file(stored, attributes[stored])
        elif p.name in ("bias", "bias_") and "weight" in tensors and \
                not (p.default is p.empty and p.name in tensors):
            kwargs[p.name] = "bias" in tensors
        elif p.name == "weight_qparams":
            kwargs[p.name] = _reference_weight_qparams(tensors, attributes, where)
        elif p.name in ("weight", "bias") and p.name in tensors and p.default is p.empty:
            # The quantized norms (nnq.LayerNorm, nnq.InstanceNorm2d, nnq.GroupNorm) take
            # their float weight and bias as constructor arguments (as parameters).
            kwargs[p.name] = nn.Parameter(tensors[p.name],
                                          requires_grad=tensors[p.name].is_floating_point())
        elif p.name in ("weight", "bias") and p.default is p.empty and \
                (attributes.get("affine") is False or
                 attributes.get("elementwise_affine") is False):
            kwargs[p.name] = None  # a quantized norm without affine parameters
        elif p.name in tensors and p.default is p.empty and tensors[p.name].numel() == 1:
            kwargs[p.name] = tensors[p.name].reshape(-1)[0].item()
        elif p.default is p.empty:
            raise ModelFileError(f"{where}: cannot rebuild {cls.__qualname__}: its constructor "
                                 f"needs '{p.name}', which the module has no attribute for")
    return kwargs


def _reference_weight_qparams(tensors, attributes, where):
    """The weight_qparams dict of a reference module (nnqr.Conv2d, nnqr.Linear)."""
    try:
        return {
            "qscheme": _names.qscheme_from_name(attributes["weight_qscheme"]),
            "dtype": attributes["weight_dtype"],
            "scale": tensors["weight_scale"].tolist(),
            "zero_point": tensors["weight_zero_point"].tolist(),
            "axis": int(tensors["weight_axis"].item()),
        }
    except KeyError as e:
        raise ModelFileError(f"{where}: a reference quantized module needs '{e.args[0]}'") from None


def _assign_tensor(module, name, tensor, where):
    if name in module._parameters:
        old = module._parameters[name]
        if old is not None and old.shape != tensor.shape:
            raise ModelFileError(
                f"{where}: tensor '{name}' has shape {list(tensor.shape)}; the module's "
                f"attributes give it shape {list(old.shape)}")
        module._parameters[name] = nn.Parameter(tensor, requires_grad=tensor.is_floating_point())
    elif name in module._buffers:
        module._buffers[name] = tensor
    elif isinstance(module.__dict__.get(name), torch.Tensor):
        # A tensor the class keeps as a plain attribute (nnq.PReLU's quantized weight):
        # it stays one, as in the module that was written.
        setattr(module, name, tensor)
    else:
        module.register_buffer(name, tensor)


@functools.lru_cache(maxsize=None)
def _initializes_randomly(cls):
    """True if cls's constructor fills its parameters by reset_parameters() (nn.Conv2d,
    nn.Linear, nn.BatchNorm2d, ...) and takes a `device`: one check per class."""
    parameters = _constructor_parameters(cls)
    return callable(getattr(cls, "reset_parameters", None)) and parameters is not None and \
        any(p.name == "device" for p in parameters)


# Below this many elements a random initialization costs less than skip_init's meta-device
# construction (~0.5 ms a module, measured on the synthetic networks' 8-channel convs).
_SKIP_INIT_MIN_ELEMENTS = 1 << 14


def _ignore_weight_bias(qweight, bias):
    """Stands in for a packed module's set_weight_bias while its constructor runs."""


def _construct_packed(cls, kwargs):
    """cls(**kwargs) for a quantized conv (nnq.Conv2d, nniq.ConvReLU2d, ...) without the
    prepack of the placeholder weight its constructor makes: build() packs the file's
    weight right after, so packing an empty full-size weight first would double the
    prepack work and the memory it touches (a third of a converted resnet50's rebuild).
    The constructor's own set_weight_bias call is answered by an instance attribute that
    shadows the method while it runs, so every other field is the constructor's."""
    module = cls.__new__(cls)
    object.__setattr__(module, "set_weight_bias", _ignore_weight_bias)
    try:
        module.__init__(**kwargs)
    finally:
        module.__dict__.pop("set_weight_bias", None)
    return module


def _construct(cls, kwargs, tensors):
    """cls(**kwargs), without the random initialization when the file replaces every
    tensor it would initialize: such a module is built on the meta device and given
    uninitialized memory (torch.nn.utils.skip_init), most of resnet50's rebuild time
    otherwise. If the constructor made a tensor the file lacks, or cannot run on the meta
    device, it is built normally.
    A quantized conv is built without packing a placeholder weight (_construct_packed)."""
    if issubclass(cls, _QuantizedConvNd):
        return _construct_packed(cls, kwargs)
    if not _initializes_randomly(cls) or \
            sum(t.numel() for t in tensors.values()) < _SKIP_INIT_MIN_ELEMENTS:
        return cls(**kwargs)
    try:
        module = torch.nn.utils.skip_init(cls, **kwargs)
    except RuntimeError:
        # PyTorch 2's reference modules (nnqr.Conv2d) read their weight's qparams with
        # .item() in the constructor, which a meta-device tensor cannot answer.
        return cls(**kwargs)
    made = [n for n, t in (*module._parameters.items(), *module._buffers.items())
            if t is not None]
    if all(n in tensors for n in made):
        return module
    return cls(**kwargs)


def _set_embedding_weight(module, tensors, type_name, where):
    """Packs an nnq.Embedding / nnq.EmbeddingBag's weight from its values (uint8) and
    per-row float scales and zero points (torch.per_channel_affine_float_qparams)."""
    try:
        weight = torch._make_per_channel_quantized_tensor(
            tensors["weight"], tensors["weight_scale"].double(),
            tensors["weight_zero_point"].float(), 0)
        module.set_weight(weight)
    except KeyError as e:
        raise ModelFileError(f"{where} ({type_name}): needs tensor '{e.args[0]}'") from None
    except Exception as e:  # the engine's prepack
        raise ModelFileError(f"{where} ({type_name}): cannot set its weight: {e}") from None


def build(type_name, tensors, attributes, children, where):
    """Rebuilds a module from its file contents (dicts in file order). Raises
    ModelFileError if the type has no PyTorch class or the contents do not fit it."""
    cls = _names.module_class(type_name)
    if cls is None and "steps" in attributes and "outputs" in attributes:
        # A type declared in a backend config: its module carries the steps it runs.
        from fuselage.nn.subgraph import of_type

        cls = of_type(type_name)
    if cls is None:
        raise ModelFileError(f"{where}: module type '{type_name}' has no PyTorch class")
    if issubclass(cls, _FusedModule):  # (an nn.Sequential too: test it first)
        # Bypass the constructor's type checks: a reference model's fused module holds a
        # reference conv (nnqr.Conv2d) where the float one held nn.Conv2d.
        module = cls.__new__(cls)
        nn.Sequential.__init__(module, collections.OrderedDict(children))
    elif cls is nn.Module or issubclass(cls, _CONTAINERS):
        module = cls()
    else:
        try:
            kwargs = _constructor_kwargs(cls, tensors, attributes, where)
        except ModelFileError:
            raise
        except Exception as e:  # an attribute of the wrong kind (a list for a qscheme...)
            raise ModelFileError(f"{where}: cannot rebuild {type_name}: an attribute its "
                                 f"constructor takes has the wrong kind of value: {e}") from None
        try:
            module = _construct(cls, kwargs, tensors)
        except Exception as e:
            raise ModelFileError(f"{where}: cannot rebuild {type_name} from its attributes "
                                 f"{sorted(kwargs)}: {e}") from e
    if not issubclass(cls, _FusedModule):
        for name, child in children.items():
            module.add_module(name, child)
    if issubclass(cls, _EMBEDDINGS):
        _set_embedding_weight(module, tensors, type_name, where)
    elif issubclass(cls, _DYNAMIC_RNNS):
        names = [n for n in tensors if n.startswith("weight_")]
        weights = dict(tensors)
        for n in names:
            weights.setdefault("bias" + n[len("weight"):], None)
        try:
            module.set_weight_bias(weights)
        except Exception as e:  # a missing weight, the engine's prepack
            raise ModelFileError(f"{where} ({type_name}): cannot set its weights and biases: "
                                 f"{e!r}") from None
    elif _is_packed(cls):
        float16 = attributes.get("dtype") == "torch.float16" or \
            attributes.get("dtype") is torch.float16
        if "weight" not in tensors or not (tensors["weight"].is_quantized or float16):
            raise ModelFileError(f"{where} ({type_name}): needs a quantized tensor 'weight'")
        try:
            module.set_weight_bias(tensors["weight"], tensors.get("bias"))
        except Exception as e:  # the engine's prepack, or fuselage.nn.quantized's checks
            raise ModelFileError(f"{where} ({type_name}): cannot set its weight and bias: "
                                 f"{e}") from None
    else:
        for name, tensor in tensors.items():
            _assign_tensor(module, name, tensor, where)
        if isinstance(module, nn.RNNBase):
            # nn.LSTM / nn.GRU run on _flat_weights, the list of the parameters' objects
            # their constructor made: point it at the file's (__setattr__ would have).
            module._flat_weights = [getattr(module, n, None) for n in module._flat_weights_names]
            if hasattr(module, "_flat_weight_refs"):
                module._flat_weight_refs = [weakref.ref(w) if w is not None else None
                                            for w in module._flat_weights]
    for name, value in attributes.items():
        value = _attribute_from_file(name, value)
        if name == "eps" and _is_observer(cls) and "eps" in module._buffers:
            module._buffers["eps"] = torch.tensor([value], dtype=torch.float32)
            continue
        buffer = module._buffers.get(name)
        if isinstance(buffer, torch.Tensor) and buffer.numel() == 1 and \
                isinstance(value, (int, float)) and not isinstance(value, bool):
            # A one-element buffer the file holds as a number: PyTorch 2's 0-dim output
            # scale / zero_point (_is_scalar_qparam_buffer), FixedQParamsObserver's
            # `scale` / `zero_point` (shape [1]).
            try:
                module._buffers[name] = torch.full_like(buffer, value)
            except RuntimeError as e:  # 1e40 in a float32 buffer
                raise ModelFileError(f"{where}: attribute '{name}' of {type_name} is {value}, "
                                     f"which its {buffer.dtype} buffer cannot hold: {e}") from None
            continue
        try:
            setattr(module, name, value)
        except Exception as e:
            raise ModelFileError(f"{where}: cannot set attribute '{name}' of {type_name}: {e}") from e
    return module
