"""Whatever the path or the file, the bridge raises ModelFileError (to_torch) or
ExportError (export) naming it, never a raw TypeError / ValueError / OSError /
DecodeError / UnicodeDecodeError; export writes nothing the C++ loader would refuse for
its size."""

import random

import pytest
import torch
import torch.nn as nn

import fuselage
import fuselage._exporter as exporter
from fuselage import ExportError, ModelFileError


@pytest.mark.parametrize("path,message", [
    (None, r"expected a model file path \(str, bytes or os.PathLike\); got NoneType"),
    (3, "got int"),
    ("a\0b.fsl", "cannot contain a NUL character"),
], ids=["none", "int", "nul"])
def test_a_path_that_names_no_file_is_refused_by_both(tmp_path, path, message):
    with pytest.raises(ModelFileError, match=message):
        fuselage.to_torch(path)
    with pytest.raises(ExportError, match=message):
        fuselage.export(nn.ReLU(), None, path)


def test_bytes_and_pathlike_paths_work(tmp_path):
    path = tmp_path / "m.fsl"
    assert fuselage.export(nn.ReLU(), None, path) == path
    assert isinstance(fuselage.to_torch(bytes(path)), torch.fx.GraphModule)
    with pytest.raises(ModelFileError, match="No such file or directory"):
        fuselage.to_torch(bytes(tmp_path / "missing.fsl"))


def test_unreadable_text_files_are_model_file_errors(tmp_path):
    bad_utf8 = tmp_path / "bad.textproto"
    bad_utf8.write_bytes(b"format_version: 1\nproducer: \"\xff\xfe\"\n")
    garbage = tmp_path / "garbage.pbtxt"
    garbage.write_text("format_version: {{{")
    for path in (bad_utf8, garbage):
        with pytest.raises(ModelFileError, match=str(path)):
            fuselage.to_torch(path)


def test_corrupted_bytes_are_model_file_errors(tmp_path, small_residual):
    """Random byte changes of a real model file: each one loads or is a ModelFileError."""
    good = tmp_path / "good.fsl"
    fuselage.export(small_residual, (torch.randn(1, 3, 8, 8),), good)
    data = good.read_bytes()
    rng = random.Random(0)
    bad = tmp_path / "bad.fsl"
    refused = 0
    for _ in range(300):
        corrupted = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            corrupted[rng.randrange(len(corrupted))] = rng.randrange(256)
        bad.write_bytes(bytes(corrupted))
        try:
            fuselage.to_torch(bad)
        except ModelFileError as e:
            assert str(bad) in str(e)
            refused += 1
    assert refused > 100  # most corruptions are caught, the rest are still valid files


def test_export_refuses_a_file_past_the_loader_limit(tmp_path, monkeypatch, small_residual):
    size = len(fuselage.to_proto(small_residual).SerializeToString())
    monkeypatch.setattr(exporter, "MAX_FILE_BYTES", size - 1)
    path = tmp_path / "big.fsl"
    with pytest.raises(ExportError, match=f"the model is {size} bytes; the C\\+\\+ loader reads "
                                          f"at most {size - 1}"):
        fuselage.export(small_residual, None, path)
    assert not path.exists()


@pytest.mark.parametrize("type_name", ["nnq.Conv2d", "nniq.ConvAddReLU2d"])
def test_a_quantized_conv_whose_bias_does_not_fit_is_a_model_file_error(tmp_path, type_name):
    import fuselage.nn.quantized as fnnq

    cls = torch.ao.nn.quantized.Conv2d if type_name == "nnq.Conv2d" else fnnq.ConvAddReLU2d
    module = cls(2, 4, 3)
    module.set_weight_bias(torch.quantize_per_tensor(torch.randn(4, 2, 3, 3), 0.1, 0,
                                                     torch.qint8), torch.randn(4))

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = module

        def forward(self, x):
            return self.conv(x) if type_name == "nnq.Conv2d" else self.conv(x, x)

    proto = fuselage.to_proto(Holder())
    conv = next(c.module for c in proto.root.children if c.name == "conv")
    bias = next(t.tensor for t in conv.tensors if t.name == "bias")
    del bias.shape[:]
    bias.shape.append(3)
    bias.data = bias.data[:12]
    path = tmp_path / "bad.fsl"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelFileError, match=f"module 'conv' \\({type_name}\\): tensor 'bias': "
                                             r"has shape \[3\]; expected \[4\]"):
        fuselage.to_torch(path)


def _arg_messages(message, out):
    """Every Arg message (a node's args, kwargs and meta; module attributes) in `message`."""
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        for item in value if field.label == field.LABEL_REPEATED else [value]:
            if type(item).__name__ == "Arg":
                out.append(item)
            _arg_messages(item, out)
    return out


def test_values_of_the_wrong_kind_are_model_file_errors(tmp_path, small_residual):
    """Each attribute or arg of PyTorch's reference / converted / prepared models replaced
    by a value of another kind (a list where a qscheme string was, a torch device where a
    number was, ...): every file loads
    or is a ModelFileError naming it."""
    from conftest import quantize_with_pytorch

    x = torch.randn(1, 3, 8, 8)
    models = quantize_with_pytorch(small_residual, x, [x])
    protos = [fuselage.to_proto(m) for m in models]
    rng = random.Random(1)
    path = tmp_path / "changed.fsl"
    refused = 0
    for i in range(400):
        proto = type(protos[0])()
        proto.CopyFrom(protos[i % len(protos)])
        arg = rng.choice(_arg_messages(proto, []))
        kind = rng.randrange(6)
        if kind == 0:
            arg.int_value = rng.choice([0, -1, 1 << 40])
        elif kind == 1:
            arg.string_value = rng.choice(["x", "torch.per_channel_affine", ""])
        elif kind == 2:
            arg.list.SetInParent()
            for _ in range(rng.randint(0, 3)):
                arg.list.items.add().int_value = rng.randint(-2, 5)
        elif kind == 3:
            arg.none = True
        elif kind == 4:  # a torch object where another kind was; a device torch does not know
            arg.torch_object = rng.choice(["device:cpu", "memory_format:channels_last",
                                           "layout:strided", "device:bogus", "layout:cpu"])
        else:
            arg.float_value = rng.choice([0.0, -1.0, 1e30, float("nan")])
        path.write_bytes(proto.SerializeToString())
        try:
            fuselage.to_torch(path)
        except ModelFileError as e:
            assert str(path) in str(e)
            refused += 1
    assert refused > 100
