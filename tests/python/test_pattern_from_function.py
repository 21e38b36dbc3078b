"""fuselage.pattern_from_function (issue 21 item 6): Python functions traced by torch.fx into
fuselage's pattern syntax. The expected strings are written by hand from pattern.h's
grammar; the end-to-end tests fuse a traced model through fuselage._core with an entry
built from the pattern text and compare with PyTorch's output of the unfused model. The
same file checks the config's `benefit` and the fuse report's overlaps (issue 21 item 5)
through _core.
"""

import operator

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuselage
from fuselage import PatternError
from fuselage._proto import model_pb2

P = fuselage.pattern_from_function


class ConvBnReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


def conv_bn_relu_model():
    torch.manual_seed(0)
    model = ConvBnReLU().eval()
    with torch.no_grad():  # running statistics that make folding the batch norm matter
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.3, 0.3)
    return model


# ---- the text -----------------------------------------------------------------------

def test_silu_written_out_shares_its_input():
    assert P(lambda x: x * torch.sigmoid(x), (torch.randn(4),)) == "(mul, $x, (torch.sigmoid, $x))"


def test_an_input_used_twice_by_one_op_is_one_named_wildcard():
    assert P(lambda x: x * x) == "(mul, $x, $x)"


def test_module_function_gives_type_leaves():
    assert P(ConvBnReLU(), (torch.randn(1, 3, 8, 8),)) == "(ReLU, (BatchNorm2d, Conv2d))"


def test_every_spelling_of_add_mul_relu_is_the_generic_leaf():
    assert P(lambda x, y: F.relu(x + y)) == "(relu, add)"
    assert P(lambda x, y: torch.relu(torch.mul(x, y))) == "(relu, mul)"
    assert P(lambda x, y: operator.add(x, y).relu()) == "(relu, add)"


def test_an_op_with_an_op_arg_writes_single_use_inputs_as_match_all():
    # The add reads an op and an input: the input is a MatchAllNode position.
    assert P(lambda x, y: F.relu(torch.sigmoid(x) + y)) == "(relu, (add, torch.sigmoid, MatchAllNode))"


def test_constants_become_predicates_and_non_default_kwargs_are_pinned():
    assert P(lambda x: torch.add(x, 3, alpha=2)) == "(add{alpha=2}[arg1 == 3], MatchAllNode, MatchAllNode)"
    assert P(lambda x: torch.flatten(torch.sigmoid(x), 1)) == \
        "(torch.flatten[arg1 == 1], torch.sigmoid, MatchAllNode)"
    # F.relu's traced inplace=False is its default: not written.
    assert P(lambda x: F.relu(torch.sigmoid(x))) == "(relu, torch.sigmoid)"
    assert P(lambda x: F.hardtanh(x, 0.0, 6.0)) == "(F.hardtanh{min_val=0.0, max_val=6.0}, MatchAllNode)"


def test_methods_other_than_add_mul_relu_are_method_leaves():
    assert P(lambda x: x.sigmoid().view(-1)) == "(method:view[arg1 == -1], method:sigmoid, MatchAllNode)"


def test_patterns_parse_in_the_matcher():
    # Every single-use pattern above is accepted by the C++ parser (an entry with no fuser:
    # the loader parses its pattern); a text it refuses fails the same route.
    texts = [P(ConvBnReLU(), (torch.randn(1, 3, 8, 8),)),
             P(lambda x, y: F.relu(torch.sigmoid(x) + y)), P(lambda x: torch.add(x, 3, alpha=2)),
             P(lambda x: x.sigmoid().view(-1)), P(lambda x: F.hardtanh(x, 0.0, 6.0))]
    for text in texts:
        model = fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model()))
        config = f'name: "parse"\npattern {{\n  pattern: "{text}"\n}}\n'
        assert fuselage._core.fuse(model, config_text=config).fused == 0, text
    with pytest.raises(fuselage.FuselageError, match="nosuchleaf"):
        fuselage._core.fuse(fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model())),
                            config_text='name: "parse"\npattern {\n  pattern: "(nosuchleaf, relu)"\n}\n')


# ---- errors -------------------------------------------------------------------------

def test_several_outputs_are_refused_naming_the_node():
    with pytest.raises(PatternError, match=r"node 'output': the function returns 2 values"):
        P(lambda x: (x.relu(), x.sigmoid()))


def test_an_inner_node_used_twice_is_refused():
    def fn(x):
        s = torch.sigmoid(x)
        return s * s
    with pytest.raises(PatternError, match=r"node 'sigmoid': used 2 times"):
        P(fn)


def test_a_parameter_read_is_refused():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w
    with pytest.raises(PatternError, match=r"node 'w': reads attribute 'w'"):
        P(Scale())


def test_returning_an_input_and_an_unnamed_module_are_refused():
    with pytest.raises(PatternError, match=r"node 'x': the function returns its input"):
        P(lambda x: x)

    class Mine(nn.Module):
        def forward(self, x):
            return x + 1

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.mine = Mine()

        def forward(self, x):
            return torch.relu(self.mine(x))
    # symbolic_trace inlines a user's module unless it is a leaf; make it one.
    class LeafTracer(torch.fx.Tracer):
        def is_leaf_module(self, m, name):
            return isinstance(m, Mine) or super().is_leaf_module(m, name)
    outer = Outer()
    gm = torch.fx.GraphModule(outer, LeafTracer().trace(outer))
    with pytest.raises(PatternError, match=r"node 'mine': module 'mine' is a .*Mine, which has no fuselage name"):
        P(gm)


def test_a_function_that_does_not_run_on_its_inputs_is_refused():
    with pytest.raises(PatternError, match="does not run on its example inputs"):
        P(lambda x: x @ x, (torch.randn(2, 3),))


# ---- end to end through _core -------------------------------------------------------

def traced_bytes(model):
    gm = torch.fx.symbolic_trace(model)
    return fuselage.to_proto(gm, (torch.randn(1, 3, 8, 8),)).SerializeToString()


def entry_config(pattern, fused, name="from_function", benefit=None, extra=""):
    lines = [f'name: "test_{name}"', "pattern {", f'  name: "{name}"', f'  pattern: "{pattern}"',
             "  fuser: FOLD_BN_THEN_WRAP", f'  fused_module: "{fused}"']
    if benefit is not None:
        lines.append(f"  benefit: {benefit}")
    lines.append("}")
    return "\n".join(lines) + "\n" + extra


def test_conv_bn_relu_function_fuses_end_to_end():
    model = conv_bn_relu_model()
    text = P(ConvBnReLU(), (torch.randn(1, 3, 8, 8),))
    core_model = fuselage._core.Model.from_bytes(traced_bytes(model))
    report = fuselage._core.fuse(core_model, config_text=entry_config(text, "ConvReLU2d"))
    assert report.fused == 1 and report.per_pattern == [("from_function", 1)]
    assert report.nodes_before == 5 and report.nodes_after == 3  # x, fused, output

    fused = fuselage.from_proto(model_pb2().Model.FromString(core_model.to_bytes()))
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
        got = fused(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # And fuselage's interpreter on the fused model agrees with PyTorch too.
    out = fuselage._core.run(core_model, [x.numpy()])
    np.testing.assert_allclose(np.asarray(out[0]), expected.numpy(), rtol=1e-5, atol=1e-5)


BN_RELU = """pattern {
  name: "bn_relu"
  pattern: "(ReLU, BatchNorm2d)"
  fuser: WRAP_IN_SEQUENCE
  fused_module: "BNReLU2d"
  %s
}
"""


def test_benefit_flips_which_entry_fuses_and_overlaps_are_reported():
    text = P(ConvBnReLU(), (torch.randn(1, 3, 8, 8),))
    # Default order: the longer conv-bn-relu wins at the relu; bn_relu loses bn and relu.
    core_model = fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model()))
    config = entry_config(text, "ConvReLU2d", extra=BN_RELU % "")
    report = fuselage._core.fuse(core_model, config_text=config, report_overlaps=True)
    assert report.per_pattern == [("from_function", 1)]
    assert len(report.overlaps) == 1
    o = report.overlaps[0]
    assert (o.winner, o.winner_at, o.loser, o.loser_at, o.nodes) == \
        ("from_function", "relu", "bn_relu", "relu", ["relu", "bn"])
    assert str(report).endswith("\n  overlap: from_function at relu took relu, bn from bn_relu at relu")

    # benefit 1 on bn_relu: it fuses instead, and the conv stays on its own.
    core_model = fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model()))
    config = entry_config(text, "ConvReLU2d", extra=BN_RELU % "benefit: 1")
    report = fuselage._core.fuse(core_model, config_text=config, report_overlaps=True)
    assert report.per_pattern == [("bn_relu", 1)]
    assert report.nodes_after == 4  # x, conv, the fused bn-relu, output
    assert [(o.winner, o.loser) for o in report.overlaps] == [("bn_relu", "from_function")]

    # Without the option there is no overlap list and the text is the one line.
    core_model = fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model()))
    report = fuselage._core.fuse(core_model, config_text=entry_config(text, "ConvReLU2d",
                                                                      extra=BN_RELU % ""))
    assert report.overlaps == [] and "\n" not in str(report)


def test_benefit_without_a_fuser_is_refused():
    config = ('name: "b"\npattern {\n  pattern: "(ReLU, BatchNorm2d)"\n  benefit: 2\n}\n')
    core_model = fuselage._core.Model.from_bytes(traced_bytes(conv_bn_relu_model()))
    with pytest.raises(fuselage.FuselageError, match="benefit given without a fuser"):
        fuselage._core.fuse(core_model, config_text=config)
