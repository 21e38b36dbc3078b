"""The engine recorded in a quantized model (runtime/quantized_engine.h, graph/NAMING.md):
fuselage._core.quantize records the backend config's engine (qnnpack config -> QNNPACK's
arithmetic, the others -> onednn's) and _core.run uses it unless `engine=` names one.

The expectation is the explicit engine's output on the same model (the arithmetic of
each engine is checked bit for bit against PyTorch's engines by
//tests/runtime/quantized:qnnpack_engine_test and register_test), and the record itself is
read from the saved model file with protobuf's own parser.
"""

import os

import numpy as np
import pytest

from conftest import REPO

import fuselage
from fuselage._proto import model_pb2

core = fuselage._core

RESIDUAL = os.path.join(REPO, "tools", "examples", "residual.textproto")


def samples(n, seed=0, shape=(1, 4, 8, 8)):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(n)]


def recorded_engine(model, tmp_path):
    path = tmp_path / "m.fsl"
    model.save(path)
    proto = model_pb2().Model()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    text = str(proto.root)
    if "quantized_engine" not in text:
        return None
    return "qnnpack" if '"qnnpack"' in text else "onednn" if '"onednn"' in text else None


def quantized(backend, **kwargs):
    model = core.Model.load(RESIDUAL)
    core.quantize(model, samples(4), backend, **kwargs)
    return model


def outputs(model, engine, inputs):
    return [core.run(model, [x], threads=1, engine=engine)[0] for x in inputs]


@pytest.mark.parametrize("backend,engine", [("qnnpack", "qnnpack"), ("onednn", "onednn"),
                                            ("x86", "onednn"), ("fbgemm", "onednn")])
def test_quantize_records_the_backends_engine_and_run_uses_it(backend, engine, tmp_path):
    model = quantized(backend)
    assert recorded_engine(model, tmp_path) == engine
    inputs = samples(300, seed=11)
    by_default = outputs(model, None, inputs)
    for got, want in zip(by_default, outputs(model, engine, inputs)):
        np.testing.assert_array_equal(got, want)


def test_an_explicit_engine_overrides_the_record(tmp_path):
    model = quantized("qnnpack", engine="onednn")
    assert recorded_engine(model, tmp_path) == "onednn"
    inputs = samples(300, seed=11)
    for got, want in zip(outputs(model, None, inputs), outputs(model, "onednn", inputs)):
        np.testing.assert_array_equal(got, want)


def test_the_engines_differ_on_a_qnnpack_model():
    # Otherwise the tests above could not tell the engines apart on this model. The
    # engines round apart only at requantization ties, a few outputs in thousands.
    model = quantized("qnnpack")
    inputs = samples(300, seed=11)
    differing = sum(int(np.count_nonzero(a != b)) for a, b in
                    zip(outputs(model, "qnnpack", inputs), outputs(model, "onednn", inputs)))
    assert differing > 0


def test_a_bad_engine_name_is_an_error():
    model = quantized("qnnpack")
    with pytest.raises(fuselage.FuselageError, match="engine is 'fbgemm'"):
        core.run(model, samples(1)[0], engine="fbgemm")
