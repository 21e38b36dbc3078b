"""Issue 36: fuselage.pt2e against torchao's own PT2E flow, SQNR of the reference model
against the float model, side by side.

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/pt2e_vs_torchao.py \
        [--models mobilenet_v2,resnet18] [--synthetic 1000,10000] [--floor] [--repeats 3]

With --synthetic, the synthetic networks of bench/synthetic_network.h (written by
bazel-bin/bench/write_synthetic: build it first) instead, exported at 1x8x8x8: prepare +
convert on both sides and the SQNR (item 8's 10^3 / 10^4-node figures).

Per model (torchvision, weights=None, randomized batch norms, one calibration batch of
4x3x64x64, seed 0): torch.export, then fuselage.pt2e.prepare_pt2e / convert_pt2e ("x86")
and torchao's prepare_pt2e / convert_pt2e with X86InductorQuantizer's default config, each
calibrated on the same batch and measured on it. Prints SQNR in dB and each flow's prepare +
convert wall time (torch.export and the calibration run, the same PyTorch observers on both
sides, excluded), the median of --repeats runs on fresh exports, the two flows taking turns
(the first run of a process pays for warming its allocator and caches, and whichever flow
ran first paid it for both); "refused" where torchao raises. Then the
lowering to oneDNN ops of torchao's reference (fuselage's where torchao refuses; the
resnets go to torchao with one ReLU module per call, conftest.one_relu_per_call):
fuselage.pt2e.lower_pt2e_quantized_to_x86 and torchao's, wall time, and whether the two
give the same count of each onednn op ("+N ops": fuselage lowers N more, none fewer).
"""

import argparse
import collections
import gc
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from conftest import one_relu_per_call, randomize_batch_norm  # noqa: E402

import fuselage  # noqa: E402
import fuselage.pt2e  # noqa: E402

MODELS = "mobilenet_v2,mobilenet_v3_large,efficientnet_b0,convnext_tiny,resnet18,resnet50"


def sqnr(want, got):
    return float(10 * torch.log10(want.pow(2).mean() / (got - want).pow(2).mean()))


def first(output):
    return output[0] if isinstance(output, tuple) else output


def timed_flow(prepare, convert, module, x):
    """(reference, prepare + convert seconds): the calibration run between them is the
    user's model running PyTorch's observers on both sides, so it is not counted. Each
    timed call starts after a full garbage collection, so neither side pays for a
    collection the other's garbage (or torch.export's) made due."""
    gc.collect()
    started = time.perf_counter()
    prepared = prepare(module)
    prepare_s = time.perf_counter() - started
    prepared(x)
    gc.collect()
    started = time.perf_counter()
    reference = convert(prepared)
    return reference, prepare_s + time.perf_counter() - started


def fuselage_flow(module, x):
    return timed_flow(lambda m: fuselage.pt2e.prepare_pt2e(m, "x86"),
                      fuselage.pt2e.convert_pt2e, module, x)


def torchao_flow(module, x):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    return timed_flow(lambda m: prepare_pt2e(m, quantizer), convert_pt2e, module, x)


def taking_turns(repeats, ours, theirs):
    """((our reference, our median s), (their reference or the exception, their median s
    or None)): `repeats` runs of each flow on a fresh export (ours() / theirs() return
    (reference, seconds)), in turns; torchao's refusal (ValueError) is kept, not timed."""
    ours_runs, theirs_runs, refusal = [], [], None
    for _ in range(repeats):
        ours_runs.append(ours())
        if refusal is None:
            try:
                theirs_runs.append(theirs())
            except ValueError as e:
                refusal = e

    def median(runs):
        return sorted(s for _, s in runs)[len(runs) // 2]
    return (ours_runs[-1][0], median(ours_runs)), \
        ((refusal, None) if refusal is not None else (theirs_runs[-1][0], median(theirs_runs)))


def onednn_counts(gm):
    return collections.Counter(str(n.target) for n in gm.graph.nodes
                               if n.op == "call_function" and "onednn" in str(n.target))


def lowering(reference, x, torchao_too):
    """(fuselage's lowering s, torchao's lowering s or "-", same onednn op counts or "-")."""
    started = time.perf_counter()
    ours = fuselage.pt2e.lower_pt2e_quantized_to_x86(reference, (x,))
    ours_s = time.perf_counter() - started
    if not torchao_too:
        return f"{ours_s:.3f}", "-", "-"
    from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
    started = time.perf_counter()
    theirs = lower_pt2e_quantized_to_x86(reference, (x,))
    theirs_s = time.perf_counter() - started
    ours_ops, their_ops = onednn_counts(ours), onednn_counts(theirs)
    if ours_ops == their_ops:
        same = "yes"
    elif all(ours_ops[op] >= count for op, count in their_ops.items()):
        same = f"+{sum(ours_ops.values()) - sum(their_ops.values())} ops"
    else:
        same = "no"
    return f"{ours_s:.3f}", f"{theirs_s:.2f}", same


def codegen_floor(name, model, x):
    """torch.fx's code generation of fuselage's prepared and reference GraphModules of
    `model` (GraphModule.recompile, median of 5): what any prepare + convert that returns
    torch.fx GraphModules pays, whatever builds their graphs."""
    prepared = fuselage.pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), "x86")
    prepared(x)
    reference = fuselage.pt2e.convert_pt2e(prepared)
    figures = []
    for gm in (prepared, reference):
        times = []
        for _ in range(5):
            gc.collect()
            started = time.perf_counter()
            gm.recompile()
            times.append(time.perf_counter() - started)
        figures.append(f"{len(gm.graph.nodes)} nodes {sorted(times)[2]:.4f} s")
    print(f"{name}: torch.fx code generation: prepared {figures[0]}, reference {figures[1]}")


def synthetic(sizes, repeats):
    import subprocess
    import tempfile
    writer = os.path.join(os.path.dirname(__file__), "..", "bazel-bin", "bench", "write_synthetic")
    print("| nodes | fuselage SQNR | torchao SQNR | fuselage s | torchao s | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in sizes.split(","):
        with tempfile.TemporaryDirectory() as workdir:
            path = os.path.join(workdir, f"synthetic_{size}.fsl")
            subprocess.run([writer, size, path], check=True, capture_output=True)
            model = fuselage.to_torch(path)
        x = torch.randn(1, 8, 8, 8)
        with torch.no_grad():
            want = model(x)
            (ours, ours_s), (theirs, theirs_s) = taking_turns(
                repeats, lambda: fuselage_flow(torch.export.export(model, (x,)).module(), x),
                lambda: torchao_flow(torch.export.export(model, (x,)).module(), x))
            print(f"| {size} | {sqnr(want, first(ours(x))):.2f} | "
                  f"{sqnr(want, first(theirs(x))):.2f} | {ours_s:.2f} | {theirs_s:.2f} | "
                  f"{theirs_s / ours_s:.1f}x |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--synthetic", help="synthetic network sizes in nodes, comma-separated")
    parser.add_argument("--floor", action="store_true",
                        help="also torch.fx's code generation of both GraphModules per model")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each flow, in turns; the median is printed")
    args = parser.parse_args()
    if args.synthetic:
        return synthetic(args.synthetic, args.repeats)
    print("| model | fuselage SQNR | torchao SQNR | fuselage s | torchao s | ratio "
          "| lowering: fuselage s | torchao s | same onednn ops |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None).eval())
        x = torch.randn(4, 3, 64, 64)
        with torch.no_grad():
            want = model(x)
            (ours, ours_s), (theirs, theirs_s) = taking_turns(
                args.repeats,
                lambda: fuselage_flow(torch.export.export(model, (x,)).module(), x),
                lambda: torchao_flow(
                    torch.export.export(one_relu_per_call(model), (x,)).module(), x))
            ours_db = f"{sqnr(want, first(ours(x))):.2f}"
            if theirs_s is None:
                theirs, theirs_db, theirs_s, ratio = None, f"refused ({str(theirs)[:40]})", "-", "-"
            else:
                ratio = f"{theirs_s / ours_s:.1f}x"
                theirs_db, theirs_s = f"{sqnr(want, first(theirs(x))):.2f}", f"{theirs_s:.2f}"
            lowered = lowering(theirs if theirs is not None else ours, x, theirs is not None)
        print(f"| {name} | {ours_db} | {theirs_db} | {ours_s:.3f} | {theirs_s} | {ratio} | "
              + " | ".join(lowered) + " |", flush=True)
        if args.floor:
            with torch.no_grad():
                codegen_floor(name, model, x)


if __name__ == "__main__":
    main()
