"""Issue 21 item 4 through the CLI: backend_configs/examples/conv_add_relu_new_type.textproto
declares user.ConvBnAddReLU2d (no C++); `fuselage quantize --config=` fuses the residual
example into it, quantizes it and lowers it to nniq.ConvAddReLU2d with both inputs
quantized. The result must equal, byte for byte, the same model through the built-in
nni.ConvAddReLU2d path, and be close to the float model (SQNR)."""

import os
import subprocess

import numpy as np

from conftest import REPO

from fuselage import _proto

EXAMPLE = os.path.join(REPO, "backend_configs", "examples", "conv_add_relu_new_type.textproto")
RESIDUAL = os.path.join(REPO, "tools", "examples", "residual.textproto")


def run(cmd, ok=True):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def builtin_equivalent(tmp_path):
    """The example with the built-in type and no declarations."""
    text = open(EXAMPLE).read()
    for block in ("fused_module_type {", "lowering_rule {"):
        start = text.index(block)
        end = text.index("\n}\n", start) + 3
        text = text[:start] + text[end:]
    path = tmp_path / "builtin.textproto"
    path.write_text(text.replace("user.ConvBnAddReLU2d", "nni.ConvAddReLU2d"))
    return path


def quantize(cli, config, out):
    run([cli, "quantize", RESIDUAL, "--backend=qnnpack", f"--config={config}", "--samples=8",
         "--seed=0", "--input-shape=1,4,8,8", "-o", out])


def interpret(cli, model, x, tmp_path):
    np.save(tmp_path / "x.npy", x)
    run([cli, "run", model, f"--input={tmp_path / 'x.npy'}", f"--output={tmp_path / 'y.npy'}"])
    return np.load(tmp_path / "y.npy")


def module_types(path):
    model = _proto.model_pb2().Model()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    found = {}

    def walk(module, prefix):
        found[prefix] = module.type
        for child in module.children:
            walk(child.module, f"{prefix}.{child.name}" if prefix else child.name)
    walk(model.root, "")
    return model, found


def test_declared_type_quantizes_like_the_builtin_one(cli, tmp_path):
    declared, builtin = tmp_path / "declared.fsl", tmp_path / "builtin.fsl"
    quantize(cli, EXAMPLE, declared)
    quantize(cli, builtin_equivalent(tmp_path), builtin)

    model, types = module_types(declared)
    assert "nniq.ConvAddReLU2d" in types.values(), types
    assert "user.ConvBnAddReLU2d" not in types.values(), types
    # Both inputs of the native op arrive quantized: neither is a dequantize.
    pb = _proto.model_pb2()
    producers = {n.name: n for n in model.graph.nodes}
    native = [n for n in model.graph.nodes
              if n.op == pb.CALL_MODULE and types.get(n.target) == "nniq.ConvAddReLU2d"]
    assert len(native) == 1
    inputs = [a.node for a in native[0].args]
    assert len(inputs) == 2
    for name in inputs:
        assert producers[name].target != "dequantize", name

    rng = np.random.default_rng(5)
    for i in range(3):
        x = rng.uniform(-1, 1, size=(1, 4, 8, 8)).astype(np.float32)
        got = interpret(cli, declared, x, tmp_path)
        same = interpret(cli, builtin, x, tmp_path)
        reference = interpret(cli, RESIDUAL, x, tmp_path)
        assert got.tobytes() == same.tobytes(), f"input {i}"
        sqnr = 10 * np.log10((reference ** 2).sum() / max(((got - reference) ** 2).sum(), 1e-30))
        assert sqnr >= 35.0, f"input {i}: SQNR {sqnr:.1f} dB"  # measured: 45.8 to 46.4


def test_fused_model_runs_without_its_config(cli, tmp_path):
    # The fused module carries the declaration's steps (issue 39): a process given no
    # config runs it, as one given the config does.
    fused = tmp_path / "fused.fsl"
    run([cli, "fuse", RESIDUAL, f"--config={EXAMPLE}", "-o", fused])
    _, types = module_types(fused)
    assert "user.ConvBnAddReLU2d" in types.values(), types
    x = np.random.default_rng(3).uniform(-1, 1, size=(1, 4, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run([cli, "run", fused, f"--input={tmp_path / 'x.npy'}", f"--output={tmp_path / 'bare.npy'}"])
    run([cli, "run", fused, f"--config={EXAMPLE}", f"--input={tmp_path / 'x.npy'}",
         f"--output={tmp_path / 'with.npy'}"])
    assert np.load(tmp_path / "bare.npy").tobytes() == np.load(tmp_path / "with.npy").tobytes()
