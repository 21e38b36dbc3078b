"""Issue 36: fuselage.pt2e against torchao's own PT2E flow, SQNR of the reference model
against the float model, side by side.

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/pt2e_vs_torchao.py \
        [--models mobilenet_v2,resnet18] [--synthetic 1000,10000] [--floor] [--repeats 3]
        [--torchao-cpu-limit 900]

With --synthetic, the synthetic networks of bench/synthetic_network.h (written by
bazel-bin/bench/write_synthetic: build it first) instead, exported at 1x8x8x8: prepare +
convert on both sides and the SQNR (item 8's 10^3 / 10^4-node figures). With
--torchao-cpu-limit N, one run of each flow counted in CPU seconds, torchao's in a child
process the kernel stops after N CPU seconds: torchao's passes grow about quadratically and
take well over 40 CPU-minutes at 10^4 nodes, so a stopped run prints a lower bound. --floor
prints what torch.fx's code generation of the two GraphModules and constructing the
prepared model's observers cost alone: the part of prepare + convert no implementation that
returns GraphModules with PyTorch's observers avoids.

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
    `model` (GraphModule.recompile, median of 5), and constructing the prepared model's
    observers afresh (each class with its defaults, median of 5): what any prepare +
    convert that returns torch.fx GraphModules with PyTorch's observers pays, whatever
    builds their graphs."""
    from torch.ao.quantization.observer import ObserverBase
    prepared = fuselage.pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), "x86")
    prepared(x)
    reference = fuselage.pt2e.convert_pt2e(prepared)
    observers = [type(m) for m in prepared.modules() if isinstance(m, ObserverBase)]

    def median_seconds(work):
        times = []
        for _ in range(5):
            gc.collect()
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return sorted(times)[2]
    figures = [f"{len(gm.graph.nodes)} nodes {median_seconds(gm.recompile):.4f} s"
               for gm in (prepared, reference)]
    constructing = median_seconds(lambda: [cls() for cls in observers])
    print(f"{name}: torch.fx code generation: prepared {figures[0]}, reference {figures[1]}; "
          f"constructing its {len(observers)} observers {constructing:.4f} s")


def synthetic_model(size, workdir):
    """The synthetic network of `size` nodes as a torch module, and its seeded input."""
    import subprocess
    writer = os.path.join(os.path.dirname(__file__), "..", "bazel-bin", "bench", "write_synthetic")
    path = os.path.join(workdir, f"synthetic_{size}.fsl")
    subprocess.run([writer, size, path], check=True, capture_output=True)
    torch.manual_seed(0)
    return fuselage.to_torch(path), torch.randn(1, 8, 8, 8)


def synthetic(sizes, repeats, floor, cpu_limit):
    import tempfile
    print("| nodes | fuselage SQNR | torchao SQNR | fuselage s | torchao s | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in sizes.split(","):
        with tempfile.TemporaryDirectory() as workdir:
            model, x = synthetic_model(size, workdir)
            with torch.no_grad():
                want = model(x)
                if cpu_limit:
                    print(synthetic_row_cpu_limited(size, model, x, want, workdir, cpu_limit),
                          flush=True)
                else:
                    print(synthetic_row(size, model, x, want, repeats), flush=True)
                if floor:
                    codegen_floor(f"synthetic {size}", model, x)


def synthetic_row(size, model, x, want, repeats):
    (ours, ours_s), (theirs, theirs_s) = taking_turns(
        repeats, lambda: fuselage_flow(torch.export.export(model, (x,)).module(), x),
        lambda: torchao_flow(torch.export.export(model, (x,)).module(), x))
    return (f"| {size} | {sqnr(want, first(ours(x))):.2f} | {sqnr(want, first(theirs(x))):.2f} "
            f"| {ours_s:.2f} | {theirs_s:.2f} | {theirs_s / ours_s:.1f}x |")


def synthetic_row_cpu_limited(size, model, x, want, workdir, cpu_limit):
    """One run of each flow counted in CPU seconds (all threads of the process): fuselage's
    here, torchao's in a child process (torchao_child) that the kernel stops after
    `cpu_limit` CPU seconds (RLIMIT_CPU). A stopped flow gives a lower bound: the limit
    less the CPU the child spent before its flow started (imports, torch.export)."""
    import json
    import resource
    import subprocess
    module = torch.export.export(model, (x,)).module()
    started = time.process_time()
    ours, _ = fuselage_flow(module, x)
    ours_cpu = time.process_time() - started

    def limit_cpu():
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 30))
    child = subprocess.run([sys.executable, __file__, "--torchao-child", size, workdir],
                           preexec_fn=limit_cpu, capture_output=True, text=True)
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    flow_started = next((line["flow_started_cpu"] for line in lines
                         if "flow_started_cpu" in line), None)
    if flow_started is None:
        raise SystemExit(f"--torchao-cpu-limit {cpu_limit}: torchao's child process was "
                         f"stopped before its flow started (code {child.returncode}; imports "
                         f"and torch.export take longer); give more\n{child.stderr[-2000:]}")
    done = [line for line in lines if "flow_cpu" in line]
    if done:
        theirs = f"{done[0]['flow_cpu']:.1f} CPU-s"
        theirs_db, ratio = f"{done[0]['sqnr']:.2f}", f"{done[0]['flow_cpu'] / ours_cpu:.0f}x"
    else:
        bound = cpu_limit - flow_started
        theirs = f"> {bound:.0f} CPU-s (stopped, {child.returncode})"
        theirs_db, ratio = "-", f">= {bound / ours_cpu:.0f}x"
    return (f"| {size} | {sqnr(want, first(ours(x))):.2f} | {theirs_db} | "
            f"{ours_cpu:.2f} CPU-s | {theirs} | {ratio} |")


def torchao_child(size, workdir):
    """torchao's flow on the synthetic network, for synthetic_row_cpu_limited: prints the
    CPU seconds spent before the flow, then the flow's CPU seconds and SQNR, as JSON."""
    import json
    import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401  imported outside the timing,
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer  # noqa: F401  as fuselage's
    model, x = synthetic_model(size, workdir)
    with torch.no_grad():
        want = model(x)
        module = torch.export.export(model, (x,)).module()
        print(json.dumps({"flow_started_cpu": time.process_time()}), flush=True)
        started = time.process_time()
        theirs, _ = torchao_flow(module, x)
        flow_cpu = time.process_time() - started
        print(json.dumps({"flow_cpu": flow_cpu, "sqnr": sqnr(want, first(theirs(x)))}),
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--synthetic", help="synthetic network sizes in nodes, comma-separated")
    parser.add_argument("--floor", action="store_true",
                        help="also torch.fx's code generation of both GraphModules and "
                        "constructing the observers, per model")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each flow, in turns; the median is printed")
    parser.add_argument("--torchao-cpu-limit", type=int,
                        help="with --synthetic: one run of each flow in CPU seconds, torchao's "
                        "stopped after this many (a lower bound then)")
    parser.add_argument("--torchao-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torchao_child:
        return torchao_child(*args.torchao_child)
    if args.synthetic:
        return synthetic(args.synthetic, args.repeats, args.floor, args.torchao_cpu_limit)
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
