#!/usr/bin/python3
"""fuselage.quantize_fx against torch.ao.quantization.quantize_fx, in process (issue 19 item 5).

    PYTHONPATH=python /usr/bin/python3 bench/quantize_fx_vs_pytorch.py \
        [--sizes 1000,3000] [--no-resnet50] [--repeats 3]

Per model, prepare_fx + convert_fx of both, with the same model, QConfigMapping
(get_default_qconfig_mapping("fbgemm")) and BackendConfig (get_native_backend_config()):
PyTorch's, and fuselage's drop-in, whose figure includes everything a user waits for —
translating the configs, moving the model from torch.fx into the engine and back (twice:
prepare_fx hands back a GraphModule with PyTorch's observers, convert_fx takes it in
again). The calibration forward between them (one sample) is not timed on either side.
Models: torchvision resnet50 (1x3x224x224) and the synthetic networks of
bench/synthetic_network.h (written by //bench:write_synthetic, rebuilt with
fuselage.to_torch, input 1x8x8x8). Best of --repeats; prints the table with the speed-up
in wall time and in CPU time (time.process_time; robust to a shared machine's load).
Targets: resnet50 >= 3x, synthetic networks at 10^3 and 3*10^3 nodes >= 20x.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torchvision
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_native_backend_config
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
import fuselage  # noqa: E402
from fuselage.quantize_fx import convert_fx, prepare_fx  # noqa: E402

WRITER = os.path.join(REPO, "bazel-bin", "bench", "write_synthetic")


def flow_seconds(prepare, convert, model, example):
    """(wall, CPU) seconds of prepare + convert (the calibration forward between them
    untimed). CPU time (time.process_time) is robust to other processes' load."""
    mapping = get_default_qconfig_mapping("fbgemm")
    config = get_native_backend_config()
    start, cpu = time.perf_counter(), time.process_time()
    prepared = prepare(model, mapping, (example,), backend_config=config)
    prepare_s, prepare_cpu = time.perf_counter() - start, time.process_time() - cpu
    with torch.no_grad():
        prepared(example)
    start, cpu = time.perf_counter(), time.process_time()
    convert(prepared, backend_config=config)
    return (prepare_s + time.perf_counter() - start,
            prepare_cpu + time.process_time() - cpu)


def best(fn, repeats):
    """The best wall time and the best CPU time of `repeats` runs."""
    runs = [fn() for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def models(args, workdir):
    if not args.no_resnet50:
        torch.manual_seed(0)
        yield ("resnet50", lambda: torchvision.models.resnet50(weights=None).eval(),
               torch.randn(1, 3, 224, 224))
    for size in args.sizes:
        path = os.path.join(workdir, f"synthetic_{size}.fsl")
        subprocess.run([WRITER, str(size), path], check=True, capture_output=True)
        yield (f"synthetic {size}", lambda p=path: fuselage.to_torch(p),
               torch.randn(1, 8, 8, 8))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,3000")
    parser.add_argument("--no-resnet50", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    warnings.filterwarnings("ignore")  # PyTorch's deprecation notes
    if not args.no_build:
        subprocess.run(["bazel", "build", "//bench:write_synthetic", "//python:fuselage_core"],
                       cwd=REPO, check=True)
        subprocess.run(["bash", "tools/build_extension.sh"], cwd=REPO, check=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuselage-quantize-fx-bench-") as workdir:
        for name, build, example in models(args, workdir):
            print(f"== {name}", file=sys.stderr, flush=True)
            theirs = best(lambda: flow_seconds(torch_prepare_fx, torch_convert_fx, build(),
                                               example), args.repeats)
            ours = best(lambda: flow_seconds(prepare_fx, convert_fx, build(), example),
                        args.repeats)
            rows.append((name, ours, theirs))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"prepare_fx + convert_fx in process, PyTorch {torch.__version__}, best of "
          f"{args.repeats}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {load}")
    print("| model | fuselage.quantize_fx s | torch quantize_fx s | speed-up | "
          "fuselage CPU s | torch CPU s | CPU-time ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, (ours, ours_cpu), (theirs, theirs_cpu) in rows:
        print(f"| {name} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.1f}x | "
              f"{ours_cpu:.3f} | {theirs_cpu:.3f} | {theirs_cpu / ours_cpu:.1f}x |")


if __name__ == "__main__":
    sys.exit(main())
