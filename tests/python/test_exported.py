"""torch.export programs into fuselage and back (issue 36 item 1): fuselage.from_exported
reads the aten graph of torchvision models into its engine, which runs it as PyTorch does,
and to_torch writes the same aten calls back."""

import collections
import operator

import pytest
import torch
import torch.nn as nn

import fuselage
from conftest import randomize_batch_norm
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
