"""fuselage._translate: PyTorch's BackendConfig and QConfigMapping as fuselage's config
texts, checked by what the C++ tool does with them: the translated built-in configs fuse
resnet18 and mobilenet_v2 byte for byte as fuselage's own built-in configs do, the
translated default qconfig mappings quantize as the CLI's default does, and a mapping's
per-type / per-name / None entries are honoured (against PyTorch's own convert_fx)."""

import copy
import inspect
import operator
import os
import subprocess
import types

import pytest
import torch
import torch.nn as nn
import torchvision
from torch.ao.quantization import (
    FakeQuantize,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    PerChannelMinMaxObserver,
    QConfig,
    QConfigMapping,
    default_dynamic_qconfig,
    get_default_qconfig_mapping,
)
from torch.ao.quantization.backend_config import (
    BackendPatternConfig,
    DTypeConfig,
    get_fbgemm_backend_config,
    get_native_backend_config,
    get_qnnpack_backend_config,
)
from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
from torch.ao.quantization.observer import ObserverBase
from torch.ao.quantization.utils import MatchAllNode

import fuselage
from conftest import REPO, nested_pattern_config
from fuselage import ConfigTranslationError
from fuselage._translate import backend_config_to_text, qconfig_mapping_to_text, user_fusions

RESIDUAL = os.path.join(REPO, "tools", "examples", "residual.textproto")
EXAMPLE_CONFIG = os.path.join(REPO, "backend_configs", "examples", "conv_bn_add_relu.textproto")


def run(cli, *args):
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def torchvision_models(tmp_path_factory):
    """resnet18 and mobilenet_v2 (seeded weights, 32x32 inputs) as fuselage model files."""
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for name in ("resnet18", "mobilenet_v2"):
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        paths[name] = folder / (name + ".fsl")
        fuselage.export(model, (torch.randn(1, 3, 32, 32),), str(paths[name]))
    return paths


# ---- backend configs ----------------------------------------------------------------------

@pytest.mark.parametrize("backend, getter", [
    ("qnnpack", get_qnnpack_backend_config),
    ("fbgemm", get_fbgemm_backend_config),
    ("native", get_native_backend_config),
    ("x86", get_x86_backend_config),
])
def test_translated_builtin_configs_fuse_as_the_builtin_ones(cli, tmp_path, torchvision_models,
                                                            backend, getter):
    config = write(tmp_path, backend + ".textproto", backend_config_to_text(getter()))
    for name, model in torchvision_models.items():
        ours = tmp_path / (name + "_translated.fsl")
        builtin = tmp_path / (name + "_builtin.fsl")
        run(cli, "fuse", model, "--config=%s" % config, "-o", ours)
        run(cli, "fuse", model, "--backend=" + backend, "-o", builtin)
        assert ours.read_bytes() == builtin.read_bytes(), (backend, name)
        # Not vacuous: fusion changed the model.
        assert ours.read_bytes() != model.read_bytes()


def test_translated_config_quantizes_as_the_builtin_one(cli, tmp_path):
    # The quantization entries too (dtype configs with constraints, observation types,
    # tensor-arg counts, fixed qparams): the whole flow gives the same bytes. `quantize
    # --backend=qnnpack --config=FILE` takes a file extending qnnpack, so every translated
    # entry replaces qnnpack's own.
    text = backend_config_to_text(get_qnnpack_backend_config())
    text = text.replace('name: "qnnpack"', 'name: "qnnpack"\nbase: "qnnpack"', 1)
    text = text.replace("pattern {\n", "pattern {\n  replace: true\n")
    config = write(tmp_path, "qnnpack.textproto", text)
    ours, builtin = tmp_path / "ours.fsl", tmp_path / "builtin.fsl"
    common = [RESIDUAL, "--backend=qnnpack", "--samples=2", "--input-shape=2,4,8,8"]
    run(cli, "quantize", *common, "--config=%s" % config, "-o", ours)
    run(cli, "quantize", *common, "-o", builtin)
    assert ours.read_bytes() == builtin.read_bytes()


def _fuselage_fuser(name):
    """fuselage.fusers.<name> (helper h2's module); until it exists, a stand-in with its
    qualified name, which is all the translator reads."""
    try:
        import fuselage.fusers as fusers
        return getattr(fusers, name)
    except (ImportError, AttributeError):
        def fuser(is_qat, relu, add_pattern):
            raise AssertionError("the translator must not call the fuser")
        fuser.__module__ = "fuselage.fusers"
        fuser.__qualname__ = fuser.__name__ = name
        return fuser


def root_node_getter(pattern):
    relu, add_pattern = pattern
    _, bn_pattern, _ = add_pattern
    bn, conv = bn_pattern
    return conv


def extra_inputs_getter(pattern):
    relu, add_pattern = pattern
    _, bn_pattern, extra_input = add_pattern
    return [extra_input]


def conv_bn_add_relu_config(add=operator.add):
    # The issue's BackendPatternConfig (its torch.add matches torch.add calls; the residual
    # example's `bn + identity` is operator.add).
    weighted_int8 = DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8,
                                weight_dtype=torch.qint8, bias_dtype=torch.float)
    return nested_pattern_config((nn.ReLU, (add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode))) \
        .set_fuser_method(_fuselage_fuser("fuse_conv_bn_add_relu")) \
        ._set_root_node_getter(root_node_getter) \
        ._set_extra_inputs_getter(extra_inputs_getter) \
        .set_dtype_configs([weighted_int8])


def test_custom_conv_bn_add_relu_fuses_like_the_example_config(cli, tmp_path):
    backend_config = get_qnnpack_backend_config().set_backend_pattern_config(
        conv_bn_add_relu_config())
    text = backend_config_to_text(backend_config)
    entry = text[text.index('pattern: "(nn.ReLU, (operator.add'):]
    entry = entry[:entry.index("\n}")]
    assert 'fuser: FOLD_BN_THEN_WRAP' in entry
    assert 'fused_module: "nni.ConvAddReLU2d"' in entry
    assert 'root: "0.0.0"' in entry          # the conv: arg 0 of arg 0 of arg 0 of the relu
    assert 'extra_input: "0.1"' in entry     # the add's MatchAllNode
    config = write(tmp_path, "custom.textproto", text)
    ours, example = tmp_path / "ours.fsl", tmp_path / "example.fsl"
    run(cli, "fuse", RESIDUAL, "--config=%s" % config, "-o", ours)
    run(cli, "fuse", RESIDUAL, "--config=%s" % EXAMPLE_CONFIG, "-o", example)
    # The same graph and modules; only the fused node's pattern meta (the entry's name)
    # differs, so the printed code is compared.
    printed = run(cli, "print", ours, "--readable")
    assert printed == run(cli, "print", example, "--readable")
    assert "conv = self.conv(x, identity)  # nni.ConvAddReLU2d" in printed


class TorchAddBlock(nn.Module):
    """The residual tail written with torch.add, as the issue's pattern expects."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(torch.add(self.bn(self.conv(x)), x))


def test_the_issues_torch_add_pattern_fuses_torch_add(cli, tmp_path):
    backend_config = get_qnnpack_backend_config().set_backend_pattern_config(
        conv_bn_add_relu_config(add=torch.add))
    config = write(tmp_path, "issue.textproto", backend_config_to_text(backend_config))
    model = tmp_path / "block.fsl"
    fuselage.export(TorchAddBlock().eval(), (torch.randn(1, 4, 6, 6),), str(model))
    fused = tmp_path / "fused.fsl"
    run(cli, "fuse", model, "--config=%s" % config, "-o", fused)
    printed = run(cli, "print", fused, "--readable")
    assert "conv = self.conv(x, x)  # nni.ConvAddReLU2d" in printed, printed


def test_getters_that_do_more_than_pick_positions_are_refused():
    def looks_at_nodes(pattern):
        return pattern[0].target

    cfg = conv_bn_add_relu_config()._set_root_node_getter(looks_at_nodes)
    with pytest.raises(ConfigTranslationError, match="root node getter .*looks_at_nodes failed"):
        backend_config_to_text(get_qnnpack_backend_config().set_backend_pattern_config(cfg))

    cfg = conv_bn_add_relu_config()._set_extra_inputs_getter(lambda p: [object()])
    with pytest.raises(ConfigTranslationError, match="expected one position of the pattern"):
        backend_config_to_text(get_qnnpack_backend_config().set_backend_pattern_config(cfg))

    cfg = conv_bn_add_relu_config()._set_extra_inputs_getter(lambda p: p[1][2])
    with pytest.raises(ConfigTranslationError, match="expected a list of positions"):
        backend_config_to_text(get_qnnpack_backend_config().set_backend_pattern_config(cfg))


def test_a_users_fuser_fuses_into_a_subgraph_for_python_and_a_non_callable_is_refused():
    def my_fuser(is_qat, relu, add_pattern):
        return relu

    backend_config = get_qnnpack_backend_config().set_backend_pattern_config(
        conv_bn_add_relu_config().set_fuser_method(my_fuser))
    text = backend_config_to_text(backend_config)
    (name, fusion), = user_fusions(backend_config).items()
    entry = text[text.index('name: "%s"' % name):]
    entry = entry[:entry.index("\n}")]
    # The engine records the match (fuselage.FusedSubgraph); fuselage._user_fusers runs the
    # fuser on it with the root and extra inputs the getters picked (the conv, the residual).
    assert 'fused_module: "fuselage.FusedSubgraph"' in entry and 'root: "0.0.0"' in entry
    assert fusion.fuser is my_fuser and fusion.root == "0.0.0" and fusion.extras == ["0.1"]

    cfg = conv_bn_add_relu_config()
    cfg.fuser_method = "not a function"
    with pytest.raises(ConfigTranslationError, match="fuser method 'not a function' is not "
                                                     "callable"):
        backend_config_to_text(get_qnnpack_backend_config().set_backend_pattern_config(cfg))

    class MyConv(nn.Conv2d):
        pass

    cfg = BackendPatternConfig(MyConv)
    with pytest.raises(ConfigTranslationError, match="MyConv.*has no fuselage name"):
        backend_config_to_text(get_qnnpack_backend_config().set_backend_pattern_config(cfg))


def test_pattern_formats_of_later_pytorch_versions(cli, tmp_path):
    # PyTorch 2.x keeps the execution-order pattern in `pattern` and the reversed nested
    # one in `_pattern_complex_format`; config objects of that shape are read accordingly.
    fmm = torch.ao.quantization.fuser_method_mappings
    reverse3 = getattr(fmm, "reverse3", None) or fmm._reverse3  # private from PyTorch 2
    sequential_wrapper2 = getattr(fmm, "sequential_wrapper2", None) or fmm._sequential_wrapper2
    simple = BackendPatternConfig(nn.Conv2d).set_fuser_method(reverse3(fmm.fuse_conv_bn_relu))
    simple.pattern = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU)
    simple._pattern_complex_format = None
    # Getters still see the nested form: (relu, (bn, conv)).
    simple._set_root_node_getter(lambda p: p[1][1])
    nested = BackendPatternConfig(nn.Conv2d).set_fuser_method(
        sequential_wrapper2(torch.nn.intrinsic.LinearReLU))
    nested.pattern = None
    nested._pattern_complex_format = (nn.ReLU, nn.Linear)
    text = backend_config_to_text(types.SimpleNamespace(name="mine", configs=[simple, nested]))
    assert ('pattern: "(nn.Conv2d, nn.BatchNorm2d, nn.ReLU)"\n  format: SEQUENCE\n'
            '  fuser: FOLD_BN_THEN_WRAP\n  fused_module: "nni.ConvReLU2d"\n  root: "0.0"') in text
    assert 'pattern: "(nn.ReLU, nn.Linear)"\n  fuser: WRAP_IN_SEQUENCE\n' \
           '  fused_module: "nni.LinearReLU"' in text

    # The C++ tool reads both and fuses with them.
    config = write(tmp_path, "mine.textproto", text)
    model_file = tmp_path / "m.fsl"
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 2), nn.ReLU()).eval()
    fuselage.export(model, (torch.randn(1, 3, 6, 6),), str(model_file))
    fused = tmp_path / "fused.fsl"
    run(cli, "fuse", model_file, "--config=%s" % config, "-o", fused)
    printed = run(cli, "print", fused, "--readable")
    assert '_0 = getattr(self, "0")(input_1)  # nni.ConvReLU2d' in printed
    assert '_4 = getattr(self, "4")(_3)  # nni.LinearReLU' in printed
    assert "BatchNorm" not in printed and "nn.ReLU" not in printed


# ---- qconfig mappings ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["qnnpack", "fbgemm"])
def test_default_qconfig_mapping_quantizes_as_the_cli_default(cli, tmp_path, torchvision_models,
                                                            backend):
    mapping = write(tmp_path, "m.textproto",
                    qconfig_mapping_to_text(get_default_qconfig_mapping(backend)))
    for model, shape in ((RESIDUAL, "2,4,8,8"), (torchvision_models["resnet18"], "1,3,32,32")):
        with_mapping, default = tmp_path / "with.fsl", tmp_path / "default.fsl"
        common = [model, "--backend=" + backend, "--samples=2", "--input-shape=" + shape]
        run(cli, "quantize", *common, "--qconfig-mapping=%s" % mapping, "-o", with_mapping)
        run(cli, "quantize", *common, "-o", default)
        assert with_mapping.read_bytes() == default.read_bytes(), (backend, model)


def test_mapping_text_reads_every_observer_kind_and_none():
    act = MovingAverageMinMaxObserver.with_args(averaging_constant=0.25, quant_min=0,
                                                quant_max=127)
    weight = PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                qscheme=torch.per_channel_symmetric, ch_axis=1)
    mapping = QConfigMapping() \
        .set_global(QConfig(activation=HistogramObserver.with_args(bins=512).with_args(reduce_range=True),
                            weight=MinMaxObserver.with_args(dtype=torch.qint8))) \
        .set_object_type(nn.Linear, QConfig(activation=act, weight=weight)) \
        .set_object_type(torch.nn.functional.relu, None) \
        .set_object_type("reshape", None) \
        .set_module_name_regex("layer[0-9]\\.0", None) \
        .set_module_name("fc", None) \
        .set_module_name_object_type_order("layer2", nn.Conv2d, 1, None)
    text = qconfig_mapping_to_text(mapping)
    # Chained with_args merge; every constructor argument is written out.
    # (PyTorch 2's HistogramObserver has no upsample_rate.)
    upsample = ("upsample_rate: 128 "
                if "upsample_rate" in inspect.signature(HistogramObserver).parameters else "")
    assert 'kind: "HistogramObserver" bins: 512 ' + upsample + 'dtype: "torch.quint8" ' \
           'qscheme: "torch.per_tensor_affine" reduce_range: true' in text
    assert 'kind: "MovingAverageMinMaxObserver" averaging_constant: 0.25' in text
    assert 'quant_min: 0 quant_max: 127' in text
    assert 'kind: "PerChannelMinMaxObserver" ch_axis: 1 dtype: "torch.qint8" ' \
           'qscheme: "torch.per_channel_symmetric"' in text
    assert 'object_type: "torch.nn.functional.relu"\n  qconfig {\n    none: true' in text
    assert 'object_type: "reshape"' in text
    assert 'regex: "layer[0-9]\\\\.0"' in text  # the backslash escaped for protobuf
    assert ('module_name_object_type_order {\n  module_name: "layer2"\n  object_type: '
            '"nn.Conv2d"\n  index: 1') in text


def test_unsupported_qconfigs_are_refused_with_their_name():
    class MyObserver(ObserverBase):
        def forward(self, x):
            return x

        def calculate_qparams(self):
            return None

    weight = MinMaxObserver.with_args(dtype=torch.qint8)
    cases = [
        (QConfig(activation=MyObserver.with_args(dtype=torch.quint8), weight=weight),
         "global.activation: observer class .*MyObserver is not supported"),
        (QConfig(activation=FakeQuantize, weight=weight),
         "global.activation: FakeQuantize is a fake-quantize"),
        (QConfig(activation=MinMaxObserver.with_args(averaging_constant=0.5), weight=weight),
         # 1.13's MinMaxObserver refuses the argument, PyTorch 2's takes **kwargs.
         "global.activation: MinMaxObserver argument"),
        (QConfig(activation=MovingAverageMinMaxObserver.with_args(bins=8), weight=weight),
         "global.activation: MovingAverageMinMaxObserver argument bins=8 is not supported"),
        (QConfig(activation=HistogramObserver, weight=weight.with_callable_args(eps=lambda: 1.0)),
         "global.weight: with_callable_args\\(eps\\) is not supported"),
    ]
    for qconfig, message in cases:
        with pytest.raises(ConfigTranslationError, match=message):
            qconfig_mapping_to_text(QConfigMapping().set_global(qconfig))
    with pytest.raises(ConfigTranslationError, match="object type .*has no fuselage name"):
        qconfig_mapping_to_text(QConfigMapping().set_object_type(lambda x: x, None))
    with pytest.raises(ConfigTranslationError, match="expected a torch.ao.quantization.QConfigMapping"):
        qconfig_mapping_to_text({"": None})


def test_dynamic_qconfig_is_a_dynamic_placeholder():
    """default_dynamic_qconfig's activation (PyTorch 2: is_dynamic=True; 1.13:
    compute_dtype=quint8) is written as a dynamic PlaceholderObserver."""
    text = qconfig_mapping_to_text(QConfigMapping().set_global(default_dynamic_qconfig))
    assert 'activation { kind: "PlaceholderObserver" dtype: "torch.quint8"' in text
    assert "is_dynamic: true" in text
    assert "compute_dtype" not in text


class TwoStage(nn.Module):
    """stem conv-bn-relu, layer1 (conv-bn-relu, conv), layer2 conv, pool, fc."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                    nn.Conv2d(8, 8, 1))
        self.layer2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def quantized_modules(gm):
    """module path -> (class name, output scale or None) of every call_module node."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "call_module":
            m = gm.get_submodule(n.target)
            scale = getattr(m, "scale", None)
            out[n.target] = (type(m).__module__.split(".")[-3:-1], type(m).__name__,
                             None if scale is None else float(scale))
    return out


def test_mapping_entries_are_honoured_as_pytorch_honours_them(cli, tmp_path):
    import numpy as np
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.manual_seed(0)
    model = TwoStage().eval()
    example = torch.randn(2, 3, 16, 16)
    base = get_default_qconfig_mapping("qnnpack")
    minmax = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
                     weight=MinMaxObserver.with_args(dtype=torch.qint8,
                                                     qscheme=torch.per_tensor_symmetric))
    # Global: histogram observers. Convs (and, as PyTorch requires of a fused conv-relu's
    # parts, relus) and linears: MinMax, but "fc" (a regex, over the type): None. All of
    # layer1 (a name): None. layer2's first nn.Conv2d
    # call: None — layer2.0, which PyTorch counts as the nn.Conv2d it was before it was
    # fused into a ConvReLU2d.
    mapping = QConfigMapping().set_global(base.global_qconfig) \
        .set_object_type(nn.Linear, minmax) \
        .set_module_name_regex("f\\w", None) \
        .set_object_type(nn.Conv2d, minmax) \
        .set_object_type(nn.ReLU, minmax) \
        .set_module_name("layer1", None) \
        .set_module_name_object_type_order("layer2", nn.Conv2d, 0, None)

    backend = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), mapping, (example,), backend_config=backend)
    with torch.no_grad():
        prepared(example)
    want = quantized_modules(convert_fx(prepared, backend_config=backend))

    model_file = tmp_path / "two_stage.fsl"
    fuselage.export(model, (example,), str(model_file))
    sample = tmp_path / "x.npy"
    np.save(sample, example.numpy())
    mapping_file = write(tmp_path, "m.textproto", qconfig_mapping_to_text(mapping))
    out = tmp_path / "q.fsl"
    run(cli, "quantize", model_file, "--backend=qnnpack", "--calibration=%s" % sample,
        "--qconfig-mapping=%s" % mapping_file, "-o", out)
    got = quantized_modules(fuselage.to_torch(str(out)))

    # The same modules quantized (PyTorch's quantized classes) and kept float, by path.
    assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in want.items()}
    # The convs' MinMax output scales are PyTorch's (histogram observers would differ).
    for path, (_, _, scale) in want.items():
        if scale is not None:
            assert got[path][2] == pytest.approx(scale, rel=1e-5), path
    # Not vacuous: quantized and float modules both, each kind of entry at work.
    assert got["stem.0"][1] == "ConvReLU2d" and got["stem.0"][2] is not None
    assert got["layer1.0"][2] is None and got["layer2.0"][2] is None
    assert got["layer2.2"][2] is not None and got["fc"][1] == "Linear" and got["fc"][2] is None


def test_any_module_name_reads_back_in_the_cpp_loader(cli, tmp_path):
    # Quotes, backslashes and non-ASCII text are escaped so that the C++ loader reads the
    # same bytes back: a mapping naming only such a module keeps nothing float, and one
    # naming "conv" (the residual example's conv) keeps exactly that conv float.
    base = get_default_qconfig_mapping("qnnpack").global_qconfig
    for name, float_conv in (('a"b\\é', False), ("conv", True)):
        mapping = QConfigMapping().set_global(base).set_module_name(name, None)
        path = write(tmp_path, "m.textproto", qconfig_mapping_to_text(mapping))
        out = run(cli, "prepare", RESIDUAL, "--backend=qnnpack", "--qconfig-mapping=%s" % path,
                  "-o", tmp_path / "p.fsl")
        assert ("its qconfig is None" in out) == float_conv, out
