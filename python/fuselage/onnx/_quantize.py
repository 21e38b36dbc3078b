"""fuselage.onnx.quantize_static: ONNX Runtime's quantize_static, run by fuselage.

    from fuselage.onnx import quantize_static      # instead of onnxruntime.quantization's
    quantize_static("model.onnx", "model.qdq.onnx", reader, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)

The same arguments with the same meaning as ONNX Runtime's (its enums, or their names as
strings): the float model is read by fuselage.from_onnx, prepared with observers that
compute what ORT's MinMax calibration computes (activations asymmetric over the whole
range of their type, min and max over all the samples and widened to hold 0; weights
symmetric over [-127, 127], per output channel with per_channel=True; a GlobalAveragePool's
output on its own range, as ORT's QLinearGlobalAveragePool has), calibrated on the reader's
samples, converted by fuselage, and written by fuselage.to_onnx as QDQ. The file
keeps the model's input and output names, so ORT's reader and feeds work unchanged.

What fuselage does not do is an OnnxImportError naming the argument: quant_format
QOperator, calibrate_method other than MinMax, types other than (U)Int8, uint8 weights,
nodes_to_quantize, an extra option other than the few below, external data output.
"""

import os

import torch

from fuselage.errors import (ConfigTranslationError, FuselageError, OnnxExportError,
                             OnnxImportError, PatternError)

# ORT's extra_options fuselage honours, and the value each must have.
_EXTRA_OPTIONS = {"ActivationSymmetric": False, "WeightSymmetric": True,
                  "EnableSubgraph": False, "ForceQuantizeNoInputCheck": False,
                  "MatMulConstBOnly": True, "AddQDQPairToWeight": False,
                  "QuantizeBias": True, "DedicatedQDQPair": False}

# The ONNX op types ORT's op_types_to_quantize names -> the fx targets from_onnx makes.
_OP_TYPES = {
    "Conv": (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d),
    "Gemm": (torch.nn.Linear,), "MatMul": (torch.nn.Linear, torch.matmul),
    "Add": ("add",), "Mul": ("mul",),
    "Relu": (torch.nn.ReLU,), "Clip": (torch.nn.ReLU6, torch.nn.Hardtanh, torch.clamp),
    "MaxPool": (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d),
    "AveragePool": (torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.AvgPool3d),
    "GlobalAveragePool": (torch.nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool2d,
                          torch.nn.AdaptiveAvgPool3d),
    "Concat": (torch.cat,), "Flatten": (torch.flatten,),
    "Reshape": (torch.reshape,), "Transpose": (torch.permute,),
    "Sigmoid": (torch.sigmoid,), "HardSwish": (torch.nn.Hardswish,),
    "HardSigmoid": (torch.nn.Hardsigmoid,), "ReduceMean": (torch.mean,),
    "BatchNormalization": (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d),
    "LayerNormalization": (torch.nn.LayerNorm,),
}


# A Relu after one of these is quantized with it (ORT folds it into the op's Q; fuselage
# fuses it into the op, which needs one qconfig for both).
_RELU_FOLLOWS = ("Conv", "Gemm", "Add")


def _name(value):
    """An ORT enum member's name (QuantType.QUInt8 -> 'QUInt8'), or a string as given."""
    return getattr(value, "name", value)


def _refuse(argument, value, expected):
    raise OnnxImportError(f"quantize_static: {argument}={_name(value)!s} is not supported by "
                          f"fuselage; expected {expected}")


def _dtype(argument, value):
    name = _name(value)
    dtypes = {"QUInt8": torch.quint8, "QInt8": torch.qint8}
    if name not in dtypes:
        _refuse(argument, value, "QuantType.QUInt8 or QuantType.QInt8")
    return dtypes[name]


def _qconfig(activation, weight_dtype, per_channel, reduce_range, symmetric_activation):
    from torch.ao.quantization import QConfig
    from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver
    info = torch.iinfo(torch.uint8 if activation is torch.quint8 else torch.int8)
    # ORT's symmetric int8 activations are over [-127, 127] (scale max|x| / 127), not
    # PyTorch's [-128, 127] (max|x| / 127.5, which clips the largest by half a step).
    lowest = -info.max if symmetric_activation and activation is torch.qint8 else info.min
    act = MinMaxObserver.with_args(
        dtype=activation, quant_min=lowest, quant_max=info.max,
        qscheme=torch.per_tensor_symmetric if symmetric_activation else
        torch.per_tensor_affine)
    # ORT's symmetric int8 weights: [-127, 127], [-64, 64] with reduce_range (7 bits).
    bound = 64 if reduce_range else 127
    if per_channel:
        weight = PerChannelMinMaxObserver.with_args(
            dtype=weight_dtype, qscheme=torch.per_channel_symmetric, quant_min=-bound,
            quant_max=bound, ch_axis=0)
    else:
        weight = MinMaxObserver.with_args(dtype=weight_dtype, qscheme=torch.per_tensor_symmetric,
                                          quant_min=-bound, quant_max=bound)
    return QConfig(activation=act, weight=weight)


# ORT calibrates a GlobalAveragePool's output with its own range (QLinearGlobalAveragePool
# has an output scale of its own), and leaves a ReduceMean float, so what reads a mean is
# quantized over the mean's own range; PyTorch's native config shares the input's
# observer, whose range a spatial mean's output may use a fraction of (10 dB on a
# convnext block).
_OWN_OUTPUT_OBSERVER = (torch.nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool2d,
                        torch.nn.AdaptiveAvgPool3d, torch.mean)


def _backend_config(activation):
    """PyTorch's native BackendConfig with ORT's observation of GlobalAveragePool's output
    (_OWN_OUTPUT_OBSERVER), for int8 activations with each quint8 dtype config repeated
    with qint8 activations (ORT quantizes either)."""
    import torch.ao.quantization.backend_config.utils  # noqa: F401 (native.py needs it loaded)
    from torch.ao.quantization.backend_config import (DTypeConfig, ObservationType,
                                                      get_native_backend_config)
    config = get_native_backend_config()
    for pattern_config in config.configs:
        if pattern_config.pattern in _OWN_OUTPUT_OBSERVER:
            pattern_config.set_observation_type(
                ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT)
    if activation is torch.quint8:
        return config
    for pattern_config in config.configs:
        extra = []
        for d in pattern_config.dtype_configs:
            if d.input_dtype is torch.quint8 and d.output_dtype is torch.quint8 and \
                    not getattr(d.output_dtype_with_constraints, "scale_exact_match", None):
                extra.append(DTypeConfig(input_dtype=torch.qint8, output_dtype=torch.qint8,
                                         weight_dtype=d.weight_dtype, bias_dtype=d.bias_dtype,
                                         is_dynamic=d.is_dynamic))
        for d in extra:
            pattern_config.add_dtype_config(d)
    return config


def _mapping(qconfig, gm, reader, op_types_to_quantize, nodes_to_exclude):
    from torch.ao.quantization import QConfigMapping
    mapping = QConfigMapping()
    if not op_types_to_quantize:  # ORT's meaning of None and of []: every op type it knows
        mapping.set_global(qconfig)
    else:
        _map_op_types(mapping, qconfig, gm, op_types_to_quantize)
    modules = {onnx_name: fx_name for fx_name, onnx_name in reader.onnx_node_of.items()
               if fx_name in dict(gm.named_children())}
    known = set(reader.onnx_node_of.values())
    for name in nodes_to_exclude or ():
        if name in modules:
            mapping.set_module_name(modules[name], None)
            for clamp in _clamps_reading(gm, modules[name]):
                mapping.set_module_name(clamp, None)  # ORT leaves an op's Relu with it
        elif name in known:
            _refuse("nodes_to_exclude", name, "nodes that become modules (Conv, Gemm, "
                    "MatMul by a constant, Relu, Clip, pools, BatchNormalization)")
        else:
            raise OnnxImportError(f"quantize_static: nodes_to_exclude names '{name}', which is "
                                  "not a node of the model")
    return mapping


def _targets(op_types):
    """The fx targets (module classes, functions) of the ONNX `op_types`."""
    import operator
    targets = set()
    for op_type in op_types:
        if op_type not in _OP_TYPES:
            _refuse("op_types_to_quantize", op_type,
                    f"op types among {', '.join(sorted(_OP_TYPES))}")
        targets.update(getattr(operator, t) if isinstance(t, str) else t
                       for t in _OP_TYPES[op_type])
    return targets


def _map_op_types(mapping, qconfig, gm, op_types):
    """`qconfig` on the functions of `op_types` by type, and on their modules (and the
    ReLUs after those of _RELU_FOLLOWS) by name: a fused module's parts need the same
    object-type qconfig, which nn.ReLU cannot have when a Gemm's ReLU is quantized and a
    Conv's (fused into ConvReLU2d) is not."""
    chosen = _targets(op_types)
    followed = _targets(set(op_types) & set(_RELU_FOLLOWS))
    children = dict(gm.named_children())

    def target(node):
        if node.op == "call_module":
            return type(children.get(node.target))
        return node.target if node.op == "call_function" else None

    for function in chosen:
        if not isinstance(function, type):
            mapping.set_object_type(function, qconfig)
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        source = node.args[0] if node.args else None
        after_chosen = target(node) is torch.nn.ReLU and isinstance(source, torch.fx.Node) \
            and target(source) in followed
        if target(node) in chosen or after_chosen:
            mapping.set_module_name(node.target, qconfig)


_RANGE_KEEPING_MODULES = (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d,
                          torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.AvgPool3d,
                          torch.nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool2d,
                          torch.nn.AdaptiveAvgPool3d, torch.nn.Identity, torch.nn.Flatten)
_RANGE_KEEPING_FUNCTIONS = (torch.flatten, torch.reshape, torch.permute, torch.mean,
                            torch.narrow)


def _clamp_ranges(prepared):
    """Each observer shared by an op's output and the clamp (ReLU6, Hardtanh, ReLU) that
    alone reads it, narrowed to the clamp's bounds after calibration: ORT's quantizer
    folds a Clip / Relu after a quantized op into that op's QuantizeLinear (the range
    calibrated after the clamp). Exact: the op's only reader clamps it anyway."""
    from torch.ao.quantization.observer import ObserverBase
    modules = dict(prepared.named_modules())

    def observer(node):
        return node.op == "call_module" and isinstance(modules.get(node.target), ObserverBase)

    # An observer shared wider may see values the clamp does not bound (a cat's inputs
    # share one): it is narrowed only if every value it sees, other than the op's output,
    # is the clamp's or a pool / reshape of a value it sees (within the clamp's bounds too).
    sites = {}
    for node in prepared.graph.nodes:
        if observer(node):
            sites.setdefault(node.target, []).append(node)

    def bounded(site, clamp_node, target):
        source = site.args[0] if site.args else None
        if source is clamp_node:
            return True
        if not isinstance(source, torch.fx.Node) or not source.args or \
                not isinstance(source.args[0], torch.fx.Node):
            return False
        module = modules.get(source.target) if source.op == "call_module" else None
        keeps_range = isinstance(module, _RANGE_KEEPING_MODULES) or (
            source.op == "call_function" and source.target in _RANGE_KEEPING_FUNCTIONS)
        return keeps_range and observer(source.args[0]) and source.args[0].target == target

    for node in prepared.graph.nodes:
        clamp = modules.get(node.target) if node.op == "call_module" else None
        if isinstance(clamp, torch.nn.ReLU6):
            lo, hi = 0.0, 6.0
        elif isinstance(clamp, torch.nn.Hardtanh):
            lo, hi = float(clamp.min_val), float(clamp.max_val)
        elif isinstance(clamp, torch.nn.ReLU):
            lo, hi = 0.0, float("inf")
        else:
            continue
        before = node.args[0]
        after = list(node.users)
        if not (isinstance(before, torch.fx.Node) and observer(before) and
                len(before.users) == 1 and len(after) == 1 and observer(after[0]) and
                after[0].target == before.target and
                isinstance(before.args[0], torch.fx.Node) and
                len(before.args[0].users) == 1 and
                all(site is before or bounded(site, node, before.target)
                    for site in sites[before.target])):
            continue
        obs = modules[before.target]
        if not hasattr(obs, "min_val") or obs.min_val.numel() != 1:
            continue
        with torch.no_grad():
            obs.min_val.clamp_(lo, hi)
            obs.max_val.clamp_(lo, hi)


def _clamps_reading(gm, module_name):
    """The ReLU / ReLU6 / Hardtanh modules that alone read the module `module_name`."""
    children = dict(gm.named_children())
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target == module_name and len(node.users) == 1:
            user = next(iter(node.users))
            if user.op == "call_module" and isinstance(
                    children.get(user.target), (torch.nn.ReLU, torch.nn.ReLU6,
                                                torch.nn.Hardtanh)):
                yield user.target


def _sample(value, name, shape, index):
    """The tensor of one input of calibration sample `index`. Its shape and type must be
    the model's, as ONNX Runtime's calibration requires: the written file's shapes are the
    first sample's, and PyTorch's modules would take any batch or size and give a file
    for other inputs than the model's."""
    tensor = torch.as_tensor(value)
    if tensor.dtype is not torch.float32 or tuple(tensor.shape) != tuple(shape):
        raise OnnxImportError(
            f"quantize_static: calibration sample {index}, input '{name}': a "
            f"{str(tensor.dtype).replace('torch.', '')} tensor of shape "
            f"{list(tensor.shape)}; the model takes float32 of shape {list(shape)}")
    return tensor


def _samples(calibration_data_reader, input_names, input_shapes):
    if calibration_data_reader is None or not hasattr(calibration_data_reader, "get_next"):
        raise OnnxImportError("quantize_static: calibration_data_reader must be an "
                              "onnxruntime CalibrationDataReader (an object with get_next())")
    samples = []
    while True:
        feed = calibration_data_reader.get_next()
        if feed is None:
            break
        if not isinstance(feed, dict):
            raise OnnxImportError(f"quantize_static: calibration_data_reader.get_next() gave "
                                  f"a {type(feed).__name__}; expected a dict of input name "
                                  "-> array")
        missing = [n for n in input_names if n not in feed]
        if missing:
            raise OnnxImportError(f"quantize_static: calibration sample {len(samples)} has no "
                                  f"value for input '{missing[0]}' (it has {sorted(feed)})")
        samples.append(tuple(_sample(feed[n], n, shape, len(samples))
                             for n, shape in zip(input_names, input_shapes)))
    if not samples:
        raise OnnxImportError("quantize_static: calibration_data_reader gave no samples")
    return samples


def quantize_with_model(model_input, calibration_data_reader, quant_format="QDQ",
                        op_types_to_quantize=None, per_channel=False, reduce_range=False,
                        activation_type="QInt8", weight_type="QInt8", nodes_to_quantize=None,
                        nodes_to_exclude=None, use_external_data_format=False,
                        calibrate_method="MinMax", calibration_providers=None,
                        extra_options=None, calibration_cache_path=None, *,
                        backend_config=None):
    """(the onnx.ModelProto quantize_static writes, the lowered torch.fx.GraphModule it was
    written from, which the tests run on fuselage's own runtime beside ONNX Runtime's)."""
    if _name(quant_format) != "QDQ":
        _refuse("quant_format", quant_format, "QuantFormat.QDQ")
    if _name(calibrate_method) != "MinMax":
        _refuse("calibrate_method", calibrate_method, "CalibrationMethod.MinMax")
    if nodes_to_quantize:
        _refuse("nodes_to_quantize", nodes_to_quantize, "None (use op_types_to_quantize / "
                "nodes_to_exclude)")
    if use_external_data_format:
        _refuse("use_external_data_format", use_external_data_format, "False")
    if calibration_cache_path is not None:
        _refuse("calibration_cache_path", calibration_cache_path, "None")
    activation = _dtype("activation_type", activation_type)
    weight = _dtype("weight_type", weight_type)
    if weight is not torch.qint8:
        _refuse("weight_type", weight_type, "QuantType.QInt8 (PyTorch's quantized convs and "
                "linears take int8 weights)")
    symmetric_activation = False
    for key, value in (extra_options or {}).items():
        if key == "ActivationSymmetric":
            symmetric_activation = bool(value)
        elif key not in _EXTRA_OPTIONS or bool(value) != _EXTRA_OPTIONS[key]:
            _refuse(f"extra_options['{key}']", value,
                    f"one of {', '.join(f'{k}={v}' for k, v in _EXTRA_OPTIONS.items())}")

    from fuselage.onnx import _export, _import
    from fuselage import quantize_fx
    gm, reader = _import.read(model_input)
    samples = _samples(calibration_data_reader, reader.input_names,
                       reader.input_shapes)
    qconfig = _qconfig(activation, weight, per_channel, reduce_range, symmetric_activation)
    mapping = _mapping(qconfig, gm, reader, op_types_to_quantize, nodes_to_exclude)
    backend = _backend_config(activation) if backend_config is None else backend_config
    try:
        prepared = quantize_fx.prepare_fx(gm, mapping, samples[0], backend_config=backend)
        with torch.no_grad():
            for sample in samples:
                prepared(*sample)
        _clamp_ranges(prepared)
        # A pool observed apart from its input (_OWN_OUTPUT_OBSERVER) keeps its quantize:
        # ORT's QLinearGlobalAveragePool requantizes to it, where PyTorch's lowering
        # would drop it and leave the pool's output on its input's parameters.
        converted = quantize_fx._convert(prepared, None, mapping, backend, lower=True,
                                         drop_requantizing_quantizes=False)
    except (OnnxExportError, ConfigTranslationError, PatternError):
        raise  # the user's backend_config: its own error, naming the pattern or field
    except FuselageError as e:
        raise OnnxImportError(f"quantize_static: fuselage cannot quantize the model: {e}") \
            from e
    try:
        proto = _export.build(converted, samples[0])
    except FuselageError as e:  # said as the step of quantize_static it is
        raise OnnxExportError(f"quantize_static: writing the quantized model: {e}") from e
    _rename_io(proto, reader.input_names, reader.output_names)
    return proto, converted


def _rename_io(proto, input_names, output_names):
    """The written graph's inputs and outputs given the source model's names."""
    _list_aliased_outputs_once(proto, input_names, output_names)
    renames = {}
    for info, name in zip(proto.graph.input, input_names):
        renames[info.name] = name
    for info, name in zip(proto.graph.output, output_names):
        renames[info.name] = name
    taken = set(renames.values())
    existing = {o for n in proto.graph.node for o in n.output} | \
        {t.name for t in proto.graph.initializer}
    clash = {old: f"{old}__fuselage" for old in existing if old in taken and old not in renames}
    renames.update(clash)
    for info in list(proto.graph.input) + list(proto.graph.output):
        info.name = renames.get(info.name, info.name)
    for tensor in proto.graph.initializer:
        tensor.name = renames.get(tensor.name, tensor.name)
    for node in proto.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]


def _list_aliased_outputs_once(proto, input_names, output_names):
    """ONNX defines each name once, so a source output that is a graph input, or one listed
    twice, is that very value; the writer gives each output a value of its own (an
    Identity of the input, a second DequantizeLinear), which the source's name could then
    not name. Such an output lists the written value the name already stands for, and its
    own copy, read by nothing, goes."""
    written = {name: info.name for info, name in zip(proto.graph.input, input_names)}
    for info, name in zip(proto.graph.output, output_names):
        if name in written:
            info.name = written[name]
        else:
            written[name] = info.name
    _drop_unread(proto)


def _drop_unread(proto):
    """The graph without the nodes no node or graph output reads (an alias _rename_io no
    longer lists)."""
    while True:
        read = {n for node in proto.graph.node for n in node.input}
        read.update(o.name for o in proto.graph.output)
        unread = [node for node in proto.graph.node
                  if not any(o in read for o in node.output)]
        if not unread:
            return
        for node in unread:
            proto.graph.node.remove(node)


def quantize_static(model_input, model_output, calibration_data_reader=None,
                    quant_format="QDQ", op_types_to_quantize=None, per_channel=False,
                    reduce_range=False, activation_type="QInt8", weight_type="QInt8",
                    nodes_to_quantize=None, nodes_to_exclude=None,
                    use_external_data_format=False, calibrate_method="MinMax",
                    calibration_providers=None, extra_options=None,
                    calibration_cache_path=None, *, backend_config=None):
    """ONNX Runtime's onnxruntime.quantization.quantize_static, with its signature and the
    meaning of its arguments (ORT's enums, or their names): reads the float model
    `model_input` (a path or an onnx.ModelProto), calibrates on every sample
    `calibration_data_reader.get_next()` gives, and writes the QDQ model to
    `model_output`, whole or not at all. Returns None, as ORT's does.

    Supported: quant_format QDQ; activation_type QUInt8 / QInt8 (asymmetric, or symmetric
    with extra_options ActivationSymmetric); weight_type QInt8 (symmetric, [-127, 127]);
    per_channel; reduce_range (7-bit weights); calibrate_method MinMax; op_types_to_quantize;
    nodes_to_exclude (nodes that become modules). Anything else is an OnnxImportError
    naming the argument, and nothing is written.

    fuselage's own keyword `backend_config`: the path of a fuselage backend config file
    (or a PyTorch BackendConfig) used instead of PyTorch's native one; its patterns may
    name ONNX ops (`onnx.Conv`, `onnx.Relu | onnx.Clip`: patterns/onnx_ops.h), and its
    fusions and dtype configs decide what is fused and quantized."""
    from fuselage import _exporter
    proto, _ = quantize_with_model(
        model_input, calibration_data_reader, quant_format, op_types_to_quantize, per_channel,
        reduce_range, activation_type, weight_type, nodes_to_quantize, nodes_to_exclude,
        use_external_data_format, calibrate_method, calibration_providers, extra_options,
        calibration_cache_path, backend_config=backend_config)
    try:
        data = proto.SerializeToString()
    except ValueError as e:
        raise OnnxExportError(f"quantize_static: the model does not fit one ONNX file: {e}") \
            from e
    try:
        _exporter._write_atomically(os.fspath(model_output), data)
    except FuselageError as e:
        raise OnnxExportError(f"quantize_static: {e}") from None
