"""fuselage._importer.compile_once: a GraphModule fuselage builds inside it generates its
Python code once, when first needed, however often the graph is edited and recompile()
called before; what it then runs is the last edit's graph. Outside it nothing waits.
The expectations are torch.fx's own: the code torch.fx generates for the edited graph,
and torch's functions applied by hand."""

import copy
import pickle

import pytest
import torch
import torch.fx

from fuselage._importer import DeferredGraphModule, TreeKeepingGraphModule, compile_once


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.tensor([0.5, -0.5, 1.5]))

    def forward(self, x):
        return torch.relu(x + self.shift)


def _to_sigmoid(gm):
    """Edits `gm`'s graph: its relu becomes a sigmoid; then recompile(), as a pass does."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.relu:
            node.target = torch.sigmoid
    gm.recompile()


@pytest.fixture
def generations(monkeypatch):
    """generations(graph): how many times torch.fx generated `graph`'s Python code
    (recompile's cost)."""
    calls = []
    generate = torch.fx.Graph.python_code

    def counting(self, *args, **kwargs):
        calls.append(self)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.Graph, "python_code", counting)
    return lambda graph: sum(1 for g in calls if g is graph)


@pytest.mark.parametrize("cls", [DeferredGraphModule, TreeKeepingGraphModule])
def test_inside_compile_once_the_code_is_generated_once_for_the_last_edit(cls, generations):
    traced = torch.fx.symbolic_trace(_Block())
    x = torch.randn(4, 3)
    with compile_once():
        gm = cls(traced, copy.deepcopy(traced.graph))
        _to_sigmoid(gm)
        gm.recompile()
        assert generations(gm.graph) == 0
        got = gm(x)
        assert generations(gm.graph) == 1
        gm(x)
    assert generations(gm.graph) == 1
    torch.testing.assert_close(got, torch.sigmoid(x + traced.shift))
    assert "torch.sigmoid" in gm.code and "torch.relu" not in gm.code


def test_outside_compile_once_every_recompile_generates_code(generations):
    traced = torch.fx.symbolic_trace(_Block())
    gm = DeferredGraphModule(traced, copy.deepcopy(traced.graph))
    _to_sigmoid(gm)
    assert generations(gm.graph) == 2  # the GraphModule's own, then the edit's
    x = torch.randn(4, 3)
    torch.testing.assert_close(gm(x), torch.sigmoid(x + traced.shift))


def test_a_compiled_module_recompiles_at_once_even_inside_compile_once(generations):
    """Once torch.fx bound a module's forward, a later edit must not leave it running
    the old code: the recompile is immediate."""
    traced = torch.fx.symbolic_trace(_Block())
    x = torch.randn(4, 3)
    with compile_once():
        gm = DeferredGraphModule(traced, copy.deepcopy(traced.graph))
        torch.testing.assert_close(gm(x), torch.relu(x + traced.shift))
        _to_sigmoid(gm)
        assert generations(gm.graph) == 2
        torch.testing.assert_close(gm.forward(x), torch.sigmoid(x + traced.shift))


def test_a_pending_module_runs_through_forward_copies_and_pickles():
    traced = torch.fx.symbolic_trace(_Block())
    x = torch.randn(4, 3)
    want = torch.relu(x + traced.shift)
    with compile_once():
        direct = TreeKeepingGraphModule(traced, copy.deepcopy(traced.graph))
        copied = copy.deepcopy(TreeKeepingGraphModule(traced, copy.deepcopy(traced.graph)))
        pickled = pickle.dumps(TreeKeepingGraphModule(traced, copy.deepcopy(traced.graph)))
        torch.testing.assert_close(direct.forward(x), want)
    torch.testing.assert_close(copied(x), want)
    torch.testing.assert_close(pickle.loads(pickled)(x), want)
