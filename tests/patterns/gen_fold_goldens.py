"""Writes PyTorch 1.13's own batch-norm folding as goldens for fold_pytorch_test.

For conv2d+bn2d and linear+bn1d with random weights and non-trivial statistics, saves the
unfused model and the model `fuse_fx` made of it, both as fuselage model files. The C++
test fuses the first and compares the folded tensors bit for bit with the second.

Run from the repository root:
  PYTHONPATH=python /usr/bin/python3 tests/patterns/gen_fold_goldens.py
"""
import os

import torch
import fuselage
from torch.ao.quantization.quantize_fx import fuse_fx

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def randomize_bn(bn, generator):
    n = bn.num_features
    bn.weight.data = torch.rand(n, generator=generator) * 2 + 0.1
    bn.bias.data = torch.randn(n, generator=generator)
    bn.running_mean.data = torch.randn(n, generator=generator)
    bn.running_var.data = torch.rand(n, generator=generator) * 3 + 0.05


def save_pair(name, model, example):
    model.eval()
    fuselage.export(model, None, os.path.join(OUT, f"{name}.fsl"))
    fused = fuse_fx(model)
    fuselage.export(fused, None, os.path.join(OUT, f"{name}_fused_by_pytorch.fsl"))


def main():
    g = torch.Generator().manual_seed(1313)
    torch.manual_seed(1313)
    conv_bn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8))
    randomize_bn(conv_bn[1], g)
    save_pair("conv_bn", conv_bn, torch.randn(1, 3, 8, 8))
    linear_bn = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8))
    randomize_bn(linear_bn[1], g)
    save_pair("linear_bn", linear_bn, torch.randn(2, 16))


if __name__ == "__main__":
    main()
