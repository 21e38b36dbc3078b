"""Issue 20 item 6: are fuselage's calibrated activation qparams bit-equal to PyTorch's?

    PYTHONPATH=python /usr/bin/python3 bench/calibration_vs_pytorch.py [--models resnet18,mobilenet_v2]

Needs `bazel build //tools:fuselage //tests/conformance:minmax_quantize` (conformance.py
builds them). Per model (the conformance suite's: torchvision, weights=None, randomized
batch norms, MinMax quint8 activations, per-tensor symmetric weights, qnnpack backend
config, 2 calibration batches of 1x3x224x224) fuselage calibrates its way
(tests/conformance/minmax_quantize: every float conv on oneDNN) and PyTorch calibrates
prepare_fx's model twice:

  eager     as PyTorch 1.13 runs it: each conv goes to oneDNN or to its own im2col + BLAS
            path by ConvParams::use_mkldnn (aten/src/ATen/native/Convolution.cpp);
  onednn    every nn.Conv2d forward through torch.mkldnn_convolution (oneDNN, the library
            fuselage's float convs use).

Printed per model and variant: the fraction of activation observers whose (scale, zero
point) are bit-equal to fuselage's, the largest relative scale difference, and the
whole-network agreement of fuselage's lowered model with PyTorch's convert_fx model (onednn
engine): elements equal / largest difference in output steps.
"""

import argparse
import contextlib
import copy
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "conformance"))
import conformance as conf  # noqa: E402
import fuselage  # noqa: E402


@contextlib.contextmanager
def convs_on_onednn():
    """Every nn.Conv2d (fused modules' too: they call their nn.Conv2d child) runs
    torch.mkldnn_convolution while the block runs."""
    original = nn.Conv2d._conv_forward

    def onednn_forward(self, x, weight, bias):
        if self.padding_mode != "zeros":
            return original(self, x, weight, bias)
        return torch.mkldnn_convolution(x, weight, bias, self.padding, self.stride,
                                        self.dilation, self.groups)

    nn.Conv2d._conv_forward = onednn_forward
    try:
        yield
    finally:
        nn.Conv2d._conv_forward = original


def pytorch_calibrated(model, calibration, evaluation, onednn):
    torch.backends.quantized.engine = "onednn"
    config = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), conf.minmax_qconfig_mapping(), (evaluation,),
                          backend_config=config)
    with torch.no_grad(), (convs_on_onednn() if onednn else contextlib.nullcontext()):
        for batch in calibration:
            prepared(batch)
    reference = convert_to_reference_fx(copy.deepcopy(prepared), backend_config=config)
    converted = convert_fx(copy.deepcopy(prepared), backend_config=config)
    with torch.no_grad():
        out = converted(evaluation)
    out = (out.dequantize() if out.is_quantized else out).numpy()
    return reference, out


def activation_agreement(ours, theirs):
    """(bit-equal, compared, max relative scale difference) over activation observers."""
    a, b = conf.activation_qparams(ours), conf.activation_qparams(theirs)
    equal = compared = 0
    worst = 0.0
    for key in sorted(set(a) & set(b)):
        if len(a[key]) != 1 or len(b[key]) != 1:
            continue
        (sa, za, _), = a[key]
        (sb, zb, _), = b[key]
        compared += 1
        equal += sa == sb and za == zb
        worst = max(worst, abs(sa - sb) / abs(sb))
    return equal, compared, worst


def measure(name, workdir):
    model, shape = conf.build_model(name)
    calibration, evaluation = conf.make_inputs(shape)
    files = lambda f: os.path.join(workdir, f"{name}_{f}")  # noqa: E731
    paths = []
    for i, batch in enumerate(calibration):
        paths.append(files(f"calibration{i}.npy"))
        np.save(paths[-1], batch.numpy())
    np.save(files("eval.npy"), evaluation.numpy())
    model_path, ref_path, lowered_path = files("float.fsl"), files("ref.fsl"), files("low.fsl")
    fuselage.export(model, (evaluation,), model_path)
    conf.run_tool([conf.MINMAX_QUANTIZE, model_path, "--calibration=" + ",".join(paths),
                   f"--reference={ref_path}", "-o", lowered_path])
    ours_ref = fuselage.to_torch(ref_path)
    ours_out = conf.fuselage_run(lowered_path, files("eval.npy"), files("out.npy"))
    rows = []
    for variant, onednn in (("eager", False), ("onednn", True)):
        reference, theirs_out = pytorch_calibrated(model, calibration, evaluation, onednn)
        equal, compared, worst = activation_agreement(ours_ref, reference)
        agree, steps = conf.step_agreement(ours_out, theirs_out, conf.output_scale(reference))
        rows.append((name, variant, f"{equal}/{compared} ({100 * equal / compared:.0f}%)",
                     f"{worst:.1e}", f"{100 * agree:.2f}% / {steps}"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    args = parser.parse_args()
    print("| model | PyTorch convs | activation qparams bit-equal | max rel scale diff | "
          "whole network vs convert_fx: equal / max steps |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            for row in measure(name, workdir):
                print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
