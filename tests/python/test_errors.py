"""What cannot be exported gets an ExportError naming the node (or module) and field, and
no file; a malformed model file gets a ModelFileError naming what is wrong."""

import pytest
import torch
import torch.fx
import torch.nn as nn

import fuselage
from fuselage import ExportError, ModelFileError


class Custom(nn.Module):
    def forward(self, x):
        return x * 2


class LeafTracer(torch.fx.Tracer):
    def is_leaf_module(self, m, qualname):
        return isinstance(m, Custom) or super().is_leaf_module(m, qualname)


class UsesCustom(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)
        self.mystery = Custom()

    def forward(self, x):
        return self.mystery(self.conv(x))


def test_a_user_leaf_module_is_an_opaque_module(tmp_path):
    # Was an ExportError ("no fuselage module type"). The file records an empty container
    # naming the class, its node marked opaque; to_torch in this process gives back the
    # very module object.
    model = UsesCustom()
    gm = torch.fx.GraphModule(model, LeafTracer().trace(model))
    path = tmp_path / "custom.fsl"
    fuselage.export(gm, None, str(path))
    proto = fuselage.to_proto(gm)
    (mystery,) = [c.module for c in proto.root.children if c.name == "mystery"]
    attributes = {a.name: a.value.string_value for a in mystery.attributes}
    assert mystery.type == "nn.Module" and not mystery.children and not mystery.tensors
    assert attributes["opaque_class"].endswith("Custom")
    (node,) = [n for n in proto.graph.nodes if n.name == "mystery"]
    assert {m.name: m.value.bool_value for m in node.meta}.get("opaque") is True
    back = fuselage.to_torch(str(path))
    assert back.mystery is model.mystery
    x = torch.randn(1, 1, 2, 2)
    torch.testing.assert_close(back(x), model(x), rtol=0, atol=0)


def test_unsupported_module_that_nothing_calls_is_only_a_container():
    model = UsesCustom()
    gm = torch.fx.symbolic_trace(model)  # traced through Custom: nothing calls it
    gm.add_submodule("unused", Custom())
    proto = fuselage.to_proto(gm)
    assert {c.name: c.module.type for c in proto.root.children}["unused"] == "nn.Module"


def test_local_functions_are_opaque_nodes_that_keep_their_own_callable():
    # Was an ExportError (no importable name). Two closures of one qualified name
    # (`test_errors.scale`) must not be mixed up when they come back.
    def scaling(factor):
        def scale(x):
            return x * factor
        return scale

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    by_two = graph.call_function(scaling(2), (x,))
    graph.output(graph.call_function(scaling(5), (by_two,)))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    proto = fuselage.to_proto(gm)
    targets = [n.target for n in proto.graph.nodes if n.name.startswith("scale")]
    assert len(set(targets)) == 2, targets
    back = fuselage._core.to_torch(fuselage._core.from_torch(gm))
    t = torch.tensor([1.0, -3.0])
    assert torch.equal(back(t), t * 10)
    calls = [n.target for n in back.graph.nodes if n.op == "call_function"]
    assert [f(torch.tensor(1.0)).item() for f in calls] == [2.0, 5.0]


def test_unsupported_arg_value_names_node_and_position():
    # Slices are stored since issue 18 (test_indexing_and_outputs.py); a complex is not.
    class Complex(nn.Module):
        def forward(self, x):
            return x * 2j

    with pytest.raises(ExportError, match=r"node 'mul' args\[1\]: a value of type complex"):
        fuselage.to_proto(Complex())


def test_unsupported_tensor_dtype_names_module_and_tensor():
    class Double(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.zeros(2, dtype=torch.float64))

        def forward(self, x):
            return x + self.table

    with pytest.raises(ExportError, match=r"root module tensor 'table'.*torch.float64"):
        fuselage.to_proto(Double())


def test_untraceable_module_is_an_export_error():
    class Branches(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(ExportError, match=r"torch.fx cannot trace .*Branches: .*control flow"):
        fuselage.to_proto(Branches())


# ---- reading malformed files ----------------------------------------------------------------

def write(tmp_path, model_proto):
    path = tmp_path / "model.fsl"
    path.write_bytes(model_proto.SerializeToString())
    return str(path)


def valid_model():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return torch.relu(self.fc(x))

    return fuselage.to_proto(Tiny())


def test_valid_model_loads(tmp_path):
    gm = fuselage.to_torch(write(tmp_path, valid_model()))
    assert isinstance(gm.fc, nn.Linear)


def test_wrong_format_version(tmp_path):
    model = valid_model()
    model.format_version = 7
    with pytest.raises(ModelFileError, match="format_version is 7; expected 1"):
        fuselage.to_torch(write(tmp_path, model))


def test_unknown_module_type_names_the_module(tmp_path):
    model = valid_model()
    model.root.children[0].module.type = "nn.NoSuchLayer"
    with pytest.raises(ModelFileError, match=r"module 'fc': unknown module type 'nn.NoSuchLayer'"):
        fuselage.to_torch(write(tmp_path, model))


def test_unknown_function_names_the_node(tmp_path):
    model = valid_model()
    model.graph.nodes[2].target = "torch.no_such_function"
    with pytest.raises(ModelFileError, match=r"node 'relu': call_function target "
                                             r"'torch.no_such_function'"):
        fuselage.to_torch(write(tmp_path, model))


def test_reference_to_a_later_node(tmp_path):
    model = valid_model()
    model.graph.nodes[1].args[0].node = "relu"
    with pytest.raises(ModelFileError, match=r"node 'fc' uses 'relu', which does not come before it"):
        fuselage.to_torch(write(tmp_path, model))


def test_tensor_bytes_not_matching_shape(tmp_path):
    model = valid_model()
    weight = model.root.children[0].module.tensors[0]
    weight.tensor.data = weight.tensor.data[:-4]
    with pytest.raises(ModelFileError, match=r"module 'fc' .*tensor 'weight': field 'data' "
                                             r"has 12 bytes; expected 16"):
        fuselage.to_torch(write(tmp_path, model))


def test_tensor_shape_not_matching_the_module(tmp_path):
    model = valid_model()
    weight = model.root.children[0].module.tensors[0].tensor
    del weight.shape[:]
    weight.shape.extend([4, 1])
    with pytest.raises(ModelFileError, match=r"module 'fc'.*weight \[4, 1\] has in features 1"):
        fuselage.to_torch(write(tmp_path, model))


def test_garbage_file(tmp_path):
    path = tmp_path / "garbage.fsl"
    path.write_bytes(b"\x1a\x10abc")  # field 'graph' declares 16 bytes; 3 follow
    with pytest.raises(ModelFileError, match="not a valid fuselage model"):
        fuselage.to_torch(str(path))
