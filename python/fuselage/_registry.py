"""What the C++ side can represent, read from its sources so that export refuses what
`fuselage verify` would refuse (a module type without a schema, a call_function target
that is not a known function), naming the node at export instead of later.

The names are the string literals of graph/module_schema.cc's RegisterBuiltinModuleSchemas
and backend_configs/known_functions.cc's RegisterBuiltinFunctions, as _limits.py reads
graph/serialization.h: one source of truth. A few literals there are not type names
("weight", "0"); they can never name a torch module type, so the superset is harmless.
$FUSELAGE_SOURCE_ROOT overrides the repository root.
"""

import functools
import os
import re
from pathlib import Path

_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _source_root() -> Path:
    override = os.environ.get("FUSELAGE_SOURCE_ROOT")
    if override:
        return Path(override)
    # python/fuselage/_registry.py -> repository root
    return Path(__file__).resolve().parent.parent.parent


def _literals_of_function(relative_path: str, function: str) -> frozenset:
    path = _source_root() / relative_path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RuntimeError(f"fuselage: cannot read {path} for the registered names: "
                           f"{e.strerror}") from None
    start = text.find(f"absl::Status {function}(")
    end = text.find("\n}\n", start)
    if start < 0 or end < 0:
        raise RuntimeError(f"fuselage: {path} has no function {function}")
    return frozenset(_LITERAL.findall(text[start:end]))


@functools.lru_cache(maxsize=None)
def module_types() -> frozenset:
    """Module type names with a schema in ModuleSchemaRegistry (graph/module_schema.cc)."""
    return _literals_of_function("graph/module_schema.cc", "RegisterBuiltinModuleSchemas")


@functools.lru_cache(maxsize=None)
def functions() -> frozenset:
    """call_function targets FunctionRegistry knows (backend_configs/known_functions.cc)."""
    return _literals_of_function("backend_configs/known_functions.cc",
                                 "RegisterBuiltinFunctions")


MODULE_HOWTO = ("register its schema in ModuleSchemaRegistry (graph/module_schema.cc, "
                "RegisterBuiltinModuleSchemas) and its kernel in KernelRegistry "
                "(runtime/float_kernels.h: the float_*_kernels.cc file of its op family), or let "
                "torch.fx trace through it")
FUNCTION_HOWTO = ("register it in FunctionRegistry (backend_configs/known_functions.cc, "
                  "RegisterBuiltinFunctions) and its kernel in KernelRegistry "
                  "(runtime/float_kernels.h: the float_*_kernels.cc file of its op family)")
