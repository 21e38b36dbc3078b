"""to_torch reads a model file's call_function targets against the functions fuselage knows
(backend_configs/known_functions.cc, what export accepts and the C++ interpreter runs): a
file naming any other importable callable (`os.system`, `builtins.exec`) is a
ModelFileError naming the node, not a GraphModule that would call it; marking the node
opaque (a function the engine does not know, meta `opaque`) does not change that: an opaque
node gets back only a function exported in this process."""
import pytest
import torch

import fuselage
from fuselage import ModelFileError, _proto


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def file_calling(tmp_path, target, opaque=False):
    """The exported model of Relu with its call_function node's target replaced (and,
    `opaque`, marked as an opaque node, meta `opaque`)."""
    path = tmp_path / "relu.fsl"
    fuselage.export(Relu(), (torch.randn(2, 3),), str(path))
    model = _proto.model_pb2().Model()
    model.ParseFromString(path.read_bytes())
    calls = [n for n in model.graph.nodes if n.op == _proto.model_pb2().CALL_FUNCTION]
    assert len(calls) == 1, model.graph
    assert calls[0].target == "torch.relu"
    calls[0].target = target
    if opaque:
        entry = calls[0].meta.add()
        entry.name = "opaque"
        entry.value.bool_value = True
    changed = tmp_path / "changed.fsl"
    changed.write_bytes(model.SerializeToString())
    return changed, calls[0].name


def test_a_known_function_imports_and_runs(tmp_path):
    path, _ = file_calling(tmp_path, "torch.nn.functional.relu")
    x = torch.randn(2, 3)
    assert torch.equal(fuselage.to_torch(str(path))(x), torch.relu(x))


@pytest.mark.parametrize("target", ["os.system", "builtins.exec", "builtins.eval",
                                    "subprocess.run"])
def test_an_unknown_importable_callable_is_refused(tmp_path, target):
    path, node = file_calling(tmp_path, target)
    with pytest.raises(ModelFileError) as e:
        fuselage.to_torch(str(path))
    message = str(e.value)
    assert f"node '{node}'" in message and f"'{target}'" in message, message
    assert "is not a function fuselage knows" in message, message


@pytest.mark.parametrize("target", ["os.system", "builtins.exec"])
def test_an_opaque_node_of_a_function_not_exported_here_is_refused(tmp_path, target):
    path, node = file_calling(tmp_path, target, opaque=True)
    with pytest.raises(ModelFileError) as e:
        fuselage.to_torch(str(path))
    message = str(e.value)
    assert f"node '{node}'" in message and f"'{target}' is an opaque node" in message, message
    assert "never imports a function a file names" in message, message
