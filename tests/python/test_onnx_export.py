"""fuselage.to_onnx (issue 37 item 1): float models as plain ONNX, quantized ones as QDQ that
ONNX Runtime fuses into its int8 ops.

The expectations are not the exporter's: PyTorch's outputs for the float models; for the
quantized ones, onnx.checker, the graph ONNX Runtime itself optimizes (EXTENDED, saved and
read back): as many QLinearConv as the fuselage model has quantized conv modules, a
QLinearAdd per quantized add, no float op left between a DequantizeLinear and a
QuantizeLinear; and ORT's outputs against fuselage's own runtime (fuselage._core.run), in
steps of each output's own scale.

fuselage's runtime is run with the qnnpack engine's requantization: ONNX Runtime's
QLinearConv / QGemm requantize as qnnpack does (the bias as int32 in the accumulator, one
float multiplier), and the two agree bit for bit on resnet18. The fbgemm / onednn
arithmetic (float bias added after scaling, what PyTorch's fbgemm kernels and fuselage's
default do) differs from it by rare rounding ties, which resnet18's twenty layers amplify
to 97.6 % within two steps.
"""
import collections
import copy
import operator

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import torchvision  # noqa: E402
from torch.ao.nn.quantized.modules.conv import _ConvNd as QuantizedConv  # noqa: E402
from torch.ao.quantization import QConfigMapping, get_default_qconfig_mapping  # noqa: E402
from torch.ao.quantization.backend_config import (DTypeConfig,  # noqa: E402
                                                  get_fbgemm_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.fx.match_utils import MatchAllNode  # noqa: E402
from torch.ao.quantization.qconfig import \
    default_per_channel_symmetric_qnnpack_qconfig  # noqa: E402

import fuselage  # noqa: E402
import fuselage.fusers  # noqa: E402
import fuselage.nn.quantized  # noqa: E402
from fuselage import _core  # noqa: E402
from fuselage.errors import FuselageError, OnnxExportError  # noqa: E402
from fuselage.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx  # noqa: E402
from conftest import SmallResidual, nested_pattern_config, randomize_batch_norm, \
    x86_engine  # noqa: E402

SHAPE = (1, 3, 64, 64)


@pytest.fixture(autouse=True, scope="module")
def one_thread_and_the_x86_engine():
    # One thread: this machine's two cores are shared, and PyTorch's two-thread kernels run
    # a 64x64 mobilenet_v2 ~100x slower when they are. The x86 qconfigs' engine (conftest
    # sets qnnpack for the other tests).
    threads, engine = torch.get_num_threads(), torch.backends.quantized.engine
    torch.set_num_threads(1)
    torch.backends.quantized.engine = x86_engine()
    yield
    torch.set_num_threads(threads)
    torch.backends.quantized.engine = engine


def ort_run(path, inputs, optimized=None):
    """ORT's outputs on the CPU, graph optimization EXTENDED; with `optimized`, the
    optimized model ORT saves there, read back."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = 1
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    outputs = session.run(None, feeds)
    return outputs, (onnx.load(str(optimized)) if optimized is not None else None)


def op_counts(model):
    return collections.Counter(n.op_type for n in model.graph.node)


def float_groups(model):
    """The ops that still compute in float between quantized tensors: each reads a
    DequantizeLinear and feeds a QuantizeLinear (what ORT leaves when a selector rejects
    a group)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = collections.defaultdict(list)
    for n in model.graph.node:
        for name in n.input:
            readers[name].append(n)
    groups = []
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        reads_dq = any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear"
                       for i in n.input)
        feeds_q = any(r.op_type == "QuantizeLinear" for o in n.output for r in readers[o])
        if reads_dq and feeds_q:
            groups.append(f"{n.op_type} {n.name}")
    return groups


def float_reads(model):
    """The ops that read a DequantizeLinear's float output, other than a QuantizeLinear
    (a requantization): once ORT has fused a fully quantized graph, none but at the
    graph's outputs."""
    producer = {o: n for n in model.graph.node for o in n.output}
    return [f"{n.op_type} {n.name}" for n in model.graph.node if n.op_type != "QuantizeLinear"
            and any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear"
                    for i in n.input)]


def output_steps(gm):
    """The scale of each output of a quantized GraphModule: that of the quantized tensor
    each output `dequantize` reads, as the module or the quantize call producing it says,
    else as one run gives it (a native op such as quantized.mul(qx, 4.0) makes its own
    parameters from its input's, whatever the data)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    values = {}

    class Recording(torch.fx.Interpreter):
        def run_node(self, n):
            values[n.name] = super().run_node(n)
            return values[n.name]

    steps = []
    for source in (leaf.args[0] for leaf in leaves):
        if source.op == "call_module":
            steps.append(float(gm.get_submodule(source.target).scale))
        elif source.target is torch.quantize_per_tensor:
            steps.append(float(source.args[1]))
        else:
            if not values:
                with torch.no_grad():
                    Recording(gm).run(torch.randn(SHAPE))
            steps.append(float(values[source.name].q_scale()))
    return steps


def fuselage_outputs(lowered, x):
    """fuselage's own runtime on the lowered model, with qnnpack's requantization (see the
    module's docstring). A reference model lowers to the same model."""
    return _core.run(_core.from_torch(lowered), [x.numpy()], engine="qnnpack")


def steps_apart(ort_outputs, own_outputs, steps):
    return np.concatenate([np.abs(a - np.asarray(b)).ravel() / s
                           for a, b, s in zip(ort_outputs, own_outputs, steps)])


def within(distance, steps):
    return float((distance <= steps + 1e-3).mean())


# ---- models -------------------------------------------------------------------------------

def small_residual():
    torch.manual_seed(0)
    return randomize_batch_norm(SmallResidual().eval())


def torchvision_model(name):
    torch.manual_seed(0)
    return randomize_batch_norm(getattr(torchvision.models, name)(weights=None).eval())


def _root_node_getter(pattern):
    _, (_, (_, conv), _) = pattern
    return conv


def _extra_inputs_getter(pattern):
    _, (_, _, extra) = pattern
    return [extra]


def conv_add_relu_backend():
    """fbgemm's backend config plus conv-bn-add-relu fused into fuselage's ConvAddReLU2d
    (both inputs quantized), for the residual blocks of SmallResidual (torch.relu) and
    resnet18 (nn.ReLU)."""
    backend = get_fbgemm_backend_config()
    dtypes = DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8,
                         weight_dtype=torch.qint8, bias_dtype=torch.float)
    for relu in (nn.ReLU, torch.relu):
        backend.set_backend_pattern_config(
            nested_pattern_config((relu, (operator.add, (nn.BatchNorm2d, nn.Conv2d),
                                          MatchAllNode)))
            .set_fuser_method(fuselage.fusers.fuse_conv_bn_add_relu)
            ._set_root_node_getter(_root_node_getter)
            ._set_extra_inputs_getter(_extra_inputs_getter)
            .set_dtype_configs([dtypes]))
    return backend


def quantize(model, backend=None, qconfig_mapping=None, batches=8):
    """(lowered, reference) of `model` by fuselage.quantize_fx, calibrated on `batches`
    random inputs."""
    backend = backend or get_fbgemm_backend_config()
    qconfig_mapping = qconfig_mapping or get_default_qconfig_mapping("fbgemm")
    torch.manual_seed(1)
    prepared = prepare_fx(model, qconfig_mapping, (torch.randn(SHAPE),), backend_config=backend)
    with torch.no_grad():
        for _ in range(batches):
            prepared(torch.randn(SHAPE))
    return convert_fx(copy.deepcopy(prepared)), convert_to_reference_fx(prepared)


def quantized_convs(lowered):
    return sum(isinstance(m, QuantizedConv) for m in lowered.modules())


def quantized_adds(lowered):
    functional = sum(n.op == "call_function" and str(n.target) in ("quantized.add",
                                                                    "quantized.add_relu")
                     for n in lowered.graph.nodes)
    fused = sum(isinstance(m, (fuselage.nn.quantized.ConvAdd2d,
                               fuselage.nn.quantized.ConvAddReLU2d))
                for m in lowered.modules())
    return functional + fused


# ---- float --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["small_residual", "resnet18", "mobilenet_v2",
                                  "efficientnet_b0", "shufflenet_v2_x1_0"])
def test_a_float_model_runs_in_onnx_runtime_as_in_pytorch(name, tmp_path):
    model = small_residual() if name == "small_residual" else torchvision_model(name)
    x = torch.randn(SHAPE)
    # Each kind of model to_onnx takes: a model file (its recorded input shape is the ONNX
    # input's), a GraphModule fuselage gave, a fuselage._core.Model, an nn.Module
    # (efficientnet's stochastic depth, shufflenet's chunk and channel shuffle).
    if name == "small_residual":
        source, example = fuselage.export(model, (x,), str(tmp_path / "model.fsl")), None
    elif name == "resnet18":
        source, example = _core.to_torch(_core.from_torch(model)), (x,)
    elif name == "mobilenet_v2":
        source, example = _core.from_torch(model, (x,)), None
    else:
        source, example = model, (x,)
    fuselage.to_onnx(source, str(tmp_path / "model.onnx"), example)
    exported = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(exported, full_check=True)
    assert not {"QuantizeLinear", "DequantizeLinear"} & set(op_counts(exported))
    (y,), _ = ort_run(tmp_path / "model.onnx", [x])
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


class WrittenOut(nn.Module):
    """The ops the writer spells with several ONNX nodes or sizes from the example run:
    layer norm (module, and functional with a parameter), split / chunk / narrow and their
    parts, GELU (erf and tanh), SiLU, ELU, LeakyReLU, softmax, interpolate (nearest,
    bilinear), expand, functional pools, hardtanh, hardsigmoid."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm([8, 8])
        self.scale = nn.Parameter(torch.rand(16) + 0.5)
        self.gelu, self.elu, self.leaky = nn.GELU(), nn.ELU(0.5), nn.LeakyReLU(0.2)
        self.silu, self.softmax = nn.SiLU(), nn.Softmax(dim=1)

    def forward(self, x):
        y = self.norm(self.conv(x))
        a, b = torch.split(y, [3, 5], 1)
        c, d = y.chunk(2, dim=1)
        e = torch.narrow(y, 1, -6, 4)
        z = self.gelu(a).mean() + F.gelu(b, approximate="tanh").mean() + \
            self.elu(c).mean() + F.elu(d).mean()
        w = F.interpolate(self.leaky(e), scale_factor=2, mode="nearest") + \
            F.interpolate(self.silu(e), scale_factor=2, mode="bilinear")
        w = F.leaky_relu(w, 0.1) + F.silu(w) + self.softmax(w) + \
            F.layer_norm(w, [16], self.scale) + w.mean((2, 3), keepdim=True).expand(-1, -1, 16, 16)
        return (w * z, F.max_pool2d(w, 2), F.avg_pool2d(w, 3, 2, 1), F.adaptive_avg_pool2d(w, 4),
                F.hardtanh(w, -0.5, 0.5), F.hardsigmoid(w))


def test_ops_written_out_run_in_onnx_runtime_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model = WrittenOut().eval()
    x = torch.randn(1, 3, 8, 8)
    path = fuselage.to_onnx(model, str(tmp_path / "model.onnx"), (x,))
    exported = onnx.load(path)
    onnx.checker.check_model(exported, full_check=True)
    assert {"Split", "Slice", "Erf", "Tanh", "Resize", "Expand", "LayerNormalization",
            "Elu", "LeakyRelu", "Softmax"} <= set(op_counts(exported))
    x = torch.randn(1, 3, 8, 8)  # the file holds no trace of the example's values
    outputs, _ = ort_run(path, [x])
    with torch.no_grad():
        expected = model(x)
    assert len(outputs) == len(expected)
    for y, want in zip(outputs, expected):
        np.testing.assert_allclose(y, want.numpy(), rtol=1e-4, atol=1e-5)


# ---- quantized ----------------------------------------------------------------------------

def _check_qdq_file(path, activation_type):
    """onnx.checker, opset >= 13, int8 weights per output channel, int32 biases, and
    activations of `activation_type` (onnx.TensorProto.UINT8 / INT8)."""
    exported = onnx.load(str(path))
    onnx.checker.check_model(exported, full_check=True)
    assert max(o.version for o in exported.opset_import if o.domain in ("", "ai.onnx")) >= 13
    initializers = {t.name: t for t in exported.graph.initializer}
    convs = [n for n in exported.graph.node if n.op_type in ("Conv", "Gemm")]
    producer = {o: n for n in exported.graph.node for o in n.output}
    assert convs
    for conv in convs:
        weight_dq, bias_dq = producer[conv.input[1]], producer[conv.input[2]]
        assert weight_dq.op_type == bias_dq.op_type == "DequantizeLinear", conv.name
        assert initializers[weight_dq.input[0]].data_type == onnx.TensorProto.INT8
        assert initializers[bias_dq.input[0]].data_type == onnx.TensorProto.INT32
        axis = {a.name: a.i for a in weight_dq.attribute}.get("axis")
        assert axis == 0 and len(onnx.numpy_helper.to_array(
            initializers[weight_dq.input[1]])) == initializers[weight_dq.input[0]].dims[0]
    activations = {initializers[n.input[2]].data_type for n in exported.graph.node
                   if n.op_type == "QuantizeLinear"}
    assert activations == {activation_type}


QUANTIZED_CASES = [
    ("small_residual", "fbgemm"), ("small_residual", "conv_add_relu"),
    ("resnet18", "fbgemm"), ("resnet18", "conv_add_relu"),
]


@pytest.fixture(scope="module", params=QUANTIZED_CASES, ids=lambda c: "-".join(c))
def quantized(request):
    name, config = request.param
    model = small_residual() if name == "small_residual" else torchvision_model(name)
    backend = conv_add_relu_backend() if config == "conv_add_relu" else None
    return name, config, quantize(model, backend)


@pytest.mark.parametrize("form", ["lowered", "reference"])
def test_a_quantized_model_becomes_onnx_runtimes_int8_ops(quantized, form, tmp_path):
    name, config, (lowered, reference) = quantized
    model = lowered if form == "lowered" else reference
    torch.manual_seed(2)
    x = torch.randn(SHAPE)
    path = fuselage.to_onnx(model, str(tmp_path / "model.onnx"), (x,))
    _check_qdq_file(path, onnx.TensorProto.UINT8)

    (y,), optimized = ort_run(path, [x], tmp_path / "optimized.onnx")
    ops = op_counts(optimized)
    # What fuselage quantized, counted on the lowered model (a reference model lowers to
    # it): every conv is a QLinearConv, every add a QLinearAdd, nothing stays float.
    assert ops["QLinearConv"] == quantized_convs(lowered) > 0, ops
    assert ops["QLinearAdd"] == quantized_adds(lowered) > 0, ops
    assert ops["Conv"] == ops["Add"] == 0, ops
    assert float_groups(optimized) == [] and float_reads(optimized) == []
    if config == "conv_add_relu":
        assert any(isinstance(m, fuselage.nn.quantized.ConvAddReLU2d) for m in lowered.modules())

    # Against fuselage's own runtime, in steps of the output's scale. ORT has no conv-add
    # kernel: a fused conv-add-relu's conv result is quantized on its own first
    # (onnx/onnx_writer.cc, ConvAddMidQParams), which costs up to half a step of the
    # output and of the residual per block (resnet18's eight blocks: 96 % within two
    # steps, 99.6 % within three).
    own = fuselage_outputs(lowered, x)
    distance = steps_apart([y], own, output_steps(lowered))
    tolerance = 1 if config == "fbgemm" else 3
    assert within(distance, tolerance) >= 0.99, [within(distance, k) for k in range(4)]


def test_mobilenet_v2_lowered_is_int8_throughout_and_equals_fuselage(tmp_path):
    # 52 convs, 10 residual adds, and 35 ReLU6 that fbgemm runs on quantized tensors.
    lowered, _ = quantize(torchvision_model("mobilenet_v2"), batches=4)
    x = torch.randn(SHAPE)
    path = fuselage.to_onnx(lowered, str(tmp_path / "model.onnx"), (x,))
    _check_qdq_file(path, onnx.TensorProto.UINT8)
    (y,), optimized = ort_run(path, [x], tmp_path / "optimized.onnx")
    ops = op_counts(optimized)
    assert ops["QLinearConv"] == quantized_convs(lowered) == 52, ops
    assert ops["QLinearAdd"] == quantized_adds(lowered) == 10, ops
    assert ops["Clip"] == sum(isinstance(m, nn.ReLU6) for m in lowered.modules()) == 35, ops
    assert float_groups(optimized) == [] and float_reads(optimized) == []
    distance = steps_apart([y], fuselage_outputs(lowered, x), output_steps(lowered))
    assert within(distance, 1) >= 0.99, [within(distance, k) for k in range(3)]


class TwoHeads(nn.Module):
    """Two outputs of different ranges: each must leave with its own scale."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.head_a = nn.Conv2d(8, 4, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head_b = nn.Linear(8, 10)

    def forward(self, x):
        y = self.relu(self.stem(x))
        return self.head_a(y) * 4.0, self.head_b(torch.flatten(self.pool(y), 1))


def test_every_output_is_dequantized_with_its_own_parameters(tmp_path):
    torch.manual_seed(0)
    lowered, _ = quantize(TwoHeads().eval())
    x = torch.randn(SHAPE)
    steps = output_steps(lowered)
    assert len(set(steps)) == 2
    path = fuselage.to_onnx(lowered, str(tmp_path / "two.onnx"), (x,))
    exported = onnx.load(path)
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in exported.graph.initializer}
    producer = {o: n for n in exported.graph.node for o in n.output}
    for output, step in zip(exported.graph.output, steps):
        dq = producer[output.name]
        assert dq.op_type == "DequantizeLinear"
        assert float(initializers[dq.input[1]]) == pytest.approx(step, rel=1e-6)
    outputs, optimized = ort_run(path, [x], tmp_path / "optimized.onnx")
    assert float_groups(optimized) == []
    assert within(steps_apart(outputs, fuselage_outputs(lowered, x), steps), 1) >= 0.99


class AroundOp(nn.Module):
    """conv_a(x) [op conv_b(x)] -> `op` -> a 1x1 conv: the op reads and gives quantized
    tensors, and the output has a step of its own."""

    def __init__(self, op, binary, channels_out=8):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 3, padding=1)
        self.op, self.binary = op, binary
        self.out = nn.Conv2d(channels_out, 4, 1)

    def forward(self, x):
        y = self.op(self.a(x), self.b(x)) if self.binary else self.op(self.a(x))
        return self.out(y)


OPS = {  # name: (op, binary, the op ORT runs it as, channels it gives)
    "mul": (operator.mul, True, "QLinearMul", 8),
    "add": (operator.add, True, "QLinearAdd", 8),
    "add_relu": (lambda a, b: torch.relu(a + b), True, "QLinearAdd", 8),
    "cat": (lambda a, b: torch.cat([a, b], 1), True, "QLinearConcat", 16),
    # The relu's output shares cat's scale and zero point, which is not 0 (b is not
    # relu'd): the relu stays, as a Clip of the integers (as in densenet121).
    "relu_into_cat": (lambda a, b: torch.cat([torch.relu(a), b], 1), True, "Clip", 16),
    "add_scalar": (lambda a: a + 1.5, False, "QLinearAdd", 8),
    "mul_scalar": (lambda a: a * -2.0, False, "QLinearMul", 8),
    "avg_pool": (lambda a: F.avg_pool2d(a, 2), False, "QLinearAveragePool", 8),
    "mean": (lambda a: a.mean((2, 3), keepdim=True), False, "QLinearGlobalAveragePool", 8),
    "max_pool": (lambda a: F.max_pool2d(a, 2), False, "MaxPool", 8),
    "relu": (torch.relu, False, "QLinearConv", 8),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_quantized_op_is_an_int8_op_in_onnx_runtime(name, tmp_path):
    op, binary, ort_op, channels = OPS[name]
    torch.manual_seed(0)
    lowered, reference = quantize(AroundOp(op, binary, channels).eval(), batches=2)
    x = torch.randn(SHAPE)
    expected = fuselage_outputs(lowered, x)
    for form, model in (("lowered", lowered), ("reference", reference)):
        path = fuselage.to_onnx(model, str(tmp_path / f"{form}.onnx"), (x,))
        (y,), optimized = ort_run(path, [x], tmp_path / f"{form}.optimized.onnx")
        ops = op_counts(optimized)
        assert ops[ort_op] >= 1 and float_groups(optimized) == [], (form, ops)
        assert float_reads(optimized) == [], (form, ops)
        distance = steps_apart([y], expected, output_steps(lowered))
        assert within(distance, 1) >= 0.99, (form, [within(distance, k) for k in range(3)])


class SwapHalves(nn.Module):
    """A quantized graph written by hand (quantize_fx, as PyTorch's prepare_fx, puts an
    observer on chunk's tuple): chunk and cat of a quantized tensor."""

    def forward(self, x):
        q = torch.quantize_per_tensor(x, 0.05, 10, torch.quint8)
        a, b = q.chunk(2, 1)
        return torch.ops.quantized.cat([b, a], 1, 0.05, 10).dequantize()


def test_chunk_of_a_quantized_tensor_splits_its_integers(tmp_path):
    model = torch.fx.symbolic_trace(SwapHalves().eval())
    x = torch.randn(SHAPE[0], 4, 8, 8)
    path = fuselage.to_onnx(model, str(tmp_path / "swap.onnx"), (x,))
    assert {"Split", "Concat"} <= set(op_counts(onnx.load(path)))
    (y,), optimized = ort_run(path, [x], tmp_path / "optimized.onnx")
    assert float_groups(optimized) == [] and float_reads(optimized) == []
    np.testing.assert_array_equal(y, model(x).numpy())


class ConvReLU6(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.conv2 = nn.Conv2d(8, 8, 3)

    def forward(self, x):
        return self.conv2(self.act(self.bn(self.conv(x))))


def test_a_relu6_on_a_quantized_tensor_is_a_clip_of_its_integers(tmp_path):
    # fbgemm quantizes the conv's output over its own range, then runs ReLU6 on the
    # quantized tensor (as in mobilenet_v2): no DequantizeLinear -> Clip -> QuantizeLinear
    # group may stay, and the integers are clamped where PyTorch's quantized clamp does.
    torch.manual_seed(0)
    lowered, reference = quantize(randomize_batch_norm(ConvReLU6().eval()))
    assert any(isinstance(m, nn.ReLU6) for m in lowered.modules())
    x = torch.randn(SHAPE) * 3
    for form, model in (("lowered", lowered), ("reference", reference)):
        path = fuselage.to_onnx(model, str(tmp_path / f"{form}.onnx"), (x,))
        (y,), optimized = ort_run(path, [x], tmp_path / f"{form}.optimized.onnx")
        assert op_counts(optimized)["QLinearConv"] == 2, form
        assert float_groups(optimized) == [], form
        distance = steps_apart([y], fuselage_outputs(lowered, x), output_steps(lowered))
        assert within(distance, 1) >= 0.99, form


def test_int8_activations_stay_int8(tmp_path):
    # The qconfig says qint8 activations: the file says INT8. (ONNX Runtime on x86 fuses
    # an int8 group only where its QuantizeLinear has one reader: docs/guide/onnx.md.)
    mapping = QConfigMapping().set_global(default_per_channel_symmetric_qnnpack_qconfig)
    lowered, _ = quantize(small_residual(), get_qnnpack_backend_config(), mapping)
    x = torch.randn(SHAPE)
    path = fuselage.to_onnx(lowered, str(tmp_path / "int8.onnx"), (x,))
    _check_qdq_file(path, onnx.TensorProto.INT8)
    (y,), _ = ort_run(path, [x])
    assert within(steps_apart([y], fuselage_outputs(lowered, x), output_steps(lowered)), 1) >= 0.99


# ---- bad input ----------------------------------------------------------------------------

class Shuffles(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return F.pixel_shuffle(self.conv(x), 2)


def test_an_op_without_an_onnx_form_names_the_node_and_leaves_the_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"the old file")
    with pytest.raises(OnnxExportError, match=r"node 'pixel_shuffle' \(call_function "
                                              r"torch\.nn\.functional\.pixel_shuffle\) has no "
                                              r"ONNX mapping"):
        fuselage.to_onnx(Shuffles().eval(), str(path), (torch.randn(1, 4, 8, 8),))
    assert path.read_bytes() == b"the old file"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # no temporary left


def test_an_argument_without_an_onnx_form_names_the_node_and_field(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")).eval()
    with pytest.raises(OnnxExportError, match=r"node '_0' \(call_module 0\): .*padding_mode "
                                              r"'reflect'"):
        fuselage.to_onnx(model, str(tmp_path / "m.onnx"), (torch.randn(1, 3, 8, 8),))
    assert not (tmp_path / "m.onnx").exists()


def test_a_pool_onnx_would_size_otherwise_names_the_node(tmp_path):
    # 5 + 2 padding, windows of 2 every 2, ceil_mode: PyTorch 3 (the last window would
    # start in the padding), ONNX 4.
    model = nn.Sequential(nn.MaxPool2d(2, 2, padding=1, ceil_mode=True)).eval()
    with pytest.raises(OnnxExportError, match=r"node '_0' \(call_module 0\): ceil_mode gives "
                                              r"\[3, 3\] in PyTorch.*\[4, 4\] in ONNX"):
        fuselage.to_onnx(model, str(tmp_path / "m.onnx"), (torch.randn(1, 1, 5, 5),))


def test_a_directory_path_is_refused_naming_it(tmp_path):
    with pytest.raises(OnnxExportError, match=rf"cannot write '{tmp_path}': it is a "
                                              r"directory"):
        fuselage.to_onnx(small_residual(), str(tmp_path), (torch.randn(SHAPE),))


def test_inputs_it_cannot_run_are_clear_errors(tmp_path):
    gm = torch.fx.symbolic_trace(small_residual())  # a GraphModule with no recorded shapes
    with pytest.raises(OnnxExportError, match=r"placeholder 'x' has no recorded shape .*give "
                                              r"example inputs"):
        fuselage.to_onnx(gm, str(tmp_path / "m.onnx"))
    with pytest.raises(OnnxExportError, match=r"running the model on the example inputs failed"):
        fuselage.to_onnx(gm, str(tmp_path / "m.onnx"), (torch.randn(1, 5, 8, 8),))
    with pytest.raises(OnnxExportError, match=r"input 0 \(x\): a torch tensor of torch.float64"):
        fuselage.to_onnx(gm, str(tmp_path / "m.onnx"), (torch.randn(SHAPE, dtype=torch.float64),))
    with pytest.raises(OnnxExportError, match=r"2 inputs for a model with 1 placeholder"):
        fuselage.to_onnx(gm, str(tmp_path / "m.onnx"), (torch.randn(SHAPE),) * 2)
    with pytest.raises(OnnxExportError, match=r"model is a int"):
        fuselage.to_onnx(42, str(tmp_path / "m.onnx"))
    with pytest.raises(OnnxExportError, match=r"the model is in training mode; call "
                                              r"model.eval\(\) first"):
        fuselage.to_onnx(SmallResidual(), str(tmp_path / "m.onnx"), (torch.randn(SHAPE),))
    assert issubclass(OnnxExportError, FuselageError)
    assert not (tmp_path / "m.onnx").exists()
