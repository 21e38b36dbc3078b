"""The lowering report's pass-through fields (quantizes_dropped_after_pass_through,
shape_reads_of_dequantize_moved) as `fuselage quantize --json` writes them and as the
extension returns them, on the inception- and ASPP-like models whose reference graphs
have such quantizes and shape reads (test_pass_through_into_cat_like_pytorch.py).

Independent expectations: which ops lose their quantize is what PyTorch 1.13's convert
does on the same model (that test checks it against PyTorch's graph); the parameters an
op keeps are those of PyTorch's own quantized output of that op, run on the same
calibration; the shape reads are counted by hand from the models' code."""
import json
import subprocess

import numpy as np
import pytest
import torch
import torch.fx
from torch.ao.quantization.quantize_fx import convert_fx

import fuselage
from test_pass_through_into_cat_like_pytorch import (AsppLike, InceptionLike,
                                                  prepare_and_calibrate_like_pytorch)

# model, input shape, the ops whose quantize goes, the shape reads of a dequantize: the
# ASPP model's `x.shape[-2:]` after the stem (the first one reads the float input).
CASES = {
    "inception_like": (InceptionLike, (1, 3, 9, 9), {"max_pool2d", "cat_1", "flatten"}, 0),
    "aspp_like": (AsppLike, (1, 3, 16, 16), {"interpolate"}, 1),
}


def data(shape):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(*shape, generator=g) for _ in range(2)], torch.randn(*shape, generator=g)


def pytorch_output_qparams(model, calibration, x, names):
    """(scale, zero_point) of each named node's quantized output in PyTorch's converted
    model (qnnpack backend config, default mapping), calibrated on the same samples."""
    prepared, backend = prepare_and_calibrate_like_pytorch(model, calibration, x)
    converted = convert_fx(prepared, backend_config=backend)
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if n.name in names and isinstance(value, torch.Tensor) and value.is_quantized:
                seen[n.name] = (value.q_scale(), value.q_zero_point())
            return value

    with torch.no_grad():
        Recorder(converted).run(x)
    assert set(seen) == names, seen
    return seen


def check_dropped(dropped, expected_names, theirs, field):
    """`dropped`: [(node, kept scale, kept zero point, dropped scale, dropped zero point)]."""
    assert {d[0] for d in dropped} == expected_names, (field, dropped)
    for node, kept_scale, kept_zp, dropped_scale, dropped_zp in dropped:
        scale, zero_point = theirs[node]
        assert kept_scale == pytest.approx(scale, rel=1e-6), (field, node)
        assert kept_zp == zero_point, (field, node)
        # It was dropped because it differed from what the op keeps.
        assert (dropped_scale, dropped_zp) != (kept_scale, kept_zp), (field, node)


def quantize_json_lower_stage(cli, tmp_path, model, x, calibration):
    """The lower stage of `fuselage quantize --json --backend=qnnpack` on `model` exported
    with example input `x` and calibrated on `calibration` (tensors); the float model is
    tmp_path/f.fsl."""
    fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
    paths = []
    for i, batch in enumerate(calibration):
        paths.append(tmp_path / f"c{i}.npy")
        np.save(paths[-1], batch.numpy())
    out = subprocess.run([cli, "quantize", str(tmp_path / "f.fsl"), "--backend=qnnpack",
                          f"--calibration={','.join(map(str, paths))}", "--json", "-o",
                          str(tmp_path / "q.fsl")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return {s["name"]: s for s in json.loads(out.stdout)["stages"]}["lower"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_and_binding_report_the_dropped_quantizes_and_moved_shape_reads(cli, tmp_path,
                                                                              case):
    make, shape, dropped_names, shape_reads = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    calibration, x = data(shape)
    theirs = pytorch_output_qparams(model, calibration, x, dropped_names)

    lower = quantize_json_lower_stage(cli, tmp_path, model, x, calibration)
    assert lower["shape_reads_of_dequantize_moved"] == shape_reads
    as_json = lower["quantizes_dropped_after_pass_through"]
    for d in as_json:
        assert d["kept"]["dtype"] == d["dropped"]["dtype"] == "torch.quint8", d
    check_dropped([(d["node"], d["kept"]["scale"], d["kept"]["zero_point"],
                    d["dropped"]["scale"], d["dropped"]["zero_point"]) for d in as_json],
                  dropped_names, theirs, "json")

    core_model = fuselage._core.Model.load(str(tmp_path / "f.fsl"))
    report = fuselage._core.quantize(core_model, [b.numpy() for b in calibration], "qnnpack")
    lowering = report.lowering
    assert lowering.shape_reads_of_dequantize_moved == shape_reads
    check_dropped([(d.node, d.kept.scale, d.kept.zero_point, d.dropped.scale,
                    d.dropped.zero_point) for d in lowering.quantizes_dropped_after_pass_through],
                  dropped_names, theirs, "binding")
    # The same run in process and from the command line: the same numbers.
    assert [(d.node, d.target, d.kept.scale, d.dropped.scale, d.kept.dtype)
            for d in lowering.quantizes_dropped_after_pass_through] == [
        (d["node"], d["target"], d["kept"]["scale"], d["dropped"]["scale"], d["kept"]["dtype"])
        for d in as_json]
    assert "quantizes_dropped_after_pass_through" in repr(lowering)
