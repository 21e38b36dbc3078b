"""Issue 18 item 1, the exporter's reach: slices / Ellipsis / None index args and shape
values (x.shape[-2:], x[..., 1:, ::2]) export, come back as real slice objects through
to_torch and run in the C++ interpreter; dict outputs come back as dicts; a module type
fuselage cannot represent is refused at export, naming the node; a function it does not
know is kept as an opaque node (Python runs it, the C++ interpreter refuses it by name)."""

import functools
import operator
import subprocess

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import fuselage
from conftest import verify
from fuselage import ExportError


class Indexing(nn.Module):
    """What torchvision's segmentation heads and friends do with indices and shapes."""

    def forward(self, x):
        size = x.shape[-2:]
        y = F.interpolate(x[..., 1:, ::2], size=size)
        z = x[:, 0:1][(None, 0)] + x[:, :x.size(1) - 1].sum()
        n = x.size(2) * x.dim() // 4
        return {"out": y + z, "flat": x.reshape(-1, n)}


def test_slices_and_dict_output_round_trip_through_to_torch(tmp_path):
    model = Indexing()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "indexing.fsl"
    fuselage.export(model, (x,), str(path))
    back = fuselage.to_torch(str(path))
    indices = [n.args[1] for n in back.graph.nodes if n.target is __import__("operator").getitem]
    # Real slice objects and Ellipsis, not tuples of their parts.
    assert slice(-2, None, None) in indices
    assert (Ellipsis, slice(1, None, None), slice(None, None, 2)) in indices
    assert any(isinstance(i, tuple) and len(i) == 2 and isinstance(i[1], slice)
               and isinstance(i[1].stop, torch.fx.Node) for i in indices)
    assert "x[(Ellipsis, slice(1, None, None), slice(None, None, 2))]" in back.code
    expected, got = model(x), back(x)
    assert isinstance(got, dict) and list(got) == ["out", "flat"]
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0)


def test_slices_and_dict_output_run_in_the_cpp_interpreter(tmp_path, cli):
    model = Indexing()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "indexing.fsl"
    fuselage.export(model, (x,), str(path))
    np.save(tmp_path / "x.npy", x.numpy())
    outs = [tmp_path / "out.npy", tmp_path / "flat.npy"]
    run = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                          "--output=" + ",".join(str(o) for o in outs)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    expected = model(x)
    # `out` adds a sum of 128 floats, which the interpreter and ATen accumulate in different
    # orders: a few float32 ulps of a sum of magnitude ~10 (atol 1e-6 failed now and then
    # on unseeded inputs).
    np.testing.assert_allclose(np.load(outs[0]), expected["out"].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.load(outs[1]), expected["flat"].numpy())


def test_a_slice_of_a_float_is_refused_naming_the_node():
    class FloatSlice(nn.Module):
        def forward(self, x):
            return x[0.5:]

    gm = torch.fx.symbolic_trace(FloatSlice())
    with pytest.raises(ExportError) as info:
        fuselage.to_proto(gm)
    assert "node 'getitem' args[1]: slice start 0.5 is a float" in str(info.value)


def test_a_dict_output_with_non_string_keys_is_refused():
    class IntKeys(nn.Module):
        def forward(self, x):
            return {1: x}

    with pytest.raises(ExportError) as info:
        fuselage.to_proto(IntKeys())
    assert "node 'output'" in str(info.value) and "key 1 of type int" in str(info.value)


@pytest.mark.parametrize("module, example, type_name", [
    (nn.ChannelShuffle(2), torch.randn(1, 4, 2, 2), "nn.ChannelShuffle"),
    (nn.RNN(4, 3), torch.randn(2, 1, 4), "nn.RNN"),
])
def test_a_module_type_without_a_schema_is_refused_at_export(tmp_path, module, example,
                                                             type_name):
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x):
            return self.inner(x)

    path = tmp_path / "refused.fsl"
    with pytest.raises(ExportError) as info:
        fuselage.export(Wrapper(), None, str(path))
    message = str(info.value)
    assert f"node 'inner': call_module target 'inner' is a {type_name}" in message
    assert "ModuleSchemaRegistry" in message and "KernelRegistry" in message
    assert not path.exists()


def test_an_unknown_function_is_kept_as_an_opaque_node(tmp_path, cli):
    # Was refused at export. Now the file records the call (meta `opaque`), `fuselage
    # verify` accepts it, to_torch in this process gives back the very function, and the
    # C++ interpreter refuses to run it, naming the node.
    class Rolls(nn.Module):
        def forward(self, x):
            return torch.roll(x, 1) + 1

    x = torch.randn(2, 3)
    path = tmp_path / "rolls.fsl"
    fuselage.export(Rolls(), (x,), str(path))
    back = fuselage.to_torch(str(path))
    (roll,) = [n for n in back.graph.nodes if n.name == "roll"]
    assert roll.target is torch.roll and roll.meta["fuselage"]["opaque"] is True
    torch.testing.assert_close(back(x), Rolls()(x), rtol=0, atol=0)
    assert verify(cli, path).returncode == 0, verify(cli, path).stderr
    np.save(tmp_path / "x.npy", x.numpy())
    run = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                          f"--output={tmp_path / 'out.npy'}"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0
    assert "node 'roll' (call_function torch.roll): an opaque node" in run.stderr, run.stderr


def test_a_callable_without_a_qualified_name_is_refused_at_export(tmp_path):
    class Adds(nn.Module):
        def forward(self, x):
            return x + 1

    gm = torch.fx.symbolic_trace(Adds())
    (add,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    add.target = functools.partial(operator.add)  # a callable without __name__
    path = tmp_path / "refused.fsl"
    with pytest.raises(ExportError) as info:
        fuselage.export(gm, None, str(path))
    message = str(info.value)
    assert "node 'add'" in message and "no qualified name" in message, message
    assert not path.exists()


def test_deeplabv3_mobilenet_v3_large_exports_and_runs_in_float(tmp_path, cli):
    """The model of issue 18 whose head needs x.shape[-2:] and returns a dict."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None).eval()
    for m in model.modules():  # randomized statistics, so batch norm is not an identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 128, 128)
    path = tmp_path / "deeplabv3.fsl"
    fuselage.export(model, (x,), str(path))
    with torch.no_grad():
        expected = model(x)["out"].numpy()
        back = fuselage.to_torch(str(path))(x)
    assert list(back) == ["out"]
    np.testing.assert_array_equal(back["out"].numpy(), expected)
    np.save(tmp_path / "x.npy", x.numpy())
    out = tmp_path / "out.npy"
    run = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                          f"--output={out}"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = np.load(out)
    assert got.shape == expected.shape == (1, 21, 128, 128)
    # Relative to the output's scale (elements near zero make a per-element ratio noise).
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()



@pytest.mark.parametrize("make_output, check", [
    (lambda a, b: [a, b], lambda out: isinstance(out, list)),
    (lambda a, b: {"b": b, "a": a}, lambda out: isinstance(out, dict) and list(out) == ["b", "a"]),
])
def test_list_and_dict_outputs_keep_their_structure(tmp_path, make_output, check):
    class Split(nn.Module):
        def forward(self, x):
            return make_output(torch.relu(x), x + 1)

    model = Split()
    x = torch.randn(2, 3)
    path = tmp_path / "split.fsl"
    fuselage.export(model, (x,), str(path))
    got, expected = fuselage.to_torch(str(path))(x), model(x)
    assert check(got), type(got)
    items = got.values() if isinstance(got, dict) else got
    for g, e in zip(items, expected.values() if isinstance(expected, dict) else expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


Pair = __import__("collections").namedtuple("Pair", ["low", "high"])


def test_a_named_tuple_output_is_an_opaque_call_of_its_class():
    # torch.fx 1.13 records Pair(a, b) as a call_function of the class (PyTorch 2 returns
    # the tuple's items): the engine keeps it opaque, to_torch gives the class back.
    class Returns(nn.Module):
        def forward(self, x):
            return Pair(x, x + 1)

    x = torch.randn(2)
    back = fuselage._core.to_torch(fuselage._core.from_torch(Returns()))
    got = back(x)
    assert isinstance(got, Pair)
    torch.testing.assert_close(got.high, x + 1, rtol=0, atol=0)
