"""prepare_custom_config with PyTorch's meaning (issue 41 item 4), where fuselage refused it:
non-traceable modules (kept as one call of the user's own module, never traced into: an
opaque module of the engine) and an output listed in output_quantized_idxs that no quantized
op produces (PyTorch inserts an observer there). Each test runs PyTorch's flow and
fuselage's on the same model and compares what the user sees."""

import copy

import pytest
import torch
import torch.ao.quantization.quantize_fx as torch_qfx
import torch.nn as nn
from torch.ao.quantization import MinMaxObserver, QConfigMapping, default_qconfig

import fuselage
import fuselage.quantize_fx as qfx
from fuselage import ModelFileError


class DataDependent(nn.Module):
    """A forward torch.fx cannot trace (control flow on a tensor's value)."""

    def forward(self, x):
        return x * 2 if bool(x.sum() > 0) else x - 1


class OtherDataDependent(DataDependent):
    pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 2, 1)
        self.by_name = DataDependent()
        self.by_class = OtherDataDependent()
        self.conv2 = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return self.conv2(self.by_class(self.by_name(self.conv1(x))))


NON_TRACEABLE = {"non_traceable_module_name": ["by_name"],
                 "non_traceable_module_class": [OtherDataDependent]}


def _call_modules(gm):
    return [(n.target, type(gm.get_submodule(n.target))) for n in gm.graph.nodes
            if n.op == "call_module"]


def _observed_inputs(gm):
    """For each call_module node that is not an observer, whether its input is observed."""
    def is_observer(node):
        return node.op == "call_module" and \
            isinstance(gm.get_submodule(node.target), MinMaxObserver)
    return [(n.target, is_observer(n.args[0])) for n in gm.graph.nodes
            if n.op == "call_module" and not is_observer(n)]


def test_non_traceable_modules_stay_one_call_and_are_observed_around_as_pytorchs():
    # Was: ConfigTranslationError naming non_traceable_module_name / _class.
    torch.manual_seed(0)
    model = Net().eval()
    example = torch.randn(1, 2, 3, 3)
    mapping = QConfigMapping().set_global(default_qconfig)
    batches = [torch.randn(1, 2, 3, 3) for _ in range(3)]
    results = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (example,),
                                          prepare_custom_config=dict(NON_TRACEABLE))
        structure = (_observed_inputs(prepared), [t for t in _call_modules(prepared)
                                                  if t[1] in (DataDependent,
                                                              OtherDataDependent)])
        with torch.no_grad():
            for x in batches:
                prepared(x)
        results.append((structure, quantize_fx.convert_fx(prepared)))
    (theirs_structure, theirs), (ours_structure, ours) = results
    assert ours_structure == theirs_structure
    assert ours_structure[1] == [("by_name", DataDependent),
                                 ("by_class", OtherDataDependent)]
    for x in (torch.randn(1, 2, 3, 3), -torch.ones(1, 2, 3, 3)):  # both branches
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


def test_prepare_qat_fx_leaves_non_traceable_modules_alone_as_pytorch():
    class Untraced(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x):
            return self.linear(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.by_class = Untraced()
            self.by_name = nn.Sequential(nn.Linear(2, 2))
            self.traced = nn.Linear(2, 2)

        def forward(self, x):
            return self.traced(self.by_name(self.by_class(x)))

    from torch.ao.quantization import get_default_qat_qconfig_mapping
    config = {"non_traceable_module_class": [Untraced],
              "non_traceable_module_name": ["by_name"]}
    types = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_qat_fx(
            Model().train(), get_default_qat_qconfig_mapping("qnnpack"),
            (torch.randn(2, 2),), prepare_custom_config=dict(config))
        types.append((type(prepared.by_class.linear), type(prepared.by_name[0]),
                      type(prepared.traced)))
    assert types[1] == types[0]
    assert types[1][:2] == (nn.Linear, nn.Linear) and types[1][2] is not nn.Linear


class ConvThenSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 1)

    def forward(self, x):
        return self.conv(x).sum(1)  # no quantized op produces the output


def test_an_output_in_output_quantized_idxs_is_observed_as_pytorch():
    # Was: ConfigTranslationError "the qconfig mapping quantizes no op producing it".
    # PyTorch 1.13 observes such an output (test_quant_output_always_observed); PyTorch
    # 2's prepare_fx leaves it float though it was declared quantized, so there the
    # expectation is the observer's own: the output quantized with the parameters a
    # MinMaxObserver gives the float model's outputs.
    torch.manual_seed(0)
    model = ConvThenSum().eval()
    mapping = QConfigMapping().set_global(default_qconfig)
    batches = [torch.randn(4, 1, 4, 4) for _ in range(3)]
    converted = {}
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (batches[0],),
                                          prepare_custom_config={"output_quantized_idxs": [0]})
        output = [n for n in prepared.graph.nodes if n.op == "output"][0].args[0]
        observed = output.op == "call_module" and \
            isinstance(prepared.get_submodule(output.target), MinMaxObserver)
        assert observed or quantize_fx is torch_qfx
        if not observed:
            continue  # PyTorch 2
        for x in batches:
            prepared(x)
        converted[quantize_fx] = quantize_fx.convert_fx(prepared)
    observer = default_qconfig.activation()
    with torch.no_grad():
        for x in batches:
            observer(model(x))
    scale, zero_point = (float(v) for v in observer.calculate_qparams())
    x = torch.randn(4, 1, 4, 4)
    got = converted[qfx](x)
    assert got.is_quantized and got.q_zero_point() == int(zero_point)
    assert got.q_scale() == pytest.approx(scale, rel=1e-6)
    if torch_qfx in converted:
        expected = converted[torch_qfx](x)
        assert (got.q_scale(), got.q_zero_point()) == \
            (expected.q_scale(), expected.q_zero_point())
        assert torch.equal(got.int_repr(), expected.int_repr())


def test_a_dict_output_in_output_quantized_idxs_leaves_quantized_as_pytorch():
    class DictOutput(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 1)

        def forward(self, x):
            return {"output": self.conv(x)}

    torch.manual_seed(0)
    model = DictOutput().eval()
    mapping = QConfigMapping().set_global(default_qconfig)
    outputs = []
    x = torch.randn(4, 1, 4, 4)
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (x,),
                                          prepare_custom_config={"output_quantized_idxs": [0]})
        prepared(x)
        outputs.append(quantize_fx.convert_fx(prepared)(x))
    theirs, ours = outputs
    assert list(ours) == list(theirs) == ["output"]
    assert ours["output"].is_quantized and theirs["output"].is_quantized
    assert torch.equal(ours["output"].int_repr(), theirs["output"].int_repr())


def test_an_opaque_module_comes_back_only_in_the_process_that_exported_it(tmp_path):
    model = Net().eval()
    core = pytest.importorskip("fuselage._core")
    m = core.from_torch(model, non_traceable=(["by_name"], [OtherDataDependent]))
    back = core.to_torch(m)
    assert back.by_name is model.by_name and back.by_class is model.by_class
    x = torch.randn(1, 2, 3, 3)
    torch.testing.assert_close(back(x), model(x), rtol=0, atol=0)
    # A file whose opaque module's key no live model of this process holds.
    path = tmp_path / "net.fsl"
    fuselage.export(back, None, str(path))
    data = path.read_bytes()
    key = fuselage._names.opaque_module_key(model.by_name).encode()
    forged = key[:-1] + (b"0" if key[-1:] != b"0" else b"1")
    path.write_bytes(data.replace(key, forged))
    with pytest.raises(ModelFileError, match="an opaque module"):
        fuselage.to_torch(str(path))


class Custom(nn.Module):
    """A user's module quantized by the user's own classes (below), not by fuselage."""

    def __init__(self, linear=None):
        super().__init__()
        self.linear = linear if linear is not None else nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x)


class ObservedCustom(Custom):
    @classmethod
    def from_float(cls, float_module):
        observed = cls(float_module.linear)
        observed.qconfig = float_module.qconfig
        return observed


class QuantizedCustom(Custom):
    @classmethod
    def from_observed(cls, observed):
        import torch.ao.nn.quantized as nnq
        observed.linear.activation_post_process = observed.activation_post_process
        observed.linear.qconfig = observed.qconfig
        return cls(nnq.Linear.from_float(observed.linear))


class WithCustom(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.custom = Custom()

    def forward(self, x):
        return self.custom(x) + self.linear(x)  # the custom module's input read twice


def test_a_custom_module_class_is_swapped_observed_and_quantized_as_pytorch():
    # Was: ConfigTranslationError naming float_to_observed_custom_module_class.
    torch.manual_seed(0)
    model = WithCustom().eval()
    mapping = QConfigMapping().set_global(default_qconfig)
    prepare_config = {"float_to_observed_custom_module_class": {"static": {Custom: ObservedCustom}}}
    convert_config = {"observed_to_quantized_custom_module_class":
                      {"static": {ObservedCustom: QuantizedCustom}}}
    batches = [torch.randn(4, 3) for _ in range(3)]
    results = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (batches[0],),
                                          prepare_custom_config=copy.deepcopy(prepare_config))
        assert type(prepared.custom) is ObservedCustom
        prepared_structure = _observed_inputs(prepared)
        for x in batches:
            prepared(x)
        converted = quantize_fx.convert_fx(prepared,
                                           convert_custom_config=copy.deepcopy(convert_config))
        assert type(converted.custom) is QuantizedCustom
        counts = [sum(1 for n in converted.graph.nodes if n.op == op and n.target == target)
                  for op, target in (("call_function", torch.quantize_per_tensor),
                                     ("call_method", "dequantize"))]
        results.append((prepared_structure, counts, converted))
    (theirs_structure, theirs_counts, theirs), (ours_structure, ours_counts, ours) = results
    assert ours_structure == theirs_structure
    assert ours_counts == theirs_counts
    x = torch.randn(4, 3)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


class Standalone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        return self.conv(x)


class WithStandalone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)
        self.standalone = Standalone()

    def forward(self, x):
        return self.standalone(self.conv(x))


def _node_counts(gm):
    import torch.ao.nn.quantized as nnq
    return (sum(1 for n in gm.graph.nodes if n.op == "call_function" and
                n.target is torch.quantize_per_tensor),
            sum(1 for n in gm.graph.nodes if n.op == "call_module" and
                isinstance(gm.get_submodule(n.target), nnq.Conv2d)),
            sum(1 for n in gm.graph.nodes if n.op == "call_method" and n.target == "dequantize"),
            sum(1 for n in gm.graph.nodes if n.op == "call_module" and
                isinstance(gm.get_submodule(n.target), MinMaxObserver)))


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("by", ["name", "class"])
def test_a_standalone_module_is_quantized_on_its_own_as_pytorch(quantized, by):
    # Was: ConfigTranslationError naming standalone_module_name / _class.
    torch.manual_seed(0)
    model = WithStandalone().eval()
    mapping = QConfigMapping().set_global(default_qconfig)
    interface = {"input_quantized_idxs": [0] if quantized else [],
                 "output_quantized_idxs": [0] if quantized else []}
    batches = [torch.randn(2, 1, 3, 3) for _ in range(3)]
    entry = ("standalone" if by == "name" else Standalone, None, (batches[0],), interface, None)
    results = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(
            copy.deepcopy(model), mapping, (batches[0],),
            prepare_custom_config={f"standalone_module_{by}": [entry]})
        counts = [_node_counts(prepared)[3], _node_counts(prepared.standalone)[3]]
        for x in batches:
            prepared(x)
        converted = quantize_fx.convert_fx(prepared)
        counts += [_node_counts(converted)[:3], _node_counts(converted.standalone)[:3]]
        results.append((counts, converted))
    (theirs_counts, theirs), (ours_counts, ours) = results
    assert ours_counts == theirs_counts
    x = torch.randn(2, 1, 3, 3)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
