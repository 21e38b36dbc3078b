"""fuselage.to_onnx: a fuselage model as an ONNX file, QDQ where it is quantized.

The writer is the engine's (onnx/onnx_writer.h, the one `fuselage export-onnx` and
`fuselage quantize -o model.onnx` use), run through the compiled extension: the model
crosses into the engine as fuselage._core.from_torch hands a GraphModule over (tensors
read in place), and the writer runs it once on the example inputs, which give each
value's shape, dtype and quantization parameters and the Python values shape arithmetic
makes (constants in the ONNX graph). Then it walks the graph node by node:
  placeholder            a graph input (the example input's dtype and shape)
  get_attr               an initializer
  a call                 its ONNX nodes; if the node's result was quantized on the example
                         run, a QuantizeLinear with that result's scale and zero point
  a non-tensor result    (x.size(0), a shape) a Python constant, no node
  output                 each output a graph output; a quantized one through a
                         DequantizeLinear of its own scale and zero point
and tidies what the QDQ form leaves (a Relu before a QuantizeLinear moved after it as a
clamp of the integers, or dropped where the QuantizeLinear clamps alike; a
DequantizeLinear -> QuantizeLinear round trip). The file is written whole or not at all.
"""

import os

import torch
import torch.fx

from fuselage.errors import OnnxExportError


def _engine_model(model):
    """fuselage._core.Model of `model`: a fuselage model file's path, a
    fuselage._core.Model, a GraphModule (fuselage's or any), or an nn.Module (traced as
    fuselage.export traces it)."""
    from fuselage import _core, _exporter

    if isinstance(model, torch.nn.Module):
        training = [name or "the model" for name, m in model.named_modules() if m.training]
        if training:
            # ONNX gets the inference form (batch norm from its running statistics, no
            # dropout), which a module in training mode does not compute.
            raise OnnxExportError(f"to_onnx: {training[0]} is in training mode; call "
                                  "model.eval() first")
        return _core.from_torch(_exporter._as_graph_module(model))
    if isinstance(model, (str, os.PathLike)):
        return _core.Model.load(model)
    if isinstance(model, _core.Model):
        return model
    raise OnnxExportError(
        f"to_onnx: model is a {type(model).__name__}; expected a fuselage model file's path, "
        "a fuselage._core.Model, a torch.fx.GraphModule or a torch.nn.Module")


def _example_inputs(example_inputs):
    if example_inputs is None:
        return None
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return tuple(x.detach().contiguous() if isinstance(x, torch.Tensor) else x
                 for x in example_inputs)


def _write(model, example_inputs, write):
    """write(engine model, example inputs): the writer's call; example inputs the engine
    cannot take (a float64 tensor, one too many) are an OnnxExportError too."""
    from fuselage import _core

    engine_model = _engine_model(model)
    try:
        return write(engine_model, _example_inputs(example_inputs))
    except _core.EngineError as e:
        raise OnnxExportError(str(e)) from e


def onnx_bytes(model, example_inputs=None):
    """The serialized ONNX model to_onnx writes."""
    from fuselage import _core

    return _write(model, example_inputs, _core.onnx_bytes)


def build(model, example_inputs=None):
    """The onnx.ModelProto of `model` (what to_onnx writes); needs the onnx package."""
    try:
        import onnx
    except ImportError as e:
        raise OnnxExportError(f"building an onnx.ModelProto needs the onnx package ({e}); "
                              "pip install onnx") from e
    return onnx.load_from_string(onnx_bytes(model, example_inputs))


def to_onnx(model, path, example_inputs=None):
    """Writes `model` to `path` as ONNX (opset 17): a float model as plain ONNX, a
    reference or lowered quantized model as QDQ (QuantizeLinear / DequantizeLinear around
    float ops, int8 weights per channel, int32 biases), which ONNX Runtime fuses into its
    quantized ops (QLinearConv, QLinearAdd, ...).

    `model`: a fuselage model file's path, a fuselage._core.Model, or a
    torch.fx.GraphModule (what fuselage.to_torch and fuselage.quantize_fx return; an
    nn.Module is traced as fuselage.export traces it). `example_inputs`: a tuple of
    tensors the model is run on once (the ONNX graph's shapes are theirs; shape
    arithmetic becomes constants); None takes the input shapes the model file recorded.
    Returns `path`. Raises OnnxExportError naming the node (or the path), and then writes
    nothing; an existing file is replaced only by a complete new one."""
    from fuselage import _core

    _write(model, example_inputs, lambda m, inputs: _core.save_onnx(m, path, inputs))
    return path
