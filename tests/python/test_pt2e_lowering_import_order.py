"""convert_pt2e does not import X86InductorQuantizer's module (about 1 s, 5 s with
Inductor's own) unless torchao's lowering module is there to need the weight-prepack
passes it registers; when torchao's lowering is imported only after convert_pt2e, they are
registered then, so torchao's lower_pt2e_quantized_to_x86 still lowers fuselage's
reference (test_pt2e_torchao_lowering checks the other order). In a fresh process; the
expectation is fuselage's own onednn lowering of the same reference, which the
conformance run checks against torchao's."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("torchao.quantization.pt2e.lowering")

_SCRIPT = """
import sys
sys.path.insert(0, {python!r})
import torch, torch.nn as nn
import fuselage.pt2e

X86 = "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer"
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3)).eval()
model[1].running_var.uniform_(0.5, 1.5)
x = torch.randn(1, 3, 16, 16)
prepared = fuselage.pt2e.prepare_pt2e(torch.export.export(model, (x,)).module())
prepared(x)
reference = fuselage.pt2e.convert_pt2e(prepared)
imported_by_convert = X86 in sys.modules
from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
imported_with_lowering = X86 in sys.modules
theirs = lower_pt2e_quantized_to_x86(reference, (x,))
ours = fuselage.pt2e.lower_pt2e_quantized_to_x86(reference, (x,))
def onednn(gm):
    return sorted(str(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and "onednn" in str(n.target))
with torch.no_grad():
    diff = (theirs(x) - ours(x)).abs().max().item()
    scale = ours(x).abs().max().item()
print(json.dumps([imported_by_convert, imported_with_lowering, onednn(theirs), onednn(ours),
                  diff, scale]))
"""


def test_torchao_lowering_imported_after_convert_still_lowers_fuselage_reference():
    script = "import json\n" + _SCRIPT.format(python=os.path.join(REPO, "python"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    by_convert, with_lowering, theirs, ours, diff, scale = json.loads(
        done.stdout.strip().splitlines()[-1])
    assert not by_convert, "convert_pt2e imported X86InductorQuantizer's module"
    assert with_lowering
    assert theirs, "torchao's lowering left no onednn op"
    assert theirs == ours
    assert diff <= 1e-5 * max(scale, 1e-6)
