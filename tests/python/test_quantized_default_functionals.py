"""The default functionals PyTorch 1.13 lowers (F.elu, F.leaky_relu, F.dropout become
torch.ops.quantized.elu / leaky_relu / dropout with output_scale / output_zero_point)
run in fuselage: `fuselage quantize` lowers them to the same calls as prepare_fx /
convert_fx (qnnpack), the quantized model runs, and its outputs are within one step of
PyTorch's converted model's (≥ 99.9 % equal). PyTorch's own converted model, exported,
runs in fuselage with PyTorch's outputs bit for bit.

The qconfig mapping is qnnpack's default on PyTorch 2; on PyTorch 1.13 its activation
observer is MinMaxObserver instead of HistogramObserver (for PyTorch and for the CLI,
through --qconfig-mapping): fuselage's HistogramObserver is PyTorch 2's
(quantize/observers.h), and 1.13's bins even a single batch over the range truncated to
integers (torch.histc(x, bins, min=int(min_val), max=int(max_val))), so its scales differ
(0.0547 against 2's 0.0569 for this conv's input) and the outputs 8 to 13 steps apart
would measure the observer's version, not the lowering."""

import copy
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.ao.quantization import (HistogramObserver, MinMaxObserver, QConfig,
                                   get_default_qconfig_mapping)
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import fuselage
from fuselage._translate import qconfig_mapping_to_text
from test_quantize_ops_like_pytorch import ConvThen, Lambda, fuselage_calls, torch_calls

CASES = {
    "F.elu": lambda y: F.elu(y, 0.7),
    "F.leaky_relu": lambda y: F.leaky_relu(y, 0.1),
    "F.dropout": lambda y: F.dropout(y, 0.5, False),
}


def run(cli, path, x, tmp_path, *flags):
    np.save(tmp_path / "x.npy", x.numpy())
    out = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                          f"--output={tmp_path / 'y.npy'}", *flags],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return torch.from_numpy(np.load(tmp_path / "y.npy"))


def quantized_output_scale(converted, x):
    """The scale of the quantized tensor PyTorch's model dequantizes last: one step."""
    graph = copy.deepcopy(converted.graph)
    output = next(n for n in graph.nodes if n.op == "output")
    dequantize = output.args[0]
    assert dequantize.op == "call_method" and dequantize.target == "dequantize"
    output.args = (dequantize.args[0],)
    with torch.no_grad():
        return torch.fx.GraphModule(converted, graph)(x).q_scale()


def qconfig_mapping():
    """qnnpack's default mapping; on PyTorch 1.13, whose HistogramObserver fuselage does not
    implement (see the module docstring), with every histogram activation observer
    replaced by a MinMaxObserver of the same reduce_range."""
    mapping = get_default_qconfig_mapping("qnnpack")
    if int(torch.__version__.split(".")[0]) >= 2:
        return mapping

    def min_max(qconfig):
        if qconfig is None or not isinstance(qconfig.activation(), HistogramObserver):
            return qconfig
        reduce_range = qconfig.activation().reduce_range
        return QConfig(activation=MinMaxObserver.with_args(reduce_range=reduce_range),
                       weight=qconfig.weight)

    mapping.set_global(min_max(mapping.global_qconfig))
    for object_type, qconfig in list(mapping.object_type_qconfigs.items()):
        mapping.set_object_type(object_type, min_max(qconfig))
    return mapping


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_functional_lowers_and_runs_like_pytorch(cli, tmp_path, case):
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        torch.manual_seed(0)
        model = ConvThen(Lambda(CASES[case]), channels=8).eval()
        x = torch.randn(1, 3, 12, 12) * 2
        backend = get_qnnpack_backend_config()
        mapping = qconfig_mapping()
        prepared = prepare_fx(copy.deepcopy(model), mapping, (x,), backend_config=backend)
        with torch.no_grad():
            prepared(x)
        converted = convert_fx(prepared, backend_config=backend)
        op = "function torch.ops.quantized." + case[2:]
        assert torch_calls(converted)[op] == 1
        with torch.no_grad():
            want = converted(x)

        # PyTorch's converted model in fuselage, on the engine PyTorch ran it on (an
        # exported PyTorch model records none): the same values exactly.
        fuselage.export(converted, (x,), str(tmp_path / "converted.fsl"))
        assert torch.equal(
            run(cli, tmp_path / "converted.fsl", x, tmp_path, "--engine=qnnpack"), want)

        # fuselage's own quantization: the same calls, within one step.
        fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
        np.save(tmp_path / "calibration.npy", x.numpy())
        (tmp_path / "mapping.textproto").write_text(qconfig_mapping_to_text(mapping))
        quantize = subprocess.run(
            [cli, "quantize", str(tmp_path / "f.fsl"), "--backend=qnnpack",
             f"--calibration={tmp_path / 'calibration.npy'}",
             f"--qconfig-mapping={tmp_path / 'mapping.textproto'}", "-o", str(tmp_path / "q.fsl")],
            capture_output=True, text=True, timeout=300)
        assert quantize.returncode == 0, quantize.stderr
        assert fuselage_calls(tmp_path / "q.fsl") == torch_calls(converted), quantize.stdout
        got = run(cli, tmp_path / "q.fsl", x, tmp_path)
        steps = ((got - want).abs() / quantized_output_scale(converted, x)).round()
        assert steps.max().item() <= 1, steps.max().item()
        assert (steps == 0).float().mean().item() >= 0.999
    finally:
        torch.backends.quantized.engine = engine
