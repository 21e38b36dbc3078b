"""fuselage's ONNX writer (onnx/onnx_writer.h) from its two front doors, the CLI
(`fuselage quantize model.onnx -o model.qdq.onnx`, `fuselage export-onnx`) and
fuselage.to_onnx, against ONNX Runtime, on torchvision models exported as their users
export them (torch.onnx.export, dynamo=False, opset 17, 1x3x64x64):

- the CLI's file passes onnx.checker and ONNX Runtime runs it (EXTENDED) to the outputs
  it gives for the torch.onnx export itself (float), or to fuselage's own runtime's on the
  quantized model file (its onnxruntime engine: ORT's requantization): lowered, within
  one step of the output's scale; reference (fuselage runs its float reference ops) and
  a fused conv-add-relu (ORT has no conv-add kernel: the conv's result is requantized on
  its own), within three;
- fuselage.to_onnx, given the same model from torch (fuselage.from_onnx, fuselage.export),
  writes the same file: the same nodes, initializers bit for bit, graph inputs and outputs;
- ONNX Runtime runs the QDQ resnet18 to fuselage's outputs within one step, and its
  optimizer (EXTENDED, the optimized model saved) turns every quantized conv into
  QLinearConv and every quantized add into QLinearAdd, leaving no float op between a
  DequantizeLinear and a QuantizeLinear.
The writer's fields on hand-built graphs: tests/onnx/onnx_writer_test.cc.
"""
import collections
import subprocess

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torchvision = pytest.importorskip("torchvision")

import onnx.helper  # noqa: E402
import onnx.numpy_helper  # noqa: E402

import fuselage  # noqa: E402
from fuselage import _core  # noqa: E402
from conftest import randomize_batch_norm  # noqa: E402

SHAPE = (1, 3, 64, 64)

# qnnpack plus conv-add-relu fused into one two-input module (nniq.ConvAddReLU2d once
# quantized: both inputs quantized), over the ONNX import's ops (its batch norms are folded
# into the convs by torch.onnx.export): backend_configs/examples/conv_bn_add_relu.textproto
# without the batch norm.
CONV_ADD_RELU_CONFIG = """
base: "qnnpack"
name: "qnnpack_conv_add_relu"
pattern {
  name: "conv_add_relu"
  pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
  fuser: WRAP_IN_SEQUENCE
  fused_module: "ConvAddReLU2d"
  root: "0.0"
  extra_input: "0.1"
  dtype_config {
    input { dtype: "quint8" } output { dtype: "quint8" } weight { dtype: "qint8" }
    bias: "float32"
  }
}
pattern {
  pattern: "nni.ConvAddReLU2d"
  root_module: "Conv2d"
  reference_quantized_module: "Conv2d"
  dtype_config {
    input { dtype: "quint8" } output { dtype: "quint8" } weight { dtype: "qint8" }
    bias: "float32"
  }
}
"""


def fuselage_cli(cli, *args):
    done = subprocess.run([cli, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"fuselage {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module", params=["resnet18", "mobilenet_v2"])
def exported(request, tmp_path_factory):
    """(ONNX path, fuselage.from_onnx's model file of it)."""
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    model = randomize_batch_norm(getattr(torchvision.models, request.param)()).eval()
    x = torch.randn(SHAPE)
    path = str(folder / "model.onnx")
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)
    python_model = str(folder / "python.fsl")
    fuselage.export(fuselage.from_onnx(path), (x,), python_model)
    return path, python_model


def graph_of(model):
    """What two front doors writing one model must agree on, comparable with ==."""
    nodes = [(n.op_type, n.name, n.domain, list(n.input), list(n.output),
              {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute})
             for n in model.graph.node]
    initializers = [(t.name, t.data_type, list(t.dims)) for t in model.graph.initializer]
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    io = ([i.SerializeToString() for i in model.graph.input],
          [o.SerializeToString() for o in model.graph.output])
    opsets = [(o.domain, o.version) for o in model.opset_import]
    return nodes, initializers, values, io, opsets, model.ir_version


def assert_same_model(cli_path, python_path):
    cli, python = onnx.load(cli_path), onnx.load(python_path)
    onnx.checker.check_model(cli, full_check=True)
    c_nodes, c_inits, c_values, c_io, c_opsets, c_ir = graph_of(cli)
    p_nodes, p_inits, p_values, p_io, p_opsets, p_ir = graph_of(python)
    for i, (c, p) in enumerate(zip(c_nodes, p_nodes)):
        assert c == p, f"node {i}: CLI {c} != to_onnx {p}"
    assert len(c_nodes) == len(p_nodes)
    assert c_inits == p_inits
    for name, value in p_values.items():
        np.testing.assert_array_equal(c_values[name], value, err_msg=name)
    assert (c_io, c_opsets, c_ir) == (p_io, p_opsets, p_ir)
    return cli


def ort_outputs(path, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


def output_step(model_file):
    """The scale of the quantized tensor a one-output model file's output dequantizes: the
    module's (lowered) or the quantize_per_tensor's (reference) giving it."""
    gm = fuselage.to_torch(model_file)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    (source,) = output.args[0].all_input_nodes
    if source.op == "call_module":
        return float(gm.get_submodule(source.target).scale)
    assert source.target is torch.quantize_per_tensor, source.format_node()
    return float(source.args[1])


@pytest.mark.parametrize("form", ["float", "reference", "lowered", "conv_add_relu"])
def test_the_cli_and_to_onnx_write_what_onnx_runtime_runs_as_the_model(cli, exported, form,
                                                                        tmp_path):
    path, python_model = exported
    cli_onnx, python_onnx = str(tmp_path / "cli.onnx"), str(tmp_path / "python.onnx")
    torch.manual_seed(3)
    x = torch.randn(SHAPE).numpy()
    if form == "float":
        # The reader's model of the ONNX file, written from the CLI and by fuselage.to_onnx
        # from the file fuselage.export made of fuselage.from_onnx's GraphModule.
        fuselage_cli(cli, "export-onnx", path, "-o", cli_onnx)
        fuselage.to_onnx(python_model, python_onnx)
        (expected,) = ort_outputs(path, x)
        tolerance = 1e-4 * np.abs(expected).max()
    else:
        quantized = str(tmp_path / "quantized.fsl")
        flags = ["--backend=fbgemm", "--samples=2", "--threads=1", "--quiet"]
        flags += ["--reference"] if form == "reference" else []
        if form == "conv_add_relu":
            config = tmp_path / "conv_add_relu.textproto"
            config.write_text(CONV_ADD_RELU_CONFIG)
            flags[0:1] = ["--backend=qnnpack", f"--config={config}"]
        fuselage_cli(cli, "quantize", path, *flags, "-o", quantized)
        fuselage_cli(cli, "quantize", path, *flags, "-o", cli_onnx)
        fuselage.to_onnx(quantized, python_onnx)
        (expected,) = _core.run(_core.Model.load(quantized), [x], threads=1,
                                engine="onnxruntime")
        tolerance = output_step(quantized) * (1 if form == "lowered" else 3)
    model = assert_same_model(cli_onnx, python_onnx)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Conv"] > 0
    assert (ops["QuantizeLinear"] > 0) == (form != "float")
    (y,) = ort_outputs(cli_onnx, x)
    distance = np.abs(y - np.asarray(expected))
    assert float((distance <= tolerance * (1 + 1e-3)).mean()) >= 0.99, distance.max()
    if form == "conv_add_relu" and "resnet" in path:
        # Each residual add reads two DequantizeLinear nodes: both inputs quantized.
        producer = {o: n for n in model.graph.node for o in n.output}
        adds = [n for n in model.graph.node if n.op_type == "Add"]
        assert len(adds) == 8
        assert all(producer[i].op_type == "DequantizeLinear" for n in adds for i in n.input)


def float_groups(model):
    """Ops still computing in float between quantized tensors: each reads a
    DequantizeLinear and feeds a QuantizeLinear (what ORT leaves when a selector rejects a
    group)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = collections.defaultdict(list)
    for n in model.graph.node:
        for name in n.input:
            readers[name].append(n)
    return [f"{n.op_type} {n.name}" for n in model.graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear"
                    for i in n.input)
            and any(r.op_type == "QuantizeLinear" for o in n.output for r in readers[o])]


def test_onnx_runtime_runs_the_cpp_qdq_resnet18_as_fuselage_does(cli, tmp_path):
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.resnet18()).eval()
    path = str(tmp_path / "resnet18.onnx")
    torch.onnx.export(model, (torch.randn(SHAPE),), path, dynamo=False, opset_version=17)
    quantized, qdq = str(tmp_path / "q.fsl"), str(tmp_path / "q.qdq.onnx")
    flags = ["--backend=fbgemm", "--samples=8", "--threads=1", "--quiet"]
    fuselage_cli(cli, "quantize", path, *flags, "-o", quantized)
    fuselage_cli(cli, "export-onnx", quantized, "-o", qdq)

    torch.manual_seed(3)
    x = torch.randn(SHAPE).numpy()
    x_npy, own_npy = str(tmp_path / "x.npy"), str(tmp_path / "own.npy")
    np.save(x_npy, x)
    fuselage_cli(cli, "run", quantized, f"--input={x_npy}", f"--output={own_npy}",
                 "--threads=1", "--engine=onnxruntime")
    own = np.load(own_npy)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = 1
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(qdq, options, providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: x})

    # The output's step: the scale of the quantized tensor the fuselage model's output
    # dequantizes (its last Gemm's, an nnq.Linear).
    lowered = fuselage.to_torch(quantized)
    output = next(n for n in lowered.graph.nodes if n.op == "output")
    (source,) = output.args[0].all_input_nodes
    assert source.op == "call_module"
    step = float(lowered.get_submodule(source.target).scale)
    distance = np.abs(y - own) / step
    assert float((distance <= 1 + 1e-3).mean()) >= 0.999, np.quantile(distance, [0.5, 0.99, 1])

    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    ops = collections.Counter(n.op_type for n in optimized.graph.node)
    quantized_convs = sum(type(m).__name__ in ("Conv2d", "ConvReLU2d") and
                          type(m).__module__.startswith("torch.ao.nn.")
                          for m in lowered.modules())
    quantized_adds = sum(n.op == "call_function" and "quantized.add" in str(n.target)
                         for n in lowered.graph.nodes)
    assert ops["QLinearConv"] == quantized_convs == 20, ops
    assert ops["QLinearAdd"] == quantized_adds == 8, ops
    assert ops["Conv"] == ops["Add"] == 0, ops
    assert float_groups(optimized) == []
