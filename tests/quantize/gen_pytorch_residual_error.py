"""PyTorch 2's own quantization error on the residual example, the figure the
end-to-end numerics test (tests/quantize/quantize_numerics_test.cc) holds fuselage to.

Run from the repo root with the PyTorch 2 environment's interpreter:

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) \
        tests/quantize/gen_pytorch_residual_error.py

It rebuilds tools/examples/residual.textproto (the built-in residual example, seed 0) as a
torch.fx.GraphModule with python/fuselage, draws seeded calibration and test inputs and
writes them as .npy (so fuselage calibrates and tests on exactly the same tensors), then
quantizes the model with PyTorch's FX flow as a PyTorch user would: prepare_fx with
get_default_qconfig_mapping("qnnpack") (the qconfigs fuselage's flow uses too), the same
calibration inputs, convert_fx, on the qnnpack engine. It records the largest and the
mean |quantized - float| over the test inputs in testdata/pytorch_residual_error.txt.
"""

import os
import sys

import numpy as np
import torch
from google.protobuf import text_format
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import fuselage  # noqa: E402
from fuselage._proto import model_pb2  # noqa: E402

SEED = 0
CALIBRATION_SAMPLES = 8
SHAPE = (1, 4, 8, 8)
TEST_SHAPE = (16, 4, 8, 8)


def main():
    with open(os.path.join(ROOT, "tools/examples/residual.textproto")) as f:
        model = text_format.Parse(f.read(), model_pb2().Model())
    float_model = fuselage.from_proto(model).eval()

    rng = np.random.RandomState(SEED)
    calibration = [rng.uniform(-1, 1, SHAPE).astype(np.float32)
                   for _ in range(CALIBRATION_SAMPLES)]
    test_input = rng.uniform(-1, 1, TEST_SHAPE).astype(np.float32)
    out_dir = os.path.join(HERE, "testdata")
    os.makedirs(out_dir, exist_ok=True)
    for i, x in enumerate(calibration):
        np.save(os.path.join(out_dir, f"residual_calibration_{i}.npy"), x)
    np.save(os.path.join(out_dir, "residual_test_input.npy"), test_input)

    torch.backends.quantized.engine = "qnnpack"
    qconfig_mapping = get_default_qconfig_mapping("qnnpack")
    example = (torch.from_numpy(calibration[0]),)
    prepared = prepare_fx(float_model, qconfig_mapping, example)
    with torch.no_grad():
        for x in calibration:
            prepared(torch.from_numpy(x))
    quantized = convert_fx(prepared)

    with torch.no_grad():
        x = torch.from_numpy(test_input)
        y_float = float_model(x)
        y_quantized = quantized(x)
    error = (y_quantized - y_float).abs()
    with open(os.path.join(out_dir, "pytorch_residual_error.txt"), "w") as f:
        f.write(f"# {torch.__version__}, engine qnnpack, qconfig mapping qnnpack, "
                f"{CALIBRATION_SAMPLES} calibration inputs {list(SHAPE)}, test input "
                f"{list(TEST_SHAPE)}, seed {SEED}\n")
        f.write(f"max_abs_error {error.max().item():.9g}\n")
        f.write(f"mean_abs_error {error.mean().item():.9g}\n")
        f.write(f"max_abs_output {y_float.abs().max().item():.9g}\n")
    print(quantized.code)
    print(open(os.path.join(out_dir, "pytorch_residual_error.txt")).read())


if __name__ == "__main__":
    main()
