"""PyTorch's own prepare_fx / convert_to_reference_fx / convert_fx models (qnnpack backend
config) survive export + to_torch: same outputs on PyTorch's kernels, same observer state,
quantized weights stored as graph/NAMING.md says."""

import pytest
import torch
import torchvision

import fuselage
from conftest import quantize_with_pytorch, randomize_batch_norm
from test_float_roundtrip import attributes_of, child, tensors_of


def roundtrip(model, example, path):
    fuselage.export(model, (example,), path)
    return fuselage.to_torch(path)


@pytest.fixture
def small_quantized(small_residual):
    torch.manual_seed(2)
    example = torch.randn(2, 3, 8, 8)
    calibration = [torch.randn(4, 3, 8, 8) for _ in range(4)]
    return example, quantize_with_pytorch(small_residual, example, calibration)


def test_prepared_model_keeps_observers_and_their_state(tmp_path, small_quantized):
    x, (prepared, _, _) = small_quantized
    rebuilt = roundtrip(prepared, x, str(tmp_path / "prepared.fsl"))
    observers = {n: type(m) for n, m in prepared.named_modules() if "activation_post_process" in n}
    assert observers
    # prepare_fx's root observers are written in the container `observers`, beside the
    # weight plans fuselage convert reads (fuselage._prepared).
    moved = {name: "observers." + name for name in observers}
    for name, cls in observers.items():
        got = rebuilt.get_submodule(moved[name])
        assert type(got) is cls, name
        for buf in ("min_val", "max_val", "histogram", "eps"):
            assert torch.equal(getattr(got, buf), getattr(prepared.get_submodule(name), buf))
        assert got.quant_min == 0 and got.quant_max == 255 and got.dtype == torch.quint8
    # Calibrating both further with the same data keeps them identical, and so are the
    # quantization parameters they compute.
    batch = torch.randn(4, 3, 8, 8) * 3
    with torch.no_grad():
        assert torch.equal(rebuilt(batch), prepared(batch))
    for name in observers:
        want = prepared.get_submodule(name).calculate_qparams()
        got = rebuilt.get_submodule(moved[name]).calculate_qparams()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), name


def test_prepared_observer_file_contents(small_quantized):
    x, (prepared, _, _) = small_quantized
    proto = fuselage.to_proto(prepared)
    observer = child(child(proto.root, "observers"), "activation_post_process_0")
    assert observer.type == "HistogramObserver"
    attrs = attributes_of(observer)
    assert attrs["qscheme"].string_value == "torch.per_tensor_affine"
    assert attrs["dtype"].dtype_value == fuselage._proto.model_pb2().QUINT8
    assert attrs["quant_min"].int_value == 0 and attrs["quant_max"].int_value == 255
    assert attrs["eps"].float_value == pytest.approx(torch.finfo(torch.float32).eps)
    assert {"min_val", "max_val", "histogram"} <= set(tensors_of(observer))
    assert "eps" not in tensors_of(observer)  # an attribute, per graph/NAMING.md
    # The weight observers of a prepared conv live on the fused float module's conv.
    assert child(proto.root, "conv1").type == "nni.ConvReLU2d"


def test_reference_model_roundtrip(tmp_path, small_quantized):
    x, (_, reference, _) = small_quantized
    rebuilt = roundtrip(reference, x, str(tmp_path / "reference.fsl"))
    with torch.no_grad():
        assert torch.equal(rebuilt(x), reference(x))
    proto = fuselage.to_proto(reference)
    conv = child(proto.root, "conv1.0")
    assert child(proto.root, "conv1").type == "nni.ConvReLU2d"
    assert conv.type == "nnqr.Conv2d"
    assert {"weight", "bias", "weight_scale", "weight_zero_point", "weight_axis"} <= set(tensors_of(conv))
    assert attributes_of(conv)["weight_qscheme"].string_value == "torch.per_tensor_affine"
    assert attributes_of(conv)["weight_dtype"].dtype_value == fuselage._proto.model_pb2().QINT8
    assert child(proto.root, "fc").type == "nnqr.Linear"
    quantize_nodes = [n for n in proto.graph.nodes if n.target == "torch.quantize_per_tensor"]
    assert len(quantize_nodes) == 7
    scale_of_input = next(t.tensor for t in proto.root.tensors if t.name == "conv1_input_scale_0")
    assert list(scale_of_input.shape) == []  # a 0-d tensor, reached by get_attr


def test_converted_model_roundtrip_runs_pytorch_quantized_kernels(tmp_path, small_quantized):
    x, (_, _, converted) = small_quantized
    rebuilt = roundtrip(converted, x, str(tmp_path / "converted.fsl"))
    assert type(rebuilt.conv1) is type(converted.conv1)  # nniq.ConvReLU2d
    assert type(rebuilt.conv2) is type(converted.conv2)  # nnq.Conv2d
    with torch.no_grad():
        out = rebuilt(x)
        assert torch.equal(out, converted(x))
        y = torch.randn(3, 3, 8, 8)
        assert torch.equal(rebuilt(y), converted(y))
    for name in ("conv1", "conv2", "fc"):
        want, got = converted.get_submodule(name), rebuilt.get_submodule(name)
        assert torch.equal(got.weight().int_repr(), want.weight().int_repr())
        assert got.weight().q_scale() == want.weight().q_scale()
        assert torch.equal(got.bias(), want.bias())
        assert (got.scale, got.zero_point) == (want.scale, want.zero_point)


def test_converted_model_file_contents(small_quantized):
    x, (_, _, converted) = small_quantized
    proto = fuselage.to_proto(converted)
    pb = fuselage._proto.model_pb2()
    assert child(proto.root, "conv1").type == "nniq.ConvReLU2d"
    conv2 = child(proto.root, "conv2")
    assert conv2.type == "nnq.Conv2d"
    assert [c.name for c in conv2.children] == []  # packed params are unpacked, not written
    weight = tensors_of(conv2)["weight"]
    q = converted.conv2.weight()
    assert weight.dtype == pb.QINT8 and weight.qscheme == pb.PER_TENSOR_AFFINE
    assert list(weight.shape) == [8, 8, 3, 3]
    assert list(weight.scales) == [q.q_scale()] and list(weight.zero_points) == [q.q_zero_point()]
    assert weight.data == q.int_repr().numpy().tobytes()
    assert tensors_of(conv2)["bias"].dtype == pb.FLOAT32
    attrs = attributes_of(conv2)
    assert attrs["scale"].float_value == converted.conv2.scale
    assert attrs["zero_point"].int_value == converted.conv2.zero_point
    assert child(proto.root, "fc").type == "nnq.Linear"
    targets = [n.target for n in proto.graph.nodes]
    assert "torch.ops.quantized.add_relu" in targets and "dequantize" in targets


def test_per_channel_weights_roundtrip(tmp_path, small_residual):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 8, 8)
    # fbgemm's default qconfig observes weights per channel.
    _, _, converted = quantize_with_pytorch(small_residual, x, [x], qconfig="fbgemm")
    proto = fuselage.to_proto(converted)
    weight = tensors_of(child(proto.root, "conv2"))["weight"]
    pb = fuselage._proto.model_pb2()
    assert weight.qscheme == pb.PER_CHANNEL_AFFINE and weight.axis == 0
    assert list(weight.scales) == converted.conv2.weight().q_per_channel_scales().tolist()
    rebuilt = roundtrip(converted, x, str(tmp_path / "per_channel.fsl"))
    assert rebuilt.conv2.weight().qscheme() == torch.per_channel_affine
    with torch.no_grad():
        assert torch.equal(rebuilt(x), converted(x))


def test_resnet18_quantized_flow_roundtrip(tmp_path):
    torch.manual_seed(4)
    model = randomize_batch_norm(torchvision.models.resnet18(weights=None).eval())
    x = torch.randn(1, 3, 64, 64)
    calibration = [torch.randn(2, 3, 64, 64) for _ in range(2)]
    prepared, reference, converted = quantize_with_pytorch(model, x, calibration)
    for name, m in (("prepared", prepared), ("reference", reference), ("converted", converted)):
        rebuilt = roundtrip(m, x, str(tmp_path / f"{name}.fsl"))
        with torch.no_grad():
            assert torch.equal(rebuilt(x), m(x)), name
