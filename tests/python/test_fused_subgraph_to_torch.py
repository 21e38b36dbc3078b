"""fuselage.FusedSubgraph through the bridge (issue 19 item 2): to_torch gives a
fuselage.nn.FusedSubgraph that replays the recorded steps over its children, with the same
outputs as fuselage's interpreter on the same input (single- and multi-output GLUs of
backend_configs/examples/glu_chunk.textproto); exporting it gives back the same fuselage
module (type, steps, outputs, children), which the C++ interpreter runs to the same result.
Malformed steps and module types without a class are clear errors."""

import os

import numpy as np
import pytest
import torch

import fuselage
from conftest import REPO
from fuselage import _proto
from fuselage._values import read_arg
from fuselage.errors import ModelFileError, ModuleError
from test_glu_chunk import GluChain

core = fuselage._core
GLU_CONFIG = os.path.join(REPO, "backend_configs", "examples", "glu_chunk.textproto")


def fused_glu_file(tmp_path):
    """The GLU chain exported, fused in process with glu_chunk.textproto, saved; and x."""
    torch.manual_seed(0)
    model = GluChain().eval()
    x = torch.randn(3, 5, 8) * 2
    source = tmp_path / "glu.fsl"
    fuselage.export(model, (x,), str(source))
    fused = core.Model.load(str(source))
    report = core.fuse(fused, config_text=open(GLU_CONFIG).read())
    assert "3 matches" in str(report), str(report)
    path = tmp_path / "glu_fused.fsl"
    fused.save(str(path))
    return path, x


def interpreter(path, x):
    return np.asarray(core.run(core.Model.load(str(path)), [x.numpy()])[0])


def subgraph_modules(path):
    """{name: (steps, outputs, child types)} of the file's FusedSubgraph modules."""
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    found = {}
    for child in model.root.children:
        if child.module.type == "fuselage.FusedSubgraph":
            attributes = {a.name: read_arg(a.value, None, a.name)
                          for a in child.module.attributes}
            found[child.name] = (attributes["steps"], attributes["outputs"],
                                 [(c.name, c.module.type) for c in child.module.children])
    return found


def test_fused_subgraph_runs_in_torch_like_the_interpreter(tmp_path):
    path, x = fused_glu_file(tmp_path)
    gm = fuselage.to_torch(str(path))
    subgraphs = [m for m in gm.modules() if isinstance(m, fuselage.nn.FusedSubgraph)]
    assert len(subgraphs) == 3
    # The shared GLU returns (a * sigmoid(b), b): two outputs.
    assert sorted(len(m.outputs) for m in subgraphs) == [1, 1, 2]
    with torch.no_grad():
        out = gm(x).numpy()
    expected = interpreter(path, x)
    assert out.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(out - expected).max() <= 1e-6 * scale
    # And against the unfused model in PyTorch: the same ops, so the same values.
    with torch.no_grad():
        assert torch.equal(gm(x), GluChain().eval()(x))


def test_fused_subgraph_round_trips_to_the_same_module(tmp_path):
    path, x = fused_glu_file(tmp_path)
    gm = fuselage.to_torch(str(path))
    again = tmp_path / "again.fsl"
    fuselage.export(gm, (x,), str(again))
    before, after = subgraph_modules(path), subgraph_modules(again)
    assert set(before) == set(after) and len(before) == 3
    for name in before:
        assert after[name] == before[name], name
    # The C++ side reads the re-exported steps and runs them to the same values.
    assert np.array_equal(interpreter(again, x), interpreter(path, x))


def test_fused_subgraph_built_by_hand_with_a_child_and_a_slice():
    steps = [("call_function", "operator.getitem",
              [("input", 0), ("const", (Ellipsis, slice(1, None, None)))], []),
             ("call_module", "0", [("step", 0)], []),
             ("call_method", "sum", [("step", 1)], [("dim", ("const", -1))])]
    module = fuselage.nn.FusedSubgraph(steps, [2, 0])
    module.add_module("0", torch.nn.Sigmoid())
    x = torch.randn(2, 5)
    total, sliced = module(x)
    assert torch.equal(sliced, x[..., 1:])
    assert torch.equal(total, torch.sigmoid(x[..., 1:]).sum(dim=-1))


@pytest.mark.parametrize("steps, outputs, message", [
    ([("call_module", "0", [("step", 0)], [])], [0], "expected an index of an earlier step"),
    ([("jump", "x", [], [])], [0], "expected (op, target, args, kwargs)"),
    ([("call_function", "torch.no_such_fn", [("input", 0)], [])], [0],
     "is not a function fuselage knows"),
    # Importable callables fuselage does not know are refused, never called.
    ([("call_function", "os.system", [("input", 0)], [])], [0],
     "call_function target 'os.system' is not a function fuselage knows"),
    ([("call_function", "builtins.exec", [("input", 0)], [])], [0],
     "call_function target 'builtins.exec' is not a function fuselage knows"),
    ([("call_function", "torch.relu", [("input", 0)], [])], [1], "non-empty list of step"),
    ([("call_function", "torch.relu", [("weird", 0)], [])], [0], "a ref is a (tag, value)"),
])
def test_malformed_steps_are_a_module_error_naming_the_step(steps, outputs, message):
    with pytest.raises(ModuleError) as e:
        fuselage.nn.FusedSubgraph(steps, outputs)
    assert message in str(e.value)


def test_malformed_steps_in_a_file_are_a_model_file_error(tmp_path):
    path, _ = fused_glu_file(tmp_path)
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    subgraph = next(c.module for c in model.root.children
                    if c.module.type == "fuselage.FusedSubgraph")
    outputs = next(a for a in subgraph.attributes if a.name == "outputs")
    outputs.value.list.items[0].int_value = 99
    broken = tmp_path / "broken.fsl"
    broken.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError) as e:
        fuselage.to_torch(str(broken))
    assert "fuselage.FusedSubgraph" in str(e.value) and "outputs" in str(e.value)


def test_a_type_of_no_class_that_carries_steps_runs_them(tmp_path):
    # A declared type's module is a FusedSubgraph under its own type name (issue 39): the
    # steps it carries are all it needs, whatever the name.
    path, x = fused_glu_file(tmp_path)
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    child = next(c for c in model.root.children if c.module.type == "fuselage.FusedSubgraph")
    child.module.type = "user.NoSuchType"
    renamed = tmp_path / "renamed.fsl"
    renamed.write_bytes(model.SerializeToString())
    gm = fuselage.to_torch(str(renamed))
    module = gm.get_submodule(child.name)
    assert isinstance(module, fuselage.nn.FusedSubgraph) and module.type_name == "user.NoSuchType"
    with torch.no_grad():
        assert torch.equal(gm(x), fuselage.to_torch(str(path))(x))
