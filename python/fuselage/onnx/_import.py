"""fuselage.from_onnx: a float ONNX model as a torch.fx.GraphModule fuselage quantizes.

The reading is the C++ ONNX reader's (onnx/onnx_reader.h, the one `fuselage run
model.onnx` and `fuselage quantize model.onnx` use), through the compiled extension: it
writes a fuselage model (each ONNX node the PyTorch module or function torchvision's own
models use for it, shape arithmetic folded to constants, node meta `onnx` / `onnx_node`
keeping each node's ONNX op and name), which becomes a GraphModule as a model file does
(fuselage.to_torch). Its errors are fuselage.OnnxImportError naming the node, initializer
or graph input and what was expected.
"""

import os

from fuselage.errors import OnnxImportError

ONNX_META, ONNX_NODE_META = "onnx", "onnx_node"  # node.meta["fuselage"] keys


def _core():
    try:
        from fuselage import _core
    except ImportError as e:
        raise OnnxImportError(f"from_onnx needs fuselage's compiled extension: {e}") from None
    return _core


def _engine_model(model):
    """The engine's Model of `model`: a path (its external data read from its folder) or an
    onnx.ModelProto (serialized; external data cannot be found beside it)."""
    core = _core()
    if isinstance(model, (str, os.PathLike)):
        return core.Model.load_onnx(os.fspath(model))
    if type(model).__name__ == "ModelProto" and hasattr(model, "SerializeToString"):
        return core.Model.from_onnx_bytes(model.SerializeToString(), "model")
    raise OnnxImportError(f"from_onnx: model is a {type(model).__name__}; expected the path "
                          "of an ONNX file or an onnx.ModelProto")


class OnnxNames:
    """What a caller of the reader needs beside the GraphModule: the ONNX graph's input
    names and static shapes and output names, in order, and each fx node's (or module's)
    ONNX node name."""

    def __init__(self, model, gm):
        proto = _proto(model)
        initializers = {t.name for t in proto.graph.initializer}
        inputs = [i for i in proto.graph.input if i.name not in initializers]
        self.input_names = [i.name for i in inputs]
        self.input_shapes = [tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                             for i in inputs]
        self.output_names = [o.name for o in proto.graph.output]
        self.onnx_node_of = {}
        for node in gm.graph.nodes:
            onnx_node = node.meta.get("fuselage", {}).get(ONNX_NODE_META)
            if onnx_node is None:
                continue
            key = node.target if node.op == "call_module" else node.name
            self.onnx_node_of[key] = onnx_node


def _proto(model):
    """The ONNX graph's structure (its tensors' external data not read)."""
    if not isinstance(model, (str, os.PathLike)):
        return model
    import onnx
    return onnx.load(os.fspath(model), load_external_data=False)


def read(model):
    """(GraphModule, OnnxNames) of `model` (a path or an onnx.ModelProto)."""
    gm = from_onnx(model)
    return gm, OnnxNames(model, gm)


def from_onnx(model):
    """A float ONNX model (a file's path or an onnx.ModelProto) as a torch.fx.GraphModule
    of PyTorch modules and functions (nn.Conv2d, nn.BatchNorm2d, operator.add, ...), its
    initializers the modules' parameters and buffers: what fuselage.quantize_fx,
    fuselage.export and fuselage.to_onnx take. The GraphModule takes the graph inputs in
    order and returns the output (a tuple for several); shapes are those the model fixes.
    Raises fuselage.OnnxImportError naming the node and what was expected."""
    from fuselage import _importer
    from fuselage._proto import model_pb2
    structure, tensors = _engine_model(model).take_parts()
    return _importer.from_proto(model_pb2().Model.FromString(structure), tensors)
