#!/usr/bin/python3
"""Side by side: PyTorch 1.13 FX and fuselage on identical graphs.

For each synthetic network size (written by //bench:write_synthetic, then rebuilt in
PyTorch from that same model file with fuselage.to_torch) and for torchvision's resnet50
(exported with `python -m fuselage export-torchvision`), times:

  stage     PyTorch                                   fuselage (CLI, --time)
  match     fuse.py's _find_matches, native patterns   `fuse` line "time match"
  fuse      fuse_fx                                    `fuse` line "time fuse"
  prepare   prepare_fx (fbgemm default qconfig         `fuse` + `prepare --backend=fbgemm`
            mapping; it fuses as its first step)       lines "time fuse" + "time prepare"
  convert   convert_fx (to reference, then lowered)    `convert` + `lower --backend=fbgemm`
                                                       lines "time convert" + "time lower"

PyTorch calibrates the prepared model once before convert_fx (untimed); fuselage runs
`calibrate --samples=1` between prepare and convert (untimed). Each fuselage stage reads
the previous stage's output file, so a stage is only timed if the CLI has the command
(else "n/a"); its figure is the fastest of --repeats runs.
Each PyTorch stage runs in its own process (its prerequisites untimed) and is stopped
after --budget seconds: it is then reported as "> budget" with the budget.
fuselage times exclude loading and saving the model file (reported separately as
"load" / "save" rows, from `fuse`).

Run from anywhere (the binaries default to the repository's bazel-bin; if one is missing
the script builds both with `bazel build -c opt`):

  PYTHONPATH=python /usr/bin/python3 bench/compare_pytorch.py --sizes 1000,3000,10000 \
      --resnet50 --budget 120

Everything it writes (model files, every stage's output, PyTorch's own temporary files:
TMPDIR points into it for the whole run) lives in one temporary folder, removed at the end,
also when a stage fails or the run is interrupted.
"""
import argparse
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

STAGES = ["match", "fuse", "prepare", "convert"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# `import fuselage` (here and in the PyTorch children, which inherit sys.path) works from
# any folder, with or without PYTHONPATH=python.
sys.path.insert(0, os.path.join(REPO, "python"))
BUILT = {"--fuselage": ("//tools:fuselage", "tools/fuselage"),
         "--writer": ("//bench:write_synthetic", "bench/write_synthetic")}


def find_binaries(args):
    """Fills args.fuselage / args.writer: given paths must exist; the defaults are the
    repository's bazel-bin, built with bazel when one of them is missing."""
    missing = []
    for flag, (target, path) in BUILT.items():
        attr = flag.lstrip("-")
        given = getattr(args, attr)
        if given is not None:
            if not os.access(given, os.X_OK):
                sys.exit(f"compare_pytorch.py: {flag}={given} is not an executable file")
            continue
        setattr(args, attr, os.path.join(REPO, "bazel-bin", path))
        if not os.access(getattr(args, attr), os.X_OK):
            missing.append(target)
    if missing:
        print(f"building {' '.join(missing)} (bazel build -c opt)", file=sys.stderr)
        result = subprocess.run(["bazel", "build", "-c", "opt", *missing], cwd=REPO)
        if result.returncode != 0:
            sys.exit(f"compare_pytorch.py: `bazel build {' '.join(missing)}` failed")


def _load_torch(model):
    import fuselage
    if model["kind"] == "resnet50":
        import torch.fx
        import torchvision
        return torch.fx.symbolic_trace(torchvision.models.resnet50().eval())
    return fuselage.to_torch(model["path"])


def _pytorch_stage(model, stage, queue):
    """Runs `stage` on `model` in this (child) process and puts its seconds on `queue`."""
    import warnings
    warnings.filterwarnings("ignore")  # PyTorch's deprecation notes would break the table
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.backend_config import get_native_backend_config
    from torch.ao.quantization.fx.fuse import _find_matches
    try:  # PyTorch 2: the pattern helpers are private and moved
        from torch.ao.quantization.fx.fuse_handler import (
            _get_fusion_pattern_to_fuse_handler_cls as get_fusion_pattern_to_fuse_handler_cls)
        from torch.ao.quantization.fx.pattern_utils import (
            _sorted_patterns_dict as sorted_patterns_dict)
    except ImportError:  # PyTorch 1.13
        from torch.ao.quantization.fx.backend_config_utils import (
            get_fusion_pattern_to_fuse_handler_cls)
        from torch.ao.quantization.fx.pattern_utils import sorted_patterns_dict
    from torch.ao.quantization.quantize_fx import convert_fx, fuse_fx, prepare_fx

    torch.manual_seed(0)
    gm = _load_torch(model).eval()
    example = (torch.randn(1, 3, 224, 224) if model["kind"] == "resnet50"
               else torch.randn(1, 8, 8, 8),)
    qconfig_mapping = get_default_qconfig_mapping("fbgemm")
    if stage == "match":
        patterns = sorted_patterns_dict(
            get_fusion_pattern_to_fuse_handler_cls(get_native_backend_config()))
        start = time.perf_counter()
        _find_matches(gm, gm.graph, patterns)
    elif stage == "fuse":
        start = time.perf_counter()
        fuse_fx(gm)
    elif stage == "prepare":
        start = time.perf_counter()
        prepare_fx(gm, qconfig_mapping, example)
    elif stage == "convert":
        prepared = prepare_fx(gm, qconfig_mapping, example)
        prepared(*example)  # calibrate once, so observers hold statistics
        start = time.perf_counter()
        convert_fx(prepared)
    queue.put(time.perf_counter() - start)


def pytorch_seconds(model, stage, budget):
    """Seconds, or None if the stage did not finish within `budget` seconds."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_pytorch_stage, args=(model, stage, queue))
    proc.start()
    proc.join(budget + 60)  # + time to import torch and build the prerequisites
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None
    if queue.empty():
        raise RuntimeError(f"PyTorch {stage} on {model['name']} failed (exit {proc.exitcode})")
    seconds = queue.get()
    return None if seconds > budget else seconds


def _timed_runs(command, repeats):
    """Step -> milliseconds (the fastest of `repeats` runs) from the `time <step> <ms> ms`
    lines of one CLI command; None if the command fails."""
    times = {}
    for _ in range(repeats):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(f"{' '.join(command)}: {result.stderr}")
            return None
        for step, ms in re.findall(r"^time (\w+)\s+([0-9.]+) ms$", result.stdout, re.M):
            times[step] = min(times.get(step, float("inf")), float(ms))
    return times


def fuselage_times(binary, model_path, input_shape, workdir, repeats=3):
    """Comparison stage -> seconds, for every stage the CLI can run (see the module
    docstring for how each is composed of the CLI's --time lines)."""
    fused = os.path.join(workdir, "fused.fsl")
    fuse = _timed_runs([binary, "fuse", model_path, "--backend=native", "-o", fused, "--time"],
                       repeats)
    times = {stage: fuse[stage] / 1000.0 for stage in ("match", "fuse", "load", "save")}
    commands = subprocess.run([binary, "help"], capture_output=True, text=True).stdout
    if not all(re.search(rf"^\s*{c}\b", commands, re.M)
               for c in ("prepare", "calibrate", "convert", "lower")):
        return times
    prepared = os.path.join(workdir, "prepared.fsl")
    calibrated = os.path.join(workdir, "calibrated.fsl")
    reference = os.path.join(workdir, "reference.fsl")
    lowered = os.path.join(workdir, "lowered.fsl")
    prepare = _timed_runs([binary, "prepare", fused, "--backend=fbgemm", "-o", prepared,
                           "--time"], repeats)
    if prepare is None:
        return times
    times["prepare"] = (fuse["fuse"] + prepare["prepare"]) / 1000.0
    if _timed_runs([binary, "calibrate", prepared, "--samples=1", f"--input-shape={input_shape}",
                    "-o", calibrated], 1) is None:
        return times
    convert = _timed_runs([binary, "convert", calibrated, "-o", reference, "--time"], repeats)
    lower = convert and _timed_runs([binary, "lower", reference, "--backend=fbgemm", "-o",
                                     lowered, "--time"], repeats)
    if lower:
        times["convert"] = (convert["convert"] + lower["lower"]) / 1000.0
        times["convert-ref"] = convert["convert"] / 1000.0
        times["lower"] = lower["lower"] / 1000.0
    return times


def node_count(binary, model_path):
    out = subprocess.run([binary, "verify", model_path], check=True, capture_output=True,
                         text=True).stdout
    return int(re.search(r"\((\d+) nodes", out).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,3000,10000",
                        help="synthetic network sizes in nodes, comma-separated")
    parser.add_argument("--resnet50", action="store_true", help="also torchvision resnet50")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds a PyTorch stage may take before it is stopped")
    parser.add_argument("--fuselage", help="the fuselage CLI (default: bazel-bin's, built if missing)")
    parser.add_argument("--writer", help="write_synthetic (default: bazel-bin's, built if missing)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each fuselage command; the fastest is reported")
    args = parser.parse_args()
    find_binaries(args)
    workdir = tempfile.mkdtemp(prefix="fuselage_compare_")
    # PyTorch's and multiprocessing's temporary files go there too (the children inherit it).
    saved_tmpdir = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = workdir
    tempfile.tempdir = None
    try:
        compare(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if saved_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_tmpdir
        tempfile.tempdir = None


def compare(args, workdir):
    stages = args.stages.split(",")
    models = []
    for size in [int(s) for s in args.sizes.split(",") if s]:
        path = os.path.join(workdir, f"synthetic_{size}.fsl")
        subprocess.run([args.writer, str(size), path], check=True, capture_output=True)
        models.append({"name": f"synthetic {size}", "kind": "synthetic", "path": path,
                       "input_shape": "1,8,8,8"})
    if args.resnet50:
        path = os.path.join(workdir, "resnet50.fsl")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "fuselage", "export-torchvision", "resnet50", path],
                       check=True, capture_output=True, env=env)
        models.append({"name": "resnet50", "kind": "resnet50", "path": path,
                       "input_shape": "1,3,224,224"})

    print(f"{'model':<18} {'stage':<11} {'nodes':>8} {'PyTorch s':>12} {'fuselage s':>12} "
          f"{'ratio':>10}")
    for model in models:
        nodes = node_count(args.fuselage, model["path"])
        ours = fuselage_times(args.fuselage, model["path"], model["input_shape"], workdir,
                              args.repeats)
        for stage in stages:
            theirs = pytorch_seconds(model, stage, args.budget)
            mine = ours.get(stage)
            theirs_text = f"> {args.budget:g}" if theirs is None else f"{theirs:.6f}"
            mine_text = "n/a" if mine is None else f"{mine:.6f}"
            if mine is None or mine == 0:
                ratio = "n/a"
            elif theirs is None:
                ratio = f"> {args.budget / mine:,.0f}x"
            else:
                ratio = f"{theirs / mine:,.0f}x"
            print(f"{model['name']:<18} {stage:<11} {nodes:>8} {theirs_text:>12} {mine_text:>12} "
                  f"{ratio:>10}", flush=True)
        # fuselage's parts of the convert row, and its file I/O (no PyTorch counterpart).
        for stage in ("convert-ref", "lower", "load", "save"):
            if stage in ours:
                print(f"{model['name']:<18} {stage:<11} {nodes:>8} {'':>12} {ours[stage]:>12.6f}")


if __name__ == "__main__":
    main()
