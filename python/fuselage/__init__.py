"""fuselage: the PyTorch bridge of the fuselage graph engine.

    import fuselage
    fuselage.export(model, (example_input,), "model.fsl")   # nn.Module or fx.GraphModule
    gm = fuselage.to_torch("model.fsl")                       # a runnable fx.GraphModule

`export` accepts float models and what PyTorch's prepare_fx, convert_to_reference_fx and
convert_fx return (quantized tensors included). `to_torch` rebuilds float graphs and
lowered quantized graphs with PyTorch's own modules and ops, so a graph fuselage produced
runs on PyTorch's kernels. The model file format is graph/model.proto; names follow
graph/NAMING.md.
"""

from fuselage._exporter import export, to_proto
from fuselage._importer import from_proto, to_torch
from fuselage.errors import ConfigTranslationError, ExportError, FuselageError, ModelFileError

__all__ = [
    "export",
    "to_torch",
    "to_proto",
    "from_proto",
    "ConfigTranslationError",
    "ExportError",
    "FuselageError",
    "ModelFileError",
]
