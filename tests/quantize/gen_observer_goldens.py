"""Generates observer_goldens.txt: PyTorch 2's observer results for fixed inputs.

Run with the PyTorch 2 environment's interpreter (tools/pytorch2_env.sh prints it):
    $(bash tools/pytorch2_env.sh | tail -n 1) tests/quantize/gen_observer_goldens.py \
        > tests/quantize/observer_goldens.txt

Format, one record per case (floats printed with %.9g round-trip float32 exactly):
    case <name>
    spec <Kind> <dtype> <qscheme> <reduce_range 0|1> <quant_min|none> <quant_max|none>
         <eps> <averaging_constant> <ch_axis> <bins> <upsample_rate>   (one line)
    input <rank> <dims...> <values...>          (one line per update, in order)
    min_val <n> <values...>
    max_val <n> <values...>
    scales <n> <values...>
    zero_points <n> <values...>
    end
"""
import torch
from torch.ao.quantization import observer as obs

torch.manual_seed(20261129)

EPS = torch.finfo(torch.float32).eps


def fmt(values):
    values = [float(v) for v in values]
    return " ".join("%.9g" % v for v in values)


def emit(name, cls, kwargs, inputs):
    kwargs = dict(kwargs)
    upsample_rate = kwargs.pop("upsample_rate", None)
    o = cls(**kwargs)
    if upsample_rate is not None:
        o.upsample_rate = upsample_rate  # a plain attribute in PyTorch 2, fixed at 16
    for x in inputs:
        o(x)
    scale, zp = o.calculate_qparams()
    kind = cls.__name__
    dtype = str(kwargs.get("dtype", torch.quint8))
    qscheme = str(kwargs.get("qscheme", torch.per_channel_affine if "PerChannel" in kind
                             else torch.per_tensor_affine))
    qmin = kwargs.get("quant_min")
    qmax = kwargs.get("quant_max")
    print("case", name)
    print("spec", kind, dtype, qscheme, int(kwargs.get("reduce_range", False)),
          "none" if qmin is None else qmin, "none" if qmax is None else qmax,
          "%.17g" % kwargs.get("eps", EPS), "%.17g" % kwargs.get("averaging_constant", 0.01),
          kwargs.get("ch_axis", 0), kwargs.get("bins", 2048), getattr(o, "upsample_rate", 16))
    for x in inputs:
        x = x.contiguous()
        print("input", x.dim(), " ".join(str(d) for d in x.shape), fmt(x.flatten().tolist()))
    mn = o.min_val.reshape(-1).tolist()
    mx = o.max_val.reshape(-1).tolist()
    print("min_val", len(mn), fmt(mn))
    print("max_val", len(mx), fmt(mx))
    s = scale.reshape(-1).tolist()
    z = zp.reshape(-1).tolist()
    print("scales", len(s), fmt(s))
    print("zero_points", len(z), " ".join(str(int(v)) for v in z))
    print("end")


def randn(*shape, scale=1.0, shift=0.0):
    return torch.randn(*shape) * scale + shift


def main():
    a = [randn(4, 8, scale=2.0, shift=0.3), randn(4, 8, scale=3.0, shift=-0.5)]
    pos = [torch.rand(3, 5) * 4.0 + 0.25, torch.rand(3, 5) * 6.0 + 0.1]
    # MinMax: affine / symmetric, quint8 / qint8, reduce_range, custom range, eps.
    emit("minmax_quint8_affine", obs.MinMaxObserver, {}, a)
    emit("minmax_quint8_affine_reduce", obs.MinMaxObserver, {"reduce_range": True}, a)
    emit("minmax_qint8_symmetric", obs.MinMaxObserver,
         {"dtype": torch.qint8, "qscheme": torch.per_tensor_symmetric}, a)
    emit("minmax_qint8_symmetric_reduce", obs.MinMaxObserver,
         {"dtype": torch.qint8, "qscheme": torch.per_tensor_symmetric, "reduce_range": True}, a)
    emit("minmax_quint8_symmetric", obs.MinMaxObserver,
         {"dtype": torch.quint8, "qscheme": torch.per_tensor_symmetric}, a)
    emit("minmax_quint8_custom_0_127", obs.MinMaxObserver, {"quant_min": 0, "quant_max": 127}, a)
    emit("minmax_quint8_symmetric_custom", obs.MinMaxObserver,
         {"qscheme": torch.per_tensor_symmetric, "quant_min": 0, "quant_max": 15}, a)
    emit("minmax_qint8_affine_custom_reduce", obs.MinMaxObserver,
         {"dtype": torch.qint8, "quant_min": -127, "quant_max": 127, "reduce_range": True}, a)
    emit("minmax_positive_only", obs.MinMaxObserver, {}, pos)
    emit("minmax_constant_eps", obs.MinMaxObserver, {}, [torch.zeros(2, 3)])
    emit("minmax_tiny_range_custom_eps", obs.MinMaxObserver,
         {"dtype": torch.qint8, "qscheme": torch.per_tensor_symmetric, "eps": 2 ** -12},
         [torch.full((5,), 1e-5)])
    emit("minmax_qint32", obs.MinMaxObserver, {"dtype": torch.qint32}, a)
    # Moving average.
    emit("moving_average_default", obs.MovingAverageMinMaxObserver, {},
         a + [randn(16, scale=5.0)])
    emit("moving_average_c05_qint8", obs.MovingAverageMinMaxObserver,
         {"averaging_constant": 0.5, "dtype": torch.qint8,
          "qscheme": torch.per_tensor_symmetric}, a + [randn(16, scale=0.5)])
    # Per channel (weights: [out, in, kh, kw]).
    w = [randn(4, 3, 3, 3, scale=0.2), randn(4, 3, 3, 3, scale=0.3, shift=0.05)]
    emit("per_channel_qint8_symmetric", obs.PerChannelMinMaxObserver,
         {"dtype": torch.qint8, "qscheme": torch.per_channel_symmetric}, w)
    emit("per_channel_quint8_affine_axis1", obs.PerChannelMinMaxObserver,
         {"ch_axis": 1}, w)
    emit("per_channel_qint8_affine_axis3_reduce", obs.PerChannelMinMaxObserver,
         {"dtype": torch.qint8, "ch_axis": 3, "reduce_range": True}, w)
    emit("per_channel_negative_axis", obs.PerChannelMinMaxObserver,
         {"ch_axis": -1, "dtype": torch.qint8, "qscheme": torch.per_channel_symmetric},
         [randn(2, 5, scale=0.7)])
    emit("moving_average_per_channel", obs.MovingAveragePerChannelMinMaxObserver,
         {"averaging_constant": 0.25}, w + [randn(4, 3, 3, 3)])
    # Histogram: one update, growing ranges, reduce_range, symmetric qint8, small bins.
    big = [randn(64, 32, scale=1.5, shift=0.2)]
    emit("histogram_single", obs.HistogramObserver, {}, big)
    emit("histogram_reduce_range", obs.HistogramObserver, {"reduce_range": True},
         big + [randn(64, 32, scale=3.0, shift=-1.0)])
    emit("histogram_three_updates", obs.HistogramObserver, {},
         [randn(256, scale=2.0), randn(256, scale=4.0, shift=1.0), randn(256, scale=1.0)])
    emit("histogram_symmetric_qint8", obs.HistogramObserver,
         {"dtype": torch.qint8, "qscheme": torch.per_tensor_symmetric},
         [randn(512, scale=2.5), randn(512, scale=3.5)])
    emit("histogram_small_bins", obs.HistogramObserver, {"bins": 64, "upsample_rate": 8},
         [torch.rand(200) * 10.0 - 3.0, torch.rand(200) * 20.0 - 9.0])
    emit("histogram_positive", obs.HistogramObserver, {},
         [torch.rand(300) * 6.0, torch.rand(300) * 9.0])


if __name__ == "__main__":
    main()
