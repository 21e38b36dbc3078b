"""The in-process tensor handoff between torch and the engine (fuselage._core.from_torch /
to_torch, Model.from_parts / take_parts): weights cross without serialization.

Expectations are PyTorch's own outputs and tensors; sharing is shown by a write on the
torch side that the engine then sees (so no copy was made), independence by writes that
must not cross (the engine copies a borrowed buffer before it writes: copy-on-write).
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_native_backend_config

import fuselage
from fuselage import FuselageError
from fuselage.quantize_fx import convert_fx, prepare_fx

core = fuselage._core


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def conv_bn():
    torch.manual_seed(0)
    m = ConvBN().eval()
    with torch.no_grad():  # non-trivial statistics, so the fold changes the weight
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
        m.bn.weight.uniform_(0.5, 2)
        m.bn.bias.uniform_(-1, 1)
    return m


def engine_output(model, x):
    (y,) = core.run(model, [x.numpy()])
    return torch.from_numpy(np.asarray(y))


class AddBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.arange(64, dtype=torch.float32))

    def forward(self, x):
        return x + self.offset


def test_from_torch_reads_the_module_memory_in_place():
    m = AddBuffer()
    x = torch.randn(64)
    model = core.from_torch(m)
    assert torch.equal(engine_output(model, x), m(x))
    m.offset.mul_(3)  # seen by the engine: its tensor is the module's memory, not a copy
    assert torch.equal(engine_output(model, x), x + 3 * torch.arange(64.0))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def test_a_torch_side_write_to_a_conv_weight_is_seen_by_the_next_run():
    # The conv kernel caches weights reordered to oneDNN's layout; borrowed weights must
    # not be cached, or the second run would use the weight as it was at the first.
    m = Conv().eval()
    x = torch.randn(1, 8, 10, 10)
    model = core.from_torch(m)
    with torch.no_grad():
        assert torch.allclose(engine_output(model, x), m(x), atol=1e-5)
        m.conv.weight.mul_(-2)
        assert torch.allclose(engine_output(model, x), m(x), atol=1e-5)


def test_an_engine_write_never_reaches_the_torch_module():
    m = conv_bn()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    model = core.from_torch(m)
    core.fuse(model, "native")  # folds bn into the conv weight, in the engine
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    x = torch.randn(2, 3, 5, 5)
    assert torch.allclose(engine_output(model, x), m(x), atol=1e-5)


def test_to_torch_consume_hands_over_and_empties_the_model():
    m = conv_bn()
    model = core.from_torch(m)
    core.fuse(model, "native")
    gm = core.to_torch(model, consume=True)
    x = torch.randn(2, 3, 5, 5)
    assert torch.allclose(gm(x), m(x), atol=1e-5)
    with pytest.raises(FuselageError, match="handed over"):
        model.node_count
    # The folded weight is new memory: writing it leaves the user's conv alone.
    weight = m.conv.weight.detach().clone()
    with torch.no_grad():
        next(t for n, t in gm.named_parameters() if n.endswith("weight")).add_(1)
    assert torch.equal(m.conv.weight, weight)


def test_to_torch_without_consume_leaves_the_model_independent():
    m = conv_bn()
    model = core.from_torch(m)
    core.fuse(model, "native")
    x = torch.randn(1, 3, 5, 5)
    expected = engine_output(model, x)
    gm = core.to_torch(model)
    with torch.no_grad():
        for p in gm.parameters():
            p.mul_(3)  # must not reach the Model's tensors
    assert torch.equal(engine_output(model, x), expected)
    assert model.node_count > 0


def test_handed_over_tensors_keep_values_dtypes_and_quantization():
    m = conv_bn()
    prepared = prepare_fx(m, get_default_qconfig_mapping("fbgemm"), (torch.randn(1, 3, 5, 5),),
                          backend_config=get_native_backend_config())
    for _ in range(3):
        prepared(torch.randn(2, 3, 5, 5))
    model = core.from_torch(prepared)
    core.convert(model)
    core.lower(model)  # native quantized modules: quantized weights
    reference = core.to_torch(model.copy())  # through the handoff
    via_bytes = fuselage.from_proto(  # the serialized path, as the file would give
        fuselage._proto.model_pb2().Model.FromString(model.to_bytes()))
    ours = {k: v for k, v in reference.state_dict().items() if isinstance(v, torch.Tensor)}
    theirs = {k: v for k, v in via_bytes.state_dict().items() if isinstance(v, torch.Tensor)}
    assert ours.keys() == theirs.keys()
    quantized = 0
    for k, v in theirs.items():
        assert ours[k].dtype == v.dtype, k
        if v.is_quantized:
            quantized += 1
            assert torch.equal(ours[k].int_repr(), v.int_repr()), k
            assert ours[k].qscheme() == v.qscheme(), k
        else:
            assert torch.equal(ours[k], v), k
    assert quantized >= 1
    x = torch.randn(2, 3, 5, 5)
    assert torch.equal(reference(x), via_bytes(x))


def test_quantize_fx_results_do_not_alias_the_float_model():
    m = conv_bn()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    config = get_native_backend_config()
    mapping = get_default_qconfig_mapping("fbgemm")
    prepared = prepare_fx(m, mapping, (torch.randn(1, 3, 5, 5),), backend_config=config)
    float_pointers = {t.data_ptr() for t in m.state_dict().values()}
    assert not float_pointers & {t.data_ptr() for t in prepared.state_dict().values()}
    prepared(torch.randn(2, 3, 5, 5))
    with torch.no_grad():
        for p in prepared.parameters():
            p.zero_()  # an in-place write on the prepared model ...
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k  # ... leaves the user's float model as it was
    converted = convert_fx(prepared, backend_config=config)
    assert converted(torch.randn(1, 3, 5, 5)).shape == (1, 4, 5, 5)


def test_a_mismatched_handoff_is_a_clear_error():
    conv = nn.Conv2d(3, 4, 3).eval()
    tensors = []
    structure = fuselage._exporter.to_proto(conv, None, tensors).SerializeToString()
    with pytest.raises(FuselageError, match="tensors were handed over"):
        core.Model.from_parts(structure, tensors[:-1])
    wrong = [t.reshape(-1) if t.dim() > 1 else t for t in tensors]
    with pytest.raises(FuselageError, match="structure declares"):
        core.Model.from_parts(structure, wrong)


def test_torch_inputs_that_require_grad_or_are_strided_run_as_their_values():
    # TensorFromTorch reads a detached CPU tensor with one .numpy() call and detaches the
    # others first; both must give the engine the tensor's values. Expected: PyTorch's
    # own output of the model on the same values.
    m = conv_bn()
    model = core.from_torch(m)
    x = torch.randn(1, 3, 6, 5)
    with torch.no_grad():
        expected = m(x)
    needs_grad = x.clone().requires_grad_(True)
    strided = x.transpose(2, 3).contiguous().transpose(2, 3)  # same values, not C order
    assert not strided.is_contiguous()
    for given in (needs_grad, strided, nn.Parameter(x.clone())):
        (y,) = core.run(model, [given])
        assert torch.allclose(torch.from_numpy(np.asarray(y)), expected, atol=1e-5)
