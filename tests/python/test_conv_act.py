"""fuselage.nn.ConvAct2d, the to_torch class of nni.ConvAct2d (conv then relu | relu6 |
hardswish, the batch norm folded): a model fused by fuselage with the
conv_bn_act_optional example comes back to PyTorch as ConvAct2d modules whose output equals
PyTorch's unfused model and fuselage's own float kernel (<= 1e-5)."""

import os

import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import REPO

import fuselage
from fuselage import ModuleError
from fuselage._proto import model_pb2

CONFIG = os.path.join(REPO, "backend_configs", "examples", "conv_bn_act_optional.textproto")


class Blocks(nn.Module):
    """conv-bn-relu6, conv-hardswish (no bn), conv-bn-relu: each one ConvAct2d."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1, self.act1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU6()
        self.conv2, self.act2 = nn.Conv2d(4, 4, 1), nn.Hardswish()
        self.conv3, self.bn3, self.act3 = nn.Conv2d(4, 2, 3), nn.BatchNorm2d(2), nn.ReLU()

    def forward(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.conv2(x))
        return self.act3(self.bn3(self.conv3(x)))


def blocks():
    torch.manual_seed(1)
    model = Blocks().eval()
    with torch.no_grad():
        for bn in (model.bn1, model.bn3):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.3, 0.3)
    return model


def test_fused_conv_act_comes_back_as_conv_act2d_and_matches():
    model = blocks()
    x = torch.randn(2, 3, 10, 10) * 3  # reaches relu6's and hardswish's upper ranges
    gm = torch.fx.symbolic_trace(model)
    core_model = fuselage._core.Model.from_bytes(fuselage.to_proto(gm, (x,)).SerializeToString())
    with open(CONFIG) as f:
        report = fuselage._core.fuse(core_model, config_text=f.read())
    assert report.fused == 3

    back = fuselage.from_proto(model_pb2().Model.FromString(core_model.to_bytes()))
    fused = [m for m in back.modules() if isinstance(m, fuselage.nn.ConvAct2d)]
    assert [type(m[1]) for m in fused] == [nn.ReLU6, nn.Hardswish, nn.ReLU]
    with torch.no_grad():
        expected = model(x)
        got = back(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    [ours] = fuselage._core.run(core_model, [x.numpy()])
    np.testing.assert_allclose(got.numpy(), ours, rtol=1e-5, atol=1e-5)
    # And it exports again (ConvAct2d has a fuselage name) to a model that runs the same.
    again = fuselage._core.Model.from_bytes(fuselage.to_proto(back, (x,)).SerializeToString())
    [rerun] = fuselage._core.run(again, [x.numpy()])
    np.testing.assert_array_equal(rerun, ours)


def test_conv_act2d_refuses_other_parts():
    with pytest.raises(ModuleError, match="child 1 must be an nn.ReLU, nn.ReLU6 or nn.Hardswish; got Sigmoid"):
        fuselage.nn.ConvAct2d(nn.Conv2d(1, 1, 1), nn.Sigmoid())
    with pytest.raises(ModuleError, match="ConvAct2d: child 0 must be an nn.Conv2d"):
        fuselage.nn.ConvAct2d(nn.Linear(1, 1), nn.ReLU())
    m = fuselage.nn.ConvAct2d(nn.Conv2d(1, 1, 1), nn.ReLU6())
    x = torch.randn(1, 1, 3, 3) * 10
    torch.testing.assert_close(m(x), torch.clamp(m[0](x), 0, 6))
