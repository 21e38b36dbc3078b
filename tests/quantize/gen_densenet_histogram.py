"""Writes testdata/densenet121_shared_histogram.npz: the state of the HistogramObserver
that PyTorch's prepare_fx (x86 default mapping) shares across densenet121's first dense
block (its stem conv, pool and every concatenated layer output), after calibration on two
seeded batches. Its range search compares bin masses with torch.sum's float32 total at a
threshold the correctly rounded total falls on the other side of, so it tells apart an
engine that sums as torch.sum does (tests/python/test_quantize_fx_as_pytorch.py).

    $(bash tools/pytorch2_env.sh | tail -n 1) tests/quantize/gen_densenet_histogram.py
"""
import copy
import os
import sys

import numpy as np
import torch
import torchvision
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import prepare_fx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from conftest import randomize_batch_norm  # noqa: E402

torch.manual_seed(0)
model = randomize_batch_norm(torchvision.models.densenet121(weights=None).eval())
batches = [torch.randn(2, 3, 64, 64) for _ in range(2)]
prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"), (batches[0],))
with torch.no_grad():
    for batch in batches:
        prepared(batch)
observer = prepared.get_submodule("activation_post_process_1")  # conv0's output, shared
np.savez(os.path.join(os.path.dirname(__file__), "testdata", "densenet121_shared_histogram.npz"),
         histogram=observer.histogram.numpy(), min_val=observer.min_val.numpy(),
         max_val=observer.max_val.numpy())
