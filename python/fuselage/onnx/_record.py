"""The torch.fx graph to_onnx writes, and what each of its nodes computes on the example
inputs.

The export reads the GraphModule fuselage gives (fuselage.to_torch): its modules and
calls are PyTorch's own (nnq.Conv2d, torch.ops.quantized.add_relu, x.dequantize()), so a
node says what it computes. Running the graph once on the example inputs says the rest:
each value's shape and dtype, whether it is quantized and with which scale and zero
point (a quantized max pool or flatten keeps its input's; the run knows, the export need
not re-derive it), and the Python values shape arithmetic produces (`x.size(0)`), which
the ONNX graph holds as constants: its shapes are the example inputs'.
"""

import copy
import dataclasses
import os

import torch
import torch.ao.nn.quantized as nnq
import torch.fx
import torch.nn.functional as F
from torch.ao.nn.quantized.modules.conv import _ConvNd as _QuantizedConvNd

from fuselage.errors import FuselageError, OnnxExportError


def graph_module(model, example_inputs):
    """The torch.fx.GraphModule of `model`: a fuselage model file's path, a
    fuselage._core.Model, a GraphModule (fuselage's or any), or an nn.Module (traced as
    fuselage.export traces it)."""
    if isinstance(model, torch.nn.Module):
        training = [name or "the model" for name, m in model.named_modules() if m.training]
        if training:
            # ONNX gets the inference form (batch norm from its running statistics, no
            # dropout), which a module in training mode does not compute.
            raise OnnxExportError(f"to_onnx: {training[0]} is in training mode; call "
                                  "model.eval() first")
    if isinstance(model, (str, os.PathLike)):
        import fuselage

        return fuselage.to_torch(model)
    if isinstance(model, torch.fx.GraphModule):
        return model
    if isinstance(model, torch.nn.Module):
        from fuselage import _exporter

        return _exporter._as_graph_module(model)
    if type(model).__name__ == "Model" and type(model).__module__.startswith("fuselage"):
        from fuselage import _core

        return _core.to_torch(model)
    raise OnnxExportError(
        f"to_onnx: model is a {type(model).__name__}; expected a fuselage model file's path, "
        "a fuselage._core.Model, a torch.fx.GraphModule or a torch.nn.Module")


@dataclasses.dataclass(frozen=True)
class Seen:
    """What one node produced on the example inputs: a tensor's description, or (for
    anything else) the Python value itself."""
    shape: tuple = None
    dtype: torch.dtype = None
    qparams: tuple = None   # (scale, zero_point) of a per-tensor quantized tensor
    qscheme: object = None  # the quantized tensor's qscheme
    python: object = None   # a non-tensor result (an int, a tuple of ints, a module...)

    @property
    def is_tensor(self):
        return self.dtype is not None

    @property
    def is_quantized(self):
        return self.qscheme is not None


def _seen(value):
    if isinstance(value, torch.Tensor):
        if value.is_quantized:
            qparams = None
            if value.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                qparams = (float(value.q_scale()), int(value.q_zero_point()))
            return Seen(tuple(value.shape), value.dtype, qparams, value.qscheme())
        return Seen(tuple(value.shape), value.dtype)
    return Seen(python=value)


def example_inputs_from_meta(gm):
    """Example inputs made from the placeholders' recorded shapes (fuselage.export
    records them as node meta `shape` / `dtype`), or None if a placeholder has none."""
    inputs = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        meta = node.meta.get("fuselage") or {}
        if "shape" not in meta:
            return None
        inputs.append(torch.zeros(meta["shape"], dtype=meta.get("dtype") or torch.float32))
    return tuple(inputs)


def _packed_conv_or_linear(module):
    return isinstance(module, (nnq.Linear, _QuantizedConvNd))


def _dequantized_forward(module, x):
    """What a quantized conv or linear module computes, in float on the dequantized input
    and weight, quantized with the module's output parameters: the record run's stand-in
    where PyTorch has no kernel (no PyTorch engine runs a conv on torch.qint8
    activations). The record needs the result's shape and quantization parameters, which
    this gives exactly; its integers may differ from a kernel's by rounding."""
    weight, bias = module.weight().dequantize(), module.bias()
    if isinstance(module, nnq.Linear):
        y = F.linear(x.dequantize(), weight, bias)
    else:
        conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[weight.dim()]
        y = conv(x.dequantize(), weight, bias, module.stride, module.padding, module.dilation,
                 module.groups)
    if type(module).__name__ in ("ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU"):
        y = torch.relu(y)
    return torch.quantize_per_tensor(y, float(module.scale), int(module.zero_point), x.dtype)


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.seen = {}

    def run_node(self, n):
        value = super().run_node(n)
        self.seen[n] = _seen(value)
        return value

    def call_module(self, target, args, kwargs):
        module = self.fetch_attr(target)
        try:
            return super().call_module(target, args, kwargs)
        except RuntimeError:
            if len(args) == 1 and not kwargs and _packed_conv_or_linear(module) and \
                    isinstance(args[0], torch.Tensor) and args[0].dtype == torch.qint8:
                return _dequantized_forward(module, args[0])
            raise


def record(gm, example_inputs):
    """node -> Seen for every node of `gm`, from one run on `example_inputs` (on a copy:
    the run must not change the caller's model)."""
    if example_inputs is None:
        example_inputs = example_inputs_from_meta(gm)
        if example_inputs is None:
            raise OnnxExportError(
                "to_onnx: the model's inputs have no recorded shapes; pass example_inputs "
                "(a tuple of tensors, as to fuselage.export)")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    probe = copy.deepcopy(gm)
    recorder = _Recorder(probe)
    try:
        with torch.no_grad():
            recorder.run(*example_inputs)
    except FuselageError:
        raise
    except Exception as e:
        raise OnnxExportError(f"to_onnx: running the model on example_inputs failed: "
                              f"{type(e).__name__}: {e}") from e
    # The recorder ran a copy: map its nodes back to the caller's by name.
    by_name = {n.name: s for n, s in recorder.seen.items()}
    return {n: by_name[n.name] for n in gm.graph.nodes if n.name in by_name}
