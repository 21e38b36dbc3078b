"""Float models: export, then to_torch, must give back PyTorch's own outputs and every
parameter and buffer; the file holds what graph/NAMING.md says."""

import struct

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.ao.quantization.quantize_fx import fuse_fx

import fuselage
from conftest import randomize_batch_norm


def child(module_proto, path):
    """The proto Module at a dotted path under `module_proto`."""
    for part in path.split("."):
        module_proto = next(c.module for c in module_proto.children if c.name == part)
    return module_proto


def tensors_of(module_proto):
    return {t.name: t.tensor for t in module_proto.tensors}


def attributes_of(module_proto):
    return {a.name: a.value for a in module_proto.attributes}


def assert_same_state(original, rebuilt):
    want, got = original.state_dict(), rebuilt.state_dict()
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        assert torch.equal(got[key], value), key


def test_resnet18_roundtrip_gives_pytorch_outputs(tmp_path):
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.resnet18(weights=None).eval())
    x = torch.randn(2, 3, 64, 64)
    path = str(tmp_path / "resnet18.fsl")
    fuselage.export(model, (x,), path)
    rebuilt = fuselage.to_torch(path)
    assert isinstance(rebuilt, torch.fx.GraphModule)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))
        y = torch.randn(1, 3, 48, 48)  # not the example input: nothing was specialized
        assert torch.equal(rebuilt(y), model(y))
    assert_same_state(model, rebuilt)
    assert type(rebuilt.get_submodule("layer1.0.conv1")) is nn.Conv2d
    assert type(rebuilt.get_submodule("layer2.0.downsample.1")) is nn.BatchNorm2d


def test_small_residual_roundtrip_and_file_contents(tmp_path, small_residual):
    x = torch.randn(2, 3, 8, 8)
    path = str(tmp_path / "small.fsl")
    fuselage.export(small_residual, (x,), path)
    with torch.no_grad():
        assert torch.equal(fuselage.to_torch(path)(x), small_residual(x))
    model = fuselage.to_proto(small_residual, (x,))
    assert model.format_version == 1
    assert model.root.type == "GraphModule"
    by_name = {n.name: n for n in model.graph.nodes}
    assert [n.name for n in model.graph.nodes] == [
        "x", "conv1", "bn1", "relu", "conv2", "bn2", "add", "relu_1", "pool", "flatten", "fc",
        "output"]
    assert by_name["add"].target == "operator.add"  # torch.fx records _operator.add
    assert by_name["relu_1"].target == "torch.relu"
    assert by_name["flatten"].target == "torch.flatten"
    assert [a.node for a in by_name["add"].args] == ["bn2", "relu"]
    assert by_name["flatten"].args[1].int_value == 1
    meta = {m.name: m.value for m in by_name["conv1"].meta}
    assert list(meta["shape"].list.items) and [i.int_value for i in meta["shape"].list.items] == [2, 8, 8, 8]
    conv = child(model.root, "conv1")
    assert conv.type == "nn.Conv2d"
    attrs = attributes_of(conv)
    assert attrs["in_channels"].int_value == 3 and attrs["out_channels"].int_value == 8
    assert [i.int_value for i in attrs["kernel_size"].tuple.items] == [3, 3]
    assert [i.int_value for i in attrs["padding"].tuple.items] == [1, 1]
    assert attrs["padding_mode"].string_value == "zeros"
    bn = child(model.root, "bn1")
    assert bn.type == "nn.BatchNorm2d"
    assert set(tensors_of(bn)) == {"weight", "bias", "running_mean", "running_var",
                                   "num_batches_tracked"}
    assert attributes_of(bn)["eps"].float_value == pytest.approx(1e-5)


def test_tensor_bytes_are_row_major_little_endian_float32():
    lin = nn.Linear(2, 3)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
        lin.bias.copy_(torch.tensor([-1.0, 0.5, 0.25]))

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lin

        def forward(self, x):
            return F.relu(self.fc(x)) + 1

    model = fuselage.to_proto(M())
    fc = child(model.root, "fc")
    assert fc.type == "nn.Linear"
    weight = tensors_of(fc)["weight"]
    assert weight.dtype == fuselage._proto.model_pb2().FLOAT32
    assert list(weight.shape) == [3, 2]
    assert weight.data == struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    assert tensors_of(fc)["bias"].data == struct.pack("<3f", -1, 0.5, 0.25)
    assert attributes_of(fc)["in_features"].int_value == 2
    assert attributes_of(fc)["out_features"].int_value == 3
    targets = [n.target for n in model.graph.nodes]
    assert targets == ["x", "fc", "torch.nn.functional.relu", "operator.add", "output"]
    add = model.graph.nodes[3]
    assert add.args[1].int_value == 1


def test_functional_ops_use_torch_nn_functional_names(tmp_path):
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 3, 3, 3))
            self.lw = nn.Parameter(torch.randn(5, 4))

        def forward(self, x):
            y = F.conv2d(x, self.w, stride=2)
            y = F.adaptive_avg_pool2d(y, 1).flatten(1)
            return F.linear(y, self.lw)

    model = Functional().eval()
    proto = fuselage.to_proto(model)
    targets = {n.name: n.target for n in proto.graph.nodes}
    assert targets["conv2d"] == "torch.nn.functional.conv2d"  # torch.fx: torch.conv2d
    assert targets["linear"] == "torch.nn.functional.linear"  # torch.fx: torch._C._nn.linear
    assert targets["flatten"] == "flatten"                     # call_method: the bare name
    assert {t.name for t in proto.root.tensors} == {"w", "lw"}
    x = torch.randn(1, 3, 9, 9)
    path = str(tmp_path / "functional.fsl")
    fuselage.export(model, (x,), path)
    with torch.no_grad():
        assert torch.equal(fuselage.to_torch(path)(x), model(x))


def test_fused_float_model_keeps_parts_as_children(tmp_path, small_residual):
    fused = fuse_fx(small_residual)  # conv1+bn1+relu -> nni.ConvReLU2d (bn folded)
    proto = fuselage.to_proto(fused)
    conv1 = child(proto.root, "conv1")
    assert conv1.type == "nni.ConvReLU2d"
    assert [c.name for c in conv1.children] == ["0", "1"]
    assert [c.module.type for c in conv1.children] == ["nn.Conv2d", "nn.ReLU"]
    assert list(conv1.tensors) == []
    x = torch.randn(2, 3, 8, 8)
    path = str(tmp_path / "fused.fsl")
    fuselage.export(fused, (x,), path)
    rebuilt = fuselage.to_torch(path)
    assert type(rebuilt.conv1).__name__ == "ConvReLU2d"
    with torch.no_grad():
        assert torch.equal(rebuilt(x), fused(x))


def test_tensor_constants_and_list_args_survive(tmp_path):
    class Constants(nn.Module):
        def forward(self, x):
            y = torch.cat([x, x * 2], dim=1) + torch.tensor([1.0, 2.0, 3.0, 4.0])
            return y.reshape(-1, 2).view(2, -1), x.size(0)

    model = Constants()
    x = torch.randn(3, 2)
    path = str(tmp_path / "constants.fsl")
    fuselage.export(model, (x,), path)
    rebuilt = fuselage.to_torch(path)
    got, want = rebuilt(x), model(x)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]
