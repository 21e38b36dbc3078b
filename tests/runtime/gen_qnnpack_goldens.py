#!/usr/bin/python3
"""Generates the QNNPACK-engine golden cases of tests/runtime/quantized/ with PyTorch 1.13.

    /usr/bin/python3 tests/runtime/gen_qnnpack_goldens.py

Writes tests/runtime/testdata/quantized/qnnpack_conv_ties.txt and qnnpack_linear_ties.txt
in gen_quantized_goldens.py's format, from PyTorch's own nnq.Conv2d / nniq.ConvReLU2d /
nnq.Linear / nniq.LinearReLU run by its 'qnnpack' engine, at requantization ties (the
scales of gen_quantized_goldens.py's tie cases). The engine's arithmetic, checked here
against every output before it is written (runtime/quantized/output_requantizer.h):

    bias_q[c] = nearbyint(bias[c] * (1.0f / float(weight_scale[c] * input_scale)))   int32
    scale[c]  = (float(weight_scale[c]) * float(input_scale)) * (1.0f / float(output_scale))
    out       = saturate(nearbyint(float(acc + bias_q[c]) * scale[c]) + output_zero_point)

with relu's lower bound the zero point. Each case also records how many of its outputs
onednn's formula gets wrong ('onednn_differs'), so the C++ test can check that the cases
tell the two engines apart.
"""
import numpy as np
import torch
import torch.nn.functional as F

import gen_quantized_goldens as g

torch.backends.quantized.engine = 'qnnpack'


def qnnpack_requantize(acc, x_scale, w_scales, bias, out_scale, out_zp, relu):
    f32 = np.float32
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    if bias is not None:
        inv = f32(1) / (w_scales.astype(np.float64) * x_scale).astype(f32)
        bias_q = np.rint(bias.astype(f32) * inv).astype(np.int64)
    else:
        bias_q = np.zeros(len(w_scales), np.int64)
    scale = (w_scales.astype(f32) * f32(x_scale)) * (f32(1) / f32(out_scale))
    v = (acc + bias_q.reshape(shape)).astype(f32) * scale.reshape(shape)
    q = np.rint(v).astype(np.int64) + out_zp
    return np.clip(q, out_zp if relu else 0, 255)


def write_case(w, name, qx, qw, bias, scalars, y, acc, x_scale, w_scales, per_channel,
               out_scale, out_zp, relu):
    got = y.int_repr().numpy().astype(np.int64).reshape(acc.shape)
    b = bias.numpy() if bias is not None else None
    mine = qnnpack_requantize(acc, x_scale, w_scales, b, out_scale, out_zp, relu)
    assert (mine == got).all(), '%s: qnnpack formula disagrees with PyTorch: %d outputs' % (
        name, (mine != got).sum())
    onednn = g.onednn_requantize(acc, x_scale, w_scales, per_channel, b, out_scale, out_zp,
                                 relu)
    w.case(name)
    w.tensor('x', qx)
    w.tensor('weight', qw)
    if bias is not None:
        w.tensor('bias', bias)
    for key, v in scalars:
        w.scalar(key, v)
    w.scalar('relu', relu)
    w.scalar('scale', out_scale)
    w.scalar('zero_point', out_zp)
    w.tensor('y', y)
    w.scalar('onednn_differs', int((onednn != got).sum()))
    w.end()


def gen_conv_ties():
    w = g.Writer('qnnpack_conv_ties')
    configs = [
        # name, C, O, k, pad, stride, groups, per_channel, bias, relu
        ('pt_1x1_nobias', 3, 4, 1, 0, 1, 1, False, 'none', False),
        ('pt_1x1_grid_bias_relu', 2, 5, 1, 0, 1, 1, False, 'grid', True),
        ('pt_3x3_random_bias', 3, 3, 3, 1, 1, 1, False, 'random', False),
        ('pt_3x3_stride2_grid_bias', 2, 4, 3, 1, 2, 1, False, 'grid', False),
        ('pc_1x1_nobias_relu', 3, 5, 1, 0, 1, 1, True, 'none', True),
        ('pc_3x3_random_bias_relu', 3, 4, 3, 1, 1, 1, True, 'random', True),
        ('pc_3x3_grid_bias', 2, 3, 3, 1, 1, 1, True, 'grid', False),
        ('pc_3x3_depthwise_random_bias', 4, 4, 3, 1, 1, 4, True, 'random', False),
    ]
    for i, (name, c, o, k, pad, stride, groups, per_channel, bias_kind, relu) in enumerate(
            configs):
        rng = np.random.default_rng(300 + i)
        torch.manual_seed(300 + i)
        x_scale = float(rng.uniform(0.005, 0.1))
        x_zp, out_zp = int(rng.integers(0, 256)), int(rng.integers(0, 256))
        qx = torch.quantize_per_tensor(torch.randn(1, c, 20 + i, 21 + i) * 2, x_scale, x_zp,
                                       torch.quint8)
        w_scales, out_scale, bias = g.tie_case(rng, o, per_channel, bias_kind, x_scale)
        qw = g.quantized_weight(torch.randn(o, c // groups, k, k) * 0.3, w_scales, per_channel)
        cls = g.nniq.ConvReLU2d if relu else g.nnq.Conv2d
        m = cls(c, o, k, stride=stride, padding=pad, groups=groups, bias=bias is not None)
        m.set_weight_bias(qw, bias)
        m.scale, m.zero_point = out_scale, out_zp
        y = m(qx)
        acc = F.conv2d(torch.from_numpy(qx.int_repr().numpy().astype(np.float64) - x_zp),
                       torch.from_numpy(qw.int_repr().numpy().astype(np.float64)),
                       stride=stride, padding=pad, groups=groups).numpy().astype(np.int64)
        write_case(w, name, qx, qw, bias,
                   [('stride', stride), ('padding', pad), ('dilation', 1), ('groups', groups)],
                   y, acc, x_scale, w_scales, per_channel, out_scale, out_zp, relu)
    w.save()


def gen_linear_ties():
    w = g.Writer('qnnpack_linear_ties')
    configs = [
        # name, in_features, out_features, per_channel, bias, relu
        ('pt_nobias', 3, 6, False, 'none', False),
        ('pt_grid_bias_relu', 2, 5, False, 'grid', True),
        ('pc_random_bias', 4, 7, True, 'random', False),
        ('pc_grid_bias_relu', 3, 4, True, 'grid', True),
    ]
    for i, (name, k, o, per_channel, bias_kind, relu) in enumerate(configs):
        rng = np.random.default_rng(400 + i)
        torch.manual_seed(400 + i)
        x_scale = float(rng.uniform(0.005, 0.1))
        x_zp, out_zp = int(rng.integers(0, 256)), int(rng.integers(0, 256))
        qx = torch.quantize_per_tensor(torch.randn(300 + i, k) * 2, x_scale, x_zp,
                                       torch.quint8)
        w_scales, out_scale, bias = g.tie_case(rng, o, per_channel, bias_kind, x_scale)
        qw = g.quantized_weight(torch.randn(o, k) * 0.3, w_scales, per_channel)
        if relu:
            m = g.nniq.LinearReLU(k, o, bias=bias is not None)
        else:
            m = g.nnq.Linear(k, o, bias_=bias is not None)
        m.set_weight_bias(qw, bias)
        m.scale, m.zero_point = out_scale, out_zp
        y = m(qx)
        acc = ((qx.int_repr().numpy().astype(np.int64) - x_zp) @
               qw.int_repr().numpy().astype(np.int64).T)
        write_case(w, name, qx, qw, bias, [], y, acc, x_scale, w_scales, per_channel,
                   out_scale, out_zp, relu)
    w.save()


if __name__ == '__main__':
    gen_conv_ties()
    gen_linear_ties()
