"""Command line of the bridge:

    PYTHONPATH=python python3 -m fuselage export-torchvision resnet50 out.fsl
    PYTHONPATH=python python3 -m fuselage export-torchvision resnet18 r18.fsl --input-size 1 3 64 64

export-torchvision builds a torchvision classification model with untrained weights
(weights=None; a fixed --seed makes the file reproducible), in eval mode, and exports it.
"""

import argparse
import sys

import fuselage


def _export_torchvision(args):
    import torch
    import torchvision

    builder = getattr(torchvision.models, args.model, None)
    if builder is None or not callable(builder) or args.model.startswith("_"):
        print(f"fuselage: torchvision.models has no model '{args.model}'", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    model = builder(weights=None).eval()
    example = torch.randn(*args.input_size) if args.input_size else None
    try:
        fuselage.export(model, (example,) if example is not None else None, args.output)
    except fuselage.FuselageError as e:
        print(f"fuselage: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output} ({args.model}, torch {torch.__version__})")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m fuselage",
                                     description="The PyTorch bridge of fuselage.")
    commands = parser.add_subparsers(dest="command", required=True)
    tv = commands.add_parser("export-torchvision",
                             help="export a torchvision model (untrained weights) to a model file")
    tv.add_argument("model", help="a torchvision.models builder name, e.g. resnet50")
    tv.add_argument("output", help="the model file to write")
    tv.add_argument("--input-size", type=int, nargs="+", default=[1, 3, 224, 224],
                    metavar="D", help="example input shape used to record node shapes "
                    "(default 1 3 224 224); --input-size 0 records none")
    tv.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    if args.input_size == [0]:
        args.input_size = None
    if args.command == "export-torchvision":
        return _export_torchvision(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
