"""Issue 18 item 1, dict and named-tuple *inputs*: fuselage.export takes a dict (str keys)
or named-tuple example input apart into one input per field the model reads, in the
example's key order, and `fuselage run` of the file fed those fields gives PyTorch's
output; an input used other than by reading its fields is refused, naming the node."""

import collections
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn

import fuselage
from fuselage import ExportError
from fuselage._proto import model_pb2

Pair = collections.namedtuple("Pair", ["image", "bias"])


class DictInput(nn.Module):
    """Reads 'a' twice (both reads must become the one input) and never reads 'unused'."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, batch):
        return self.conv(batch["a"]) * batch["b"] + batch["a"].sum()


class NamedTupleInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(5, 2)

    def forward(self, pair):
        return self.linear(pair.image) + pair[1]


def _inputs(proto):
    return [(n.name, n.target) for n in proto.graph.nodes if n.op == model_pb2().PLACEHOLDER]


def _run(cli, tmp_path, path, arrays):
    names = []
    for i, array in enumerate(arrays):
        names.append(str(tmp_path / f"in{i}.npy"))
        np.save(names[-1], array.numpy())
    out = tmp_path / "out.npy"
    run = subprocess.run([cli, "run", str(path), "--input=" + ",".join(names),
                          f"--output={out}"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return np.load(out)


def test_a_dict_input_becomes_one_input_per_read_key_in_the_examples_order(tmp_path, cli):
    torch.manual_seed(0)
    model = DictInput().eval()
    # 'b' first: the inputs follow the example's key order, not the order of the reads.
    batch = {"b": torch.randn(1, 4, 1, 1), "unused": torch.randn(2), "a": torch.randn(1, 3, 6, 6)}
    path = tmp_path / "dict.fsl"
    fuselage.export(model, (batch,), str(path))
    proto = fuselage.to_proto(model, (batch,))
    inputs = _inputs(proto)
    assert len(inputs) == 2  # 'unused' is never read; the two reads of 'a' are one input
    fields = {n.name: [v for v in n.meta if v.name == "input_field"] for n in proto.graph.nodes
              if n.op == model_pb2().PLACEHOLDER}
    assert all(len(f) == 1 for f in fields.values())
    got = _run(cli, tmp_path, path, [batch["b"], batch["a"]])
    with torch.no_grad():
        expected = model(batch).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_named_tuple_input_by_attribute_and_by_index(tmp_path, cli):
    torch.manual_seed(1)
    model = NamedTupleInput().eval()
    pair = Pair(image=torch.randn(3, 5), bias=torch.randn(3, 2))
    path = tmp_path / "pair.fsl"
    fuselage.export(model, (pair,), str(path))
    assert len(_inputs(fuselage.to_proto(model, (pair,)))) == 2
    got = _run(cli, tmp_path, path, [pair.image, pair.bias])
    with torch.no_grad():
        expected = model(pair).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_dict_input_used_whole_is_refused_naming_the_node():
    class WholeDict(nn.Module):
        def forward(self, batch):
            return torch.cat(list(batch.values()))

    gm = torch.fx.GraphModule(nn.Module(), torch.fx.Graph())
    graph = gm.graph
    batch = graph.placeholder("batch")
    values = graph.call_method("values", (batch,))
    graph.output(values)
    gm.recompile()
    with pytest.raises(ExportError) as info:
        fuselage.to_proto(gm, ({"a": torch.randn(2)},))
    message = str(info.value)
    assert "node 'values'" in message and "input 'batch' is a dict" in message
