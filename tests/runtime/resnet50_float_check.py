#!/usr/bin/python3
"""Times torchvision resnet50 (float, 1x3x224x224) in fuselage's interpreter and checks its
output against PyTorch's. Writes nothing into the repo; prints the numbers bench/RESULTS.md
once held ("Runtime: resnet50 float", in git log).

    bazel build //tests/runtime:run_model
    /usr/bin/python3 tests/runtime/resnet50_float_check.py [--model resnet50]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import fuselage  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="fuselage_rt_")
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    model_path = os.path.join(tmp, args.model + ".fsl")
    fuselage.export(model, (x,), model_path)
    with torch.no_grad():
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            y = model(x)
            times.append(time.perf_counter() - start)
    print("pytorch %s (%d threads): best of %d: %.3f s"
          % (torch.__version__, torch.get_num_threads(), args.repeat, min(times)))
    np.save(os.path.join(tmp, "input.npy"), x.numpy())
    np.save(os.path.join(tmp, "expected.npy"), y.numpy())
    binary = os.path.join(REPO, "bazel-bin", "tests", "runtime", "run_model")
    subprocess.check_call([binary, model_path, os.path.join(tmp, "input.npy"),
                           "--expected=" + os.path.join(tmp, "expected.npy"),
                           "--repeat=%d" % args.repeat])


if __name__ == "__main__":
    main()
