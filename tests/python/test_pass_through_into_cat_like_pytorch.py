"""Pass-through ops whose output observer a cat takes over (issue 18: inception_v3 and
deeplabv3_mobilenet_v3_large), against PyTorch 1.13's prepare_fx / convert_fx on the same
small models (qnnpack backend config, default qconfig mapping):

  - a max-pool as a cat's last input, a cat inside a cat, and avg-pool → dropout → flatten
    → linear after a cat (inception_v3's InceptionB / InceptionE blocks and its head);
  - ASPP's pooling branch, F.interpolate (bilinear) as a cat's last input, and the head's
    F.interpolate (deeplabv3).

PyTorch shares one observer among a cat's inputs and output; the quantize after such a
pass-through op then has other parameters than its input, and PyTorch's convert drops it
(the op runs on quantized tensors, torch.cat requantizes). Asserted: the same observer
nodes and instances after prepare, the same calls after convert (one quantize at the
input, one dequantize at the output, every pass-through op on quantized tensors), the
lowering report naming exactly the ops whose quantize went with other parameters, and
fuselage's quantized output within one output step of PyTorch's on most elements."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.observer import ObserverBase
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import fuselage
from test_quantize_ops_like_pytorch import (OBSERVER_TYPES, fuselage_calls, fuselage_graph,
                                            fuselage_prepared_observers, run_cli, torch_calls,
                                            torch_prepared_observers)


def torch_sharing(prepared):
    """The observer sharing of PyTorch's prepared model: a set of groups, each the names
    of the nodes whose values one observer instance watches."""
    modules = dict(prepared.named_modules(remove_duplicate=False))
    groups = {}
    for n in prepared.graph.nodes:
        if n.op == "call_module" and isinstance(modules[n.target], ObserverBase):
            groups.setdefault(id(modules[n.target]), set()).add(n.args[0].name)
    return {frozenset(g) for g in groups.values()}


def fuselage_sharing(path):
    model, type_of = fuselage_graph(path)
    groups = {}
    for n in model.graph.nodes:
        if n.op == 4 and type_of(n.target) in OBSERVER_TYPES:
            groups.setdefault(n.target, set()).add(n.args[0].node)
    return {frozenset(g) for g in groups.values()}


def activation_observer_modules_in_tree(path):
    """The activation observer modules of a prepared model (what the prepare report counts;
    the weights' observers, weight_post_process_<n>, are not among them)."""
    model, _ = fuselage_graph(path)
    count = 0

    def walk(module, name):
        nonlocal count
        count += module.type in OBSERVER_TYPES and name.startswith("activation_post_process_")
        for child in module.children:
            walk(child.module, child.name)

    walk(model.root, "")
    return count


class InceptionLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.branch = nn.Conv2d(4, 4, 3, stride=2)
        self.e1 = nn.Conv2d(8, 4, 1)
        self.e2a = nn.Conv2d(8, 2, 1)
        self.e2b = nn.Conv2d(8, 2, 1)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        # InceptionB: the pool is the cat's last input.
        x = torch.cat([self.branch(x), F.max_pool2d(x, kernel_size=3, stride=2)], 1)
        # InceptionE: a cat inside a cat.
        x = torch.cat([self.e1(x), torch.cat([self.e2a(x), self.e2b(x)], 1)], 1)
        x = self.dropout(self.avgpool(x))
        return self.fc(torch.flatten(x, 1))


class AsppLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.branch = nn.Conv2d(4, 4, 1)
        self.pool_conv = nn.Conv2d(4, 4, 1)
        with torch.no_grad():  # so that its relu is not all zeros
            self.pool_conv.bias.fill_(0.5)
        self.project = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        size = x.shape[-2:]
        x = self.stem(x)
        pooled = F.relu(self.pool_conv(F.adaptive_avg_pool2d(x, 1)))
        pooled = F.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False)
        x = self.project(torch.cat([self.branch(x), pooled], 1))
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


# The nodes whose quantize, after prepare shared the observers as PyTorch does, has other
# parameters than the op's input: the lowering drops it (as PyTorch's convert does) and
# names the node. In InceptionLike: the pool (the outer cat's observer), the inner cat
# (the outer cat's), and flatten (the dropout's own observer; nnq.Dropout passes the
# avg-pool's parameters on). In AsppLike: the pooling branch's interpolate.
CASES = {
    "inception_like": (InceptionLike, (1, 3, 9, 9), {"max_pool2d", "cat_1", "flatten"}),
    "aspp_like": (AsppLike, (1, 3, 16, 16), {"interpolate"}),
}


def prepare_and_calibrate_like_pytorch(model, calibration, x):
    """PyTorch 1.13's prepare_fx of a copy of `model` (qnnpack backend config, default
    qconfig mapping) run on the calibration batches; with the backend config."""
    backend = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("qnnpack"), (x,),
                          backend_config=backend)
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    return prepared, backend


@pytest.mark.parametrize("case", sorted(CASES))
def test_pass_through_ops_into_cat_quantize_like_pytorch(cli, tmp_path, case):
    make, shape, dropped = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    g = torch.Generator().manual_seed(1)
    calibration = [torch.randn(*shape, generator=g) for _ in range(2)]
    x = torch.randn(*shape, generator=g)
    prepared, backend = prepare_and_calibrate_like_pytorch(model, calibration, x)
    want_observers = torch_prepared_observers(prepared)
    want_sharing = torch_sharing(prepared)
    torch.backends.quantized.engine = "onednn"
    try:
        converted = convert_fx(prepared, backend_config=backend)
        with torch.no_grad():
            theirs = converted(x).dequantize().numpy()
    finally:
        torch.backends.quantized.engine = "qnnpack"
    want_calls = torch_calls(converted)
    assert want_calls["function torch.quantize_per_tensor"] == 1
    assert want_calls["method dequantize"] == 1

    fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
    paths = []
    for i, batch in enumerate(calibration):
        paths.append(tmp_path / f"c{i}.npy")
        np.save(paths[-1], batch.numpy())
    np.save(tmp_path / "x.npy", x.numpy())
    run_cli(cli, "fuse", tmp_path / "f.fsl", "--backend=qnnpack", "-o", tmp_path / "fused.fsl")
    prepare_report = run_cli(cli, "prepare", tmp_path / "fused.fsl", "--backend=qnnpack",
                             "-o", tmp_path / "p.fsl")
    assert fuselage_prepared_observers(tmp_path / "p.fsl") == want_observers
    # The same values share an observer: the pool's (or interpolate's, inner cat's)
    # output is watched with the cat's, its input with the op before.
    assert fuselage_sharing(tmp_path / "p.fsl") == want_sharing
    # The report's counts are the graph's: observer nodes, and observer modules (the
    # distinct ones the nodes call; none left over in the module tree, as
    # ShareListInputObservers' orphans are removed).
    nodes, instances = want_observers
    assert f"{nodes} observer nodes, {instances} observer modules" in prepare_report, \
        prepare_report
    assert activation_observer_modules_in_tree(tmp_path / "p.fsl") == instances

    report = run_cli(cli, "quantize", tmp_path / "f.fsl", "--backend=qnnpack",
                     f"--calibration={','.join(map(str, paths))}", "-o", tmp_path / "q.fsl")
    assert "left as reference" not in report, report
    got_calls = fuselage_calls(tmp_path / "q.fsl")
    assert got_calls == want_calls, (
        f"fuselage {sorted(got_calls.items())}\nPyTorch  {sorted(want_calls.items())}\n{report}")
    # Each pass-through function rule lowered as many nodes as the graph calls it.
    for line in report.splitlines():
        rule, _, count = line.strip().rpartition(": ")
        if rule.startswith("pass-through:torch."):
            assert got_calls["function " + rule[len("pass-through:"):]] == int(count), report
    marker = "quantize dropped after pass-through op: "
    named = {line.split(marker)[1].split()[0] for line in report.splitlines() if marker in line}
    assert named == dropped, report

    run_cli(cli, "run", tmp_path / "q.fsl", f"--input={tmp_path / 'x.npy'}",
            f"--output={tmp_path / 'out.npy'}", "--engine=onednn")
    ours = np.load(tmp_path / "out.npy")
    assert ours.shape == theirs.shape
    # The output's quantization step: the distinct spacing of PyTorch's output values.
    levels = np.unique(theirs)
    step = float(np.min(np.diff(levels)))
    steps_apart = np.round(np.abs(ours - theirs) / step)
    assert steps_apart.max() <= 1, steps_apart.max()
    assert np.mean(steps_apart == 0) >= 0.95, np.mean(steps_apart == 0)
