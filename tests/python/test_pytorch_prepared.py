"""Models PyTorch prepared or converted, exported and carried on by fuselage's CLI: a
prepare_fx model converts (`fuselage convert`) to the reference modules PyTorch's own
convert_to_reference_fx makes, with the same weight quantization; a
convert_to_reference_fx model lowers (`fuselage lower`) to the native modules convert_fx
makes; a convert_fx model is refused by convert and lower with a message, never a silent
no-op."""

import copy
import subprocess

import numpy as np
import pytest
import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.quantized.reference as nnqr
import torchvision
from torch.ao.quantization import QConfigMapping, get_default_qconfig
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx

import fuselage
from conftest import randomize_batch_norm


def _cli(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=600)


def _pytorch_flow(model, example, mapping):
    backend = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), mapping, (example,), backend_config=backend)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _ in range(4):
            prepared(torch.randn(example.shape, generator=g))
    reference = convert_to_reference_fx(copy.deepcopy(prepared), backend_config=backend)
    converted = convert_fx(copy.deepcopy(prepared), backend_config=backend)
    return prepared, reference, converted


def _weighted_paths(gm, classes):
    """path -> class of every module of `classes` (reference / native weighted ops)."""
    return {path: type(m) for path, m in gm.named_modules() if isinstance(m, classes)}


_REFERENCE = (nnqr.Conv2d, nnqr.Linear)


def _convert_with_fuselage(cli, tmp_path, prepared, example):
    path = tmp_path / "prepared.fsl"
    fuselage.export(prepared, (example,), path)
    out = tmp_path / "reference.fsl"
    result = _cli(cli, "convert", path, "-o", out)
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def _mapping(qconfig="qnnpack"):
    return QConfigMapping().set_global(get_default_qconfig(qconfig))


@pytest.mark.parametrize("qconfig", ["qnnpack", "fbgemm"])  # per-tensor / per-channel weights
def test_prepared_small_residual_converts_to_pytorchs_reference_modules(
        cli, tmp_path, small_residual, qconfig):
    example = torch.randn(1, 3, 8, 8)
    prepared, reference, _ = _pytorch_flow(small_residual, example, _mapping(qconfig))
    out, report = _convert_with_fuselage(cli, tmp_path, prepared, example)
    assert "3 reference modules" in report
    ours = fuselage.to_torch(out)
    expected = _weighted_paths(reference, _REFERENCE)
    assert expected == {"conv1.0": nnqr.Conv2d, "conv2": nnqr.Conv2d, "fc": nnqr.Linear}
    assert _weighted_paths(ours, _REFERENCE) == expected
    assert type(ours.conv1) is nni.ConvReLU2d
    for path in expected:  # the same weight observer ran on the same weight
        want, got = reference.get_submodule(path), ours.get_submodule(path)
        assert torch.equal(got.get_quantized_weight().int_repr(),
                           want.get_quantized_weight().int_repr()), path
        assert torch.equal(got.weight_scale.reshape(-1), want.weight_scale.reshape(-1)), path
        assert got.weight_qscheme == want.weight_qscheme == (
            torch.per_channel_affine if qconfig == "fbgemm" else torch.per_tensor_affine), path
    # Same numerics as PyTorch's reference model, up to a float rounding that may move a
    # value across one quantization step.
    x = torch.randn(2, 3, 8, 8)
    np.save(tmp_path / "x.npy", x.numpy())
    result = _cli(cli, "run", out, f"--input={tmp_path}/x.npy", f"--output={tmp_path}/y.npy")
    assert result.returncode == 0, result.stderr
    with torch.no_grad():
        want = reference(x)
    step = prepared.activation_post_process_6.calculate_qparams()[0].item()
    assert torch.allclose(torch.from_numpy(np.load(tmp_path / "y.npy")), want, atol=step * 1.01)


def test_a_submodule_kept_float_by_the_qconfig_mapping_stays_float(cli, tmp_path, small_residual):
    example = torch.randn(1, 3, 8, 8)
    mapping = _mapping().set_module_name("fc", None).set_object_type(torch.nn.Conv2d, None)
    prepared, reference, _ = _pytorch_flow(small_residual, example, mapping)
    out, _ = _convert_with_fuselage(cli, tmp_path, prepared, example)
    ours = fuselage.to_torch(out)
    expected = _weighted_paths(reference, _REFERENCE)
    assert _weighted_paths(ours, _REFERENCE) == expected
    assert "fc" not in expected and type(ours.fc) is torch.nn.Linear


def test_prepared_resnet18_converts_the_ops_pytorch_converts(cli, tmp_path):
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.resnet18().eval())
    example = torch.randn(1, 3, 32, 32)
    mapping = _mapping().set_module_name("layer2", None)  # a whole stage kept float
    prepared, reference, _ = _pytorch_flow(model, example, mapping)
    out, _ = _convert_with_fuselage(cli, tmp_path, prepared, example)
    ours = fuselage.to_torch(out)
    expected = _weighted_paths(reference, _REFERENCE)
    assert len(expected) == 21 - 5  # 20 convs + fc, layer2's 5 convs float
    assert _weighted_paths(ours, _REFERENCE) == expected


def test_pytorch_reference_model_lowers_to_pytorchs_native_modules(cli, tmp_path, small_residual):
    example = torch.randn(1, 3, 8, 8)
    _, reference, converted = _pytorch_flow(small_residual, example, _mapping())
    path = tmp_path / "reference.fsl"
    fuselage.export(reference, (example,), path)
    out = tmp_path / "lowered.fsl"
    result = _cli(cli, "lower", path, "--backend=qnnpack", "-o", out)
    assert result.returncode == 0, result.stderr
    lowered = fuselage.to_torch(out)
    native = (torch.ao.nn.quantized.Conv2d, torch.ao.nn.quantized.Linear)
    expected = {p: c for p, c in _weighted_paths(converted, native).items()}
    assert expected and _weighted_paths(lowered, native) == expected
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        step = converted.fc.scale
        assert torch.allclose(lowered(x), converted(x), atol=step * 2.01)


def test_pytorch_converted_model_is_refused_by_convert_and_lower(cli, tmp_path, small_residual):
    example = torch.randn(1, 3, 8, 8)
    _, _, converted = _pytorch_flow(small_residual, example, _mapping())
    path = tmp_path / "converted.fsl"
    fuselage.export(converted, (example,), path)
    out = tmp_path / "out.fsl"
    result = _cli(cli, "convert", path, "-o", out)
    assert result.returncode != 0 and "not a prepared model" in result.stderr
    result = _cli(cli, "lower", path, "--backend=qnnpack", "-o", out)
    assert result.returncode != 0 and "nothing to lower" in result.stderr
    assert not out.exists()
