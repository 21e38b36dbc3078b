"""torch.export programs into fuselage and back (issue 36 item 1): fuselage.from_exported
reads the aten graph of torchvision models into its engine, which runs it as PyTorch does,
and to_torch writes the same aten calls back."""

import collections
import operator

import pytest
import torch
import torch.nn as nn

import fuselage
from conftest import randomize_batch_norm, torchao_x86_reference
from fuselage import _core

torchvision = pytest.importorskip("torchvision")
pytestmark = pytest.mark.skipif(not hasattr(torch, "export"), reason="torch.export is PyTorch 2")


def _calls(gm):
    return collections.Counter(n.target for n in gm.graph.nodes if n.op == "call_function")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_large", "convnext_tiny"])
def test_an_exported_torchvision_model_runs_in_fuselage_and_goes_back_as_aten(name):
    torch.manual_seed(0)
    model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None).eval())
    x = torch.randn(1, 3, 64, 64)
    program = torch.export.export(model, (x,))
    with torch.no_grad():
        want = model(x)
    engine = fuselage.from_exported(program, (x,))
    got = torch.from_numpy(_core.run(engine, [x.numpy()])[0])
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    back = _core.to_torch(engine)
    exported = program.module()
    # The same aten calls (export's input guard aside), and PyTorch's own result.
    assert _calls(back) == _calls(exported)
    with torch.no_grad():
        assert torch.equal(back(x)[0], exported(x))


def test_a_decomposed_batch_norm_and_its_getitem_come_back_as_they_were():
    # run_decompositions writes _native_batch_norm_legit_no_training, a 3-tuple read by
    # getitem 0; fuselage's F.batch_norm returns the one output.
    model = randomize_batch_norm(nn.Sequential(nn.BatchNorm2d(3), nn.ReLU()).eval())
    x = torch.randn(2, 3, 4, 4)
    program = torch.export.export(model, (x,)).run_decompositions()
    engine = fuselage.from_exported(program, (x,))
    with torch.no_grad():
        want = model(x)
    got = torch.from_numpy(_core.run(engine, [x.numpy()])[0])
    assert torch.allclose(got, want, atol=1e-6)
    back = _core.to_torch(engine)
    assert _calls(back) == _calls(program.module())
    assert [n.args[1] for n in back.graph.nodes if n.target is operator.getitem] == [0]
    with torch.no_grad():
        assert torch.equal(back(x)[0], want)


def test_an_op_fuselage_does_not_read_is_refused_naming_the_node_and_op():
    class Cumulative(nn.Module):
        def forward(self, x):
            return torch.relu(x).cumsum(0)

    program = torch.export.export(Cumulative(), (torch.randn(3, 4),))
    with pytest.raises(fuselage.ExportError,
                       match=r"node 'cumsum': op 'aten.cumsum.default' is not one fuselage reads"):
        fuselage.from_exported(program)


class _Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)).cumsum(1)


def test_an_op_fuselage_does_not_read_is_kept_float_and_reported_where_the_user_asks():
    # unknown_ops="float": the op is an opaque node of the engine (which the engine's
    # interpreter does not run: PyTorch does), named in the prepare report as kept float,
    # and given back as the same aten call.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(_Cumulative().eval(), (x,))
    engine = fuselage.from_exported(program, (x,), unknown_ops="float")
    want = program.module()(x)
    back = _core.to_torch(engine)
    assert _calls(back)[torch.ops.aten.cumsum.default] == 1
    assert torch.equal(back(x)[0], want)
    _core.fuse(engine, "x86")
    report = _core.prepare(engine, "x86")
    assert [(k.node, k.op) for k in report.kept_float] == [("cumsum", "torch.ops.aten.cumsum.default")]


def test_unknown_ops_float_still_refuses_an_unknown_op_that_writes_in_place():
    class FillsSlice(nn.Module):
        def forward(self, x):
            mask = torch.zeros(x.shape[0], 4)
            mask[:, 1:3] = 1.0  # aten.fill_ into a slice of the mask
            return x * mask

    program = torch.export.export(FillsSlice(), (torch.randn(2, 4),))
    with pytest.raises(fuselage.ExportError, match=r"node 'zeros': op 'aten.zeros.default' is not one"):
        fuselage.from_exported(program)
    with pytest.raises(fuselage.ExportError,
                       match=r"node 'fill_\w*': op 'aten.fill_.Tensor' writes into its arguments"):
        fuselage.from_exported(program, unknown_ops="float")


def test_an_unknown_value_of_unknown_ops_is_a_clear_error():
    program = torch.export.export(_Cumulative().eval(), (torch.randn(1, 3, 8, 8),))
    with pytest.raises(fuselage.ExportError,
                       match=r"from_exported: unknown_ops is 'skip'; expected \"refuse\""):
        fuselage.from_exported(program, unknown_ops="skip")


def test_an_in_place_write_into_an_input_is_refused():
    class WritesInput(nn.Module):
        def forward(self, x):
            return x.relu_() * 2

    program = torch.export.export(WritesInput(), (torch.randn(3, 4),))
    with pytest.raises(fuselage.ExportError,
                       match=r"node 'relu_': it writes in place into placeholder 'x'"):
        fuselage.from_exported(program)


def test_something_else_than_a_program_is_a_clear_error():
    with pytest.raises(fuselage.ExportError, match="expected a torch.export.ExportedProgram"):
        fuselage.from_exported(nn.ReLU())


class _ConvAddLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        z = torch.relu(self.c2(y) + y)
        return self.fc(z.mean((2, 3)))


def _reference_in_fuselage():
    """(input, torchao's reference model of _ConvAddLinear, its output, fuselage's Model
    of it)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    reference = torchao_x86_reference(_ConvAddLinear().eval(), x)
    with torch.no_grad():
        want = reference(x)
    return x, reference, want, fuselage.from_exported(reference, (x,))


def test_a_pt2e_reference_model_runs_in_fuselage_and_goes_back_as_q_dq_ops():
    x, reference, want, engine = _reference_in_fuselage()
    got = torch.from_numpy(_core.run(engine, [x.numpy()])[0])
    assert torch.allclose(got, want, atol=1e-5)
    back = _core.to_torch(engine)
    calls = _calls(reference)
    assert calls[torch.ops.quantized_decomposed.dequantize_per_channel.default] == 3
    assert _calls(back) == calls  # the same q/dq and aten calls
    with torch.no_grad():
        assert torch.equal(back(x)[0], want)


def test_a_pt2e_reference_lowers_to_native_kernels_in_fuselage_and_runs_in_pytorch():
    # dq -> conv -> relu -> q becomes one quantized conv-relu; the result still runs in
    # PyTorch, the rest of the graph in its q/dq form.
    x, _, want, engine = _reference_in_fuselage()
    assert _core.lower(engine).total_lowered >= 1
    got = torch.from_numpy(_core.run(engine, [x.numpy()])[0])
    lowered = _core.to_torch(engine)
    assert torch.ops.quantized.conv2d_relu in _calls(lowered)
    with torch.no_grad():
        in_pytorch = lowered(x)[0]
    step = 0.002  # the mean's output scale is 0.002; the linear then multiplies by < 1
    assert float((got - want).abs().max()) <= step
    assert float((in_pytorch - want).abs().max()) <= step


def test_a_narrow_quant_range_is_refused_naming_the_node():
    class Narrow(nn.Module):
        def forward(self, x):
            q = torch.ops.quantized_decomposed.quantize_per_tensor.default(
                x, 0.1, 0, 0, 127, torch.uint8)
            return torch.ops.quantized_decomposed.dequantize_per_tensor.default(
                q, 0.1, 0, 0, 127, torch.uint8)

    pytest.importorskip("torchao.quantization.pt2e")  # registers quantized_decomposed
    program = torch.export.export(Narrow(), (torch.randn(3),))
    with pytest.raises(fuselage.ExportError, match=r"node 'quantize_per_tensor': quant range "
                                                   r"\[0, 127\]; fuselage reads the whole"):
        fuselage.from_exported(program)


def test_the_python_reader_and_the_pattern_language_share_one_table_of_aten_ops():
    # patterns/aten_ops.cc names each aten op's FX form for the pattern language;
    # fuselage._exported rewrites graphs with its callables: they must agree.
    from fuselage import _exported, _names
    ours = {name: _names.function_name(op.fx) for name, op in _exported._OPS.items()}
    assert ours == dict(_core.aten_ops())


def test_a_pattern_in_aten_spelling_fuses_an_exported_model():
    # aten.add_.Tensor / aten.relu_.default are `add` / `relu` with all their spellings:
    # resnet18's eight residual add-relus fuse, and the fused model computes the same.
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.resnet18(weights=None).eval())
    x = torch.randn(1, 3, 64, 64)
    engine = fuselage.from_exported(torch.export.export(model, (x,)), (x,))
    config = """
        name: "aten_add_relu"
        pattern {
          pattern: "(aten.relu_.default, (aten.add_.Tensor, MatchAllNode, MatchAllNode))"
          fuser: WRAP_IN_SEQUENCE
          fused_module: "fuselage.FusedSubgraph"
        }"""
    report = _core.fuse(engine, config_text=config)
    assert str(report).startswith("fused 8 matches")
    with torch.no_grad():
        want = model(x)
    got = torch.from_numpy(_core.run(engine, [x.numpy()])[0])
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


class _ArangeChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x) + torch.arange(x.shape[-1], dtype=torch.float32)  # device=cpu
        return y.contiguous(memory_format=torch.channels_last)


def test_an_op_kept_float_keeps_its_torch_object_arguments_through_a_model_file(tmp_path):
    # torch.export writes `device=cpu` into arange and `memory_format=torch.channels_last`
    # into contiguous: the model file holds them (Arg.torch_object), and the calls come
    # back as they were exported. A file naming a device torch does not know is refused.
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(_ArangeChannelsLast().eval(), (x,))
    engine = fuselage.from_exported(program, (x,), unknown_ops="float")
    path = tmp_path / "kept_float.fsl"
    path.write_bytes(engine.to_bytes())
    back = fuselage.to_torch(path)
    want = program.module()(x)
    got = back(x)[0]
    assert torch.equal(got, want)
    assert got.is_contiguous(memory_format=torch.channels_last)
    kwargs = {n.target: n.kwargs for n in back.graph.nodes if n.op == "call_function"}
    assert kwargs[torch.ops.aten.arange.default]["device"] == torch.device("cpu")
    assert kwargs[torch.ops.aten.contiguous.default]["memory_format"] == torch.channels_last
    proto = fuselage.to_proto(back)
    arange = next(n for n in proto.graph.nodes if n.name == "arange")
    next(kw for kw in arange.kwargs if kw.name == "device").value.torch_object = "device:bogus"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(fuselage.ModelFileError,
                       match=r"node 'arange' kwargs\['device'\]: torch_object 'device:bogus' "
                             r"is not a device torch knows"):
        fuselage.to_torch(path)
