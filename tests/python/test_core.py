"""fuselage._core, the compiled extension: models in process, the passes, the interpreter.

The expectations come from elsewhere: the C++ CLI (`fuselage quantize`, `fuselage run`,
built with Bazel) for the pipeline and the interpreter, PyTorch for a float model's
output, protobuf's own parsers for the files, numbers worked out by hand for the rest.
tools/test.sh builds the extension (tools/build_extension.sh) before this file runs.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.fx
from google.protobuf import text_format

from conftest import REPO

import fuselage
from fuselage import ModelFileError, FuselageError
from fuselage._proto import model_pb2

core = fuselage._core

RESIDUAL = os.path.join(REPO, "tools", "examples", "residual.textproto")
CONFIG = os.path.join(REPO, "backend_configs", "examples", "conv_bn_add_relu.textproto")


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def samples(n, seed=0, shape=(1, 4, 8, 8)):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(n)]


# ---- models: files and bytes -------------------------------------------------------

def test_load_and_save_text_and_binary(tmp_path):
    model = core.Model.load(RESIDUAL)
    assert model.placeholders == ["x"]
    text_path, binary_path = tmp_path / "m.textproto", tmp_path / "m.fsl"
    model.save(text_path)
    model.save(str(binary_path))
    # Independent readers: protobuf's text parser and binary parser, the same message.
    from_text = text_format.Parse(read(text_path, "r"), model_pb2().Model())
    from_binary = model_pb2().Model.FromString(read(binary_path))
    assert from_text == from_binary
    assert from_text == text_format.Parse(read(RESIDUAL, "r"), model_pb2().Model())
    # And both load back to the same model.
    assert core.Model.load(text_path).to_bytes() == core.Model.load(binary_path).to_bytes()
    assert core.Model.from_text(model.to_text()).to_bytes() == model.to_bytes()


def test_from_bytes_of_to_proto_round_trip(small_residual):
    gm = torch.fx.symbolic_trace(small_residual)
    x = torch.randn(1, 3, 8, 8)
    model = core.Model.from_bytes(fuselage.to_proto(gm, (x,)).SerializeToString())
    model.verify()
    back = fuselage.from_proto(model_pb2().Model.FromString(model.to_bytes()))
    with torch.no_grad():
        torch.testing.assert_close(back(x), gm(x))
    assert "def forward(self, x):" in model.code()


# ---- the pipeline in process equals the CLI's ------------------------------------

def cli_quantize(cli, tmp_path, calibration):
    files = []
    for i, x in enumerate(calibration):
        files.append(str(tmp_path / f"cal{i}.npy"))
        np.save(files[-1], x)
    out = tmp_path / "cli.fsl"
    subprocess.run([cli, "quantize", RESIDUAL, "--backend=qnnpack", f"--config={CONFIG}",
                    "--calibration=" + ",".join(files), "-o", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    return read(out)


def test_stages_in_process_equal_fuselage_quantize(cli, tmp_path):
    calibration = samples(4)
    expected = cli_quantize(cli, tmp_path, calibration)

    model = core.Model.load(RESIDUAL)
    config = read(CONFIG, "r")
    fused = core.fuse(model, "qnnpack", config_text=config)
    assert fused.fused == 1 and fused.per_pattern == [("conv_bn_add_relu", 1)]
    prepared = core.prepare(model, "qnnpack", config_text=config)
    assert prepared.quantized_ops > 0
    assert core.calibrate(model, [(x,) for x in calibration]).samples == 4
    assert core.convert(model).observers_replaced > 0
    lowered = core.lower(model)
    assert lowered.total_lowered > 0 and lowered.unlowered == []
    model.verify()
    assert model.to_bytes() == expected

    # The whole flow in one call gives the same model, and its report reads as the CLI's.
    again = core.Model.load(RESIDUAL)
    report = core.quantize(again, calibration, "qnnpack", config_text=config)
    assert again.to_bytes() == expected
    assert str(report).startswith("fuse: 1 matches fused\nprepare: ")
    assert report.prepare.quantized_ops == prepared.quantized_ops


def test_reports_are_objects_with_the_cli_text(cli, tmp_path):
    model = core.Model.load(RESIDUAL)
    report = core.fuse(model, "qnnpack", config_text=read(CONFIG, "r"))
    out = tmp_path / "fused.fsl"
    printed = subprocess.run([cli, "fuse", RESIDUAL, f"--config={CONFIG}", "-o", str(out)],
                             check=True, capture_output=True, text=True).stdout
    assert printed == f"{report}; wrote {out}\n"
    assert report.nodes_before == 7 and report.nodes_after == model.node_count
    assert "FuseReport(backend='qnnpack_conv_bn_add_relu', fused=1" in repr(report)

    explained = core.explain(core.Model.load(RESIDUAL), "qnnpack")
    printed = subprocess.run([cli, "explain", RESIDUAL, "--backend=qnnpack"],
                             check=True, capture_output=True, text=True).stdout
    assert str(explained) == printed
    assert explained.failures and explained.failures[0].node == "relu"


# ---- the interpreter ------------------------------------------------------------

def test_run_equals_fuselage_run_and_pytorch(cli, tmp_path, small_residual):
    gm = torch.fx.symbolic_trace(small_residual)
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "float.fsl"
    fuselage.export(gm, (x,), str(path))
    model = core.Model.load(path)
    [y] = core.run(model, [x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(y, gm(x).numpy(), rtol=1e-4, atol=1e-5)
    np.save(tmp_path / "x.npy", x.numpy())
    subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                    f"--output={tmp_path / 'y.npy'}"], check=True, capture_output=True)
    np.testing.assert_array_equal(y, np.load(tmp_path / "y.npy"))
    # A torch tensor goes in as well, and a single array stands for a one-input model.
    np.testing.assert_array_equal(core.run(model, x)[0], y)


def test_run_quantized_model_equals_fuselage_run(cli, tmp_path):
    model = core.Model.load(RESIDUAL)
    core.quantize(model, samples(4), "qnnpack", config_text=read(CONFIG, "r"))
    path = tmp_path / "q.fsl"
    model.save(path)
    x = samples(1, seed=7)[0]
    np.save(tmp_path / "x.npy", x)
    subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                    f"--output={tmp_path / 'y.npy'}"], check=True, capture_output=True)
    [y] = core.run(model, [x], threads=1)
    np.testing.assert_array_equal(y, np.load(tmp_path / "y.npy"))


def test_outputs_are_the_callers_to_write():
    model = core.Model.load(RESIDUAL)
    x = samples(1)[0]
    [first] = core.run(model, [x])
    expected = first.copy()
    first[...] = 0  # the array is writable and the model's buffers are not behind it
    [second] = core.run(model, [x])
    np.testing.assert_array_equal(second, expected)


def test_quantized_array_dequantizes_as_torch():
    t = torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.5, 2.0]), 0.25, 3, torch.quint8)
    q = core.QuantizedArray(t.int_repr().numpy(), "torch.quint8", 0.25, 3)
    np.testing.assert_array_equal(q.dequantize(), t.dequantize().numpy())
    # By hand: (values - zero_point) * scale.
    np.testing.assert_array_equal(q.dequantize(), (q.values.astype(np.float32) - 3) * 0.25)


# ---- bad input ------------------------------------------------------------------

def test_corrupt_bytes_and_missing_files_are_model_file_errors(tmp_path):
    data = core.Model.load(RESIDUAL).to_bytes()
    with pytest.raises(ModelFileError):
        core.Model.from_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError):
        core.Model.from_bytes(b"\xff\xfe not a model")
    with pytest.raises(ModelFileError, match="nothing_here"):
        core.Model.load(tmp_path / "nothing_here.fsl")


def test_wrong_inputs_are_clear_errors():
    model = core.Model.load(RESIDUAL)
    x = samples(1)[0]
    with pytest.raises(core.EngineError, match=r"run: 2 inputs for a model with 1 placeholder \(x\)"):
        core.run(model, [x, x])
    with pytest.raises(core.EngineError, match=r"input 0 \(x\).*float64"):
        core.run(model, [x.astype(np.float64)])
    with pytest.raises(core.EngineError, match="conv") as error:
        core.run(model, [np.zeros((1, 3, 8, 8), np.float32)])  # 3 channels, the conv has 4
    assert isinstance(error.value, FuselageError) and error.value.code == "INVALID_ARGUMENT"
    with pytest.raises(core.EngineError, match=r"sample 1: 2 inputs"):
        core.calibrate(model, [x, (x, x)])


def test_bad_backends_and_failed_passes_leave_the_model_unchanged():
    model = core.Model.load(RESIDUAL)
    before = model.to_bytes()
    with pytest.raises(core.EngineError) as error:
        core.fuse(model, "no_such_backend")
    assert error.value.code == "NOT_FOUND"
    with pytest.raises(core.EngineError, match="extends backend 'qnnpack'"):
        core.fuse(model, "fbgemm", config_text=read(CONFIG, "r"))
    with pytest.raises(core.EngineError, match="nothing to lower"):
        core.lower(model)  # a float model
    with pytest.raises(core.EngineError, match="prepared"):
        core.convert(model)  # not prepared
    assert model.to_bytes() == before
    with pytest.raises(core.EngineError, match="qconfig_mapping_text"):
        core.prepare(model, "qnnpack", qconfig_mapping_text="global { activation { kind: 7 } }")
    assert model.to_bytes() == before


def test_missing_extension_says_how_to_build_it(tmp_path):
    # A copy of the package without the .so: import fuselage works, _core says what to run.
    package = tmp_path / "fuselage"
    shutil.copytree(os.path.join(REPO, "python", "fuselage"), package,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    code = ("import fuselage\nassert callable(fuselage.export)\n"
            "try:\n    fuselage._core\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "bash tools/demo.sh" in out.stdout


def test_inputs_are_read_not_written_whatever_their_layout():
    # Contiguous inputs are read in place (no copy), others made contiguous; either way the
    # caller's arrays keep their values, and a transposed view gives the same outputs as
    # its contiguous copy.
    model = core.Model.load(RESIDUAL)
    x = samples(1, seed=3)[0]
    kept = x.copy()
    [y] = core.run(model, [x])
    np.testing.assert_array_equal(x, kept)
    view = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(core.run(model, [view])[0], y)
    misaligned = np.frombuffer(b"\0" * 4 + x.tobytes(), np.float32, offset=4).reshape(x.shape)
    np.testing.assert_array_equal(core.run(model, [misaligned])[0], y)
    core.prepare(model, "qnnpack")
    core.calibrate(model, [x, torch.from_numpy(x)])
    np.testing.assert_array_equal(x, kept)


class Quantizes(torch.nn.Module):
    def forward(self, x):
        return torch.quantize_per_tensor(x, 0.1, 3, torch.quint8)


def test_quantized_outputs_are_quantized_arrays_equal_to_torch():
    x = torch.tensor([[-0.5, 0.0, 0.26, 1.0, 30.0]])
    model = core.from_torch(torch.fx.symbolic_trace(Quantizes()), (x,))
    [q] = core.run(model, [x])
    expected = torch.quantize_per_tensor(x, 0.1, 3, torch.quint8)
    assert isinstance(q, core.QuantizedArray) and q.dtype == "torch.quint8"
    assert q.scale == pytest.approx(0.1) and q.zero_point == 3
    np.testing.assert_array_equal(q.values, expected.int_repr().numpy())
    # A quantized torch tensor goes in as one, through its integers and qparams.
    back = core.QuantizedArray(q.values, q.dtype, q.scale, q.zero_point)
    np.testing.assert_array_equal(back.dequantize(), expected.dequantize().numpy())


def test_from_torch_and_to_torch_in_memory(small_residual):
    gm = torch.fx.symbolic_trace(small_residual)
    x = torch.randn(1, 3, 8, 8)
    model = core.from_torch(gm, (x,))
    back = core.to_torch(model)
    with torch.no_grad():
        torch.testing.assert_close(back(x), gm(x))
        np.testing.assert_allclose(core.run(model, x)[0], gm(x).numpy(), rtol=1e-4, atol=1e-5)


def test_runs_on_several_threads_at_once_agree():
    # run releases the GIL and reads the model under a shared lock: threads run at once.
    from concurrent.futures import ThreadPoolExecutor

    model = core.Model.load(RESIDUAL)
    inputs = samples(8, seed=11)
    expected = [core.run(model, [x], threads=1)[0] for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: core.run(model, [x], threads=1)[0], inputs))
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_pixel_shuffle_modules_and_functionals_run_as_in_pytorch(tmp_path):
    # PyTorch 2's backend configs name them; the exported model runs as PyTorch runs it.
    class Shuffles(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.PixelShuffle(2)
            self.down = torch.nn.PixelUnshuffle(3)

        def forward(self, x):
            y = self.down(self.up(x))
            return torch.nn.functional.pixel_unshuffle(
                torch.nn.functional.pixel_shuffle(y, 3), 2)

    gm = torch.fx.symbolic_trace(Shuffles())
    x = torch.randn(2, 36, 3, 6)
    path = tmp_path / "shuffle.fsl"
    fuselage.export(gm, (x,), str(path))
    [y] = core.run(core.Model.load(path), [x.numpy()])
    np.testing.assert_array_equal(y, gm(x).numpy())
    # A pure rearrangement: it can be checked against the input too.
    assert sorted(y.ravel().tolist()) == sorted(x.numpy().ravel().tolist())


def test_narrow_runs_as_in_pytorch_and_refuses_a_range_past_the_end(tmp_path):
    class Narrows(torch.nn.Module):
        def forward(self, x):
            return torch.narrow(x, 1, -3, 2), x.narrow(-1, 1, 3)

    gm = torch.fx.symbolic_trace(Narrows())
    x = torch.arange(2 * 5 * 4, dtype=torch.float32).reshape(2, 5, 4)
    path = tmp_path / "narrow.fsl"
    fuselage.export(gm, (x,), str(path))
    model = core.Model.load(path)
    got = core.run(model, [x.numpy()])
    want = gm(x)
    assert len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
    # x[:, 2:4] and x[..., 1:4], by hand.
    np.testing.assert_array_equal(got[0], x.numpy()[:, 2:4])
    with pytest.raises(FuselageError, match="narrow: start 1 \\+ length 3 exceeds dim 2 of size 3"):
        core.run(model, [np.ascontiguousarray(x.numpy()[..., :3])])
