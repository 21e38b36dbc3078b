"""The C++ ONNX reader (onnx/onnx_reader.h), fuselage's one ONNX reader, on torchvision
models exported as their users export them (torch.onnx.export, dynamo=False, opset 17,
1x3x64x64), through both of its front doors: the CLI (`fuselage print/run/quantize
model.onnx`) and fuselage.from_onnx (the reader's model as a torch GraphModule). The
expectations are ONNX Runtime's outputs and the ONNX file's own nodes:

- `fuselage print --readable model.onnx` lists one nn.Conv2d per ONNX Conv, and is the
  listing of the model file fuselage.from_onnx + fuselage.export write (the trip through
  torch changes nothing);
- `fuselage run model.onnx` gives ONNX Runtime's outputs, and exactly what running that
  model file gives (the same weights and attributes);
- `fuselage quantize model.onnx` gives the same quantized model as quantizing that file.
The hand-built models of every op the reader reads: tests/onnx/onnx_reader_test.cc.
"""
import subprocess

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torchvision = pytest.importorskip("torchvision")

import fuselage  # noqa: E402
from conftest import randomize_batch_norm  # noqa: E402

SHAPE = (1, 3, 64, 64)


def fuselage_cli(cli, *args):
    done = subprocess.run([cli, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"fuselage {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module", params=["resnet18", "mobilenet_v2"])
def exported(request, tmp_path_factory):
    """(ONNX path, fuselage.from_onnx's model file of it, an input .npy, ORT's output)."""
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    model = randomize_batch_norm(getattr(torchvision.models, request.param)()).eval()
    x = torch.randn(SHAPE)
    path = str(folder / "model.onnx")
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17)
    python_model = str(folder / "python.fsl")
    fuselage.export(fuselage.from_onnx(path), (x,), python_model)
    x_npy = str(folder / "x.npy")
    np.save(x_npy, x.numpy())
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    return path, python_model, x_npy, expected


def test_cpp_reader_lists_the_onnx_files_convs_as_from_onnx_does(cli, exported):
    path, python_model, _, _ = exported
    cpp = fuselage_cli(cli, "print", "--readable", path)
    assert cpp == fuselage_cli(cli, "print", "--readable", python_model)
    convs = sum(n.op_type == "Conv" for n in onnx.load(path).graph.node)
    assert convs > 0 and cpp.count("nn.Conv2d") == convs, (convs, cpp.count("nn.Conv2d"))


def test_cpp_reader_runs_to_onnx_runtimes_outputs(cli, exported, tmp_path):
    path, python_model, x_npy, expected = exported
    out, python_out = str(tmp_path / "y.npy"), str(tmp_path / "py.npy")
    fuselage_cli(cli, "run", path, f"--input={x_npy}", f"--output={out}", "--threads=1")
    fuselage_cli(cli, "run", python_model, f"--input={x_npy}", f"--output={python_out}",
                 "--threads=1")
    y = np.load(out)
    np.testing.assert_array_equal(y, np.load(python_out))
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_cpp_reader_quantizes_as_from_onnxs_file(cli, exported, tmp_path):
    path, python_model, _, _ = exported
    ours, theirs = str(tmp_path / "q.fsl"), str(tmp_path / "pyq.fsl")
    for source, target in ((path, ours), (python_model, theirs)):
        fuselage_cli(cli, "quantize", source, "--backend=fbgemm", "--samples=2", "--threads=1",
                     "--quiet", "-o", target)
    listing = fuselage_cli(cli, "print", ours)
    assert listing == fuselage_cli(cli, "print", theirs)
    assert "torch.quantize_per_tensor" in listing


def test_cpp_reader_bad_input_exits_1_naming_the_problem_and_writes_nothing(cli, tmp_path):
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["x"], ["y"], "/the/einsum", equation="ij->ij")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    unknown = tmp_path / "einsum.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(unknown))
    truncated = tmp_path / "cut.onnx"
    truncated.write_bytes(unknown.read_bytes()[:-7])
    for path, message in ((unknown, "node '/the/einsum' (Einsum): op 'Einsum' is not one"),
                          (truncated, "is not an ONNX model")):
        out = tmp_path / "out.fsl"
        done = subprocess.run([cli, "quantize", str(path), "--backend=fbgemm", "-o", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stderr
        assert message in done.stderr
        assert not out.exists()
