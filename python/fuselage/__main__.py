"""Command line of the bridge:

    PYTHONPATH=python python3 -m fuselage export-torchvision resnet50 out.fsl
    PYTHONPATH=python python3 -m fuselage export-torchvision resnet18 r18.fsl --input-size 1 3 64 64

    PYTHONPATH=python python3 -m fuselage quantize-onnx model.onnx -o model.qdq.onnx --calibration 8

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


class _RandomSamples:
    """An onnxruntime CalibrationDataReader of `count` standard-normal samples of each
    graph input's shape (seeded): what quantize-onnx calibrates on."""

    def __init__(self, names, shapes, count, seed):
        import numpy as np
        rng = np.random.default_rng(seed)
        self._samples = iter([{n: rng.standard_normal(s).astype(np.float32)
                               for n, s in zip(names, shapes)} for _ in range(count)])

    def get_next(self):
        return next(self._samples, None)


def _quantize_onnx(args):
    from fuselage.onnx import _import, quantize_static
    if args.calibration < 1:
        print("fuselage: --calibration must be at least 1", file=sys.stderr)
        return 2
    try:
        _, reader = _import.read(args.model)
        samples = _RandomSamples(reader.input_names, reader.input_shapes, args.calibration,
                                 args.seed)
        quantize_static(args.model, args.output, samples, per_channel=args.per_channel,
                        activation_type="QUInt8" if args.activation_type == "uint8" else "QInt8",
                        weight_type="QInt8", backend_config=args.config)
    except fuselage.FuselageError as e:
        print(f"fuselage: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output} (QDQ, {args.activation_type} activations, int8 "
          f"{'per-channel' if args.per_channel else 'per-tensor'} weights, "
          f"{args.calibration} calibration samples)")
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
    qo = commands.add_parser("quantize-onnx",
                             help="quantize a float ONNX model to ONNX QDQ (as ONNX Runtime's "
                             "quantize_static does)")
    qo.add_argument("model", help="the float ONNX model")
    qo.add_argument("-o", "--output", required=True, help="the QDQ ONNX model to write")
    qo.add_argument("--config", metavar="PATH", default=None,
                    help="a fuselage backend config file used instead of PyTorch's native one; "
                    "its patterns may name ONNX ops (onnx.Conv, onnx.Relu | onnx.Clip)")
    qo.add_argument("--calibration", type=int, default=16, metavar="N",
                    help="calibrate on N standard-normal samples of the input shapes "
                    "(default 16); for real data use fuselage.onnx.quantize_static")
    qo.add_argument("--activation-type", choices=("uint8", "int8"), default="uint8",
                    help="activation type (default uint8, which ONNX Runtime fuses everywhere "
                    "on x86)")
    qo.add_argument("--per-tensor", dest="per_channel", action="store_false",
                    help="weights per tensor (default per output channel)")
    qo.add_argument("--seed", type=int, default=0, help="seed of the calibration samples")
    args = parser.parse_args(argv)
    if args.command == "quantize-onnx":
        return _quantize_onnx(args)
    if args.input_size == [0]:
        args.input_size = None
    if args.command == "export-torchvision":
        return _export_torchvision(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
