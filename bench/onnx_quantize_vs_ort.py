"""Issue 37 item 4: fuselage.onnx.quantize_static against ONNX Runtime's own, side by side.

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/onnx_quantize_vs_ort.py \
        [--model resnet50] [--size 224] [--samples 16]

torchvision's model (weights=None, randomized batch-norm statistics) exported to ONNX at
opset 17, then quantized by both with the same seeded samples and settings (QDQ, uint8
activations, int8 weights per channel, MinMax): end-to-end wall time of each quantize_static
call (reading the file, calibration, writing the QDQ model), SQNR of each QDQ model run by
ONNX Runtime against the float model, and ORT's inference of each at one thread (median of
5, graph optimization EXTENDED). Torch runs on one thread too.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from onnxruntime import quantization

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from conftest import randomize_batch_norm  # noqa: E402
from onnx_calibration import Reader, sqnr  # noqa: E402

import fuselage.onnx  # noqa: E402


def session(path):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_timed(path, x):
    """(output, median seconds of 5 runs after one warm-up)."""
    s = session(path)
    name = s.get_inputs()[0].name
    out = s.run(None, {name: x})[0]
    times = []
    for _ in range(5):
        started = time.perf_counter()
        s.run(None, {name: x})
        times.append(time.perf_counter() - started)
    return out, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = randomize_batch_norm(getattr(torchvision.models, args.model)(weights=None)).eval()
    shape = (1, 3, args.size, args.size)
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.samples)]
    x = rng.standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        float_path = os.path.join(tmp, "float.onnx")
        torch.onnx.export(model, (torch.from_numpy(x),), float_path, input_names=["x"],
                          opset_version=17, dynamo=False)
        want, float_s = run_timed(float_path, x)
        print(f"{args.model} {args.size}x{args.size}, {args.samples} samples; ORT float "
              f"inference {float_s * 1e3:.1f} ms")
        print("| flow | quantize_static s | SQNR (ORT runs it) | ORT int8 inference ms |")
        print("| --- | --- | --- | --- |")
        for label, quantize in (("fuselage", fuselage.onnx.quantize_static),
                                ("ONNX Runtime", quantization.quantize_static)):
            path = os.path.join(tmp, f"{label.split()[0]}.onnx")
            started = time.perf_counter()
            quantize(float_path, path, Reader("x", samples),
                     quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                     activation_type=quantization.QuantType.QUInt8,
                     weight_type=quantization.QuantType.QInt8)
            quantize_s = time.perf_counter() - started
            got, int8_s = run_timed(path, x)
            print(f"| {label} | {quantize_s:.2f} | {sqnr(want, got):.2f} dB | "
                  f"{int8_s * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
