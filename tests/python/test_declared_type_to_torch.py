"""A fused module type declared in a backend config (fused_module_type; here
backend_configs/examples/conv_add_relu_new_type.textproto's user.ConvBnAddReLU2d) through
the bridge (issue 19 item 2, issue 39 item 1): fusion writes the declaration's steps on the
module, so the model file carries them; to_torch(path) rebuilds it, with no config, as a
fuselage.nn.FusedSubgraph subclass named after the type, float and reference quantized,
equal to fuselage's interpreter on the same input, and a process that never loaded the
config runs it alike; its lowered form (nniq.ConvAddReLU2d, both inputs quantized) is
bit-equal to the interpreter; export gives back the same module. Where the config is loaded,
steps that differ from it are refused. fuselage.quantize_fx takes the config file as
backend_config and its convert_fx returns a runnable GraphModule bit-equal to the
interpreter."""

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.ao.nn.quantized.reference as nnqr
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping

import fuselage
import fuselage.nn.quantized as fnnq
from conftest import REPO
from fuselage import _proto
from fuselage.errors import ModelFileError
from fuselage.nn.subgraph import FusedSubgraph, of_type
from fuselage.quantize_fx import convert_fx, prepare_fx

core = fuselage._core
CONFIG = os.path.join(REPO, "backend_configs", "examples", "conv_add_relu_new_type.textproto")
RESIDUAL = os.path.join(REPO, "tools", "examples", "residual.textproto")
TYPE = "user.ConvBnAddReLU2d"


def config_text():
    with open(CONFIG) as f:
        return f.read()


def inputs():
    rs = np.random.RandomState(0)
    samples = [[rs.randn(1, 4, 8, 8).astype(np.float32)] for _ in range(8)]
    return samples, rs.randn(1, 4, 8, 8).astype(np.float32)


def residual_model(stage, tmp_path):
    """tools/examples/residual.textproto fused with the config ("fused"), or quantized to a
    reference ("reference") or lowered ("lowered") model in process; saved. The C++
    declarations are registered by the fuse, named by the file's path (config_source)."""
    model = core.Model.load(RESIDUAL)
    samples, _ = inputs()
    if stage == "fused":
        core.fuse(model, config_text=config_text(), config_source=CONFIG)
    else:
        core.quantize(model, samples, "qnnpack", config_text=config_text(),
                      config_source=CONFIG, reference=stage == "reference", engine="qnnpack")
    path = tmp_path / f"{stage}.fsl"
    model.save(str(path))
    return path


def interpreter(path_or_model, x):
    model = core.Model.load(str(path_or_model)) if not isinstance(path_or_model, core.Model) \
        else path_or_model
    return np.asarray(core.run(model, [x], engine="qnnpack")[0])


def torch_output(gm, x):
    with torch.no_grad():
        out = gm(torch.from_numpy(x))
    return (out.dequantize() if out.is_quantized else out).numpy()


def module_types(path):
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    found = {}

    def walk(module, prefix):
        found[prefix] = (module.type, sorted(a.name for a in module.attributes))
        for child in module.children:
            walk(child.module, f"{prefix}.{child.name}" if prefix else child.name)
    walk(model.root, "")
    return found


@pytest.fixture(autouse=True)
def qnnpack():
    torch.backends.quantized.engine = "qnnpack"


@pytest.mark.parametrize("stage, child_type", [("fused", nn.Conv2d), ("reference", nnqr.Conv2d)])
def test_declared_type_runs_its_steps_in_torch(stage, child_type, tmp_path):
    path = residual_model(stage, tmp_path)
    gm = fuselage.to_torch(str(path))  # no config: the model carries the steps
    declared = [m for m in gm.modules() if isinstance(m, FusedSubgraph)]
    assert len(declared) == 1
    module = declared[0]
    assert type(module) is of_type(TYPE) and module.type_name == TYPE
    assert type(module._modules["0"]) is child_type
    assert type(module._modules["1"]) is nn.ReLU
    _, x = inputs()
    expected = interpreter(path, x)
    out = torch_output(gm, x)
    assert np.abs(out - expected).max() <= 1e-6 * np.abs(expected).max()
    # The module alone computes relu(conv(a) + b) with its own parts.
    a, b = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        assert torch.equal(module(a, b), torch.relu(module._modules["0"](a) + b))


_RUN_ELSEWHERE = """
import sys
import numpy as np
sys.path.insert(0, {python!r})
from fuselage import _core as core
x = np.load({x!r})
np.save({out!r}, np.asarray(core.run(core.Model.load({path!r}), [x], engine="qnnpack")[0]))
"""


@pytest.mark.parametrize("stage", ["fused", "reference"])
def test_a_process_that_never_loaded_the_config_runs_the_model(stage, tmp_path):
    path = residual_model(stage, tmp_path)
    assert module_types(path)["conv"] == (TYPE, ["outputs", "steps"])
    _, x = inputs()
    np.save(tmp_path / "x.npy", x)
    script = _RUN_ELSEWHERE.format(python=os.path.join(REPO, "python"), x=str(tmp_path / "x.npy"),
                                   out=str(tmp_path / "y.npy"), path=str(path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.load(tmp_path / "y.npy"), interpreter(path, x))


def test_config_source_needs_a_config_text():
    model = core.Model.load(RESIDUAL)
    with pytest.raises(core.EngineError) as e:
        core.fuse(model, "qnnpack", config_source=CONFIG)
    assert "config_source names the backend config text: give config_text too" in str(e.value)
    with pytest.raises(core.EngineError) as e:
        core.fuse(model, config_text=config_text(), config_source="")
    assert "config_source is empty" in str(e.value)


def test_config_source_names_the_config_in_errors():
    model = core.Model.load(RESIDUAL)
    with pytest.raises(core.EngineError) as e:
        core.fuse(model, config_text="name: \"x\"\npattern {", config_source="my/bad.textproto")
    assert "my/bad.textproto" in str(e.value)


def test_declared_type_exports_back_to_the_same_module(tmp_path):
    path = residual_model("fused", tmp_path)
    gm = fuselage.to_torch(str(path))
    again = tmp_path / "again.fsl"
    _, x = inputs()
    fuselage.export(gm, (torch.from_numpy(x),), str(again))
    before, after = module_types(path), module_types(again)
    assert before["conv"] == (TYPE, ["outputs", "steps"])
    assert after["conv"] == before["conv"]
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    # The C++ side (declarations loaded by residual_model's fuse) runs it alike.
    assert np.array_equal(interpreter(again, x), interpreter(path, x))


def test_a_model_with_a_declared_type_pickles_and_copies(tmp_path):
    gm = fuselage.to_torch(str(residual_model("fused", tmp_path)))
    x = torch.randn(1, 4, 8, 8)
    for copied in (pickle.loads(pickle.dumps(gm)), copy.deepcopy(gm)):
        assert type(copied.conv) is type(gm.conv) is of_type(TYPE)
        assert copied.conv.steps == gm.conv.steps
        with torch.no_grad():
            assert torch.equal(copied(x), gm(x))


def test_lowered_declared_type_is_bit_equal_to_the_interpreter(tmp_path):
    path = residual_model("lowered", tmp_path)
    assert module_types(path)["conv"][0] == "nniq.ConvAddReLU2d"
    gm = fuselage.to_torch(str(path))  # a lowered model names only native types
    assert type(gm.conv) is fnnq.ConvAddReLU2d
    _, x = inputs()
    assert np.array_equal(torch_output(gm, x), interpreter(path, x))


def edited_model(path, tmp_path, edit):
    """The model file at `path` with its module 'conv' changed by `edit`, saved anew."""
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    edit(next(c.module for c in model.root.children if c.name == "conv"))
    other = tmp_path / "edited.fsl"
    other.write_bytes(model.SerializeToString())
    return other


def test_a_type_with_neither_steps_nor_class_is_refused(tmp_path):
    def strip(conv):
        conv.type = "user.NotDeclaredAnywhere"
        kept = [a for a in conv.attributes if a.name not in ("steps", "outputs")]
        del conv.attributes[:]
        conv.attributes.extend(kept)
    other = edited_model(residual_model("fused", tmp_path), tmp_path, strip)
    with pytest.raises(ModelFileError) as e:
        fuselage.to_torch(str(other))
    message = str(e.value)
    assert "module 'conv'" in message
    assert "unknown module type 'user.NotDeclaredAnywhere'" in message


def test_steps_that_differ_from_the_configs_declaration_are_refused_with_it(tmp_path):
    def drop_last_step(conv):
        for a in conv.attributes:
            if a.name == "steps":
                del a.value.list.items[-1]
            if a.name == "outputs":
                a.value.list.items[0].int_value = 1
    other = edited_model(residual_model("fused", tmp_path), tmp_path, drop_last_step)
    fuselage.to_torch(str(other))  # no config: it runs the steps it carries
    model = core.Model.load(str(other))
    with pytest.raises(core.EngineError) as e:
        core.prepare(model, "qnnpack", config_text=config_text(), config_source=CONFIG)
    assert f"its steps differ from the declaration of '{TYPE}' in '{CONFIG}'" in str(e.value)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)) + x)


def test_quantize_fx_with_the_config_file_gives_a_runnable_graph_module():
    torch.manual_seed(0)
    model = Residual().eval()
    model.bn.running_mean.uniform_(-0.2, 0.2)
    model.bn.running_var.uniform_(0.5, 1.5)
    samples, x = inputs()
    prepared = prepare_fx(model, get_default_qconfig_mapping("qnnpack"),
                          (torch.from_numpy(x),), backend_config=CONFIG)
    fused = [m for m in prepared.modules() if isinstance(m, FusedSubgraph)]
    assert len(fused) == 1 and fused[0].type_name == TYPE
    with torch.no_grad():
        # Observers pass values through: the prepared model computes the float one (the
        # batch norm folded into the conv: equal to rounding).
        float_out = model(torch.from_numpy(x)).numpy()
        assert np.abs(prepared(torch.from_numpy(x)).numpy() - float_out).max() <= \
            1e-5 * np.abs(float_out).max()
        for (batch,) in samples:
            prepared(torch.from_numpy(batch))
    converted = convert_fx(prepared, backend_config=CONFIG)
    assert isinstance(converted, torch.fx.GraphModule)
    natives = [n for n in converted.graph.nodes if n.op == "call_module"
               and type(converted.get_submodule(n.target)) is fnnq.ConvAddReLU2d]
    assert len(natives) == 1
    # Both inputs quantized: each comes from a quantize_per_tensor, not a dequantize.
    for arg in natives[0].args:
        assert arg.op == "call_function" and arg.target is torch.quantize_per_tensor
    out = torch_output(converted, x)
    assert np.array_equal(out, interpreter(core.from_torch(converted), x))
    assert np.abs(out - float_out).max() <= 0.1 * np.abs(float_out).max()
