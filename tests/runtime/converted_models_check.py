#!/usr/bin/python3
"""Runs PyTorch 1.13's own convert_fx output of torchvision models in fuselage's
interpreter and compares it with PyTorch's, engine 'onednn' (issue #18 item 3: the
quantized kernels real models need). Every model is prepared with the fbgemm (default) or
qnnpack backend config and default qconfig mapping, calibrated on random data,
converted, exported with fuselage.export and run by `fuselage run`. Prints, per model,
the share of output elements equal to PyTorch's and the largest difference in steps, or
the error that stopped it. Writes nothing into the repo.

    bazel build //tools:fuselage
    /usr/bin/python3 tests/runtime/converted_models_check.py [--models a,b,...]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import (get_fbgemm_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import fuselage  # noqa: E402

MODELS = ["mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "densenet121",
          "googlenet", "inception_v3", "squeezenet1_1", "convnext_tiny",
          "deeplabv3_mobilenet_v3_large"]


def build(name):
    if name.startswith("deeplabv3"):
        model = getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
        return model.eval(), torch.randn(1, 3, 128, 128)
    kwargs = {"aux_logits": False, "init_weights": False} if name in (
        "googlenet", "inception_v3") else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs).eval()
    size = 80 if name == "inception_v3" else 64
    return model, torch.randn(1, 3, size, size)


def randomize_batch_norm(model):
    """Untrained models have batch norms that make most activations tiny: give them
    statistics and affine parameters of a trained model's size."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.1)
            m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)
            m.weight.data = torch.rand_like(m.weight) + 0.5
            m.bias.data = torch.randn_like(m.bias) * 0.1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--config", default="fbgemm", choices=["fbgemm", "qnnpack"],
                        help="backend config and default qconfig mapping (both run on "
                             "PyTorch's onednn engine, whose arithmetic fuselage runs)")
    args = parser.parse_args()
    torch.backends.quantized.engine = "onednn"
    binary = os.path.join(REPO, "bazel-bin", "tools", "fuselage")
    tmp = tempfile.mkdtemp(prefix="fuselage_converted_")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, x = build(name)
        randomize_batch_norm(model)
        backend = (get_fbgemm_backend_config() if args.config == "fbgemm"
                   else get_qnnpack_backend_config())
        prepared = prepare_fx(model, get_default_qconfig_mapping(args.config), (x,),
                              backend_config=backend)
        with torch.no_grad():
            for _ in range(4):
                prepared(torch.randn_like(x))
        converted = convert_fx(prepared, backend_config=backend)
        try:
            with torch.no_grad():
                want = converted(x)
        except Exception as e:  # noqa: BLE001 - PyTorch's own failure is a result too
            print(f"{name}: PyTorch's converted model fails: {str(e).splitlines()[0][:120]}")
            continue
        if isinstance(want, dict):
            want = want["out"]
        path = os.path.join(tmp, name + ".fsl")
        try:
            fuselage.export(converted, (x,), path)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: export fails: {str(e).splitlines()[0][:160]}")
            continue
        inp, out = os.path.join(tmp, name + "_x.npy"), os.path.join(tmp, name + "_y.npy")
        np.save(inp, x.numpy())
        run = subprocess.run([binary, "run", path, "--input=" + inp, "--output=" + out],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{name}: fuselage run fails: {run.stderr.strip().splitlines()[-1][:200]}")
            continue
        got = torch.from_numpy(np.load(out))
        # The output is dequantized: its values are multiples of the last scale.
        values = torch.unique(want.flatten())
        step = float((values[1:] - values[:-1]).min()) if values.numel() > 1 else 1.0
        diff = (got - want).abs()
        equal = float((diff <= 1e-6 * max(1.0, float(want.abs().max()))).float().mean())
        print(f"{name}: {100 * equal:.2f} % of {want.numel()} outputs equal to PyTorch's, "
              f"max |diff| {float(diff.max()) / step:.2f} steps of {step:.4g} "
              f"({values.numel()} distinct values)")


if __name__ == "__main__":
    main()
