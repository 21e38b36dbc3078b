"""Issue 36 item 8: the int8 forward of a lowered PT2E model at one thread, three ways.

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/pt2e_int8_forward.py \
        [--models resnet18,resnet50,mobilenet_v2] [--size 224] [--repeats 20]

Per model (torchvision, weights=None, randomized batch norms, exported at 1x3xSxS,
calibrated on 4 samples): fuselage's PT2E reference (fuselage.pt2e, "x86") lowered by
fuselage.pt2e.lower_pt2e_quantized_to_x86 and run by PyTorch, and by
fuselage.pt2e.lower_to_fuselage run on fuselage's runtime; beside them PyTorch's own onednn
model, torchao's whole flow (X86InductorQuantizer, lower_pt2e_quantized_to_x86), where
torchao takes the model (the resnets with one ReLU module per call, which torchao needs).
Median wall ms of `--repeats` runs after two warm-ups, torch and fuselage on one thread.
"""

import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from conftest import one_relu_per_call, randomize_batch_norm  # noqa: E402

import fuselage.pt2e  # noqa: E402
from fuselage import _core  # noqa: E402
from timing import median_ms  # noqa: E402


def torchao_reference(model, x):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for _ in range(4):
        prepared(torch.randn_like(x))
    return convert_pt2e(prepared)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
    torch.set_num_threads(1)
    print("| model | fuselage's onednn lowering ms | torchao's flow ms | ratio "
          "| fuselage runtime ms |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None)).eval()
        x = torch.randn(1, 3, args.size, args.size)
        with torch.no_grad():
            prepared = fuselage.pt2e.prepare_pt2e(torch.export.export(model, (x,)))
            for _ in range(4):
                prepared(torch.randn_like(x))
            reference = fuselage.pt2e.convert_pt2e(prepared)
            ours = fuselage.pt2e.lower_pt2e_quantized_to_x86(reference, (x,))
            ours_ms = median_ms(lambda: ours(x), args.repeats)
            try:
                theirs_reference = torchao_reference(one_relu_per_call(model), x)
                theirs = lower_pt2e_quantized_to_x86(theirs_reference, (x,))
                theirs_ms = median_ms(lambda: theirs(x), args.repeats)
            except ValueError:  # "Input partition has more than one output node"
                theirs_ms = None
        native = fuselage.pt2e.lower_to_fuselage(reference, (x,))
        feed = [x.numpy()]
        native_ms = median_ms(lambda: _core.run(native, feed, threads=1), args.repeats)
        theirs_cells = "refused | -" if theirs_ms is None else \
            f"{theirs_ms:.1f} | {ours_ms / theirs_ms:.2f}"
        print(f"| {name} | {ours_ms:.1f} | {theirs_cells} | {native_ms:.1f} |", flush=True)


if __name__ == "__main__":
    main()
