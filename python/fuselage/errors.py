"""The exceptions of the fuselage bridge. Each message names the node or module and the
field at fault, and what was expected."""


class FuselageError(Exception):
    """Base class of the bridge's errors."""


class ExportError(FuselageError):
    """The PyTorch model holds something a fuselage model file cannot express: a module
    type or function with no fuselage name, a value of an unsupported type, a tensor of an
    unsupported dtype."""


class ModelFileError(FuselageError):
    """A model file is malformed, or names something PyTorch cannot rebuild."""


class ModuleError(FuselageError, ValueError):
    """A fuselage module (fuselage.nn, fuselage.nn.quantized) or fuser (fuselage.fusers)
    was given parts or inputs it does not take: the wrong module types, a tensor of the
    wrong dtype, quantization scheme or shape."""


class ConfigTranslationError(FuselageError, ValueError):
    """A PyTorch QConfigMapping or BackendConfig holds something fuselage's config formats
    cannot express (python/fuselage/_translate.py): a custom observer class, a dynamic
    qconfig, a fake-quantize outside prepare_fx / prepare_qat_fx, an object type or module without a
    fuselage name, a fuser method that is not callable, a getter that does more than pick pattern
    positions; or what prepare_qat_fx cannot train as PyTorch does (fuselage._qat); or a
    qconfig PyTorch's prepare_fx refuses with a ValueError (a fixed-qparams op's)."""


class QConfigAssertionError(ConfigTranslationError, AssertionError):
    """A qconfig PyTorch's prepare_fx refuses with an AssertionError (its
    assert_valid_qconfig: a per-channel weight observer on a ConvTranspose): also an
    AssertionError, so code written for PyTorch's prepare_fx catches it as before."""


class PatternError(FuselageError, ValueError):
    """A Python function given to fuselage.pattern_from_function cannot be written as a
    fusion pattern: several outputs, a parameter read (get_attr), an inner node used twice,
    a module or function without a fuselage name. The message names the traced node."""


class OnnxExportError(FuselageError):
    """fuselage.to_onnx cannot write the model as ONNX: a node whose op has no ONNX mapping,
    an argument the mapping cannot express (a padding mode, a per-channel quantized
    activation), inputs it cannot run the model on, or a path it cannot write. The message
    names the node (and the field) or the path."""


class OnnxImportError(FuselageError):
    """fuselage.from_onnx or fuselage.onnx.quantize_static cannot read an ONNX model: a
    malformed or truncated file, external data that is missing, an opset or a domain
    fuselage does not read, an op or an attribute value without a PyTorch form, an option
    of quantize_static fuselage does not support. The message names the node (or the
    argument, tensor or path) and what was expected."""
