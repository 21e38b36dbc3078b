"""fuselage: the PyTorch bridge of the fuselage graph engine.

    import fuselage
    fuselage.export(model, (example_input,), "model.fsl")   # nn.Module or fx.GraphModule
    gm = fuselage.to_torch("model.fsl")                       # a runnable fx.GraphModule

`export` accepts float models and what PyTorch's prepare_fx, convert_to_reference_fx and
convert_fx return (quantized tensors included). `to_torch` rebuilds float graphs and
lowered quantized graphs with PyTorch's own modules and ops, so a graph fuselage produced
runs on PyTorch's kernels. The model file format is graph/model.proto (protobuf text
when the file name ends in .textproto or .pbtxt, as in the C++ tool); names follow
graph/NAMING.md. A model PyTorch's prepare_fx returned is written with fuselage's
prepared-model layout, so `fuselage convert` quantizes the ops PyTorch's convert would.

The fused modules PyTorch 1.13 lacks are fuselage.nn.ConvAdd2d / ConvAddReLU2d (float),
fuselage.nn.quantized.ConvAdd2d / ConvAddReLU2d (both inputs quantized, bit-exact with
fuselage's kernel), and fuselage.fusers builds them with PyTorch's fuser signature.
A fuselage.FusedSubgraph (a multi-output pattern's fused module) becomes
fuselage.nn.FusedSubgraph, replaying its steps; so does a module of a type a backend config
declares (fused_module_type), whose steps the model carries (a FusedSubgraph subclass
named after the type).

`fuselage._core` is the engine in process (the compiled extension, built by
`bash tools/demo.sh`): models from bytes or files, fuse / prepare / calibrate / convert /
lower, and the interpreter on numpy arrays. It is imported on first use, so everything
above works without it.
"""

import warnings as _warnings

# PyTorch 2 deprecates its quantized tensor dtypes (torch.quint8 / qint8 / qint32) and warns
# once when anything creates one. fuselage creates them where its results are PyTorch's
# quantized modules and tensors (to_torch of a lowered graph, fuselage.quantize_fx,
# fuselage.nn.quantized); docs/guide/python.md says so and names the alternative, so the
# warning is not raised from fuselage's own code. (PyTorch warns once per process: after
# fuselage made such a tensor, a user's own call does not warn either.)
_warnings.filterwarnings(
    "ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other "
    r"quantized tensor creation functions", category=UserWarning, module=r"fuselage(\.|$)")

from fuselage._exporter import export, to_proto  # noqa: E402
from fuselage._importer import from_proto, to_torch  # noqa: E402
from fuselage._exported import from_exported  # noqa: E402
from fuselage.onnx import from_onnx, to_onnx  # noqa: E402  (imports onnx only when called)
from fuselage.errors import (ConfigTranslationError, ExportError, FuselageError, ModelFileError,
                             ModuleError, OnnxExportError, OnnxImportError,
                             PatternError)
from fuselage import fusers, nn  # fused modules PyTorch 1.13 lacks, and their fusers
from fuselage._patterns import pattern_from_function  # patterns written as Python functions

__all__ = [
    "export",
    "to_torch",
    "to_proto",
    "from_proto",
    "from_exported",
    "to_onnx",
    "from_onnx",
    "ConfigTranslationError",
    "ExportError",
    "FuselageError",
    "ModelFileError",
    "ModuleError",
    "OnnxExportError",
    "OnnxImportError",
    "PatternError",
    "pattern_from_function",
    "fusers",
    "nn",
]


def __getattr__(name):
    # `fuselage._core` on first access: the extension may be missing (not built yet), and
    # export / to_torch must not need it. _core.py raises an ImportError saying how to
    # build it.
    if name == "_core":
        import importlib

        return importlib.import_module("fuselage._core")
    raise AttributeError("module 'fuselage' has no attribute %r" % name)
