#!/usr/bin/python3
"""Dumps PyTorch 1.13's built-in backend configs to the golden file the C++ test reads.

Run with the interpreter that has PyTorch 1.13.1 (/usr/bin/python3):
    /usr/bin/python3 tests/backend_configs/dump_pytorch_backend_configs.py \
        > tests/backend_configs/pytorch_1_13_backend_configs.txt

One line per (backend, pattern) as PyTorch's BackendConfig holds it after its own
dict-override of duplicate patterns, with names spelled as graph/NAMING.md spells them:
  backend <name> | pattern <p> | observation <type> | fuser <yes|no> | fused <m> |
  root <m> | reference <m> | dtypes <d>; <d>; ...
A pattern is PyTorch's tree (outermost op first): a module type (nn.Conv2d), a function
(torch.nn.functional.relu, operator.add), a method (method:relu), MatchAllNode,
or a parenthesized tuple of those. A dtype config is
  in=<c> out=<c> weight=<c> bias=<dtype> dynamic=<bool>
where <c> is a dtype (or -) optionally followed by constraints in brackets.
"""
import torch
from torch.ao.quantization.backend_config import (
    get_fbgemm_backend_config,
    get_native_backend_config,
    get_qnnpack_backend_config,
)
from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
from torch.ao.quantization.utils import MatchAllNode
from torch.fx.node import _get_qualified_name

_MODULE_PREFIXES = [
    ("torch.nn.intrinsic.qat.", "nniqat."),
    ("torch.nn.intrinsic.quantized.", "nniq."),
    ("torch.nn.intrinsic.", "nni."),
    ("torch.ao.nn.intrinsic.qat.", "nniqat."),
    ("torch.ao.nn.intrinsic.", "nni."),
    ("torch.nn.qat.", "nnqat."),
    ("torch.ao.nn.qat.", "nnqat."),
    ("torch.nn.quantized._reference.", "nnqr."),
    ("torch.ao.nn.quantized.reference.", "nnqr."),
    ("torch.nn.quantized.", "nnq."),
    ("torch.nn.", "nn."),
]


def module_name(cls):
    qual = cls.__module__ + "." + cls.__qualname__
    for prefix, alias in _MODULE_PREFIXES:
        if qual.startswith(prefix):
            return alias + cls.__qualname__
    raise ValueError("unmapped module class " + qual)


def function_name(fn):
    # graph/NAMING.md spells functionals `torch.nn.functional.x` even where torch.fx would
    # record the builtin they alias (F.conv2d is torch.conv2d, F.linear is
    # torch._C._nn.linear); everything else as torch.fx records it, `_operator` spelled
    # `operator`.
    if getattr(torch.nn.functional, getattr(fn, "__name__", ""), None) is fn:
        return "torch.nn.functional." + fn.__name__
    name = _get_qualified_name(fn)
    if name.startswith("_operator."):
        name = "operator." + name[len("_operator."):]
    return name


def pattern_str(p):
    if p is MatchAllNode:
        return "MatchAllNode"
    if isinstance(p, tuple):
        return "(" + ", ".join(pattern_str(x) for x in p) + ")"
    if isinstance(p, str):
        return "method:" + p
    if isinstance(p, type) and issubclass(p, torch.nn.Module):
        return module_name(p)
    if callable(p):
        return function_name(p)
    raise ValueError("unmapped pattern element %r" % (p,))


def dtype_str(d):
    return "-" if d is None else str(d)


def number_str(x):
    return repr(float(x)) if isinstance(x, float) else str(x)


def constrained_str(c):
    parts = []
    for field in ["quant_min_lower_bound", "quant_max_upper_bound", "scale_min_lower_bound",
                  "scale_max_upper_bound", "scale_exact_match", "zero_point_exact_match"]:
        value = getattr(c, field, None)
        if value is not None:
            parts.append("%s=%s" % (field, number_str(value)))
    return dtype_str(c.dtype) + ("[" + ",".join(parts) + "]" if parts else "")


def dtype_config_str(d):
    return "in=%s out=%s weight=%s bias=%s dynamic=%s" % (
        constrained_str(d.input_dtype_with_constraints),
        constrained_str(d.output_dtype_with_constraints),
        constrained_str(d.weight_dtype_with_constraints),
        dtype_str(d.bias_dtype),
        "true" if d.is_dynamic else "false")


def optional_module(m):
    return "-" if m is None else module_name(m)


def main():
    for getter in [get_native_backend_config, get_fbgemm_backend_config,
                   get_qnnpack_backend_config, get_x86_backend_config]:
        config = getter()
        lines = []
        for pattern, c in config.configs.items():
            lines.append(" | ".join([
                "backend " + config.name,
                "pattern " + pattern_str(pattern),
                "observation " + c.observation_type.name,
                "fuser " + ("yes" if c.fuser_method is not None else "no"),
                "fused " + optional_module(c.fused_module),
                "root " + optional_module(c.root_module),
                "reference " + optional_module(c.reference_quantized_module),
                "dtypes " + "; ".join(dtype_config_str(d) for d in c.dtype_configs),
            ]))
        for line in sorted(lines):
            print(line)


if __name__ == "__main__":
    main()
