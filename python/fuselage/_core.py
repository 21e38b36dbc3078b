"""fuselage._core: the engine in process (the compiled extension, python/core/).

This file only loads it: the extension is `_fuselage_core.cpython-311-x86_64-linux-gnu.so`
in this folder, built and copied here by `bash tools/demo.sh` (or tools/test.sh,
tools/build_extension.sh). Its own docstring, `help(fuselage._core)`, lists the API:
Model (load / save / from_bytes / to_bytes / code / verify), fuse, explain, prepare,
calibrate, convert, lower, quantize, run and the report types; from_torch / to_torch, defined
here, move models between torch.fx and the engine in memory.
"""

# The API version this Python package expects; the extension carries its own
# (python/core/module.cc kApiVersion). They differ when the .so is older than the sources.
_EXPECTED_API_VERSION = 3

_REBUILD = "run `bash tools/demo.sh` (or `bash tools/build_extension.sh`) to build it"

try:
    from fuselage import _fuselage_core as _ext
except ImportError as e:
    raise ImportError(
        "fuselage._core: the compiled extension "
        "python/fuselage/_fuselage_core.cpython-311-x86_64-linux-gnu.so is missing or does "
        "not load (" + str(e) + "); " + _REBUILD + ". fuselage.export / to_torch work "
        "without it.") from e

if getattr(_ext, "API_VERSION", None) != _EXPECTED_API_VERSION:
    raise ImportError(
        "fuselage._core: the compiled extension is stale (API version %r, this package "
        "expects %d); %s." % (getattr(_ext, "API_VERSION", None), _EXPECTED_API_VERSION,
                              _REBUILD))

__doc__ = _ext.__doc__
for _name in dir(_ext):
    if not _name.startswith("__"):
        globals()[_name] = getattr(_ext, _name)
del _name


def from_torch(module, example_inputs=None, non_traceable=None):
    """The Model of a torch nn.Module or fx.GraphModule (what fuselage.export would write),
    handed over in memory: the structure as bytes without tensor data, the tensors read in
    place by the engine (Model.from_parts; no copy where the layout allows, and the engine
    copies a buffer before it writes to it, so the module's tensors never change).
    `example_inputs` as for fuselage.export; `non_traceable` = (module names, module
    classes) kept as opaque modules, never traced into (prepare_custom_config's)."""
    from fuselage import _exporter

    tensors = []
    structure = _exporter.to_proto(module, example_inputs, tensors,
                                   non_traceable).SerializeToString()
    return Model.from_parts(structure, tensors)


def to_torch(model, consume=False, share=False):
    """The torch.fx.GraphModule of a Model (what fuselage.to_torch would read from its file),
    handed over in memory. With consume=True the model's tensors become the GraphModule's
    without a copy (Model.take_parts) and `model` is empty afterwards; with share=True
    `model` stays and shares its tensors' memory with the GraphModule (Model.share_parts:
    a write on the torch side is seen by the model); otherwise a copy is handed over (its
    buffers copied as they leave), and `model` stays as it was."""
    from fuselage import _importer
    from fuselage._proto import model_pb2

    if share:
        structure, tensors = model.share_parts()
    else:
        structure, tensors = (model if consume else model.copy()).take_parts()
    return _importer.from_proto(model_pb2().Model.FromString(structure), tensors)
