"""Writes the seeds of pass_pipeline_fuzz that reach every pass (see tests/fuzz/README.md).

A seed is one byte followed by a binary model file. Byte 0 is the index of a built-in
backend config in BuiltinBackendConfigNames (0 native, 1 fbgemm, 2 qnnpack, 3 x86,
4 onednn), plus 5 for the global MinMax qconfig mapping instead of the backend's default. Run from the
workspace root with PyTorch 1.13:

    PYTHONPATH=python /usr/bin/python3 tests/fuzz/make_pass_pipeline_seeds.py \
        tests/fuzz/corpus/pass_pipeline_fuzz
"""
import sys

import torch
from google.protobuf import text_format
sys.path.insert(0, "python")
import fuselage
from fuselage.proto import model_pb2

out = sys.argv[1]
names = ["native", "fbgemm", "qnnpack", "x86", "onednn"]

def write(name, config_index, data):
    with open(f"{out}/config{config_index}-{name}.pb", "wb") as f:
        f.write(bytes([config_index]) + data)

# The residual example, with and without an input shape (calibrated / uncalibrated convert).
m = model_pb2.Model()
text_format.Parse(open("tools/examples/residual.textproto").read(), m)
write("residual-unshaped", 2, m.SerializeToString())
for node in m.graph.nodes:
    if node.name == "x":
        entry = node.meta.add()
        entry.name = "shape"
        for d in [1, 4, 8, 8]:
            entry.value.list.items.add().int_value = d
data = m.SerializeToString()
write("residual", 2, data)
write("residual", 4, data)
write("residual", 7, data)  # qnnpack, MinMax mapping
write("residual", 9, data)  # onednn, MinMax mapping

class ConvBnReluLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.relu = torch.nn.ReLU()
        self.flatten = torch.nn.Flatten()
        self.linear = torch.nn.Linear(4 * 4 * 4, 5)
    def forward(self, x):
        return self.linear(self.flatten(self.relu(self.bn(self.conv(x)))))

torch.manual_seed(0)
model = ConvBnReluLinear().eval()
with torch.no_grad():
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 1.5)
data = fuselage.to_proto(model, (torch.randn(1, 3, 6, 6),)).SerializeToString()
write("conv_bn_relu_linear", 0, data)
write("conv_bn_relu_linear", 1, data)
write("conv_bn_relu_linear", 3, data)
write("conv_bn_relu_linear", 6, data)  # fbgemm, MinMax mapping
