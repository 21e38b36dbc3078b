"""Reach of fuselage on torchvision models, against PyTorch 1.13 (issue 18 item 5).

    PYTHONPATH=python /usr/bin/python3 tests/conformance/reach.py [--models a,b] [--no-build]

conformance.py checks resnet18, resnet50, mobilenet_v2 and the residual example op by op.
This suite checks how far fuselage reaches on the models PyTorch 1.13's FX quantization
handles, each with weights=None, eval, fixed seeds and randomized batch-norm statistics, at a
small input (1x3x64x64; inception_v3 1x3x96x96, its smallest size that keeps every pool
window; segmentation 1x3x128x128). Per model, ASSERTED:

  export     fuselage.export of the model succeeds.
  float      `fuselage run` vs PyTorch eager: max |fuselage - pytorch| / max |pytorch| <= 1e-4.
  fuse       node by node, the fused modules of `fuselage fuse --backend=qnnpack` equal those
             of PyTorch's fuse_fx with get_qnnpack_backend_config(): the same fused node
             names, each with the same fused module type (the table shows how many).
  quantize   `fuselage quantize --backend=qnnpack` (the backend's default qconfig mapping,
             as PyTorch's get_default_qconfig_mapping("qnnpack")) on the same two
             calibration batches as PyTorch's prepare_fx, and `fuselage run` of the result.
  float ops  no op that PyTorch's convert_fx runs on quantized tensors is left float by
             fuselage: every node of PyTorch's converted graph whose output is a quantized
             tensor (found by running it) must, if fuselage's quantized graph has a node of
             the same name, compute on quantized tensors in fuselage too (a static dtype
             propagation over fuselage's graph). The table shows how many names matched.
  sqnr       SQNR of fuselage's quantized output against the float output, the better
             of fuselage's two engines (--engine=qnnpack / onednn), >= the better of
             PyTorch's (its converted model on its qnnpack and onednn engines) - 0.5 dB.
             Where PyTorch's converted model fails on both engines, fuselage's figure
             stands alone and the table says so.

Prints one line `CONFORMANCE <model> PASSED|FAILED|KNOWN-GAP` per model (tools/test.sh
counts them; KNOWN_GAPS below lists the models that still miss a figure, and why) and the
table; exits non-zero if any model failed.
"""

import argparse
import copy
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.fx
import torchvision
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.quantize_fx import convert_fx, fuse_fx, prepare_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
from conformance import (FLOAT_MAX_RELATIVE, FUSELAGE, REPO,  # noqa: E402
                         load_proto, randomize_batch_norm, run_tool)

import fuselage  # noqa: E402  (conformance put python/ on the path)
from fuselage._proto import model_pb2  # noqa: E402

SQNR_MARGIN_DB = 0.5
CALIBRATION_BATCHES = 2

# Models that still miss an asserted figure, each with the reason: they run and print
# their figures, and their line is `CONFORMANCE <model> KNOWN-GAP` (neither passed nor
# failed). One that meets every figure fails the run until it is taken off this list, so
# the list cannot go stale.
KNOWN_GAPS = {}

# name -> (builder keyword arguments, input shape)
MODELS = {
    "resnet18": ({}, (1, 3, 64, 64)),
    "resnet50": ({}, (1, 3, 64, 64)),
    "mobilenet_v2": ({}, (1, 3, 64, 64)),
    "mobilenet_v3_large": ({}, (1, 3, 64, 64)),
    "efficientnet_b0": ({}, (1, 3, 64, 64)),
    "regnet_y_400mf": ({}, (1, 3, 64, 64)),
    "densenet121": ({}, (1, 3, 64, 64)),
    "googlenet": ({"aux_logits": False, "init_weights": True}, (1, 3, 64, 64)),
    "inception_v3": ({"aux_logits": False, "init_weights": True}, (1, 3, 96, 96)),
    "squeezenet1_1": ({}, (1, 3, 64, 64)),
    "convnext_tiny": ({}, (1, 3, 64, 64)),
    "deeplabv3_mobilenet_v3_large": ({"weights_backbone": None}, (1, 3, 128, 128)),
}


def fused_node_types(proto):
    """{node name: module type} of the call_module nodes of `proto` whose module is a fused
    one (an nni.* type), so that two fusions can be compared node by node: a count per type
    would not notice a fusion moved to another node or two fusions swapped."""
    types = {}
    for n in proto.graph.nodes:
        if n.op == model_pb2().CALL_MODULE:
            module = conformance.module_at(proto.root, n.target)
            if module is not None and module.type.startswith("nni."):
                types[n.name] = module.type
    return types


def fused_differences(ours, theirs, limit=6):
    """The differences between two {fused node name: type} maps, worded for a failure
    message (empty when they are equal): nodes only fuselage fused, nodes only fuse_fx
    fused, and nodes both fused with different types; at most `limit` of each."""
    def listed(what, items):
        items = sorted(items)
        more = f" and {len(items) - limit} more" if len(items) > limit else ""
        return [f"{what}: {', '.join(items[:limit])}{more}"] if items else []
    only_ours = [f"{n} ({ours[n]})" for n in ours if n not in theirs]
    only_theirs = [f"{n} ({theirs[n]})" for n in theirs if n not in ours]
    differing = [f"{n} ({ours[n]} vs {theirs[n]})" for n in ours
                 if n in theirs and ours[n] != theirs[n]]
    return "; ".join(listed("fused only by fuselage", only_ours) +
                     listed("fused only by fuse_fx", only_theirs) +
                     listed("fused to another type", differing))


def build(name):
    kwargs, shape = MODELS[name]
    torch.manual_seed(0)
    builder = getattr(torchvision.models, name, None) or getattr(
        torchvision.models.segmentation, name)
    model = builder(weights=None, **kwargs)
    return randomize_batch_norm(model, seed=1).eval(), shape


def first_output(value):
    """The tensor a model returns: segmentation models return {"out": tensor}."""
    if isinstance(value, dict):
        value = value["out"]
    if isinstance(value, (tuple, list)):
        value = value[0]
    return value.dequantize() if value.is_quantized else value


def sqnr_db(reference, measured):
    noise = float(np.sum((reference - measured) ** 2))
    signal = float(np.sum(reference ** 2))
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


# ---- Which ops run on quantized tensors -----------------------------------------------

class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.quantized = set()

    def run_node(self, n):
        value = super().run_node(n)
        if isinstance(value, torch.Tensor) and value.is_quantized:
            self.quantized.add(n.name)
        return value


def pytorch_quantized_ops(converted, example):
    """Names of the compute nodes of PyTorch's converted graph whose output is quantized
    (quantize nodes themselves excluded)."""
    recorder = _Recorder(converted)
    with torch.no_grad():
        recorder.run(example)
    ops = {"call_module", "call_function", "call_method"}
    return {n.name for n in converted.graph.nodes
            if n.name in recorder.quantized and n.op in ops
            and "quantize_per" not in str(n.target)}


def _node_inputs(arg, out):
    kind = arg.WhichOneof("value")
    if kind == "node":
        out.append(arg.node)
    elif kind in ("list", "tuple", "slice"):
        for item in getattr(arg, kind).items:
            _node_inputs(item, out)


def fuselage_float_ops(proto):
    """{node name: op kind} of the compute nodes of fuselage's graph that run on float
    tensors, by static propagation: placeholders, get_attr and dequantize give float;
    quantize_per_tensor / _per_channel and native quantized modules give quantized; any
    other node is quantized iff one of its node inputs is."""
    pb = model_pb2()
    quantized = set()
    floats = {}
    for n in proto.graph.nodes:
        inputs = []
        for a in n.args:
            _node_inputs(a, inputs)
        for kw in n.kwargs:
            _node_inputs(kw.value, inputs)
        if n.op in (pb.PLACEHOLDER, pb.GET_ATTR, pb.OUTPUT):
            continue
        kind = n.target
        if n.op == pb.CALL_MODULE:
            module = conformance.module_at(proto.root, n.target)
            kind = module.type if module is not None else n.target
        if "quantize_per" in n.target or kind.startswith(("nnq.", "nniq.")):
            quantized.add(n.name)
        elif "dequantize" in n.target or kind == "nnq.DeQuantize":
            pass
        elif any(i in quantized for i in inputs):
            quantized.add(n.name)
        else:
            floats[n.name] = kind
    return floats


def count_targets(proto, words):
    return sum(1 for n in proto.graph.nodes if any(w in n.target for w in words))


def pytorch_counts(converted):
    """(quantize nodes, dequantize nodes) of PyTorch's converted graph."""
    targets = [str(n.target) for n in converted.graph.nodes]
    return (sum("quantize_per" in t for t in targets),
            sum("dequantize" in t for t in targets))


# ---- One model ------------------------------------------------------------------------

class Result:
    def __init__(self, model):
        self.model = model
        self.figures = {}
        self.failures = []
        self.seconds = 0.0
        self.status = "FAILED"

    def check(self, what, ok, detail):
        if not ok:
            self.failures.append(f"{what}: {detail}")


def reach(name, workdir):
    result = Result(name)
    start = time.time()
    model, shape = build(name)
    g = torch.Generator().manual_seed(2)
    batches = [torch.randn(*shape, generator=g) for _ in range(CALIBRATION_BATCHES + 1)]
    calibration, evaluation = batches[:-1], batches[-1]
    path = lambda f: os.path.join(workdir, f"{name}_{f}")  # noqa: E731
    calibration_paths = []
    for i, batch in enumerate(calibration):
        calibration_paths.append(path(f"calibration{i}.npy"))
        np.save(calibration_paths[-1], batch.numpy())
    np.save(path("eval.npy"), evaluation.numpy())

    # Export and float.
    model_path = path("float.fsl")
    fuselage.export(model, (evaluation,), model_path)
    result.figures["export"] = "ok"
    with torch.no_grad():
        expected = first_output(model(evaluation)).numpy()
    run_tool([FUSELAGE, "run", model_path, f"--input={path('eval.npy')}",
              f"--output={path('float_out.npy')}"])
    ours = np.load(path("float_out.npy"))
    rel = float(np.abs(ours - expected).max() / np.abs(expected).max())
    result.figures["float max rel"] = f"{rel:.1e}"
    result.check("float", ours.shape == expected.shape and rel <= FLOAT_MAX_RELATIVE,
                 f"max relative difference {rel:.3g} > {FLOAT_MAX_RELATIVE}")

    # Fused module types against fuse_fx.
    backend_config = get_qnnpack_backend_config()
    run_tool([FUSELAGE, "fuse", model_path, "--backend=qnnpack", "-o", path("fused.fsl")])
    ours_fused = fused_node_types(load_proto(path("fused.fsl")))
    theirs_fused = fused_node_types(
        fuselage.to_proto(fuse_fx(copy.deepcopy(model), backend_config=backend_config)))
    result.figures["fused"] = str(len(theirs_fused))
    fused_mismatch = fused_differences(ours_fused, theirs_fused)
    result.check("fuse", not fused_mismatch, fused_mismatch)

    # PyTorch's own flow, on both engines.
    mapping = get_default_qconfig_mapping("qnnpack")
    prepared = prepare_fx(copy.deepcopy(model), mapping, (evaluation,),
                          backend_config=backend_config)
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    theirs_sqnr = {}
    quantized_names = theirs_counts = None
    for engine in ("qnnpack", "onednn"):
        torch.backends.quantized.engine = engine
        try:
            converted = convert_fx(copy.deepcopy(prepared), backend_config=backend_config)
            with torch.no_grad():
                out = first_output(converted(evaluation)).numpy()
            theirs_sqnr[engine] = sqnr_db(expected, out)
            if quantized_names is None:
                quantized_names = pytorch_quantized_ops(converted, evaluation)
                theirs_counts = pytorch_counts(converted)
        except Exception as e:  # PyTorch's own failure is a figure, not ours
            theirs_sqnr[engine] = f"fails ({str(e).splitlines()[0][:60]})"
    torch.backends.quantized.engine = "onednn"

    # fuselage's flow.
    run_tool([FUSELAGE, "quantize", model_path, "--backend=qnnpack",
              f"--calibration={','.join(calibration_paths)}", "-o", path("quantized.fsl")])
    # On both engines' arithmetic, as PyTorch's converted model runs on both: the bar is
    # PyTorch's better engine, met by fuselage's better one (each engine agrees with
    # PyTorch's engine of the same name, conformance.py checks that per layer).
    ours_sqnr = {}
    for engine in ("qnnpack", "onednn"):
        run_tool([FUSELAGE, "run", path("quantized.fsl"), f"--input={path('eval.npy')}",
                  f"--output={path('quantized_out.npy')}", f"--engine={engine}"])
        ours_sqnr[engine] = sqnr_db(expected, np.load(path("quantized_out.npy")))
    quantized_proto = load_proto(path("quantized.fsl"))
    result.figures["fuselage sqnr qnnpack / onednn"] = " / ".join(
        f"{v:.2f} dB" for v in ours_sqnr.values())
    result.figures["pytorch sqnr qnnpack / onednn"] = " / ".join(
        f"{v:.2f} dB" if isinstance(v, float) else v for v in theirs_sqnr.values())
    numeric = [v for v in theirs_sqnr.values() if isinstance(v, float)]
    if numeric:
        bar = max(numeric) - SQNR_MARGIN_DB
        best = max(ours_sqnr.values())
        result.check("sqnr", best >= bar, f"{best:.2f} dB < {bar:.2f} dB")

    # Ops PyTorch quantizes that fuselage leaves float.
    floats = fuselage_float_ops(quantized_proto)
    ours_names = {n.name for n in quantized_proto.graph.nodes}
    if quantized_names is not None:
        matched = quantized_names & ours_names
        left_float = sorted(f"{n} ({floats[n]})" for n in matched if n in floats)
        result.figures["float ops"] = f"{len(left_float)} of {len(matched)} matched"
        result.check("float ops", not left_float, ", ".join(left_float[:8]) +
                     (f" and {len(left_float) - 8} more" if len(left_float) > 8 else ""))
        result.figures["quantize / dequantize"] = (
            f"{count_targets(quantized_proto, ('quantize_per',))} / "
            f"{count_targets(quantized_proto, ('dequantize',))} "
            f"(PyTorch {theirs_counts[0]} / {theirs_counts[1]})")
    result.seconds = time.time() - start
    return result


COLUMNS = ("export", "float max rel", "fused", "fuselage sqnr qnnpack / onednn",
           "pytorch sqnr qnnpack / onednn", "float ops", "quantize / dequantize")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--no-build", action="store_true",
                        help="use the fuselage binary already in bazel-bin")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    if not args.no_build:
        subprocess.run(["bazel", "build", "//tools:fuselage"], cwd=REPO, check=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    workdir = tempfile.mkdtemp(prefix="fuselage-reach-")
    results = []
    try:
        for name in models:
            print(f"== {name}", flush=True)
            try:
                result = reach(name, workdir)
            except Exception as e:  # a crash of one model is that model's failure
                result = Result(name)
                result.failures.append(f"error: {str(e)[:400]}")
            for failure in result.failures:
                print(f"  {failure}")
            if name in KNOWN_GAPS and result.failures:
                result.status = "KNOWN-GAP"
                print(f"  known gap (issue 18): {KNOWN_GAPS[name]}")
            elif name in KNOWN_GAPS:
                result.status = "FAILED"
                print(f"  {name} now meets every figure: take it off KNOWN_GAPS")
            else:
                result.status = "FAILED" if result.failures else "PASSED"
            print(f"CONFORMANCE {name} {result.status}", flush=True)
            results.append(result)
    finally:
        subprocess.run(["rm", "-rf", workdir], check=False)
    print()
    print("| model | " + " | ".join(COLUMNS) + " | time | result |")
    print("|" + "---|" * (len(COLUMNS) + 3))
    for r in results:
        print(f"| {r.model} | " + " | ".join(r.figures.get(c, "-") for c in COLUMNS) +
              f" | {r.seconds:.0f} s | {r.status.lower()} |")
    counts = {status: sum(1 for r in results if r.status == status)
              for status in ("PASSED", "FAILED", "KNOWN-GAP")}
    print(f"\nreach: {counts['PASSED']} passed, {counts['FAILED']} failed, "
          f"{counts['KNOWN-GAP']} known gaps (models)")
    return 1 if counts["FAILED"] else 0


if __name__ == "__main__":
    sys.exit(main())
