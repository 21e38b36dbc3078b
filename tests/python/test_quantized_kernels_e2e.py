"""PyTorch 1.13's own convert_fx output (fbgemm backend config and default qconfig
mapping, engine onednn) runs in fuselage and gives PyTorch's outputs: a small model made
of the ops issue #18's torchvision models run on quantized tensors (hardswish, the
squeeze-excitation block with its avg pool / hardsigmoid / mul, standalone BNReLU2d,
cat, dropout, bilinear interpolate, layer norm, transposed and 1-d convs, sigmoid,
flatten, linear). tests/runtime/converted_models_check.py does the same for the models."""

import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuselage
from conftest import randomize_batch_norm, x86_engine


class KernelMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.act = nn.Hardswish()
        self.se_pool = nn.AdaptiveAvgPool2d(1)
        self.se_fc1 = nn.Conv2d(16, 8, 1)
        self.se_relu = nn.ReLU()
        self.se_fc2 = nn.Conv2d(8, 16, 1)
        self.se_gate = nn.Hardsigmoid()
        self.branch = nn.Conv2d(16, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(24)  # after cat: nn.BatchNorm2d + ReLU -> nniq.BNReLU2d
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(0.2)
        self.up = nn.ConvTranspose2d(24, 12, 2, stride=2)
        self.norm = nn.LayerNorm(12)
        self.seq = nn.Conv1d(12, 6, 3, padding=1)
        self.gate = nn.Sigmoid()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        x = self.act(self.stem(x))
        s = self.se_gate(self.se_fc2(self.se_relu(self.se_fc1(self.se_pool(x)))))
        excited = x * s
        x = torch.cat([excited, self.branch(excited)], 1)
        x = self.drop(self.relu(self.bn(x)))
        resized = F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=False)
        x = self.up(resized)                             # [1, 12, 22, 26]
        normed = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.gate(self.seq(torch.flatten(normed, 2)))  # [1, 6, 572]
        # Intermediate values are outputs too, so far more than the 5 logits are compared.
        return excited, resized, normed, x, self.fc(x.mean(-1))


def test_pytorch_converted_model_runs_in_fuselage_with_pytorchs_outputs(cli, tmp_path):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.backend_config import get_fbgemm_backend_config
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = x86_engine()
    try:
        torch.manual_seed(0)
        model = randomize_batch_norm(KernelMix().eval())
        with torch.no_grad():  # the cat's BatchNorm2d is 24 wide: randomize it as well
            model.bn.running_mean.copy_(torch.randn(24) * 0.1)
            model.bn.running_var.copy_(torch.rand(24) + 0.5)
        x = torch.randn(1, 3, 12, 14)
        backend = get_fbgemm_backend_config()
        prepared = prepare_fx(model, get_default_qconfig_mapping("fbgemm"), (x,),
                              backend_config=backend)
        with torch.no_grad():
            for _ in range(4):
                prepared(torch.randn(1, 3, 12, 14))
        converted = convert_fx(prepared, backend_config=backend)
        kinds = {type(m).__name__ for m in converted.modules()}
        # The quantized modules this test is about are really there.
        assert {"Hardswish", "BNReLU2d", "Dropout", "ConvTranspose2d", "LayerNorm",
                "Conv1d"} <= kinds, kinds
        with torch.no_grad():
            want = converted(x)
        path = tmp_path / "mix.fsl"
        fuselage.export(converted, (x,), str(path))
        np.save(tmp_path / "x.npy", x.numpy())
        outputs = [tmp_path / f"y{i}.npy" for i in range(len(want))]
        run = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                              "--output=" + ",".join(str(o) for o in outputs)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        for i, (out, expected) in enumerate(zip(outputs, want)):
            got = torch.from_numpy(np.load(out))
            assert got.shape == expected.shape, i
            assert torch.equal(got, expected), (i, (got != expected).sum().item())
    finally:
        torch.backends.quantized.engine = engine
