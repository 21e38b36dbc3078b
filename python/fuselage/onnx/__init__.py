"""fuselage.onnx: fuselage models as ONNX, for ONNX Runtime.

    import fuselage
    fuselage.to_onnx(converted, "model.onnx", (x,))   # converted: fuselage.quantize_fx's

A float model is written as plain ONNX; a quantized one (lowered, as convert_fx returns it,
or reference, as convert_to_reference_fx does) as QDQ: QuantizeLinear / DequantizeLinear
around float ops, weights int8 per output channel, biases int32, activations uint8 or int8
as the qconfig made them, every graph output dequantized with its own scale and zero point.
ONNX Runtime (graph optimization EXTENDED or above) fuses that into QLinearConv,
QLinearAdd, QLinearMul, QGemm, QLinearGlobalAveragePool, QLinearConcat. The writer is
the engine's (onnx/onnx_writer.h, which lists the ops that have an ONNX form), run through
the compiled extension (fuselage.onnx._export); docs/guide/onnx.md has the details.

ONNX in: `fuselage.from_onnx("model.onnx")` reads a float ONNX model as a torch.fx
GraphModule of PyTorch modules and functions (fuselage.onnx._import: the C++ ONNX reader,
onnx/onnx_reader.h, through the compiled extension), and
`fuselage.onnx.quantize_static(model_input, model_output, calibration_data_reader, ...)`
is ONNX Runtime's quantize_static with its signature, run by fuselage
(fuselage.onnx._quantize).

The onnx package is imported on use: `import fuselage` and to_onnx work without it.
"""

from fuselage.onnx._export import to_onnx  # imports onnx only when called
from fuselage.onnx._import import from_onnx
from fuselage.onnx._quantize import quantize_static

__all__ = ["to_onnx", "from_onnx", "quantize_static"]
