"""fuselage.quantize_fx as a drop-in for torch.ao.quantization.quantize_fx (issue 19 item 4).

The issue's own code, with the import changed and fuselage's fuser: the fused
conv-add-relu of a residual block receives two quantized tensors, runs in PyTorch and
equals fuselage's interpreter; and torchvision models through fuselage.quantize_fx with a
mapping that sets per-module and per-type qconfigs (None included) quantize exactly the ops
PyTorch's convert_fx quantizes, at PyTorch's SQNR or better (within 0.5 dB).
"""
import collections
import copy
import math

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn as nn
import torchvision
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import (BackendPatternConfig, DTypeConfig,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.fx.match_utils import MatchAllNode
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

import fuselage
import fuselage.fusers
import fuselage.nn.quantized
from fuselage import _core
from fuselage.quantize_fx import convert_fx, prepare_fx
from conftest import nested_pattern_config

weighted_int8_dtype_config = DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8,
                                         weight_dtype=torch.qint8, bias_dtype=torch.float)


def root_node_getter(pattern):
    relu, add_pattern = pattern
    _, bn_pattern, _ = add_pattern
    bn, conv = bn_pattern
    return conv


def extra_inputs_getter(pattern):
    relu, add_pattern = pattern
    _, bn_pattern, extra_input = add_pattern
    return [extra_input]


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()

    def forward(self, x):
        identity = self.stem(x)
        return self.relu(torch.add(self.bn(self.conv(identity)), identity))


def issue_backend_config():
    cfg = nested_pattern_config((nn.ReLU, (torch.add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode))) \
        .set_fuser_method(fuselage.fusers.fuse_conv_bn_add_relu) \
        ._set_root_node_getter(root_node_getter) \
        ._set_extra_inputs_getter(extra_inputs_getter) \
        .set_dtype_configs([weighted_int8_dtype_config])
    return get_qnnpack_backend_config().set_backend_pattern_config(cfg)


class _Values(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.args_of = {}
        self.quantized = set()

    def run_node(self, n):
        args, _ = self.fetch_args_kwargs_from_env(n)
        self.args_of[n.name] = args
        value = super().run_node(n)
        if isinstance(value, torch.Tensor) and value.is_quantized:
            self.quantized.add(n.name)
        return value


def test_the_issues_conv_bn_add_relu_gets_two_quantized_inputs_and_runs_in_pytorch():
    torch.manual_seed(0)
    model = Residual().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 1.5)
    example = torch.randn(1, 3, 16, 16)
    qconfig_mapping = get_default_qconfig_mapping("qnnpack")
    backend_config = issue_backend_config()
    prepared = prepare_fx(model, qconfig_mapping, (example,), backend_config=backend_config)
    assert isinstance(prepared, torch.fx.GraphModule)
    # Calibrated by the user's own loop, on PyTorch's observer modules.
    observers = [m for m in prepared.modules()
                 if isinstance(m, torch.ao.quantization.ObserverBase)]
    assert observers
    for _ in range(4):
        prepared(torch.randn(1, 3, 16, 16))
    activation_observers = [m for n, m in prepared.named_modules()
                            if "activation_post_process" in n]
    assert len(activation_observers) >= 3  # input, stem, the fused op's output
    assert all(float(o.min_val) < float(o.max_val) for o in activation_observers)
    converted = convert_fx(prepared, qconfig_mapping=None, backend_config=None)

    fused = [n for n in converted.graph.nodes if n.op == "call_module" and isinstance(
        converted.get_submodule(n.target), fuselage.nn.quantized.ConvAddReLU2d)]
    assert len(fused) == 1
    x = torch.randn(1, 3, 16, 16)
    values = _Values(converted)
    with torch.no_grad():
        out = values.run(x)
    args = values.args_of[fused[0].name]
    assert len(args) == 2 and all(a.is_quantized for a in args)  # both inputs quantized
    assert sum(1 for n in converted.graph.nodes if "dequantize" in str(n.target)) == 1

    # PyTorch's own run of the converted model equals fuselage's interpreter bit for bit.
    ours = _core.run(_core.from_torch(converted), [x.numpy()])[0]
    theirs = out.int_repr().numpy() if out.is_quantized else out.numpy()
    ours_values = np.asarray(ours.values if hasattr(ours, "values") else ours)
    if out.is_quantized:
        assert np.array_equal(ours_values, theirs)
    else:
        assert np.array_equal(np.asarray(ours), theirs)


_WARNINGS_SCRIPT = """
import os, sys, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, fuselage
    from fuselage import _core
    from fuselage.quantize_fx import convert_fx, prepare_fx
    from torch.ao.quantization import get_default_qconfig_mapping
    import test_quantize_fx as t
    torch.manual_seed(0)
    example = torch.randn(1, 3, 16, 16)
    prepared = prepare_fx(t.Residual().eval(), get_default_qconfig_mapping("qnnpack"),
                          (example,), backend_config=t.issue_backend_config())
    prepared(example)
    converted = convert_fx(prepared)
    converted(example)
    _core.to_torch(_core.from_torch(converted, (example,)))(example)
root = os.path.dirname(fuselage.__file__)
for w in caught:
    if os.path.abspath(w.filename).startswith(root):
        print("%s:%d: %s" % (w.filename, w.lineno, w.message))
"""


def test_fuselage_raises_no_warning_of_its_own(tmp_path):
    # A fresh process: PyTorch warns about its deprecated quantized dtypes once per process.
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "warnings_check.py"
    script.write_text(_WARNINGS_SCRIPT)
    out = subprocess.run([sys.executable, str(script), here], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONWARNINGS": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


def _quantized_ops(gm, x):
    """The ops that compute on quantized tensors, comparable across two converted graphs:
    a call_module by its module path, a function or method by its name (PyTorch names the
    node of a lowered add-relu 'add_relu', fuselage keeps 'add'), counted."""
    values = _Values(gm)
    with torch.no_grad():
        out = values.run(x)
    ops = collections.Counter()
    for n in gm.graph.nodes:
        if n.name not in values.quantized or "quantize_per" in str(n.target):
            continue
        if n.op == "call_module":
            ops["module " + n.target] += 1
        elif n.op in ("call_function", "call_method"):
            ops[getattr(n.target, "__name__", str(n.target))] += 1
    return ops, (out.dequantize() if out.is_quantized else out)


def _sqnr(reference, measured):
    noise = float(((reference - measured) ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float((reference ** 2).sum()) / noise)


@pytest.mark.parametrize("name, keep_float", [
    ("resnet18", "layer2"),
    ("mobilenet_v2", "features.3"),
])
def test_torchvision_with_per_module_and_per_type_qconfigs_quantizes_what_pytorch_does(
        name, keep_float):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    calibration = [torch.randn(1, 3, 64, 64, generator=g) for _ in range(2)]
    x = torch.randn(1, 3, 64, 64, generator=g)
    mapping = (get_default_qconfig_mapping("qnnpack")
               .set_module_name(keep_float, None)
               .set_object_type(nn.Linear, None))
    backend_config = get_qnnpack_backend_config()

    # Both converted models run on PyTorch's onednn engine (its qnnpack relu6 is wrong on
    # channels-last tensors, issue 18), fuselage's rebuilt by fuselage.to_torch.
    theirs_prepared = torch_prepare_fx(copy.deepcopy(model), mapping, (x,),
                                       backend_config=backend_config)
    ours_prepared = prepare_fx(copy.deepcopy(model), mapping, (x,), backend_config=backend_config)
    with torch.no_grad():
        for batch in calibration:
            theirs_prepared(batch)
            ours_prepared(batch)
    theirs = torch_convert_fx(theirs_prepared, backend_config=backend_config)
    ours = convert_fx(ours_prepared)
    theirs_ops, theirs_out = _quantized_ops(theirs, x)
    ours_ops, ours_out = _quantized_ops(ours, x)
    # The float submodule and the linear stay float on both sides; the rest is quantized
    # op for op.
    assert not any(op.startswith("module " + keep_float + ".") for op in ours_ops)
    assert any(op.startswith("module ") for op in ours_ops)
    assert ours_ops == theirs_ops, (ours_ops - theirs_ops, theirs_ops - ours_ops)
    with torch.no_grad():
        expected = model(x)
    assert _sqnr(expected, ours_out) >= _sqnr(expected, theirs_out) - 0.5


def _save_and_load(model):
    import io
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    try:
        return torch.load(buffer, weights_only=False)
    except TypeError:  # PyTorch 1.13 has no weights_only
        buffer.seek(0)
        return torch.load(buffer)


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save", "twice"])
def test_a_copy_of_a_prepared_model_converts_as_the_original(how):
    # PyTorch 1.13's GraphModule rebuilt copies from the graph alone and dropped the weight
    # plans no node calls: the copy's convs and linears converted silently float.
    import pickle
    copies = {
        "deepcopy": copy.deepcopy,
        "pickle": lambda m: pickle.loads(pickle.dumps(m)),
        "torch.save": _save_and_load,
        "twice": lambda m: copy.deepcopy(pickle.loads(pickle.dumps(m))),
    }
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5)).eval()
    x = torch.randn(2, 3, 8, 8)
    prepared = prepare_fx(model, get_default_qconfig_mapping("qnnpack"), (x,))
    prepared(x)
    duplicate = copies[how](prepared)
    original, converted = convert_fx(prepared), convert_fx(duplicate)
    import torch.nn.intrinsic.quantized as nniq
    import torch.nn.quantized as nnq
    assert {nniq.ConvReLU2d, nnq.Linear} <= {type(m) for m in converted.modules()}
    with torch.no_grad():
        assert torch.equal(converted(x), original(x))


def test_the_seeds_convert_call_with_its_mappings_runs_verbatim():
    # The PyTorch issue fuselage started from converts with
    # qfx.convert_fx(prepared_model, qconfig_mapping=qmapping, backend_config=backend_config).
    import fuselage.quantize_fx as qfx
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    qmapping = get_default_qconfig_mapping("qnnpack")
    backend_config = issue_backend_config()
    prepared_model = qfx.prepare_fx(Residual().eval(), qmapping, (x,),
                                    backend_config=backend_config)
    prepared_model(x)
    verbatim = qfx.convert_fx(copy.deepcopy(prepared_model), qconfig_mapping=qmapping,
                              backend_config=backend_config)
    plain = qfx.convert_fx(prepared_model)
    with torch.no_grad():
        assert torch.equal(verbatim(x), plain(x))
    assert any(isinstance(m, fuselage.nn.quantized.ConvAddReLU2d) for m in verbatim.modules())

    # A mapping that does more than narrow prepare's (test_quantize_fx_as_pytorch.py) is
    # refused, naming what differs.
    other = get_default_qconfig_mapping("fbgemm")
    with pytest.raises(fuselage.ConfigTranslationError, match="global qconfig differs"):
        qfx.convert_fx(prepared_model, qconfig_mapping=other)
