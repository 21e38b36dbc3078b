"""A model PyTorch's prepare_fx returned, written so that `fuselage convert` quantizes the
same weighted ops PyTorch's convert_fx would.

PyTorch keeps what convert needs beside the graph: each module's `qconfig` (whose weight
observer convert runs on the weight) and the GraphModule's observed node names and qconfig
map (1.13: attributes `_observed_node_names`, `_qconfig_map`; PyTorch 2: the same in
`meta["_observed_graph_module_attrs"]`). A model file cannot hold qconfigs, so without
this the file's observers became quantize / dequantize pairs while every conv stayed float.
fuselage's prepared-model format (quantize/prepared_model.h) records the same decision as data: one plan module
`<container>.weight_post_process_<k>` per weighted op — its weight observer's class and
spec, and string attributes `node`, `root_module`, `reference_module` — in the one container
holding the observers. prepare_fx puts its observers on the root, so they are written
under a container of their own (`observers`, as fuselage's prepare names it) and the
call_module targets follow them.

The ops planned are those PyTorch's convert_weighted_module converts to reference modules:
a call_module node that was observed (in `_observed_node_names`), whose module has a
non-None qconfig (also in `_qconfig_map`) with a quantized weight, and whose module — or, for
a fused module, its child `0` — has a reference form (nnqr.*). convert_fx also drops a
qconfig its backend_config's dtype configs do not support; prepare_fx inserted no
observers around such an op in the first place, so its node is not observed either.
"""

import torch.ao.nn.intrinsic as nni
from torch.ao.quantization.utils import weight_is_quantized

from fuselage import _modules, _names, _registry
from fuselage.errors import ExportError

PLAN_PREFIX = "weight_post_process_"  # quantize/prepared_model.cc kWeightPlanModulePrefix
CONTAINER = "observers"


class Plan:
    """One weighted op's plan: its node, root and reference module types, and the weight
    observer (a fresh module from the qconfig, as convert_fx creates it)."""

    __slots__ = ("node", "root_module", "reference_module", "observer", "observer_type")

    def __init__(self, node, root_module, reference_module, observer, observer_type):
        self.node = node
        self.root_module = root_module
        self.reference_module = reference_module
        self.observer = observer
        self.observer_type = observer_type


class PreparedLayout:
    """Where the observers of a prepare_fx model go (`moved`: old path -> new path, all
    under `container`) and the plans written beside them (or already in `existing`)."""

    def __init__(self, container, moved, plans, existing=None):
        self.container = container
        self.moved = moved
        self.plans = plans
        # The container module already on the root (fuselage's own prepared model, its
        # weight plans inside), whose children are written beside the moved observers.
        self.existing = existing


def _is_observer_module(module):
    return _modules._is_observer(type(module))


# Set on a prepared model fuselage.quantize_fx.prepare_fx returned (flatten_observers): the
# name of the container that keeps its weight plans and takes its observers back at export.
FLAT_ATTR = "_fuselage_observer_container"
OBSERVER_PREFIX = "activation_post_process_"


def _root_observers(gm):
    """The call_module targets on the root that are observer modules, in graph order."""
    observers = []
    for node in gm.graph.nodes:
        if node.op == "call_module" and "." not in node.target and \
                _is_observer_module(gm.get_submodule(node.target)) and \
                node.target not in observers:
            observers.append(node.target)
    return observers


def flatten_observers(gm):
    """PyTorch's layout for a prepared model fuselage's prepare made: each observer module
    moved from the container onto the root under the name prepare gave it
    (`activation_post_process_<n>`, PyTorch's names), the nodes calling it retargeted, so
    `getattr(prepared, node.target)` finds it as in PyTorch's prepared model. The container
    keeps the weight plans (which no node calls); export moves the observers back
    (`layout`). Nothing is moved if a name is taken on the root."""
    moves = {}
    for node in gm.graph.nodes:
        if node.op != "call_module" or node.target.count(".") != 1:
            continue
        container, name = node.target.split(".")
        if _is_observer_module(gm.get_submodule(node.target)):
            moves[node.target] = (container, name)
    containers = {c for c, _ in moves.values()}
    if len(containers) != 1:
        return gm
    container = containers.pop()
    taken = set(gm._modules) | set(gm._parameters) | set(gm._buffers) | set(gm.__dict__)
    if any(name in taken for _, name in moves.values()):
        return gm
    holder = gm.get_submodule(container)
    for target, (_, name) in moves.items():
        if name in holder._modules:
            gm.add_module(name, holder._modules.pop(name))
    # A node sharing its input's observer (a pool, a cat's output) calls it by the same
    # name. PyTorch gives it a second name for the one instance; doing so here lowered
    # fuselage.onnx.quantize_static's SQNR on mobilenet_v2 by 1.3 dB (cause not found), so
    # it is a known difference (tests/conformance/pytorch_fx_suite/KNOWN_FAILURES.md).
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target in moves:
            node.target = moves[node.target][1]
    setattr(gm, FLAT_ATTR, container)
    gm.recompile()
    return gm


def layout(gm):
    """The PreparedLayout of `gm` if prepare_fx returned it (it has `_observed_node_names`
    and its graph calls observers on the root), else None. Raises ExportError naming the
    node for a weighted op whose weight observer the file cannot express.
    A model fuselage's prepare_fx returned (FLAT_ATTR) has its root observers moved back
    into its own container, beside the weight plans already there."""
    flat = getattr(gm, FLAT_ATTR, None)
    if isinstance(flat, str):
        observers = _root_observers(gm)
        if not observers:
            return None
        return PreparedLayout(flat, {name: f"{flat}.{name}" for name in observers}, [],
                              existing=getattr(gm, flat, None))
    observed, qconfig_map = _observed_attrs(gm)
    if not isinstance(observed, (set, frozenset)):
        return None
    observers = _root_observers(gm)
    if not observers:
        return None
    container = CONTAINER
    taken = set(gm._modules) | set(gm._parameters) | set(gm._buffers)
    k = 1
    while container in taken:
        container, k = f"{CONTAINER}_{k}", k + 1
    moved = {name: f"{container}.{name}" for name in observers}
    return PreparedLayout(container, moved, _plans(gm, observed, qconfig_map))


def _observed_attrs(gm):
    """(observed node names, node name -> qconfig) that prepare_fx left on `gm`: PyTorch 2
    keeps them in `gm.meta["_observed_graph_module_attrs"]`, 1.13 as attributes."""
    attrs = getattr(gm, "meta", {}).get("_observed_graph_module_attrs")
    if attrs is not None:
        return (getattr(attrs, "observed_node_names", None),
                getattr(attrs, "node_name_to_qconfig", None) or {})
    return (getattr(gm, "_observed_node_names", None),
            getattr(gm, "_qconfig_map", None) or {})


def _plans(gm, observed, qconfig_map):
    plans = []
    for node in gm.graph.nodes:
        if node.op != "call_module" or node.name not in observed:
            continue
        module = gm.get_submodule(node.target)
        qconfig = getattr(module, "qconfig", None)
        if qconfig is None or qconfig_map.get(node.name, qconfig) is None:
            continue
        weighted = module[0] if isinstance(module, nni._FusedModule) else module
        root = _names.module_type_name(type(weighted))
        if root is None or not root.startswith("nn."):
            continue
        reference = "nnqr." + root[len("nn."):]
        if reference not in _registry.module_types() or not weight_is_quantized(qconfig):
            continue
        where = f"node '{node.name}'"
        try:
            observer = qconfig.weight()
        except Exception as e:
            raise ExportError(f"{where}: its qconfig's weight observer cannot be built: "
                              f"{e}") from e
        observer_type = _names.module_type_name(type(observer))
        if observer_type is None or observer_type not in _registry.module_types() or \
                not _is_observer_module(observer):
            raise ExportError(
                f"{where}: the weight observer of its qconfig is a "
                f"{type(observer).__module__}.{type(observer).__qualname__}, which fuselage "
                "has no observer type for (MinMaxObserver, PerChannelMinMaxObserver, ...); "
                "`fuselage convert` could not quantize the weight")
        plans.append(Plan(node.name, root, reference, observer, observer_type))
    return plans
