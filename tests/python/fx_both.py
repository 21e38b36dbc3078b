"""Helpers of the tests that run one model through PyTorch's FX flow and fuselage's
drop-in side by side (the dynamic, weight-only and recurrent tests)."""

import contextlib
import copy
import warnings

import torch
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

from fuselage.quantize_fx import convert_fx, prepare_fx


@contextlib.contextmanager
def engine(name):
    """torch.backends.quantized.engine set to `name` inside, restored after."""
    saved = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = saved


def leaf_types(model):
    """The modules the graph calls, by name, with their types."""
    return {n.target: type(model.get_submodule(n.target)) for n in model.graph.nodes
            if n.op == "call_module"}


def quantize_both(model, mapping, example, backend_config):
    """(fuselage's, PyTorch's) converted models of `model`, each calibrated on `example`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_prepare_fx(copy.deepcopy(model), mapping, (example,),
                                  backend_config=backend_config)
        theirs(example)
        theirs = torch_convert_fx(theirs, backend_config=backend_config)
        ours = prepare_fx(copy.deepcopy(model), mapping, (example,),
                          backend_config=backend_config)
        ours(example)
        ours = convert_fx(ours, backend_config=backend_config)
    return ours, theirs


def relative_error(got, want):
    """The largest difference relative to `want`'s largest magnitude."""
    return (got - want).abs().max().item() / want.abs().max().item()
