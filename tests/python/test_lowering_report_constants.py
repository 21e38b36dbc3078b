"""The lowering report's constant folding counts (constants_quantized,
folded_tensors_removed) as `fuselage quantize --json` writes them and as the extension
returns them, on a model whose weights reach functional ops through get_attr.

Independent expectation, by hand from the model's code: two F.linear calls read their own
weight parameters, so lowering quantizes two constant weights in advance (PyTorch's
fold_weight) and the two float weights, read by nothing afterwards, leave the module
tree; the biases stay (the quantized linear reads them in float)."""
import torch
import torch.nn.functional as F

import fuselage
from test_lowering_report_fields import quantize_json_lower_stage


class TwoFunctionalLinears(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(8, 4))
        self.b1 = torch.nn.Parameter(torch.randn(8))
        self.w2 = torch.nn.Parameter(torch.randn(3, 8))
        self.b2 = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return F.linear(torch.relu(F.linear(x, self.w1, self.b1)), self.w2, self.b2)


def test_json_and_binding_count_the_folded_constant_weights(cli, tmp_path):
    torch.manual_seed(0)
    model = TwoFunctionalLinears().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [torch.randn(2, 4, generator=g) for _ in range(2)]
    lower = quantize_json_lower_stage(cli, tmp_path, model, calibration[0], calibration)
    assert lower["constants_quantized"] == 2, lower
    assert lower["folded_tensors_removed"] == 2, lower

    core_model = fuselage._core.Model.load(str(tmp_path / "f.fsl"))
    report = fuselage._core.quantize(core_model, [b.numpy() for b in calibration], "qnnpack")
    assert report.lowering.constants_quantized == 2
    assert report.lowering.folded_tensors_removed == 2
    assert "constants_quantized=2" in repr(report.lowering)
