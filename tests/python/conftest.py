"""Shared fixtures of the bridge tests. Run with
    PYTHONPATH=python /usr/bin/python3 -m pytest tests/python -q
(python/ is also put on sys.path here, so the PYTHONPATH is a convenience)."""

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

torch.backends.quantized.engine = "qnnpack"


class SmallResidual(nn.Module):
    """conv-bn-relu, conv-bn, add, relu, pool, linear: the shape of a ResNet block."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        z = self.bn2(self.conv2(y))
        z = torch.relu(z + y)
        return self.fc(torch.flatten(self.pool(z), 1))


def x86_engine():
    """The quantized engine PyTorch runs an x86 (fbgemm / x86 backend config) model on in
    the tests: fbgemm where PyTorch has it; Debian's 1.13 has only onednn. PyTorch 2.14's
    onednn (and x86) ConvTranspose2d is wrong (errors of several output steps against the
    float op on its own dequantized inputs, where fbgemm and qnnpack are within one)."""
    return "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else "onednn"


def nested_pattern_config(pattern):
    """A BackendPatternConfig for `pattern` in PyTorch's nested (complex) format, outermost
    op first: 1.13 takes it as the constructor's argument; PyTorch 2 reads that argument
    as the execution-order format and takes the nested one through
    _set_pattern_complex_format."""
    from torch.ao.quantization.backend_config import BackendPatternConfig
    if hasattr(BackendPatternConfig, "_set_pattern_complex_format"):
        return BackendPatternConfig()._set_pattern_complex_format(pattern)
    return BackendPatternConfig(pattern)


def randomize_batch_norm(model, seed=1):
    """Untrained batch norms are identities; give them statistics so they matter."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


@pytest.fixture
def small_residual():
    torch.manual_seed(0)
    return randomize_batch_norm(SmallResidual().eval())


def quantize_with_pytorch(model, example, calibration, qconfig="qnnpack"):
    """PyTorch's own FX flow with the qnnpack backend config: (prepared after calibration,
    reference, converted)."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.backend_config import get_qnnpack_backend_config
    from torch.ao.quantization.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx

    backend = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping(qconfig),
                          (example,), backend_config=backend)
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    reference = convert_to_reference_fx(copy.deepcopy(prepared), backend_config=backend)
    converted = convert_fx(copy.deepcopy(prepared), backend_config=backend)
    return prepared, reference, converted


BINARY = os.path.join(REPO, "bazel-bin", "tools", "fuselage")


@pytest.fixture(scope="session")
def cli():
    """The C++ command-line tool, built with Bazel once per session; the tests that need it
    are skipped only if it cannot be built at all."""
    build = subprocess.run(["bazel", "build", "//tools:fuselage"], cwd=REPO,
                           capture_output=True, text=True, timeout=3600)
    if not os.access(BINARY, os.X_OK):
        pytest.skip("//tools:fuselage is not built: " + build.stderr[-2000:])
    return BINARY


def verify(cli, path):
    """`fuselage verify PATH`: the C++ loader's verdict on a model file."""
    return subprocess.run([cli, "verify", str(path)], capture_output=True, text=True,
                          timeout=300)


def _basic_block_forward(self, x):
    identity = x
    out = self.relu(self.bn1(self.conv1(x)))
    out = self.bn2(self.conv2(out))
    if self.downsample is not None:
        identity = self.downsample(x)
    out += identity
    return self.relu_out(out)


def _bottleneck_forward(self, x):
    identity = x
    out = self.relu(self.bn1(self.conv1(x)))
    out = self.relu_mid(self.bn2(self.conv2(out)))
    out = self.bn3(self.conv3(out))
    if self.downsample is not None:
        identity = self.downsample(x)
    out += identity
    return self.relu_out(out)


def one_relu_per_call(model):
    """A copy of `model` whose torchvision BasicBlocks / Bottlenecks call a ReLU module of
    their own at each place (the same aten graph after torch.export): torchao's
    X86InductorQuantizer refuses a module called from two places ("Input partition has
    more than one output node"), so a torchvision resnet is compared with torchao in this
    form. fuselage takes the model as it is."""
    import types
    from torchvision.models.resnet import BasicBlock, Bottleneck
    model = copy.deepcopy(model)
    for block in model.modules():
        if isinstance(block, (BasicBlock, Bottleneck)):
            block.relu_out = nn.ReLU(inplace=True)
            forward = _basic_block_forward
            if isinstance(block, Bottleneck):
                block.relu_mid = nn.ReLU(inplace=True)
                forward = _bottleneck_forward
            block.forward = types.MethodType(forward, block)
    return model


def torchao_x86_reference(model, x):
    """torchao's own PT2E flow with X86InductorQuantizer, calibrated on `x`: the reference
    graph of q/dq ops around float aten ops (the test skips without torchao)."""
    quantize_pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
    x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")
    quantizer = x86.X86InductorQuantizer().set_global(
        x86.get_default_x86_inductor_quantization_config())
    prepared = quantize_pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    return quantize_pt2e.convert_pt2e(prepared)
