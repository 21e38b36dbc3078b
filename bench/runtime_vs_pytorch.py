#!/usr/bin/python3
"""fuselage's runtime against PyTorch 1.13 in one run (issue 20 item 5).

    PYTHONPATH=python /usr/bin/python3 bench/runtime_vs_pytorch.py \
        [--models resnet18,resnet50,mobilenet_v2] [--threads 1,0] [--runs 10] [--no-build]
        [--figures float,int8,calibrate,quantize]

Per model (torchvision, weights=None, eval, input 1x3x224x224) and thread count (0 = every
core), medians of --runs forwards after one warm-up, the sides interleaved forward by
forward in this one process (fuselage through fuselage._core.run, the interpreter `fuselage
run` calls; its CLI's `run --repeat --time` wall median is printed beside it):

  float      fuselage's float model    vs the faster of PyTorch eager and PyTorch with
                                          every nn.Conv2d run by torch.mkldnn_convolution
  int8       fuselage quantized with the fbgemm config, run on the onednn engine, and
             with the qnnpack config on --engine=qnnpack
                                       vs PyTorch's convert_fx model (the same config and
                                          default qconfig mapping) on the engine of that name
  calibrate  one sample, with HistogramObserver (the default qconfig mapping) and with
             MinMaxObserver (its global qconfig replaced by PyTorch's default_qconfig):
             fuselage `calibrate --time` over --runs samples (the prepared model made
             from the fused one, as prepare_fx fuses), the median of 3 such processes
                                       vs PyTorch's prepared model forward (eager, and with
                                          its convs on oneDNN as above)
  quantize   resnet50 only: `fuselage quantize` with 16 calibration samples, end to end
             (wall clock of the process: load, fuse, prepare, calibrate, convert, lower,
             save)                     vs PyTorch's prepare_fx + 16 forwards + convert_fx
                                          (eager, and with its convs on oneDNN);
             beside it, the time 5x eager allows and 16 x fuselage's float forward (the
             flow's floor: calibration runs each sample through the float model)

Prints one table per figure with the ratio fuselage / PyTorch (lower is better; the
targets: float <= 1.2, int8 <= 1.5 against onednn, calibrate <= 1.0, quantize >= 5x faster
than eager and faster than with oneDNN convs, int8 never slower than float), and the load
average before and after. float and int8 give each side's wall time and CPU time
(time.process_time(), every thread of the process) per forward. On a loaded machine the
CPU ratio is the robust one (wall time also counts the time a forward waited for a core);
on a quiet one the two agree. (CPU time of a `fuselage run` subprocess, from
getrusage(RUSAGE_CHILDREN) with a --repeat=1 run's subtracted, was tried first: its
load-time noise swamped a mobilenet_v2 forward.) --figures float,int8 skips calibration
and the quantize flow.
"""
import argparse
import copy
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision
from torch.ao.quantization import default_qconfig, get_default_qconfig_mapping
from torch.ao.quantization.backend_config import (get_native_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
import fuselage  # noqa: E402
from fuselage import _core  # noqa: E402
from fuselage._translate import qconfig_mapping_to_text  # noqa: E402

FUSELAGE = os.path.join(REPO, "bazel-bin", "tools", "fuselage")
SHAPE = (1, 3, 224, 224)
# observer -> the qconfig mapping calibrated with (qnnpack config): the default one has
# HistogramObserver activations; PyTorch's default_qconfig has MinMaxObserver ones.
CALIBRATION_MAPPINGS = {
    "Histogram": lambda: get_default_qconfig_mapping("qnnpack"),
    "MinMax": lambda: get_default_qconfig_mapping("qnnpack").set_global(default_qconfig),
}
# fuselage calibrate processes per calibration figure (their median is reported).
CALIBRATE_PROCESSES = 3
# engine -> (fuselage's --backend, PyTorch's backend config, its default qconfig mapping).
# PyTorch 1.13 has no onednn backend config: its fbgemm / native config quantizes the same
# ops, and fuselage's fbgemm config is that one (its onednn config also fuses conv-add-relu,
# which would not compare like with like).
BACKENDS = {
    "onednn": ("fbgemm", get_native_backend_config, "fbgemm"),
    "qnnpack": ("qnnpack", get_qnnpack_backend_config, "qnnpack"),
}


def tool(argv):
    result = subprocess.run([FUSELAGE] + argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"fuselage {' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


class Timing:
    """One side's time per forward: medians over the timed forwards of wall time and of
    CPU time (time.process_time: every thread of this process). CPU time counts only the
    cycles the forward got, so other load on a shared machine inflates it far less than
    wall time (caches and SMT siblings still do); with more than one thread it is the sum
    over threads."""

    def __init__(self, wall_ms, cpu_ms):
        self.wall_ms, self.cpu_ms = wall_ms, cpu_ms

    def cells(self):
        return f"{self.wall_ms:.1f}", f"{self.cpu_ms:.1f}"


def interleaved_timings(forwards, runs):
    """Times each of `forwards` (callables) once per round, round after round, after one
    warm-up call each, so that every side sees the same load; a Timing per forward."""
    walls = [[] for _ in forwards]
    cpus = [[] for _ in forwards]
    with torch.no_grad():
        for fn in forwards:
            fn()
        for _ in range(runs):
            for k, fn in enumerate(forwards):
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                cpus[k].append(1000 * (time.process_time() - cpu))
                walls[k].append(1000 * (time.perf_counter() - wall))
    return [Timing(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus)]


def fuselage_forward(model_path, x, threads, engine="onednn"):
    """fuselage's interpreter on the model file, in this process (fuselage._core.run,
    what `fuselage run` calls): the same clocks as PyTorch's side."""
    model = _core.Model.load(model_path)
    inputs = [x.numpy()]
    return lambda: _core.run(model, inputs, threads=threads, engine=engine)


def times_ms(output, step):
    return [float(m) for m in re.findall(rf"^time {step}\s+([0-9.]+) ms", output, re.M)]


def fuselage_cli_wall_ms(model, input_path, runs, threads, engine="onednn"):
    """`fuselage run --repeat=runs+1 --time`: the median wall time of the last `runs`
    repetitions, the CLI's own figure (a cross-check of the in-process one)."""
    out = tool(["run", model, f"--input={input_path}", f"--repeat={runs + 1}", "--time",
                f"--engine={engine}"] + ([f"--threads={threads}"] if threads else []))
    return statistics.median(times_ms(out, "run")[1:])


def torch_ms(fn, x, runs):
    return interleaved_timings([lambda: fn(x)], runs)[0].wall_ms


class MkldnnConv(nn.Module):
    """An nn.Conv2d run by torch.mkldnn_convolution (oneDNN), as the issue's anchor."""

    def __init__(self, conv):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.args = (conv.padding, conv.stride, conv.dilation, conv.groups)

    def forward(self, x):
        return torch.mkldnn_convolution(x, self.weight, self.bias, *self.args)


def with_mkldnn_convs(model):
    model = copy.deepcopy(model)
    for name, m in list(model.named_modules()):
        for child_name, child in list(m.named_children()):
            if isinstance(child, nn.Conv2d) and child.padding_mode == "zeros":
                setattr(m, child_name, MkldnnConv(child))
    return model


def ratio(a, b):
    return f"{a / b:.2f}" if b else "-"


def bench_model(name, args, workdir, rows):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*SHAPE, generator=g)
    samples = [torch.randn(*SHAPE, generator=g) for _ in range(max(args.runs, 16))]
    path = lambda f: os.path.join(workdir, f"{name}_{f}")  # noqa: E731
    np.save(path("x.npy"), x.numpy())
    sample_paths = []
    for i, s in enumerate(samples):
        sample_paths.append(path(f"s{i}.npy"))
        np.save(sample_paths[-1], s.numpy())
    float_path = path("float.fsl")
    fuselage.export(model, (x,), float_path)
    mkldnn_model = with_mkldnn_convs(model)
    calib = ",".join(sample_paths[:2])
    quantized = {}
    for engine, (backend, _, _) in (BACKENDS.items() if "int8" in args.figures else ()):
        quantized[engine] = path(f"{engine}.fsl")
        tool(["quantize", float_path, f"--backend={backend}", f"--calibration={calib}",
              "-o", quantized[engine]])
    # prepare_fx fuses first (conv-bn-relu into one observed op), so fuselage's prepared
    # model is prepared from the fused one: the same 33 observers on resnet18, not 3 per
    # conv-bn-relu.
    fused_path = path("fused.fsl")
    tool(["fuse", float_path, "--backend=qnnpack", "-o", fused_path])
    prepared_paths = {}
    for observer, mapping in CALIBRATION_MAPPINGS.items():
        mapping_path = path(f"{observer}_mapping.textproto")
        with open(mapping_path, "w") as f:
            f.write(qconfig_mapping_to_text(mapping()))
        prepared_paths[observer] = path(f"{observer}_prepared.fsl")
        tool(["prepare", fused_path, "--backend=qnnpack", f"--qconfig-mapping={mapping_path}",
              "-o", prepared_paths[observer]])
    for threads in args.threads:
        torch.set_num_threads(threads or os.cpu_count())
        label = f"{name}, {threads or os.cpu_count()} thread(s)"
        # Float.
        cli = fuselage_cli_wall_ms(float_path, path("x.npy"), args.runs, threads)
        float_forward = fuselage_forward(float_path, x, threads)
        ours, eager, mkldnn = interleaved_timings(
            [float_forward, lambda: model(x),
             lambda: mkldnn_model(x)], args.runs)
        rows["float"].append((label, *ours.cells(), f"{cli:.1f}", *eager.cells(),
                              *mkldnn.cells(),
                              ratio(ours.wall_ms, min(eager.wall_ms, mkldnn.wall_ms)),
                              ratio(ours.cpu_ms, min(eager.cpu_ms, mkldnn.cpu_ms))))
        if "int8" in args.figures:
            # Int8 per engine.
            for engine, (_, config, mapping_name) in BACKENDS.items():
                torch.backends.quantized.engine = engine
                mapping = get_default_qconfig_mapping(mapping_name)
                prepared = prepare_fx(copy.deepcopy(model), mapping, (x,),
                                      backend_config=config())
                with torch.no_grad():
                    for s in samples[:2]:
                        prepared(s)
                converted = convert_fx(prepared, backend_config=config())
                cli = fuselage_cli_wall_ms(quantized[engine], path("x.npy"), args.runs, threads,
                                           engine=engine)
                # fuselage's float forward runs in the same rounds, so that int8 / float
                # compares two forwards that saw the same load (the float rounds above
                # follow other forwards).
                int8, theirs, ours_float = interleaved_timings(
                    [fuselage_forward(quantized[engine], x, threads, engine),
                     lambda: converted(x), float_forward],
                    args.runs)
                rows["int8"].append((label, engine, *int8.cells(), f"{cli:.1f}", *theirs.cells(),
                                     ratio(int8.wall_ms, theirs.wall_ms),
                                     ratio(int8.cpu_ms, theirs.cpu_ms),
                                     ratio(int8.cpu_ms, ours_float.cpu_ms)))
        torch.backends.quantized.engine = "onednn"
        if "calibrate" not in args.figures:
            continue
        # Calibration, one sample, per observer.
        config = get_qnnpack_backend_config()
        for observer, mapping in CALIBRATION_MAPPINGS.items():
            # One process calibrates on --runs samples (its first sample also creates the
            # oneDNN primitives); a single such run swings by half on a shared machine, so
            # the figure is the median of CALIBRATE_PROCESSES runs.
            per_sample = []
            for _ in range(CALIBRATE_PROCESSES):
                out = tool(["calibrate", prepared_paths[observer],
                            f"--calibration={','.join(sample_paths[:args.runs])}", "--time",
                            "-o", path("calibrated.fsl")] +
                           ([f"--threads={threads}"] if threads else []))
                per_sample.append(times_ms(out, "calibrate")[0] / args.runs)
            ours_calib = statistics.median(per_sample)
            theirs_prepared = prepare_fx(copy.deepcopy(model), mapping(), (x,),
                                         backend_config=config)
            mkldnn_prepared = prepare_fx(copy.deepcopy(mkldnn_model), mapping(), (x,),
                                         backend_config=config)
            eager_calib = torch_ms(theirs_prepared, x, args.runs)
            mkldnn_calib = torch_ms(mkldnn_prepared, x, args.runs)
            rows["calibrate"].append((label, observer, f"{ours_calib:.1f}", f"{eager_calib:.1f}",
                                      f"{mkldnn_calib:.1f}",
                                      ratio(ours_calib, min(eager_calib, mkldnn_calib))))
        mapping = get_default_qconfig_mapping("qnnpack")
        # The whole flow, resnet50.
        if name == "resnet50" and "quantize" in args.figures:
            start = time.perf_counter()
            tool(["quantize", float_path, "--backend=qnnpack",
                  f"--calibration={','.join(sample_paths[:16])}", "-o", path("q16.fsl")] +
                 ([f"--threads={threads}"] if threads else []))
            ours_flow = time.perf_counter() - start
            flows = []
            for source in (model, mkldnn_model):
                start = time.perf_counter()
                p = prepare_fx(copy.deepcopy(source), mapping, (x,), backend_config=config)
                with torch.no_grad():
                    for s in samples[:16]:
                        p(s)
                convert_fx(p, backend_config=config)
                flows.append(time.perf_counter() - start)
            # What 5x would leave against what the flow cannot go below: its 16 float
            # forwards, at the median measured above in this run.
            forwards_floor = 16 * ours.wall_ms / 1000
            rows["quantize"].append((label, f"{ours_flow:.2f}", f"{flows[0]:.2f}",
                                     f"{flows[1]:.2f}", f"{flows[0] / ours_flow:.1f}x",
                                     f"{flows[1] / ours_flow:.1f}x", f"{flows[0] / 5:.2f}",
                                     f"{forwards_floor:.2f}"))


HEADERS = {
    "float": ("model", "fuselage wall ms", "fuselage CPU ms", "fuselage CLI wall ms",
              "PyTorch eager wall ms",
              "eager CPU ms", "PyTorch oneDNN convs wall ms", "oneDNN convs CPU ms",
              "wall ratio to the faster", "CPU ratio to the faster"),
    "int8": ("model", "engine", "fuselage wall ms", "fuselage CPU ms", "fuselage CLI wall ms",
             "PyTorch convert_fx wall ms", "convert_fx CPU ms", "wall ratio", "CPU ratio",
             "fuselage int8 / float (CPU)"),
    "calibrate": ("model", "observer", "fuselage ms / sample", "PyTorch prepared eager ms",
                  "PyTorch prepared oneDNN convs ms", "ratio to the faster"),
    "quantize": ("model", "fuselage s", "PyTorch eager s", "PyTorch oneDNN convs s",
                 "speed-up vs eager", "speed-up vs oneDNN convs", "eager / 5 s",
                 "16 fuselage float forwards s"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--threads", default="1,0",
                        help="comma-separated thread counts; 0 = every core")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--figures", default="float,int8,calibrate,quantize",
                        help="comma-separated subset of float,int8,calibrate,quantize "
                             "(int8, calibrate and quantize also run float)")
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.figures = set(args.figures.split(","))
    unknown = args.figures - set(HEADERS)
    if unknown:
        parser.error(f"--figures: unknown {sorted(unknown)}; expected some of {list(HEADERS)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not args.no_build:
        subprocess.run(["bazel", "build", "//tools:fuselage"], cwd=REPO,
                       check=True)
    rows = {k: [] for k in HEADERS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fuselage-runtime-bench-") as workdir:
        for name in args.models.split(","):
            print(f"== {name}", file=sys.stderr, flush=True)
            bench_model(name, args, workdir, rows)
    print(f"fuselage runtime vs PyTorch {torch.__version__}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, medians of {args.runs} "
          f"interleaved forwards")
    print("load average (1, 5, 15 min) before: " + " ".join(f"{v:.2f}" for v in load_before) +
          ", after: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    for key, header in HEADERS.items():
        if not rows[key]:
            continue
        print(f"\n{key}\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows[key]:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    sys.exit(main())
