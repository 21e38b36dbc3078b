"""The limits on what a model file may hold, the same numbers as the C++ loader's.

The C++ loader's defaults (graph/serialization.h, struct ModelLimits) are the one place the
numbers are written: they are read from that header, as fuselage._proto reads
graph/model.proto, whenever the checkout has it. An installed copy without the C++ sources
falls back to _FALLBACK, which tests/python/test_limits.py holds equal to the header.

LIMITS maps each ModelLimits field name (max_file_bytes, max_nodes, max_arg_depth,
max_module_depth, max_string_length, max_tensor_rank) to its value. The C++ loader also
clamps max_file_bytes to protobuf's 2 GiB - 1 and requires node names to be identifiers
([A-Za-z_][A-Za-z0-9_]*); both are fixed rules, mirrored here as MAX_PROTOBUF_BYTES and
NODE_NAME.
"""

import ast
import operator
import os
import re
from pathlib import Path

MAX_PROTOBUF_BYTES = (1 << 31) - 1  # serialization.cc EffectiveMaxBytes: INT_MAX
NODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_SCALE = 1e30  # graph/tensor.h QuantParams::kMaxScale: a quantization scale's upper bound

_FALLBACK = {
    "max_file_bytes": (1 << 31) - 1,
    "max_nodes": 50_000_000,
    "max_arg_depth": 16,
    "max_module_depth": 64,
    "max_string_length": 4096,
    "max_tensor_rank": 8,
}

_BINARY_OPS = {ast.LShift: operator.lshift, ast.Sub: operator.sub, ast.Add: operator.add,
               ast.Mult: operator.mul}


def _header_path() -> Path:
    override = os.environ.get("FUSELAGE_SERIALIZATION_H")
    if override:
        return Path(override)
    # python/fuselage/_limits.py -> repository root -> graph/serialization.h
    return Path(__file__).resolve().parent.parent.parent / "graph" / "serialization.h"


def _evaluate(expression: str, field: str) -> int:
    """The value of a ModelLimits initializer: integer literals (with ' separators and
    int64_t{...}), <<, +, -, * and parentheses; anything else is an error."""
    text = re.sub(r"\bint64_t\{([^}]*)\}", r"(\1)", expression.replace("'", ""))

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            return _BINARY_OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"ModelLimits::{field} = {expression!r} is not a plain integer "
                         "expression")

    return value(ast.parse(text, mode="eval").body)


def parse_model_limits(header_text: str) -> dict:
    """The defaults of struct ModelLimits in the text of graph/serialization.h."""
    struct = re.search(r"struct ModelLimits\s*\{(.*?)\n\};", header_text, re.S)
    if struct is None:
        raise ValueError("graph/serialization.h has no struct ModelLimits")
    limits = {}
    for line in struct.group(1).splitlines():
        field = re.match(r"\s*(?:int64_t|int)\s+(\w+)\s*=\s*([^;]+);", line)
        if field:
            limits[field.group(1)] = _evaluate(field.group(2).strip(), field.group(1))
    missing = set(_FALLBACK) - set(limits)
    if missing:
        raise ValueError(f"struct ModelLimits lacks {sorted(missing)}")
    return limits


def _load() -> dict:
    path = _header_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return dict(_FALLBACK)
    return parse_model_limits(text)


LIMITS = _load()
# What the loader really reads at most: ModelLimits clamped to protobuf's own limit.
MAX_FILE_BYTES = min(LIMITS["max_file_bytes"], MAX_PROTOBUF_BYTES)
