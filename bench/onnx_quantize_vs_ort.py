"""Issue 37 item 4: fuselage's quantize of an ONNX model against ONNX Runtime's quantize_static.

    bazel build //tools:fuselage
    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/onnx_quantize_vs_ort.py \
        [--model resnet50] [--size 224] [--samples 16]

Three flows: the C++ CLI (`fuselage quantize model.onnx --calibration=s0.npy,... -o
model.qdq.onnx`, ORT's settings as a qconfig mapping file: MinMax uint8 activations, int8
symmetric [-127, 127] weights per channel; --cli-threads, default 2, the cores of the machine
this is measured on, as ONNX Runtime's calibration session takes every core: with MinMax
observers the CLI runs that many samples at once, one thread each, so no OpenMP team waits
on a busy core), fuselage.onnx.quantize_static, and
onnxruntime.quantization.quantize_static. Besides wall time, the CPU seconds each took (this
process's, which include ORT's threads, or the CLI child's): on a shared machine the fairer
of the two.

torchvision's model (weights=None, randomized batch-norm statistics) exported to ONNX at
opset 17, then quantized by both with the same seeded samples and settings (QDQ, uint8
activations, int8 weights per channel, MinMax): end-to-end wall time of each quantize_static
call (reading the file, calibration, writing the QDQ model), SQNR of each QDQ model run by
ONNX Runtime against the float model, and ORT's inference of each at one thread (median of
5, graph optimization EXTENDED). Torch runs on one thread too.

First, the floor of any MinMax calibration on this machine: the model's float multiply-adds
(its convs' and Gemms' / MatMuls', from ONNX's inferred shapes) times the samples, over
the machine's float32 matmul rate (torch.mm of 2048 x 2048, one thread and all threads):
calibration must run every sample's float forward, and a forward cannot compute faster
than the machine multiplies matrices.
"""

import argparse
import os
import resource
import statistics
import subprocess
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

CLI = os.path.join(os.path.dirname(__file__), "..", "bazel-bin", "tools", "fuselage")
# ORT's quantize_static settings (QDQ, per_channel=True, QUInt8 activations, QInt8 weights,
# MinMax) as a fuselage qconfig mapping, as fuselage.onnx.quantize_static makes them.
ORT_LIKE_QCONFIG = """global {
  activation { kind: "MinMaxObserver" dtype: "quint8" qscheme: "per_tensor_affine"
               quant_min: 0 quant_max: 255 }
  weight { kind: "PerChannelMinMaxObserver" dtype: "qint8" qscheme: "per_channel_symmetric"
           quant_min: -127 quant_max: 127 ch_axis: 0 }
}
"""


def cli_quantize(tmp, samples, threads):  # threads 0: OpenMP's default
    """A callable with quantize_static's first two arguments that runs the C++ CLI on
    `samples` saved as .npy files (saving them is outside the timed call)."""
    files = []
    for i, sample in enumerate(samples):
        files.append(os.path.join(tmp, f"sample{i}.npy"))
        np.save(files[-1], sample)
    mapping = os.path.join(tmp, "ort_like.textproto")
    with open(mapping, "w") as f:
        f.write(ORT_LIKE_QCONFIG)

    def quantize(model_input, model_output, *unused, **unused_kwargs):
        subprocess.run([CLI, "quantize", model_input, "--backend=native",
                        f"--qconfig-mapping={mapping}", "--calibration=" + ",".join(files),
                        *([f"--threads={threads}"] if threads else []), "--quiet", "-o",
                        model_output], check=True,
                       stdout=subprocess.DEVNULL)
    return quantize


def session(path):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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


def float_multiply_adds(path):
    """The multiply-adds of one forward of the ONNX model at `path`: each Conv's output
    elements times its weight's per-output-channel size, each Gemm / MatMul's rows times
    its constant weight's size."""
    import onnx
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    graph = model.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*graph.value_info, *graph.output, *graph.input)}
    weights = {t.name: list(t.dims) for t in graph.initializer}
    total = 0
    for node in graph.node:
        weight = weights.get(node.input[1]) if len(node.input) > 1 else None
        if weight is None or node.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        out = shapes[node.output[0]]
        if node.op_type == "Conv":
            total += int(np.prod(out)) * int(np.prod(weight[1:]))
        else:
            total += int(np.prod(out[:-1])) * int(np.prod(weight))
    return total


def matmul_gflops(threads, n=2048, repeat=5):
    """This machine's float32 matmul rate on `threads` threads (median of `repeat`)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    torch.set_num_threads(1)
    return 2 * n ** 3 / statistics.median(times) / 1e9


def print_floor(float_path, samples):
    flops = 2 * float_multiply_adds(float_path)
    one, every = matmul_gflops(1), matmul_gflops(os.cpu_count())
    print(f"floor: {flops / 1e9:.2f} GFLOP per forward; float32 matmul {one:.1f} GFLOPS on one "
          f"thread, {every:.1f} on {os.cpu_count()}; {samples} forwards take at least "
          f"{samples * flops / (every * 1e9):.2f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--cli-threads", type=int, default=2)
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
        print_floor(float_path, args.samples)
        print("| flow | quantize wall s | CPU s | SQNR (ORT runs it) | ORT int8 inference ms |")
        print("| --- | --- | --- | --- | --- |")
        cli_label = f"fuselage CLI (C++), --threads={args.cli_threads}"
        for label, quantize in ((cli_label, cli_quantize(tmp, samples, args.cli_threads)),
                                ("fuselage.onnx (Python)", fuselage.onnx.quantize_static),
                                ("ONNX Runtime", quantization.quantize_static)):
            path = os.path.join(tmp, f"{label.split()[0]}{len(label)}.onnx")
            started = time.perf_counter()
            cpu_started = time.process_time() + _children_cpu()
            quantize(float_path, path, Reader("x", samples),
                     quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                     activation_type=quantization.QuantType.QUInt8,
                     weight_type=quantization.QuantType.QInt8)
            quantize_s = time.perf_counter() - started
            cpu_s = time.process_time() + _children_cpu() - cpu_started
            got, int8_s = run_timed(path, x)
            print(f"| {label} | {quantize_s:.2f} | {cpu_s:.2f} | {sqnr(want, got):.2f} dB | "
                  f"{int8_s * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
