"""Issue 38 item 6: the dynamic int8 forward of a transformer encoder and an LSTM at one
thread, fuselage's runtime against PyTorch's dynamic quantized model.

    PYTHONPATH=python $(bash tools/pytorch2_env.sh | tail -n 1) bench/dynamic_int8_forward.py \
        [--repeats 20]

The models are tests/python/test_dynamic_models.py's at a larger size: a 2-layer
transformer encoder classifier (d_model 256, 4 heads, feed-forward 1024; input 1 x 64 x
256; its Linears dynamic int8) and a 2-layer LSTM language model (vocabulary 10000,
embedding 256 weight-only, hidden 512, decoder dynamic; 1 x 35 tokens). Each goes through
fuselage.quantize_fx (default_dynamic_qconfig, x86 backend config, PyTorch on its x86
engine) and runs: in PyTorch (the converted GraphModule, PyTorch's own nnqd kernels) and
on fuselage's runtime (onednn arithmetic). Median wall ms of `--repeats` runs after two
warm-ups, both on one thread.
"""

import argparse
import os
import sys
import warnings

import torch
import torch.nn as nn
from torch.ao.quantization import (QConfigMapping, default_dynamic_qconfig,
                                   float_qparams_weight_only_qconfig)
from torch.ao.quantization.backend_config import get_native_backend_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from conftest import x86_engine  # noqa: E402
from test_dynamic_models import EncoderClassifier, LstmLanguageModel  # noqa: E402

from fuselage import _core  # noqa: E402
from timing import median_ms  # noqa: E402
from fuselage.quantize_fx import convert_fx, prepare_fx  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.backends.quantized.engine = x86_engine()
    torch.manual_seed(0)
    cases = [
        ("transformer encoder", EncoderClassifier(256, 4, 1024, 10).eval(),
         torch.randn(1, 64, 256),
         QConfigMapping().set_object_type(nn.Linear, default_dynamic_qconfig)),
        ("LSTM language model", LstmLanguageModel(10000, 256, 512).eval(),
         torch.randint(0, 10000, (1, 35)),
         QConfigMapping()
         .set_object_type(nn.Embedding, float_qparams_weight_only_qconfig)
         .set_object_type(nn.LSTM, default_dynamic_qconfig)
         .set_object_type(nn.Linear, default_dynamic_qconfig)),
    ]
    print(f"engine {torch.backends.quantized.engine}, torch {torch.__version__}, 1 thread, "
          f"median of {args.repeats}")
    print("| model | PyTorch nnqd ms | fuselage runtime ms | ratio |")
    print("| --- | --- | --- | --- |")
    for name, model, x, mapping in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepared = prepare_fx(model, mapping, (x,), backend_config=get_native_backend_config())
            prepared(x)
            converted = convert_fx(prepared, backend_config=get_native_backend_config())
        model_file = _core.from_torch(converted)
        feed = [x.numpy()]
        with torch.no_grad():
            torch_ms = median_ms(lambda: converted(x), args.repeats)
        fuselage_ms = median_ms(lambda: _core.run(model_file, feed, engine="onednn", threads=1),
                                args.repeats)
        print(f"| {name} | {torch_ms:.2f} | {fuselage_ms:.2f} | {fuselage_ms / torch_ms:.2f} |")


if __name__ == "__main__":
    main()
