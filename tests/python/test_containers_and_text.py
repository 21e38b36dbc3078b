"""The module tree and the file form survive the bridge: torch containers (Sequential,
ModuleList, ModuleDict) come back from to_torch as what they were, so `m.layer1[0]`
indexes; a .textproto / .pbtxt name is written and read as protobuf text, as the C++
tool decides by the same endings."""

import torch
import torch.nn as nn
import torchvision

import fuselage
from conftest import verify


def _check_paths(original, restored):
    """Every submodule path of `original` resolves in `restored`, with the same class
    where the original's class is torch's own (a container or a layer); a subclass of a
    torch container (torchvision's Conv2dNormActivation) comes back as that container."""
    containers = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
    for path, module in original.named_modules():
        if not path:
            continue
        got = restored.get_submodule(path)
        if type(module).__module__.startswith("torch.nn.modules"):
            assert type(got) is type(module), path
        else:
            for base in containers:
                if isinstance(module, base):
                    assert type(got) is base, path


def test_resnet18_containers_index_as_in_torchvision(tmp_path):
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    path = tmp_path / "r18.fsl"
    fuselage.export(model, (torch.randn(1, 3, 32, 32),), path)
    gm = fuselage.to_torch(path)
    _check_paths(model, gm)
    assert isinstance(gm.layer1, nn.Sequential) and len(gm.layer1) == 2
    assert torch.equal(gm.layer1[0].conv1.weight, model.layer1[0].conv1.weight)
    assert torch.equal(gm.layer2[0].downsample[1].running_var,
                       model.layer2[0].downsample[1].running_var)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(gm(x), model(x), atol=1e-5)


def test_mobilenet_v2_containers_index_as_in_torchvision(tmp_path):
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2().eval()
    path = tmp_path / "mnv2.fsl"
    fuselage.export(model, None, path)
    gm = fuselage.to_torch(path)
    _check_paths(model, gm)
    assert isinstance(gm.features, nn.Sequential) and len(gm.features) == 19
    assert isinstance(gm.features[3].conv, nn.Sequential)
    assert torch.equal(gm.features[3].conv[0][0].weight, model.features[3].conv[0][0].weight)
    assert isinstance(gm.classifier[1], nn.Linear)


class _Blocks(nn.Module):
    """A ModuleList whose second entry no node uses, and a ModuleDict."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.ReLU()})

    def forward(self, x):
        x = self.blocks[2](self.blocks[0](x))
        return self.heads["b"](self.heads["a"](x))


def test_module_list_keeps_positions_of_unused_entries(tmp_path, cli):
    torch.manual_seed(0)
    model = _Blocks().eval()
    path = tmp_path / "blocks.fsl"
    fuselage.export(model, None, path)
    assert verify(cli, path).returncode == 0, verify(cli, path).stderr
    gm = fuselage.to_torch(path)
    _check_paths(model, gm)
    assert isinstance(gm.blocks, nn.ModuleList) and len(gm.blocks) == 3
    for i in range(3):  # the unused blocks[1] keeps its place and its weights
        assert torch.equal(gm.blocks[i].weight, model.blocks[i].weight)
    assert isinstance(gm.heads, nn.ModuleDict) and list(gm.heads.keys()) == ["a", "b"]
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_restored_containers_export_again(tmp_path):
    model = _Blocks().eval()
    first = tmp_path / "first.fsl"
    fuselage.export(model, None, first)
    gm = fuselage.to_torch(first)
    second = tmp_path / "second.fsl"
    fuselage.export(gm, None, second)
    again = fuselage.to_torch(second)
    assert isinstance(again.blocks, nn.ModuleList) and len(again.blocks) == 3
    assert isinstance(again.heads, nn.ModuleDict)


# ---- text form by file name -------------------------------------------------------------


def test_textproto_and_pbtxt_are_written_as_text(tmp_path, small_residual, cli):
    x = torch.randn(1, 3, 8, 8)
    for name in ("m.textproto", "m.pbtxt"):
        path = tmp_path / name
        fuselage.export(small_residual, (x,), path)
        text = path.read_text(encoding="utf-8")
        assert text.startswith("format_version: 1"), text[:80]
        assert verify(cli, path).returncode == 0  # the C++ loader reads it as text
        with torch.no_grad():
            assert torch.allclose(fuselage.to_torch(path)(x), small_residual(x), atol=1e-6)


def test_other_names_are_written_binary(tmp_path, small_residual):
    path = tmp_path / "m.TEXTPROTO"  # the endings are case-sensitive, as in the C++ loader
    fuselage.export(small_residual, None, path)
    proto = fuselage.to_proto(small_residual)
    assert path.read_bytes() == proto.SerializeToString()


def test_text_written_by_the_cpp_tool_is_read(tmp_path, small_residual, cli):
    import subprocess
    binary = tmp_path / "m.fsl"
    fuselage.export(small_residual, None, binary)
    text = tmp_path / "fused.textproto"
    result = subprocess.run([cli, "fuse", str(binary), "--backend=qnnpack", "-o", str(text)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not text.read_bytes().startswith(b"\x08")  # not a binary message
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(fuselage.to_torch(text)(x), small_residual(x), atol=1e-5)
