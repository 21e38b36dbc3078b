"""Writes the printer goldens from PyTorch's own torch.fx codegen.

Run with the interpreter that has PyTorch 1.13 (on Debian 12: /usr/bin/python3):
    /usr/bin/python3 tests/graph/testdata/make_fx_goldens.py
It traces three nn.Modules with torch.fx.symbolic_trace and writes GraphModule.code,
normalized the way fuselage's PrintCode documents: no leading blank lines, no trailing
indentation-only line, and without the `;  x = None` statements FX appends to free dead
values. tests/graph/printer_test.cc and slice_arg_test.cc build the same graphs in C++ and
compare.
"""
import os
import re

import torch
import torch.fx


class Residual(torch.nn.Module):
    """The conv -> bn -> add -> relu block (tools/examples.h)."""

    def __init__(self):
        super().__init__()
        self.identity = torch.nn.Identity()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        identity = self.identity(x)
        out = self.conv(x)
        out = self.bn(out)
        out = out + identity
        return self.relu(out)


class Mixed(torch.nn.Module):
    """Every kind of statement: digit module paths, kwargs, methods, getitem, get_attr,
    constants of each type, a tuple output."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.layer1 = torch.nn.Sequential(torch.nn.ReLU())

    def forward(self, x, y):
        conv = self.conv(x)
        a = self.layer1[0](conv)
        f = torch.flatten(a, start_dim=1)
        g = f.view(1, -1)
        d = g.dequantize()
        w = self.conv.weight
        s = y[0]
        n = -s
        q = torch.quantize_per_tensor(d, 0.1, 3, torch.quint8)
        return (conv, q, w, n, 1e-05, [0.5, 'a', None, True])


class Indexing(torch.nn.Module):
    """Slices, Ellipsis, None and a slice bound that is a node (tests/graph/slice_arg_test.cc)."""

    def forward(self, x, n):
        s = x.shape[-2:]
        y = x[..., 1:, ::2]
        z = x[:, :n]
        w = x[None, 0]
        return (s, y, z, w)


def normalized_code(module):
    code = torch.fx.symbolic_trace(module).code
    lines = [re.sub(r";  (\w+ = )+None$", "", line) for line in code.strip("\n").split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, module in [("residual", Residual()), ("mixed", Mixed()), ("indexing", Indexing())]:
        with open(os.path.join(here, f"fx_code_{name}.txt"), "w") as f:
            f.write(normalized_code(module))


if __name__ == "__main__":
    main()
