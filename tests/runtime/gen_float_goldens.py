#!/usr/bin/python3
"""Writes the float-kernel goldens under tests/runtime/testdata/float/.

Run with the interpreter that has PyTorch 1.13 (/usr/bin/python3), from the repo root:

    /usr/bin/python3 tests/runtime/gen_float_goldens.py

Each case is one fuselage model file (<case>.pb): a small graph of placeholders, one op
(a call_module whose module mirrors the PyTorch module, or a call_function /
call_method with the args FX would record) and the output. Its root module carries the
inputs as tensors input_0, input_1, ... and PyTorch's results as expected_0, ...
(flattened in output order). MANIFEST.txt lists the cases. The C++ golden test runs every
case through the interpreter and compares with expected_* (rtol 1e-5).

The model_pb2 module is generated from graph/model.proto into a temporary directory
with the system protoc at run time; nothing generated is committed. Seeded: re-running
gives the same files.
"""
import importlib
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.ao.nn.intrinsic as nni

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(REPO, "tests", "runtime", "testdata", "float")


def load_model_pb2():
    tmp = tempfile.mkdtemp(prefix="fuselage_pb2_")
    subprocess.check_call(["protoc", "--proto_path=" + os.path.join(REPO, "graph"),
                           "--python_out=" + tmp, "model.proto"])
    sys.path.insert(0, tmp)
    return importlib.import_module("model_pb2")


pb = load_model_pb2()


class Ref:
    """A reference to a node by name, as an arg."""

    def __init__(self, name):
        self.name = name


def arg(v):
    a = pb.Arg()
    if v is None:
        a.none = True
    elif isinstance(v, Ref):
        a.node = v.name
    elif isinstance(v, bool):
        a.bool_value = v
    elif isinstance(v, int):
        a.int_value = v
    elif isinstance(v, float):
        a.float_value = v
    elif isinstance(v, str):
        a.string_value = v
    elif isinstance(v, torch.dtype):
        a.dtype_value = {torch.float32: pb.FLOAT32}[v]
    elif isinstance(v, slice):
        a.slice.items.extend(arg(x) for x in (v.start, v.stop, v.step))
    elif v is Ellipsis:
        a.ellipsis = True
    elif isinstance(v, tuple):
        a.tuple.items.extend(arg(x) for x in v)
    elif isinstance(v, list):
        a.list.items.extend(arg(x) for x in v)
    else:
        raise TypeError(v)
    return a


def tensor(t):
    t = t.detach().contiguous()
    p = pb.Tensor()
    p.dtype = pb.FLOAT32
    p.shape.extend(t.shape)
    p.data = t.numpy().astype("<f4").tobytes()
    return p


def module_type(m):
    if type(m).__module__.startswith("torch.ao.nn.intrinsic"):
        return "nni." + type(m).__name__
    return "nn." + type(m).__name__


ATTRS = {
    nn.Conv2d: ["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                "groups", "padding_mode"],
    nn.Conv1d: ["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                "groups", "padding_mode"],
    nn.Conv3d: ["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                "groups", "padding_mode"],
    nn.ConvTranspose1d: ["in_channels", "out_channels", "kernel_size", "stride", "padding",
                         "output_padding", "dilation", "groups", "padding_mode"],
    nn.ConvTranspose2d: ["in_channels", "out_channels", "kernel_size", "stride", "padding",
                         "output_padding", "dilation", "groups", "padding_mode"],
    nn.ConvTranspose3d: ["in_channels", "out_channels", "kernel_size", "stride", "padding",
                         "output_padding", "dilation", "groups", "padding_mode"],
    nn.BatchNorm3d: ["num_features", "eps", "momentum", "affine", "track_running_stats"],
    nn.Linear: ["in_features", "out_features"],
    nn.BatchNorm1d: ["num_features", "eps", "momentum", "affine", "track_running_stats"],
    nn.BatchNorm2d: ["num_features", "eps", "momentum", "affine", "track_running_stats"],
    nn.ReLU6: ["min_val", "max_val"],
    nn.Hardtanh: ["min_val", "max_val"],
    nn.MaxPool2d: ["kernel_size", "stride", "padding", "dilation", "ceil_mode"],
    nn.AvgPool2d: ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                   "divisor_override"],
    nn.AdaptiveAvgPool2d: ["output_size"],
    nn.Flatten: ["start_dim", "end_dim"],
    nn.Dropout: ["p"],
    nn.GELU: ["approximate"],
    nn.ELU: ["alpha"],
    nn.LeakyReLU: ["negative_slope"],
    nn.PReLU: ["num_parameters"],
    nn.Softmax: ["dim"],
    nn.LogSoftmax: ["dim"],
    nn.LayerNorm: ["normalized_shape", "eps", "elementwise_affine"],
    nn.GroupNorm: ["num_groups", "num_channels", "eps", "affine"],
    nn.InstanceNorm1d: ["num_features", "eps", "momentum", "affine", "track_running_stats"],
    nn.InstanceNorm2d: ["num_features", "eps", "momentum", "affine", "track_running_stats"],
    nn.Upsample: ["size", "scale_factor", "mode", "align_corners", "recompute_scale_factor"],
    nn.UpsamplingBilinear2d: ["size", "scale_factor", "mode", "align_corners",
                              "recompute_scale_factor"],
    nn.AdaptiveMaxPool2d: ["output_size", "return_indices"],
    nn.MaxPool1d: ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
    nn.AvgPool1d: ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"],
    nn.AdaptiveAvgPool1d: ["output_size"],
}


def module_proto(m):
    p = pb.Module()
    p.type = module_type(m)
    for name, t in list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False)):
        if t is not None and t.dtype == torch.float32:
            p.tensors.add(name=name, tensor=tensor(t))
    for name in ATTRS.get(type(m), []):
        value = getattr(m, name)
        p.attributes.add(name=name, value=arg(list(value) if isinstance(value, tuple) else value))
    for name, child in m.named_children():
        p.children.add(name=name, module=module_proto(child))
    return p


def node(name, op, target, args=(), kwargs=None):
    n = pb.Node(name=name, op=op, target=target)
    n.args.extend(arg(a) for a in args)
    for k, v in (kwargs or {}).items():
        n.kwargs.add(name=k, value=arg(v))
    return n


CASES = []


def case(name, inputs, outputs, op, target, args, kwargs=None, modules=None, attrs=None,
         then=None):
    """One golden: placeholders x0.. fed `inputs`, one op node, output = the op's value.

    args / kwargs may use Ref("x0"), Ref("w") (a get_attr of root tensor `w` from `attrs`).
    `then` lists further nodes (name, op, target, args) after "op" (a getitem of its
    tuple, say); the output is then the last of them.
    """
    model = pb.Model(format_version=1, producer="tests/runtime/gen_float_goldens.py (torch %s)"
                     % torch.__version__)
    model.root.type = "GraphModule"
    for i, x in enumerate(inputs):
        model.graph.nodes.append(node("x%d" % i, pb.PLACEHOLDER, "x%d" % i))
    for attr_name, t in (attrs or {}).items():
        model.root.tensors.add(name=attr_name, tensor=tensor(t))
        model.graph.nodes.append(node(attr_name, pb.GET_ATTR, attr_name))
    for path, m in (modules or {}).items():
        model.root.children.add(name=path, module=module_proto(m))
    model.graph.nodes.append(node("op", op, target, args, kwargs))
    last = "op"
    for then_name, then_op, then_target, then_args in then or []:
        model.graph.nodes.append(node(then_name, then_op, then_target, then_args))
        last = then_name
    model.graph.nodes.append(node("output", pb.OUTPUT, "output", [Ref(last)]))
    flat = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    for i, x in enumerate(inputs):
        model.root.tensors.add(name="input_%d" % i, tensor=tensor(x))
    for i, y in enumerate(flat):
        model.root.tensors.add(name="expected_%d" % i, tensor=tensor(y))
    CASES.append((name, model))


def module_case(name, m, *inputs):
    m.eval()
    with torch.no_grad():
        y = m(*inputs)
    case(name, inputs, y, pb.CALL_MODULE, "m", [Ref("x%d" % i) for i in range(len(inputs))],
         modules={"m": m})


def randomize_bn(bn):
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return bn


def build_cases():
    torch.manual_seed(0)
    r = torch.randn
    # ---- Conv2d: stride, padding, dilation, groups (depthwise), bias -----------------
    module_case("conv2d_basic", nn.Conv2d(3, 4, 3, padding=1), r(1, 3, 6, 6))
    module_case("conv2d_stride_dilation_nobias",
                nn.Conv2d(3, 5, 3, stride=2, padding=2, dilation=2, bias=False), r(2, 3, 9, 8))
    module_case("conv2d_groups", nn.Conv2d(4, 6, (3, 2), padding=(1, 0), groups=2), r(1, 4, 5, 6))
    module_case("conv2d_depthwise", nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), r(2, 4, 7, 7))
    module_case("conv2d_1x1", nn.Conv2d(6, 3, 1), r(1, 6, 4, 5))
    module_case("conv2d_unbatched", nn.Conv2d(2, 3, 2, stride=(1, 2)), r(2, 5, 5))
    # ---- Linear, BatchNorm -----------------------------------------------------------
    module_case("linear", nn.Linear(5, 3), r(2, 4, 5))
    module_case("linear_nobias", nn.Linear(6, 2, bias=False), r(3, 6))
    module_case("batchnorm2d", randomize_bn(nn.BatchNorm2d(3, eps=1e-3)), r(2, 3, 4, 4))
    module_case("batchnorm1d_2d", randomize_bn(nn.BatchNorm1d(4)), r(5, 4))
    module_case("batchnorm1d_3d", randomize_bn(nn.BatchNorm1d(3)), r(2, 3, 6))
    # ---- Activations -----------------------------------------------------------------
    module_case("relu", nn.ReLU(), r(2, 3, 4))
    module_case("relu6", nn.ReLU6(), r(2, 3, 4) * 5)
    module_case("hardtanh", nn.Hardtanh(-0.5, 0.75), r(3, 5))
    module_case("hardswish", nn.Hardswish(), r(2, 3, 4) * 4)
    module_case("sigmoid", nn.Sigmoid(), r(2, 7) * 3)
    # ---- Pools -----------------------------------------------------------------------
    module_case("maxpool2d", nn.MaxPool2d(3, 2, 1), r(1, 2, 7, 7))
    module_case("maxpool2d_ceil_dilation", nn.MaxPool2d(2, stride=2, dilation=2, ceil_mode=True),
                r(1, 2, 8, 7))
    module_case("avgpool2d", nn.AvgPool2d(3, 2, 1), r(1, 2, 7, 6))
    module_case("avgpool2d_no_pad_count_ceil",
                nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), r(2, 2, 6, 6))
    module_case("avgpool2d_divisor", nn.AvgPool2d((2, 3), divisor_override=5), r(1, 1, 6, 6))
    module_case("adaptive_avgpool2d_1x1", nn.AdaptiveAvgPool2d((1, 1)), r(2, 3, 5, 5))
    module_case("adaptive_avgpool2d_uneven", nn.AdaptiveAvgPool2d((3, 2)), r(1, 2, 7, 5))
    module_case("adaptive_avgpool2d_none", nn.AdaptiveAvgPool2d((None, 2)), r(1, 2, 3, 5))
    # ---- Shape / pass-through modules --------------------------------------------------
    module_case("flatten_module", nn.Flatten(), r(2, 3, 2, 2))
    module_case("identity", nn.Identity(), r(2, 3))
    module_case("dropout_eval", nn.Dropout(0.5), r(4, 4))
    # ---- Fused float modules (children "0", "1", ...) ---------------------------------
    module_case("nni_conv_relu2d", nni.ConvReLU2d(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()),
                r(1, 3, 5, 5))
    module_case("nni_conv_bn2d",
                nni.ConvBn2d(nn.Conv2d(3, 4, 3), randomize_bn(nn.BatchNorm2d(4))), r(1, 3, 5, 5))
    module_case("nni_conv_bn_relu2d",
                nni.ConvBnReLU2d(nn.Conv2d(2, 3, 3, stride=2), randomize_bn(nn.BatchNorm2d(3)),
                                 nn.ReLU()), r(1, 2, 7, 7))
    module_case("nni_bn_relu2d", nni.BNReLU2d(randomize_bn(nn.BatchNorm2d(3)), nn.ReLU()),
                r(1, 3, 4, 4))
    module_case("nni_linear_relu", nni.LinearReLU(nn.Linear(4, 5), nn.ReLU()), r(3, 4))
    module_case("nni_linear_bn1d", nni.LinearBn1d(nn.Linear(4, 3), randomize_bn(nn.BatchNorm1d(3))),
                r(5, 4))
    # torch 1.13 has no ConvAdd2d / ConvAddReLU2d: same children layout, semantics per
    # NAMING.md: relu(conv(x) + extra).
    conv = nn.Conv2d(3, 4, 3, padding=1).eval()
    x, extra = r(1, 3, 5, 5), r(1, 4, 5, 5)
    with torch.no_grad():
        y = conv(x) + extra
    for relu in (False, True):
        p = pb.Module(type="nni.ConvAddReLU2d" if relu else "nni.ConvAdd2d")
        p.children.add(name="0", module=module_proto(conv))
        if relu:
            p.children.add(name="1", module=module_proto(nn.ReLU()))
        name = "nni_conv_add_relu2d" if relu else "nni_conv_add2d"
        case(name, [x, extra], torch.relu(y) if relu else y, pb.CALL_MODULE, "m",
             [Ref("x0"), Ref("x1")])
        CASES[-1][1].root.children.add(name="m", module=p)

    # ---- Functions and methods --------------------------------------------------------
    fn, meth = pb.CALL_FUNCTION, pb.CALL_METHOD
    a, b = r(2, 3, 4), r(3, 1)
    case("torch_add_broadcast_alpha", [a, b], torch.add(a, b, alpha=0.5), fn, "torch.add",
         [Ref("x0"), Ref("x1")], {"alpha": 0.5})
    case("operator_add_scalar", [a], a + 2.5, fn, "operator.add", [Ref("x0"), 2.5])
    case("operator_add_scalar_left", [a], 3 + a, fn, "operator.add", [3, Ref("x0")])
    case("method_add_tensor", [a, a * 2], a.add(a * 2), meth, "add", [Ref("x0"), Ref("x1")])
    c = r(1, 3, 1)
    case("operator_mul_broadcast", [a, c], a * c, fn, "operator.mul", [Ref("x0"), Ref("x1")])
    case("torch_mul_scalar", [a], torch.mul(a, -1.5), fn, "torch.mul", [Ref("x0"), -1.5])
    d = r(2, 2, 4)
    case("torch_cat_dim1", [a, d], torch.cat([a, d], dim=1), fn, "torch.cat",
         [[Ref("x0"), Ref("x1")]], {"dim": 1})
    case("torch_cat_negative_dim", [a, a], torch.cat((a, a), -1), fn, "torch.cat",
         [(Ref("x0"), Ref("x0")), -1])
    e = r(2, 3, 4, 5)
    case("torch_flatten", [e], torch.flatten(e, 1), fn, "torch.flatten", [Ref("x0"), 1])
    case("method_flatten_range", [e], e.flatten(1, 2), meth, "flatten", [Ref("x0"), 1, 2])
    case("method_view", [e], e.view(2, -1), meth, "view", [Ref("x0"), 2, -1])
    case("method_reshape_list", [e], e.reshape([6, 20]), meth, "reshape", [Ref("x0"), [6, 20]])
    case("method_mean_hw_keepdim", [e], e.mean([2, 3], keepdim=True), meth, "mean",
         [Ref("x0"), [2, 3]], {"keepdim": True})
    case("torch_mean_all", [e], torch.mean(e), fn, "torch.mean", [Ref("x0")])
    case("method_mean_dim", [e], e.mean(1), meth, "mean", [Ref("x0"), 1])
    case("method_relu", [a], a.relu(), meth, "relu", [Ref("x0")])
    case("torch_relu", [a], torch.relu(a), fn, "torch.relu", [Ref("x0")])
    case("functional_relu", [a], F.relu(a), fn, "torch.nn.functional.relu", [Ref("x0")],
         {"inplace": False})
    case("functional_hardtanh", [a], F.hardtanh(a, -0.2, 0.3), fn, "torch.nn.functional.hardtanh",
         [Ref("x0"), -0.2, 0.3])
    case("functional_relu6", [a * 4], F.relu6(a * 4), fn, "torch.nn.functional.relu6", [Ref("x0")])
    case("functional_hardswish", [a * 3], F.hardswish(a * 3), fn,
         "torch.nn.functional.hardswish", [Ref("x0")])
    case("torch_sigmoid", [a], torch.sigmoid(a), fn, "torch.sigmoid", [Ref("x0")])
    w, bias = r(4, 2, 3, 3), r(4)
    f = r(1, 4, 6, 6)
    case("functional_conv2d_kwargs", [f], F.conv2d(f, w, bias, stride=2, padding=1, groups=2),
         fn, "torch.nn.functional.conv2d", [Ref("x0"), Ref("w"), Ref("bias")],
         {"stride": 2, "padding": 1, "groups": 2}, attrs={"w": w, "bias": bias})
    w2 = r(3, 5)
    g = r(2, 5)
    case("functional_linear_nobias", [g], F.linear(g, w2), fn, "torch.nn.functional.linear",
         [Ref("x0"), Ref("w")], attrs={"w": w2})
    case("functional_max_pool2d", [f], F.max_pool2d(f, 2), fn, "torch.nn.functional.max_pool2d",
         [Ref("x0"), 2])
    case("functional_avg_pool2d", [f], F.avg_pool2d(f, 3, stride=2, padding=1), fn,
         "torch.nn.functional.avg_pool2d", [Ref("x0"), 3], {"stride": 2, "padding": 1})
    case("functional_adaptive_avg_pool2d", [f], F.adaptive_avg_pool2d(f, (2, 3)), fn,
         "torch.nn.functional.adaptive_avg_pool2d", [Ref("x0"), (2, 3)])
    case("method_contiguous", [a], a.contiguous(), meth, "contiguous", [Ref("x0")])
    # Added later; kept last so earlier cases keep their random draws.
    module_case("hardsigmoid", nn.Hardsigmoid(), r(2, 3, 4) * 4)
    h = r(3, 5) * 4
    case("functional_hardsigmoid", [h], F.hardsigmoid(h), fn,
         "torch.nn.functional.hardsigmoid", [Ref("x0")])

    build_nd_conv_cases()
    build_model_op_cases()


def build_nd_conv_cases():
    """Conv1d / Conv3d, ConvTranspose1d/2d/3d, BatchNorm3d and their fused forms. Seeded
    on their own, after the older cases, so adding them left those goldens unchanged."""
    torch.manual_seed(1)
    r = torch.randn
    module_case("conv1d_basic", nn.Conv1d(3, 4, 3, padding=1), r(2, 3, 9))
    module_case("conv1d_stride_dilation_groups_nobias",
                nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2, bias=False),
                r(1, 4, 11))
    module_case("conv1d_unbatched", nn.Conv1d(2, 3, 2), r(2, 6))
    module_case("conv3d_basic", nn.Conv3d(2, 3, 3, padding=1), r(1, 2, 4, 5, 5))
    module_case("conv3d_stride_dilation_groups",
                nn.Conv3d(4, 4, (2, 3, 3), stride=(1, 2, 2), padding=(0, 2, 1),
                          dilation=(1, 2, 1), groups=2), r(2, 4, 4, 7, 6))
    module_case("conv_transpose1d_basic", nn.ConvTranspose1d(3, 4, 3), r(2, 3, 6))
    module_case("conv_transpose1d_all_params",
                nn.ConvTranspose1d(4, 6, 3, stride=3, padding=1, output_padding=2, dilation=2,
                                   groups=2), r(1, 4, 5))
    module_case("conv_transpose2d_basic", nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1),
                r(1, 3, 4, 4))
    module_case("conv_transpose2d_all_params_nobias",
                nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0),
                                   output_padding=(1, 2), dilation=(2, 1), groups=2, bias=False),
                r(2, 4, 3, 5))
    module_case("conv_transpose2d_unbatched", nn.ConvTranspose2d(2, 3, 2), r(2, 3, 3))
    module_case("conv_transpose3d_basic", nn.ConvTranspose3d(2, 3, 2, stride=2), r(1, 2, 2, 3, 3))
    module_case("conv_transpose3d_all_params",
                nn.ConvTranspose3d(2, 4, (2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0),
                                   output_padding=(1, 0, 1), dilation=(1, 2, 1), groups=2),
                r(2, 2, 3, 4, 3))
    module_case("batchnorm3d", randomize_bn(nn.BatchNorm3d(3)), r(2, 3, 2, 3, 4))
    module_case("nni_conv_relu1d", nni.ConvReLU1d(nn.Conv1d(3, 4, 3, padding=1), nn.ReLU()),
                r(2, 3, 7))
    module_case("nni_conv_relu3d", nni.ConvReLU3d(nn.Conv3d(2, 3, 3, padding=1), nn.ReLU()),
                r(1, 2, 3, 4, 4))
    module_case("nni_conv_bn1d",
                nni.ConvBn1d(nn.Conv1d(3, 4, 3), randomize_bn(nn.BatchNorm1d(4))), r(2, 3, 8))
    module_case("nni_conv_bn_relu3d",
                nni.ConvBnReLU3d(nn.Conv3d(2, 3, 2), randomize_bn(nn.BatchNorm3d(3)), nn.ReLU()),
                r(1, 2, 3, 4, 4))
    module_case("nni_bn_relu3d", nni.BNReLU3d(randomize_bn(nn.BatchNorm3d(3)), nn.ReLU()),
                r(1, 3, 2, 3, 3))


def randomize_affine(m):
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m


def build_model_op_cases():
    """The ops of torchvision's newer models (efficientnet, mobilenet_v3, convnext,
    regnet, deeplabv3) and their relatives: activations, norms, softmax, shape ops,
    matmul, reductions, resampling, padding, stochastic depth and broadcasting
    arithmetic. Seeded on their own, after the older cases."""
    torch.manual_seed(2)
    r = torch.randn
    fn, meth = pb.CALL_FUNCTION, pb.CALL_METHOD
    get = pb.CALL_FUNCTION, "operator.getitem"
    # ---- Activation modules --------------------------------------------------------
    module_case("silu", nn.SiLU(), r(2, 3, 4) * 3)
    module_case("gelu_none", nn.GELU(), r(2, 3, 4) * 3)
    module_case("gelu_tanh", nn.GELU("tanh"), r(2, 3, 4) * 3)
    module_case("tanh", nn.Tanh(), r(2, 5) * 2)
    module_case("elu", nn.ELU(0.7), r(2, 6) * 2)
    module_case("leaky_relu", nn.LeakyReLU(0.2), r(3, 4))
    prelu = nn.PReLU(3)
    with torch.no_grad():
        prelu.weight.uniform_(-0.5, 0.5)
    module_case("prelu_per_channel", prelu, r(2, 3, 2, 2))
    module_case("prelu_single", nn.PReLU(init=0.1), r(2, 5))
    module_case("softmax_dim1", nn.Softmax(dim=1), r(2, 5, 3) * 3)
    module_case("softmax_dim_none", nn.Softmax(), r(2, 3, 2, 2))  # legacy: dim 1 for 4-d
    module_case("log_softmax_last", nn.LogSoftmax(dim=-1), r(3, 7) * 3)
    # ---- Norm modules ----------------------------------------------------------------
    module_case("layer_norm", randomize_affine(nn.LayerNorm(8)), r(2, 3, 8) * 2 + 1)
    module_case("layer_norm_2d_shape_no_affine",
                nn.LayerNorm([4, 5], eps=1e-3, elementwise_affine=False), r(2, 3, 4, 5))
    module_case("group_norm", randomize_affine(nn.GroupNorm(2, 6)), r(2, 6, 3, 4) + 0.5)
    module_case("group_norm_no_affine", nn.GroupNorm(3, 3, affine=False), r(1, 3, 5))
    module_case("instance_norm2d", nn.InstanceNorm2d(3), r(2, 3, 4, 5))
    module_case("instance_norm2d_affine_unbatched",
                randomize_affine(nn.InstanceNorm2d(3, affine=True)), r(3, 4, 5))
    module_case("instance_norm1d_running_stats",
                randomize_bn(nn.InstanceNorm1d(3, affine=True, track_running_stats=True)),
                r(2, 3, 6))
    # ---- Resampling and adaptive max pooling modules ------------------------------------
    module_case("upsample_nearest_scale2", nn.Upsample(scale_factor=2), r(1, 2, 3, 4))
    module_case("upsample_bilinear_size", nn.Upsample(size=(7, 5), mode="bilinear"),
                r(1, 2, 3, 4))
    module_case("upsample_bilinear_align_corners_scale",
                nn.Upsample(scale_factor=1.7, mode="bilinear", align_corners=True), r(1, 2, 4, 5))
    module_case("upsampling_bilinear2d", nn.UpsamplingBilinear2d(scale_factor=2), r(1, 2, 3, 3))
    module_case("adaptive_maxpool2d", nn.AdaptiveMaxPool2d((3, 2)), r(1, 2, 7, 5))
    # ---- Activation functions -----------------------------------------------------------
    a = r(2, 3, 4) * 3
    case("functional_silu", [a], F.silu(a), fn, "torch.nn.functional.silu", [Ref("x0")],
         {"inplace": False})
    case("functional_gelu_tanh", [a], F.gelu(a, approximate="tanh"), fn,
         "torch.nn.functional.gelu", [Ref("x0")], {"approximate": "tanh"})
    case("functional_gelu", [a], F.gelu(a), fn, "torch.nn.functional.gelu", [Ref("x0")])
    case("torch_tanh", [a], torch.tanh(a), fn, "torch.tanh", [Ref("x0")])
    case("method_tanh", [a], a.tanh(), meth, "tanh", [Ref("x0")])
    case("functional_sigmoid", [a], torch.sigmoid(a), fn, "torch.nn.functional.sigmoid",
         [Ref("x0")])
    case("functional_elu", [a], F.elu(a, alpha=0.5), fn, "torch.nn.functional.elu",
         [Ref("x0")], {"alpha": 0.5, "inplace": False})
    case("functional_leaky_relu", [a], F.leaky_relu(a, 0.1), fn,
         "torch.nn.functional.leaky_relu", [Ref("x0"), 0.1])
    pw = torch.rand(3) - 0.5
    case("functional_prelu", [a], F.prelu(a, pw), fn, "torch.nn.functional.prelu",
         [Ref("x0"), Ref("w")], attrs={"w": pw})
    # ---- Softmax (FX records F.softmax's _stacklevel and dtype) -------------------------
    case("functional_softmax", [a], F.softmax(a, dim=-1), fn, "torch.nn.functional.softmax",
         [Ref("x0")], {"dim": -1, "_stacklevel": 3, "dtype": None})
    case("torch_softmax", [a], torch.softmax(a, 1), fn, "torch.softmax", [Ref("x0"), 1])
    case("method_softmax", [a], a.softmax(0), meth, "softmax", [Ref("x0"), 0])
    case("functional_log_softmax", [a], F.log_softmax(a, dim=1), fn,
         "torch.nn.functional.log_softmax", [Ref("x0")],
         {"dim": 1, "_stacklevel": 3, "dtype": None})
    case("method_log_softmax", [a], a.log_softmax(-1), meth, "log_softmax", [Ref("x0"), -1])
    # ---- Norm functions (convnext's LayerNorm2d calls F.layer_norm after a permute) ------
    ln_w, ln_b = torch.rand(4) + 0.5, torch.rand(4) - 0.5
    e = r(2, 3, 5, 4) * 2
    case("functional_layer_norm", [e], F.layer_norm(e, (4,), ln_w, ln_b, 1e-6), fn,
         "torch.nn.functional.layer_norm", [Ref("x0"), (4,), Ref("w"), Ref("b"), 1e-6],
         attrs={"w": ln_w, "b": ln_b})
    gn_w, gn_b = torch.rand(6) + 0.5, torch.rand(6) - 0.5
    g = r(2, 6, 3, 3)
    case("functional_group_norm", [g], F.group_norm(g, 3, gn_w, gn_b), fn,
         "torch.nn.functional.group_norm", [Ref("x0"), 3, Ref("w"), Ref("b")],
         attrs={"w": gn_w, "b": gn_b})
    case("functional_instance_norm", [g], F.instance_norm(g), fn,
         "torch.nn.functional.instance_norm", [Ref("x0")])
    # ---- Shape ops ----------------------------------------------------------------------
    case("torch_permute", [e], torch.permute(e, (0, 2, 3, 1)), fn, "torch.permute",
         [Ref("x0"), (0, 2, 3, 1)])
    case("method_permute_varargs", [e], e.permute(0, 3, 1, 2), meth, "permute",
         [Ref("x0"), 0, 3, 1, 2])
    case("method_permute_list_negative", [a], a.permute([-1, 0, 1]), meth, "permute",
         [Ref("x0"), [-1, 0, 1]])
    case("torch_transpose", [e], torch.transpose(e, 1, -1), fn, "torch.transpose",
         [Ref("x0"), 1, -1])
    case("method_transpose", [a], a.transpose(0, 2), meth, "transpose", [Ref("x0"), 0, 2])
    h = r(2, 7, 3)
    case("torch_chunk_getitem", [h], torch.chunk(h, 3, dim=1)[2], fn, "torch.chunk",
         [Ref("x0"), 3], {"dim": 1}, then=[("item", *get, [Ref("op"), 2])])
    case("method_chunk_all", [h], h.chunk(2, -1), meth, "chunk", [Ref("x0"), 2, -1])
    case("torch_split_int", [h], torch.split(h, 3, dim=1), fn, "torch.functional.split",
         [Ref("x0"), 3], {"dim": 1})
    case("method_split_sections_getitem", [h], h.split([1, 2], dim=2)[1], meth, "split",
         [Ref("x0"), [1, 2]], {"dim": 2}, then=[("item", *get, [Ref("op"), -1])])
    case("torch_unbind", [h], torch.unbind(h, 2), fn, "torch.unbind", [Ref("x0"), 2])
    case("method_unbind_getitem", [h], h.unbind()[1], meth, "unbind", [Ref("x0")],
         then=[("item", *get, [Ref("op"), 1])])
    h2 = r(2, 7, 3)
    case("torch_stack", [h, h2], torch.stack([h, h2], dim=1), fn, "torch.stack",
         [[Ref("x0"), Ref("x1")]], {"dim": 1})
    case("torch_stack_last_dim", [h, h2], torch.stack((h, h2), -1), fn, "torch.stack",
         [(Ref("x0"), Ref("x1")), -1])
    # ---- Matrix products ---------------------------------------------------------------
    m1, m2 = r(2, 1, 3, 4), r(5, 4, 2)
    case("torch_matmul_batch_broadcast", [m1, m2], torch.matmul(m1, m2), fn, "torch.matmul",
         [Ref("x0"), Ref("x1")])
    v1, v2 = r(3, 4), r(4)
    case("torch_matmul_matrix_vector", [v1, v2], torch.matmul(v1, v2), fn, "torch.matmul",
         [Ref("x0"), Ref("x1")])
    v3 = r(2, 4, 3)
    case("operator_matmul_vector_batch", [v2, v3], v2 @ v3, fn, "operator.matmul",
         [Ref("x0"), Ref("x1")])
    b1, b2 = r(2, 3, 4), r(2, 4, 5)
    case("torch_bmm", [b1, b2], torch.bmm(b1, b2), fn, "torch.bmm", [Ref("x0"), Ref("x1")])
    case("method_matmul", [b1, b2], b1.matmul(b2), meth, "matmul", [Ref("x0"), Ref("x1")])
    # ---- Reductions --------------------------------------------------------------------
    case("torch_sum_dims_keepdim", [e], torch.sum(e, [1, 2], keepdim=True), fn, "torch.sum",
         [Ref("x0"), [1, 2]], {"keepdim": True})
    case("method_sum_all", [e], e.sum(), meth, "sum", [Ref("x0")])
    case("method_sum_dim", [e], e.sum(-1), meth, "sum", [Ref("x0"), -1])
    case("torch_amax_keepdim", [e], torch.amax(e, dim=(2, 3), keepdim=True), fn, "torch.amax",
         [Ref("x0")], {"dim": (2, 3), "keepdim": True})
    case("method_amax_dim", [e], e.amax(1), meth, "amax", [Ref("x0"), 1])
    case("method_mean_dims_partial", [e], e.mean((1, 3)), meth, "mean", [Ref("x0"), (1, 3)])
    # ---- Interpolate (as FX records it: every keyword) and pad ------------------------
    def interp(name, x, **kw):
        kwargs = {"size": None, "scale_factor": None, "mode": "nearest", "align_corners": None,
                  "recompute_scale_factor": None, "antialias": False}
        kwargs.update(kw)
        case(name, [x], F.interpolate(x, **kwargs), fn, "torch.nn.functional.interpolate",
             [Ref("x0")], kwargs)
    f = r(1, 2, 4, 5)
    interp("interpolate_nearest_size", f, size=(5, 7))
    interp("interpolate_nearest_scale", f, scale_factor=2.5)
    interp("interpolate_bilinear_size", f, size=(9, 6), mode="bilinear", align_corners=False)
    interp("interpolate_bilinear_align_corners", f, size=(7, 8), mode="bilinear",
           align_corners=True)
    interp("interpolate_bilinear_scale", f, scale_factor=(1.5, 2.0), mode="bilinear",
           align_corners=False)
    interp("interpolate_bilinear_recompute_scale", f, scale_factor=1.3, mode="bilinear",
           align_corners=False, recompute_scale_factor=True)
    interp("interpolate_bilinear_downsample", r(1, 2, 5, 7), size=(2, 3), mode="bilinear",
           align_corners=False)
    case("functional_pad_constant", [f], F.pad(f, (1, 2, 0, 1), value=0.5), fn,
         "torch.nn.functional.pad", [Ref("x0"), (1, 2, 0, 1)], {"value": 0.5})
    case("functional_pad_crop", [f], F.pad(f, (-1, 1)), fn, "torch.nn.functional.pad",
         [Ref("x0"), [-1, 1]], {"mode": "constant"})
    case("functional_adaptive_max_pool2d", [f], F.adaptive_max_pool2d(f, 2), fn,
         "torch.nn.functional.adaptive_max_pool2d", [Ref("x0"), 2])
    # torchvision's StochasticDepth module calls stochastic_depth(input, p, mode, training).
    from torchvision.ops import stochastic_depth
    case("stochastic_depth_eval", [f], stochastic_depth(f, 0.2, "row", False), fn,
         "torchvision.ops.stochastic_depth.stochastic_depth", [Ref("x0"), 0.2, "row", False])
    # ---- Broadcasting arithmetic (squeeze-excitation scales, residual subtractions) ----
    se_x, se_s = r(1, 6, 4, 4), torch.sigmoid(r(1, 6, 1, 1))
    case("operator_mul_squeeze_excitation", [se_x, se_s], se_x * se_s, fn, "operator.mul",
         [Ref("x0"), Ref("x1")])
    c = r(3, 1)
    case("operator_sub_broadcast", [a, c], a - c, fn, "operator.sub", [Ref("x0"), Ref("x1")])
    case("torch_sub_alpha", [a, c], torch.sub(a, c, alpha=2), fn, "torch.sub",
         [Ref("x0"), Ref("x1")], {"alpha": 2})
    case("operator_sub_scalar_left", [a], 1 - a, fn, "operator.sub", [1, Ref("x0")])
    case("method_sub_scalar", [a], a.sub(2.5), meth, "sub", [Ref("x0"), 2.5])
    d = c.abs() + 0.5
    case("operator_truediv_broadcast", [a, d], a / d, fn, "operator.truediv",
         [Ref("x0"), Ref("x1")])
    case("torch_div_scalar", [a], torch.div(a, 4.0), fn, "torch.div", [Ref("x0"), 4.0])
    pos = a.abs() + 0.5
    case("operator_truediv_scalar_left", [pos], 2 / pos, fn, "operator.truediv",
         [2, Ref("x0")])
    case("method_div_tensor", [a, d], a.div(d), meth, "div", [Ref("x0"), Ref("x1")])
    # ---- Functional convolutions with get_attr weights ---------------------------------
    x1, w1, b1 = r(2, 4, 9), r(6, 2, 3), r(6)
    case("functional_conv1d", [x1], F.conv1d(x1, w1, b1, 2, 1, 2, 2), fn,
         "torch.nn.functional.conv1d", [Ref("x0"), Ref("w"), Ref("b"), 2, 1, 2, 2],
         attrs={"w": w1, "b": b1})
    x3, w3 = r(1, 2, 4, 5, 5), r(3, 2, 2, 3, 3)
    case("functional_conv3d_kwargs", [x3], F.conv3d(x3, w3, padding=(0, 1, 1), stride=(1, 2, 1)),
         fn, "torch.nn.functional.conv3d", [Ref("x0"), Ref("w")],
         {"padding": (0, 1, 1), "stride": (1, 2, 1)}, attrs={"w": w3})
    xt, wt, bt = r(1, 4, 5), r(4, 3, 3), r(6)
    case("functional_conv_transpose1d", [xt], F.conv_transpose1d(xt, wt, bt, 2, 1, 1, 2), fn,
         "torch.nn.functional.conv_transpose1d", [Ref("x0"), Ref("w"), Ref("b"), 2, 1, 1, 2],
         attrs={"w": wt, "b": bt})
    xt2, wt2 = r(1, 2, 3, 4), r(2, 3, 3, 3)
    case("functional_conv_transpose2d_dilation", [xt2],
         F.conv_transpose2d(xt2, wt2, stride=2, dilation=2, output_padding=1), fn,
         "torch.nn.functional.conv_transpose2d", [Ref("x0"), Ref("w")],
         {"stride": 2, "dilation": 2, "output_padding": 1}, attrs={"w": wt2})
    xt3, wt3 = r(1, 2, 2, 3, 3), r(2, 2, 2, 2, 2)
    case("functional_conv_transpose3d", [xt3], F.conv_transpose3d(xt3, wt3, stride=2), fn,
         "torch.nn.functional.conv_transpose3d", [Ref("x0"), Ref("w")], {"stride": 2},
         attrs={"w": wt3})
    # ---- squeeze / unsqueeze ------------------------------------------------------------
    q = r(2, 1, 3, 1)
    case("torch_squeeze_all", [q], torch.squeeze(q), fn, "torch.squeeze", [Ref("x0")])
    case("method_squeeze_dim", [q], q.squeeze(-1), meth, "squeeze", [Ref("x0"), -1])
    case("method_squeeze_non_one_dim", [q], q.squeeze(0), meth, "squeeze", [Ref("x0"), 0])
    case("torch_unsqueeze_negative", [q], torch.unsqueeze(q, -1), fn, "torch.unsqueeze",
         [Ref("x0"), -1])
    case("method_unsqueeze", [q], q.unsqueeze(1), meth, "unsqueeze", [Ref("x0"), 1])
    module_case("dropout2d_eval", nn.Dropout2d(0.3), r(1, 3, 2, 2))
    # ---- 1-d pools --------------------------------------------------------------------
    module_case("maxpool1d_dilation_ceil", nn.MaxPool1d(3, 2, 1, dilation=2, ceil_mode=True),
                r(2, 3, 10))
    module_case("avgpool1d_pad_exclude", nn.AvgPool1d(3, 2, 1, count_include_pad=False),
                r(1, 2, 9))
    module_case("adaptive_avgpool1d", nn.AdaptiveAvgPool1d(4), r(2, 3, 7))
    p1 = r(1, 2, 8)
    case("functional_max_pool1d", [p1], F.max_pool1d(p1, 2), fn,
         "torch.nn.functional.max_pool1d", [Ref("x0"), 2])
    case("functional_avg_pool1d_unbatched", [p1[0]], F.avg_pool1d(p1[0], 3, stride=2), fn,
         "torch.nn.functional.avg_pool1d", [Ref("x0"), 3], {"stride": 2})
    case("functional_adaptive_avg_pool1d", [p1], F.adaptive_avg_pool1d(p1, 3), fn,
         "torch.nn.functional.adaptive_avg_pool1d", [Ref("x0"), 3])

    # ---- getitem: basic tensor indexing, shape values and their int arithmetic ----------
    # The index args are what torch.fx records for x[...]: ints, slice objects, None,
    # Ellipsis and tuples of them.
    g = r(2, 3, 5, 6)
    for name, index in [
            ("getitem_ellipsis_slices", (Ellipsis, slice(1, None, None), slice(None, None, 2))),
            ("getitem_int", 1),
            ("getitem_negative_int_none", (None, -1, slice(-3, 100, 2))),
            ("getitem_ellipsis_int", (Ellipsis, 0)),
            ("getitem_open_and_clamped", (slice(None, None, None), slice(-100, -1, None),
                                          None, slice(2, 5, 3))),
            ("getitem_slice_only", slice(1, 2, None)),
            ("getitem_empty_slice", (slice(None, None, None), slice(3, 1, None)))]:
        case(name, [g], g[index], fn, "operator.getitem", [Ref("x0"), index])
    # x.shape[-2:] as the size of an interpolate (deeplabv3 / lraspp heads).
    big, small = r(1, 2, 6, 8), r(1, 2, 3, 4)
    case("shape_slice_interpolate", [big, small], F.interpolate(small, size=big.shape[-2:]), fn,
         "builtins.getattr", [Ref("x0"), "shape"],
         then=[("getitem", fn, "operator.getitem", [Ref("op"), slice(-2, None, None)]),
               ("interpolate", fn, "torch.nn.functional.interpolate",
                [Ref("x1"), Ref("getitem")])])
    # x.reshape(-1, (x.size(2) * x.dim()) - (x.size(2) * x.dim()) // 2 + (0 - 7) // 2 + 4):
    # Python's floor division rounds -7 // 2 to -4.
    s = r(2, 6, 4)
    k = (s.size(2) * s.dim()) - (s.size(2) * s.dim()) // 2 + (0 - 7) // 2 + 4
    case("shape_int_arithmetic_reshape", [s], s.reshape(-1, k), meth, "size", [Ref("x0"), 2],
         then=[("dim", meth, "dim", [Ref("x0")]),
               ("mul", fn, "operator.mul", [Ref("op"), Ref("dim")]),
               ("floordiv", fn, "operator.floordiv", [Ref("mul"), 2]),
               ("sub", fn, "operator.sub", [Ref("mul"), Ref("floordiv")]),
               ("sub_1", fn, "operator.sub", [0, 7]),
               ("floordiv_1", fn, "operator.floordiv", [Ref("sub_1"), 2]),
               ("add", fn, "operator.add", [Ref("sub"), Ref("floordiv_1")]),
               ("add_1", fn, "operator.add", [Ref("add"), 4]),
               ("reshape", meth, "reshape", [Ref("x0"), -1, Ref("add_1")])])
    # x[:, :x.size(1) - 1]: a slice whose stop is a node.
    case("getitem_slice_stop_node", [g], g[:, :g.size(1) - 1], meth, "size", [Ref("x0"), 1],
         then=[("sub", fn, "operator.sub", [Ref("op"), 1]),
               ("getitem", fn, "operator.getitem",
                [Ref("x0"), (slice(None, None, None), slice(None, Ref("sub"), None))])])


def write_npy_fixtures():
    """Arrays written by NumPy itself, for npy_test (values are restated in the test)."""
    import numpy as np
    out = os.path.join(REPO, "tests", "runtime", "testdata", "npy")
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "f32_2x3.npy"), np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
    np.save(os.path.join(out, "i64_3.npy"), np.array([-1, 2 ** 40, 7], dtype=np.int64))
    np.save(os.path.join(out, "u8_2x2.npy"), np.array([[0, 255], [128, 1]], dtype=np.uint8))
    np.save(os.path.join(out, "i8_4.npy"), np.array([-128, -1, 0, 127], dtype=np.int8))
    np.save(os.path.join(out, "f32_scalar.npy"), np.array(1.5, dtype=np.float32))
    with open(os.path.join(out, "f32_v2.npy"), "wb") as f:
        np.lib.format.write_array(f, np.array([[1.0, -2.0]], dtype=np.float32), version=(2, 0))
    np.save(os.path.join(out, "f32_fortran.npy"),
            np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    np.save(os.path.join(out, "f64_2.npy"), np.array([1.0, 2.0], dtype=np.float64))
    np.save(os.path.join(out, "f32_bigendian.npy"), np.array([1.0, 2.0], dtype=">f4"))


def main():
    write_npy_fixtures()
    build_cases()
    os.makedirs(OUT_DIR, exist_ok=True)
    for old in os.listdir(OUT_DIR):
        if old.endswith(".pb") or old == "MANIFEST.txt":
            os.remove(os.path.join(OUT_DIR, old))
    names = []
    for name, model in CASES:
        with open(os.path.join(OUT_DIR, name + ".pb"), "wb") as f:
            f.write(model.SerializeToString(deterministic=True))
        names.append(name)
    with open(os.path.join(OUT_DIR, "MANIFEST.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    print("wrote %d cases to %s" % (len(names), OUT_DIR))


if __name__ == "__main__":
    main()
