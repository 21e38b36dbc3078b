"""Rewrites of the QDQ graph that change no result and leave ONNX Runtime less to undo.

Writing each quantized op as dequantize → float op → quantize leaves two shapes that
ONNX Runtime's QDQ selectors reject or would have to simplify themselves:

  x → Relu / Clip → Q    the clamp goes after the Q, as a Clip of the integers with the
                         bounds quantized; where the Q's own range lies inside the
                         clamp's, it goes altogether (what ORT's quantizer does when it
                         folds a Relu into the Q before it). Conv → Relu → Q becomes
                         Conv → Q (→ Clip), which the Conv selector takes; a relu6 run on a
                         quantized tensor, DQ → Clip → Q, becomes DQ → Q → Clip.
  DQ → Q                 with equal scale and zero point: the integers themselves.
  Clip of integers       whose bounds are the integer type's own (a relu6 after a Q whose
                         range is [0, 6] already): the integers themselves.

Both hold exactly: quantization is monotone, so it commutes with a clamp whose bounds
are quantized alike, and a DQ → Q pair on one grid gives back its integers. Each applies
only where the intermediate tensor has one reader and is no graph output.
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


def _clamps_after_quantize(view):
    """Returns (nodes removed, whether anything changed)."""
    removed, changed = set(), False
    position = {id(n): i for i, n in enumerate(view.g.nodes)}
    for node in list(view.g.nodes):
        if node.op_type not in _CLAMPS:
            continue
        q = view.only_reader(node.output[0], "QuantizeLinear")
        bounds = view.clamp_range(node)
        qparams = view.scalar_qparams(q) if q is not None else None
        if bounds is None or qparams is None:
            continue
        changed = True
        lo, hi = _q_range(*qparams)
        if bounds[0] <= lo and hi <= bounds[1]:
            q.input[0] = node.input[0]  # the Q clamps alike: the clamp goes
            removed.add(id(node))
            continue
        # x → clamp → y → Q → z  becomes  x → Q → t → Clip(integers) → z; the two swap
        # places in the node order, which keeps it topological (only Q read y).
        integers = view.g.fresh(q.output[0] + "_unclamped")
        z = q.output[0]
        q.input[0], q.output[0] = node.input[0], integers
        inputs = [integers]
        for bound, unbounded in zip(bounds, (-np.inf, np.inf)):
            inputs.append("" if bound == unbounded else
                          view.g.constant(_quantize_bound(bound, *qparams), "bound"))
        while inputs[-1] == "":
            inputs.pop()
        node.op_type = "Clip"
        del node.input[:]
        node.input.extend(inputs)
        node.output[0] = z
        i, j = position[id(node)], position[id(q)]
        view.g.nodes[i], view.g.nodes[j] = q, node
        position[id(node)], position[id(q)] = j, i
    return removed, changed


def _quantize_bound(value, scale, zero_point):
    """PyTorch's quantize_val (ATen): zero_point + nearbyint(value * (1.0f / scale)) in
    float32, clamped to the integer type; the bound PyTorch's quantized clamp uses."""
    qmin, qmax = _integer_range(zero_point)
    inv_scale = np.float32(1.0) / np.float32(scale)
    q = int(zero_point) + int(np.rint(np.float32(value) * inv_scale))
    return np.asarray(min(qmax, max(qmin, q)), dtype=zero_point.dtype)


def _bypass_round_trips(view):
    """Returns (nodes removed, whether anything changed)."""
    removed = set()
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
    return removed, bool(removed)


def _drop_whole_range_clips(view):
    """Returns (nodes removed, whether anything changed): a Clip of uint8 / int8 integers
    whose bounds are the type's own range changes nothing."""
    removed = set()
    for node in view.g.nodes:
        if node.op_type != "Clip" or node.output[0] in view.outputs:
            continue
        names = [n for n in node.input[1:3] if n]
        bounds = [view.constants.get(n) for n in names]
        if not bounds or any(b is None or b.dtype not in (np.uint8, np.int8) for b in bounds):
            continue
        info = np.iinfo(bounds[0].dtype)
        lo = view.constants[node.input[1]] if len(node.input) > 1 and node.input[1] else None
        hi = view.constants[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        if (lo is not None and lo > info.min) or (hi is not None and hi < info.max):
            continue
        for reader in view.readers.get(node.output[0], []):
            for i, name in enumerate(reader.input):
                if name == node.output[0]:
                    reader.input[i] = node.input[0]
        removed.add(id(node))
    return removed, bool(removed)


def tidy(g):
    """Applies the rewrites to the Graph `g` until none applies."""
    for _ in range(_MAX_ROUNDS):
        changed = False
        for rewrite in (_clamps_after_quantize, _bypass_round_trips,
                        _drop_whole_range_clips):
            removed, rewritten = rewrite(_View(g))
            g.nodes = [n for n in g.nodes if id(n) not in removed]
            changed |= rewritten
        if not changed:
            break
    g.drop_unread_initializers()  # a removed Clip's bounds, a removed Q's parameters
