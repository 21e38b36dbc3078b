"""fuselage.from_onnx and fuselage.onnx.quantize_static on torchvision models exported as
their users export them (torch.onnx.export, dynamo=False, opset 17, 1x3x64x64; untrained
weights with batch norm statistics that matter). The expectations are ONNX Runtime's:
its outputs on the float file, and its own quantize_static on the same calibration data
with the same settings (SQNR against the float outputs, and the ops it fuses on load).
Small models: test_onnx_import.py.
"""
import collections

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
torchvision = pytest.importorskip("torchvision")

import fuselage  # noqa: E402
import fuselage.onnx  # noqa: E402
from fuselage import _core  # noqa: E402
from fuselage.onnx import _quantize  # noqa: E402
from onnx_calibration import Reader, sqnr  # noqa: E402
from conftest import randomize_batch_norm  # noqa: E402

QuantType = quantization.QuantType
SHAPE = (1, 3, 64, 64)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_exported = {}


def exported(name, tmp_path_factory):
    if name not in _exported:
        torch.manual_seed(0)
        model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None).eval())
        path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
        torch.onnx.export(model, (torch.randn(SHAPE),), str(path), dynamo=False,
                          opset_version=17)
        _exported[name] = str(path)
    return _exported[name]


def session(path, level, optimized=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def outputs(path, samples, level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
    s = session(path, level)
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x})[0] for x in samples])


def fused_ops(path, optimized):
    session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, optimized)
    return collections.Counter(n.op_type for n in onnx.load(str(optimized)).graph.node)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "efficientnet_b0"])
def test_float_outputs_equal_onnx_runtimes(name, tmp_path_factory):
    path = exported(name, tmp_path_factory)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    gm = fuselage.from_onnx(path)
    with torch.no_grad():
        ours = gm(torch.from_numpy(x)).numpy()
    theirs = outputs(path, [x], ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert ours.shape == theirs.shape == (1, 1000)
    assert np.abs(theirs).max() > 1e-3  # batch norms that matter: a real signal
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


def own_outputs(lowered, samples):
    """fuselage's own runtime on the model quantize_static wrote, with ONNX Runtime's
    requantization (runtime/quantized/output_requantizer.h, engine onnxruntime)."""
    model = _core.from_torch(lowered)
    return np.concatenate([np.asarray(_core.run(model, [x], engine="onnxruntime")[0])
                           for x in samples])


def output_step(lowered):
    """The scale of the quantized tensor the model's one output dequantizes."""
    output = next(n for n in lowered.graph.nodes if n.op == "output")
    (dequantize,) = output.all_input_nodes
    source = dequantize.args[0]
    if source.op == "call_module":
        return float(lowered.get_submodule(source.target).scale)
    return float(source.args[-2])  # quantized.add(a, b, scale, zero_point)


# (model, convs, activation types): resnet50 and efficientnet_b0 with uint8 activations
# only, to keep CI's time small (each ~30 s on one core, most of it ORT's quantize_static).
QUANTIZE_CASES = [
    ("resnet18", 20, QuantType.QUInt8), ("resnet18", 20, QuantType.QInt8),
    ("mobilenet_v2", 52, QuantType.QUInt8), ("mobilenet_v2", 52, QuantType.QInt8),
    ("resnet50", 53, QuantType.QUInt8), ("efficientnet_b0", 81, QuantType.QUInt8),
]


@pytest.mark.parametrize("name, convs, activation_type", QUANTIZE_CASES,
                         ids=lambda v: getattr(v, "name", str(v)))
def test_quantize_static_is_as_good_as_onnx_runtimes(name, convs, activation_type,
                                                     tmp_path, tmp_path_factory):
    path = exported(name, tmp_path_factory)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(8)]
    test = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    input_name = onnx.load(path).graph.input[0].name
    settings = dict(per_channel=True, activation_type=activation_type,
                    weight_type=QuantType.QInt8)
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    quantization.quantize_static(path, str(theirs), Reader(input_name, calibration),
                                 **settings)
    proto, lowered = _quantize.quantize_with_model(path, Reader(input_name, calibration),
                                                   **settings)
    ours.write_bytes(proto.SerializeToString())
    reference = outputs(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    ours_out = outputs(ours, test)
    theirs_sqnr, ours_sqnr = sqnr(reference, outputs(theirs, test)), sqnr(reference, ours_out)
    print(f"{name} {activation_type.name}: fuselage {ours_sqnr:.2f} dB, "
          f"ONNX Runtime {theirs_sqnr:.2f} dB")
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)
    ours_fused = fused_ops(ours, tmp_path / "ours.optimized.onnx")
    theirs_fused = fused_ops(theirs, tmp_path / "theirs.optimized.onnx")
    if activation_type == QuantType.QUInt8:
        assert ours_fused["QLinearConv"] == convs and ours_fused["Conv"] == 0, ours_fused
        # ORT running the file against fuselage's own runtime on the model it was written
        # from, in steps of the output's scale (int8 activations: ORT on x86 runs part of
        # the file in float, docs/guide/onnx.md).
        steps = np.abs(ours_out - own_outputs(lowered, test)) / output_step(lowered)
        within = float((steps <= 1 + 1e-3).mean())
        print(f"{name}: {within:.2%} within one step, {float((steps <= 1e-3).mean()):.2%} "
              "equal")
        assert within >= 0.999, (within, float(steps.max()))
    # ORT fuses fuselage's file as far as its own (int8: only where a Q has one reader).
    assert ours_fused["QLinearConv"] >= theirs_fused["QLinearConv"], (ours_fused, theirs_fused)


def quantized_ops(lowered):
    """The quantized ops of a lowered model, by kind: quantized module types
    ('Conv2d', 'ConvReLU2d', 'Linear', ...) and quantized functions ('quantized.add',
    'quantized.add_relu', ...). A quantized Dropout is left out: it is the identity in
    eval mode, and torch.onnx.export drops it."""
    modules = dict(lowered.named_modules())
    ops = collections.Counter()
    for node in lowered.graph.nodes:
        if node.op == "call_module":
            module = modules[node.target]
            if ".quantized" in type(module).__module__ and \
                    not isinstance(module, torch.ao.nn.quantized.Dropout):
                ops[type(module).__name__] += 1
        elif node.op == "call_function" and str(node.target).startswith("quantized."):
            ops[str(node.target)] += 1
    return ops


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_pytorch_and_onnx_front_doors_give_the_same_quantized_ops(name, tmp_path_factory):
    # The torchvision model through fuselage.quantize_fx, and its ONNX export through
    # fuselage.onnx.quantize_static, with the same qconfig and backend config.
    from torch.ao.quantization import QConfigMapping
    from fuselage.quantize_fx import convert_fx, prepare_fx
    path = exported(name, tmp_path_factory)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    input_name = onnx.load(path).graph.input[0].name
    _, from_onnx = _quantize.quantize_with_model(
        path, Reader(input_name, calibration), per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)

    torch.manual_seed(0)
    model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None).eval())
    mapping = QConfigMapping().set_global(
        _quantize._qconfig(torch.quint8, torch.qint8, True, False, False))
    backend = _quantize._backend_config(torch.quint8)
    prepared = prepare_fx(model, mapping, (torch.from_numpy(calibration[0]),),
                          backend_config=backend)
    with torch.no_grad():
        for x in calibration:
            prepared(torch.from_numpy(x))
    from_pytorch = convert_fx(prepared, qconfig_mapping=mapping, backend_config=backend)

    ours_pt, ours_onnx = quantized_ops(from_pytorch), quantized_ops(from_onnx)
    assert ours_pt["Conv2d"] + ours_pt["ConvReLU2d"] > 0 and ours_pt["Linear"] == 1, ours_pt
    assert ours_pt == ours_onnx, (f"only from PyTorch: {dict(ours_pt - ours_onnx)}, "
                                  f"only from ONNX: {dict(ours_onnx - ours_pt)}")
