"""The `qconfig` attribute PyTorch's prepare_fx leaves on the prepared model's modules.

PyTorch's prepare_fx runs propagate_qconfig_ with the mapping's global, object-type and
module-name entries (each module inherits its parent's), then sets each called module's
qconfig with the full precedence (module name, module-name regex, object type, global;
generate_qconfig_map). Users and PyTorch's own tests read it (`prepared.linear.qconfig`);
fuselage's convert does not need it (the weight plans carry the weight observers). It is
set here as PyTorch's propagate_qconfig_ does (without its device-check wrapper, which
PyTorch 2 makes a local function that pickle cannot save) and with PyTorch's own helpers,
on the modules of the prepared GraphModule, not on its observers (PyTorch inserts those
after propagating). As in PyTorch, propagating
checks each module's qconfig (assert_valid_qconfig): a per-channel weight observer on a
ConvTranspose is refused, a QConfigAssertionError."""

import torch.ao.nn.intrinsic as nni
from torch.ao.quantization.fake_quantize import FakeQuantizeBase

from fuselage import _prepared
from fuselage.errors import QConfigAssertionError


def _torch_helpers():
    """(flattened qconfig dict, qconfig of a module type / name, qconfig check) of the
    running PyTorch."""
    try:  # PyTorch 2
        from torch.ao.quantization.fx.qconfig_mapping_utils import (
            _get_flattened_qconfig_dict as flattened,
            _maybe_adjust_qconfig_for_module_type_or_name as adjust)
        from torch.ao.quantization.qconfig import _assert_valid_qconfig as check
    except ImportError:  # PyTorch 1.13
        from torch.ao.quantization.qconfig_mapping_utils import (
            get_flattened_qconfig_dict as flattened,
            maybe_adjust_qconfig_for_module_type_or_name as adjust)
        from torch.ao.quantization.qconfig import assert_valid_qconfig as check
    return flattened, adjust, check


def _propagate(module, flat, check, parent_qconfig=None, prefix=""):
    """PyTorch's _propagate_qconfig_helper without its device-check wrapper (PyTorch 2's
    is a local function: a prepared model holding it could not be pickled or saved)."""
    qconfig = flat.get(type(module), parent_qconfig)
    qconfig = flat.get(prefix, qconfig)
    try:
        check(qconfig, module)
    except AssertionError as e:
        # PyTorch's message, word for word (code written for PyTorch compares it); the
        # module and qconfig at fault in a note.
        error = QConfigAssertionError(str(e))
        error.add_note(f"prepare_fx: module '{prefix}' ({type(module).__name__}), qconfig "
                       f"{qconfig!r}")
        raise error from e
    module.qconfig = qconfig
    for name, child in module.named_children():
        _propagate(child, flat, check, qconfig, f"{prefix}.{name}" if prefix else name)


def _is_observer(module):
    return _prepared._is_observer_module(module) or isinstance(module, FakeQuantizeBase)


def set_module_qconfigs(prepared, qconfig_mapping):
    """Sets `qconfig` on the modules of `prepared` (in place) as PyTorch's prepare_fx does:
    propagated by type and name, then each called module's by PyTorch's precedence, a
    fused module by its first part's type (PyTorch's update_qconfig_for_fusion)."""
    flattened, adjust, check = _torch_helpers()
    _propagate(prepared, flattened(qconfig_mapping), check)
    modules = dict(prepared.named_modules(remove_duplicate=False))
    for module in modules.values():
        if _is_observer(module) and "qconfig" in module.__dict__:
            del module.qconfig
    # PyTorch's prepared GraphModule is a new root, without the float model's qconfig.
    prepared.__dict__.pop("qconfig", None)
    for node in prepared.graph.nodes:
        if node.op != "call_module":
            continue
        module = modules.get(node.target)
        if module is None or _is_observer(module):
            continue
        kind = type(module[0]) if isinstance(module, nni._FusedModule) else type(module)
        module.qconfig = adjust(qconfig_mapping, kind, node.target,
                                qconfig_mapping.global_qconfig)
