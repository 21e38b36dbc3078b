"""Files the bridge writes load in the C++ loader: `fuselage verify FILE` (tools/) parses
them, validates every field and runs GraphModule::Verify (module types registered in
graph/module_schema.cc, targets resolving, arities). The binary is built with Bazel first;
the tests are skipped only if it cannot be built at all (the `cli` fixture of conftest)."""

import re

import torch
import torchvision

import fuselage
from conftest import quantize_with_pytorch, verify


def test_resnet18_loads_in_cpp(cli, tmp_path):
    model = torchvision.models.resnet18(weights=None).eval()
    path = str(tmp_path / "resnet18.fsl")
    fuselage.export(model, (torch.randn(1, 3, 64, 64),), path)
    result = verify(cli, path)
    assert result.returncode == 0, result.stderr
    nodes = len(torch.fx.symbolic_trace(model).graph.nodes)
    assert re.search(rf"ok \({nodes} nodes", result.stdout), result.stdout


def test_converted_models_load_in_cpp(cli, tmp_path, small_residual):
    torch.manual_seed(5)
    x = torch.randn(1, 3, 8, 8)
    resnet = torchvision.models.resnet18(weights=None).eval()
    for name, model, example in (("small", small_residual, x),
                                 ("resnet18", resnet, torch.randn(1, 3, 64, 64))):
        _, _, converted = quantize_with_pytorch(model, example, [example])
        path = str(tmp_path / f"{name}_converted.fsl")
        fuselage.export(converted, (example,), path)
        result = verify(cli, path)
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert re.search(rf"ok \({len(converted.graph.nodes)} nodes", result.stdout), result.stdout


def test_cpp_loader_rejects_a_damaged_export(cli, tmp_path):
    proto = fuselage.to_proto(torchvision.models.resnet18(weights=None).eval())
    conv = next(c.module for c in proto.root.children if c.name == "conv1")
    weight = next(t.tensor for t in conv.tensors if t.name == "weight")
    weight.data = weight.data[:-4]
    path = tmp_path / "damaged.fsl"
    path.write_bytes(proto.SerializeToString())
    result = verify(cli, str(path))
    assert result.returncode != 0
    assert "tensor 'weight'" in result.stderr and "field 'data'" in result.stderr
