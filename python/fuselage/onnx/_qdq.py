"""Rewrites of the QDQ graph that change no result and leave ONNX Runtime less to undo.

Writing each quantized op as dequantize → float op → quantize leaves three shapes that
ONNX Runtime's QDQ selectors either reject or would have to simplify themselves:

  x → Relu / Clip → Q        where Q's own range lies inside the clamp's: the Q clamps
                             alike, so the Relu goes (what ORT's quantizer does when it
                             folds a Relu into the Q before it); Conv → Relu → Q becomes
                             Conv → Q, which the Conv selector takes.
  DQ → Relu / Clip → Q       with equal scale and zero point on both sides (a relu6 run on
                             a quantized tensor): the clamp of the integers, a Clip of the
                             quantized tensor with quantized bounds.
  DQ → Q                     with equal scale and zero point: the integers themselves.

Each holds exactly (quantization is monotone and both sides share the grid), and each
applies only where the intermediate tensor has one reader and is no graph output.
"""

import numpy as np

_CLAMPS = ("Relu", "Clip")
_MAX_ROUNDS = 10  # each round only removes nodes; a few rounds reach the fixed point


class _View:
    """Who produces and who reads each tensor, and the constant initializers, of the graph
    as it is at the start of one round."""

    def __init__(self, g):
        self.g = g
        self.readers, self.producer = {}, {}
        for node in g.nodes:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
            for name in node.output:
                self.producer[name] = node
        self.outputs = {o.name for o in g.outputs}
        self.constants = g.small  # scales, zero points and clamp bounds are all small

    def only_reader(self, name, op_type):
        readers = self.readers.get(name, [])
        if len(readers) == 1 and readers[0].op_type == op_type and name not in self.outputs:
            return readers[0]
        return None

    def scalar_qparams(self, node):
        """(scale, zero point) of a per-tensor Q / DQ with constant parameters, else None."""
        if len(node.input) < 3 or any(a.name == "axis" for a in node.attribute):
            return None
        scale = self.constants.get(node.input[1])
        zero_point = self.constants.get(node.input[2])
        if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
            return None
        return scale.reshape(()), zero_point.reshape(())

    def clamp_range(self, node):
        """(lo, hi) a Relu / Clip with constant bounds keeps values in, else None."""
        if node.op_type == "Relu":
            return 0.0, np.inf
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            if len(node.input) <= i or not node.input[i]:
                bounds.append(default)
            elif node.input[i] in self.constants:
                bounds.append(float(self.constants[node.input[i]]))
            else:
                return None
        return tuple(bounds)


def _integer_range(zero_point):
    info = np.iinfo(zero_point.dtype)
    return int(info.min), int(info.max)


def _q_range(scale, zero_point):
    qmin, qmax = _integer_range(zero_point)
    return (qmin - int(zero_point)) * float(scale), (qmax - int(zero_point)) * float(scale)


def _same_grid(a, b):
    return a is not None and b is not None and a[0] == b[0] and a[1] == b[1] and \
        a[1].dtype == b[1].dtype


def _drop_redundant_clamps(view, removed):
    for node in view.g.nodes:
        if node.op_type not in _CLAMPS or id(node) in removed:
            continue
        q = view.only_reader(node.output[0], "QuantizeLinear")
        bounds = view.clamp_range(node)
        qparams = view.scalar_qparams(q) if q is not None else None
        if bounds is None or qparams is None:
            continue
        lo, hi = _q_range(*qparams)
        if bounds[0] <= lo and hi <= bounds[1]:
            q.input[0] = node.input[0]
            removed.add(id(node))


def _quantize_bound(value, scale, zero_point):
    """PyTorch's quantize_val (ATen): zero_point + nearbyint(value * (1.0f / scale)) in
    float32, clamped to the integer type; the bound PyTorch's quantized clamp uses."""
    qmin, qmax = _integer_range(zero_point)
    inv_scale = np.float32(1.0) / np.float32(scale)
    q = int(zero_point) + int(np.rint(np.float32(value) * inv_scale))
    return np.asarray(min(qmax, max(qmin, q)), dtype=zero_point.dtype)


def _clamp_integers(view, removed):
    for node in view.g.nodes:
        if node.op_type not in _CLAMPS or id(node) in removed or not node.input:
            continue
        dq = view.producer.get(node.input[0])
        q = view.only_reader(node.output[0], "QuantizeLinear")
        bounds = view.clamp_range(node)
        if dq is None or dq.op_type != "DequantizeLinear" or q is None or bounds is None or \
                view.only_reader(dq.output[0], node.op_type) is not node:
            continue
        grid = view.scalar_qparams(dq)
        if not _same_grid(grid, view.scalar_qparams(q)):
            continue
        inputs = [dq.input[0]]
        for bound, default in zip(bounds, (-np.inf, np.inf)):
            inputs.append("" if bound == default else
                          view.g.constant(_quantize_bound(bound, *grid), "bound"))
        while inputs[-1] == "":
            inputs.pop()
        # The Q becomes the Clip, in its place and producing its output.
        q.op_type = "Clip"
        del q.input[:]
        q.input.extend(inputs)
        q.ClearField("attribute")
        removed.update((id(dq), id(node)))


def _bypass_round_trips(view, removed):
    for dq in view.g.nodes:
        if dq.op_type != "DequantizeLinear" or id(dq) in removed:
            continue
        q = view.only_reader(dq.output[0], "QuantizeLinear")
        if q is None or id(q) in removed or q.output[0] in view.outputs or \
                not _same_grid(view.scalar_qparams(dq), view.scalar_qparams(q)):
            continue
        for reader in view.readers.get(q.output[0], []):
            for i, name in enumerate(reader.input):
                if name == q.output[0]:
                    reader.input[i] = dq.input[0]
        removed.update((id(dq), id(q)))


def tidy(g):
    """Applies the three rewrites to the Graph `g` until none applies."""
    for _ in range(_MAX_ROUNDS):
        changed = False
        for rewrite in (_drop_redundant_clamps, _clamp_integers, _bypass_round_trips):
            removed = set()
            rewrite(_View(g), removed)
            if removed:
                g.nodes = [n for n in g.nodes if id(n) not in removed]
                changed = True
        if not changed:
            break
    g.drop_unread_initializers()  # a removed Clip's bounds, a removed Q's parameters
