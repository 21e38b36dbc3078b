"""A fused module type declared in a backend config (fused_module_type; here
backend_configs/examples/conv_add_relu_new_type.textproto's user.ConvBnAddReLU2d) through
the bridge (issue 19 item 2): to_torch(path, config=) rebuilds it as a torch module running
the declared composition, float and reference quantized, equal to fuselage's interpreter on
the same input; its lowered form (nniq.ConvAddReLU2d, both inputs quantized) is bit-equal
to the interpreter; export gives back the same module. Without the config, to_torch names
the config to pass. fuselage.quantize_fx takes the config file as backend_config and its
convert_fx returns a runnable GraphModule bit-equal to the interpreter."""

import copy
import os
import pickle

import numpy as np
import pytest
import torch
import torch.ao.nn.quantized.reference as nnqr
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping

import fuselage
import fuselage.nn.quantized as fnnq
from conftest import REPO
from fuselage import _declared, _proto
from fuselage.errors import ModelFileError
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
    declarations are registered by the fuse, named by the file's path (config_source): a
    type keeps the name it was first declared under in the process, and every test here
    expects the path."""
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
def test_declared_type_runs_its_composition_in_torch(stage, child_type, tmp_path):
    path = residual_model(stage, tmp_path)
    gm = fuselage.to_torch(str(path), config=CONFIG)
    declared = [m for m in gm.modules() if isinstance(m, fuselage.nn.DeclaredModule)]
    assert len(declared) == 1
    module = declared[0]
    assert type(module) is _declared.declared_class(TYPE) and module.type_name == TYPE
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


def declared_in_attributes(path):
    """Every (module path, "declared_in" value) of the model file at `path`."""
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    found = {}

    def walk(module, prefix):
        for a in module.attributes:
            if a.name == "declared_in":
                found[prefix] = a.value.string_value
        for child in module.children:
            walk(child.module, f"{prefix}.{child.name}" if prefix else child.name)
    walk(model.root, "")
    return found


@pytest.mark.parametrize("stage", ["fused", "reference"])
def test_the_engine_records_the_config_source_as_declared_in(stage, tmp_path):
    # Straight from the engine's model file, no Python in between: the name given as
    # config_source, the file a process must load, not the default "config_text".
    assert declared_in_attributes(residual_model(stage, tmp_path)) == {"conv": CONFIG}


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
    gm = fuselage.to_torch(str(path), config=CONFIG)
    again = tmp_path / "again.fsl"
    _, x = inputs()
    fuselage.export(gm, (torch.from_numpy(x),), str(again))
    before, after = module_types(path), module_types(again)
    assert before["conv"] == (TYPE, ["declared_in"])
    assert after["conv"] == before["conv"]
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    # The C++ side (declarations loaded by residual_model's fuse) runs it alike.
    assert np.array_equal(interpreter(again, x), interpreter(path, x))


def test_a_model_with_a_declared_type_pickles_and_copies(tmp_path):
    gm = fuselage.to_torch(str(residual_model("fused", tmp_path)), config=CONFIG)
    x = torch.randn(1, 4, 8, 8)
    for copied in (pickle.loads(pickle.dumps(gm)), copy.deepcopy(gm)):
        assert type(copied.conv) is type(gm.conv)
        assert copied.conv.declared_in == gm.conv.declared_in
        with torch.no_grad():
            assert torch.equal(copied(x), gm(x))


def test_lowered_declared_type_is_bit_equal_to_the_interpreter(tmp_path):
    path = residual_model("lowered", tmp_path)
    assert module_types(path)["conv"][0] == "nniq.ConvAddReLU2d"
    gm = fuselage.to_torch(str(path))  # a lowered model names only native types
    assert type(gm.conv) is fnnq.ConvAddReLU2d
    _, x = inputs()
    assert np.array_equal(torch_output(gm, x), interpreter(path, x))


def test_without_the_config_to_torch_names_the_config_to_pass(tmp_path):
    path = residual_model("fused", tmp_path)
    model = _proto.model_pb2().Model()
    model.ParseFromString(open(path, "rb").read())
    conv = next(c.module for c in model.root.children if c.name == "conv")
    conv.type = "user.NotDeclaredAnywhere"  # (TYPE itself may be declared by another test)
    for a in conv.attributes:
        if a.name == "declared_in":
            a.value.string_value = "my_backend.textproto"
    other = tmp_path / "other.fsl"
    other.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError) as e:
        fuselage.to_torch(str(other))
    message = str(e.value)
    assert "module 'conv'" in message
    assert "unknown module type 'user.NotDeclaredAnywhere'" in message
    assert "my_backend.textproto" in message


def test_a_conflicting_declaration_is_refused(tmp_path):
    _declared.load(CONFIG)
    changed = tmp_path / "changed.textproto"
    changed.write_text(config_text().replace('step { child: 1 input { step: 1 } }',
                                             'step { op: "relu" input { step: 1 } }'))
    with pytest.raises(ModelFileError) as e:
        _declared.load(str(changed))
    assert f"'{TYPE}' is already declared differently in '{CONFIG}'" in str(e.value)
    unknown_op = tmp_path / "unknown_op.textproto"
    unknown_op.write_text(config_text().replace('op: "add"', 'op: "frobnicate"')
                          .replace(TYPE, "user.Other"))
    with pytest.raises(ModelFileError) as e:
        _declared.load(str(unknown_op))
    assert "fused_module_type 'user.Other'" in str(e.value)
    assert "unknown op 'frobnicate'" in str(e.value)


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
    fused = [m for m in prepared.modules() if isinstance(m, fuselage.nn.DeclaredModule)]
    assert len(fused) == 1 and fused[0].type_name == TYPE
    # The engine records the file's path (quantize_fx passes it as config_source); the
    # Python side does not patch it.
    assert fused[0].declared_in == CONFIG
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
