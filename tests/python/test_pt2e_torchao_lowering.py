"""torchao's own lower_pt2e_quantized_to_x86 on fuselage's convert_pt2e output, in a fresh
process that never imports X86InductorQuantizer: torchao's lowering needs the weight-prepack
passes that only that module's import registers, so without fuselage registering them the
model came back with no int8 op, silently. The expectation is independent: the same
reference lowered by fuselage's own onednn lowering (fuselage.pt2e.lower_pt2e_quantized_to_x86),
which the conformance run checks against torchao's on torchao's references."""

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
from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))

torch.manual_seed(0)
model = Block().eval()
model.bn.running_mean.uniform_(-0.2, 0.2)
model.bn.running_var.uniform_(0.5, 1.5)
x = torch.randn(1, 3, 16, 16)
assert "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer" not in sys.modules
prepared = fuselage.pt2e.prepare_pt2e(torch.export.export(model, (x,)).module())
for _ in range(4):
    prepared(torch.randn(1, 3, 16, 16))
reference = fuselage.pt2e.convert_pt2e(prepared)
theirs = lower_pt2e_quantized_to_x86(reference, (x,))
ours = fuselage.pt2e.lower_pt2e_quantized_to_x86(reference, (x,))
def onednn(gm):
    return sorted(str(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and "onednn" in str(n.target))
with torch.no_grad():
    diff = (theirs(x) - ours(x)).abs().max().item()
    scale = ours(x).abs().max().item()
import json
print(json.dumps([onednn(theirs), onednn(ours), diff, scale]))
"""


def test_torchao_lowering_lowers_fuselage_reference_in_a_fresh_process():
    script = _SCRIPT.format(python=os.path.join(REPO, "python"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs, ours, diff, scale = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs, "torchao's lowering left no onednn op"
    assert theirs == ours
    assert diff <= 1e-5 * max(scale, 1e-6)
