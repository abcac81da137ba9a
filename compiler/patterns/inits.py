"""Accumulator initial values: fills (`fill_value`, `is_zero_fill`), broadcasts
of one tensor (a bias in the accumulator) and the identity of max."""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.program import EPILOGUE_INT_TYPES

from ..ir_utils import constant_of, indexing_maps, n_inputs, region_ops, static_shape
from ..ir_utils import iterator_types as _iterators
from .contraction import dim_of
from .elementwise import is_identity_like


def single_user(v: ir.Value) -> ir.Operation | None:
    users = [u.owner for u in v.uses]
    return users[0] if len(users) == 1 else None


def fill_value(op: ir.Operation):
    """The scalar a `linalg.fill` (or its generalized form: no tensor ins, body
    yields a constant or its scalar input) writes, or None if `op` is no fill."""
    if op.name == "linalg.fill":
        c = constant_of(op.operands[0])
    elif op.name == "linalg.generic" and n_inputs(op) <= 1:
        body = region_ops(op)
        if len(body) != 1 or body[0].name != "linalg.yield":
            return None
        v = body[0].operands[0]
        if isinstance(v.owner, ir.Block):  # yields its scalar input
            if n_inputs(op) != 1 or v.arg_number != 0 or static_shape(op.operands[0].type):
                return None
            v = op.operands[0]
        c = constant_of(v)
    else:
        return None
    return c if c is not None and c.ndim == 0 else None


def is_zero_fill(op: ir.Operation) -> bool:
    """`linalg.fill` of 0, or its generalized form (no ins, body yields 0)."""
    c = fill_value(op)
    return c is not None and float(c) == 0.0


def broadcast_source(op: ir.Operation) -> tuple[ir.Value, ir.AffineMap, ir.AffineMap] | None:
    """(input, its map, result map) if `op` is a generic that only broadcasts one tensor."""
    if op.name != "linalg.generic" or n_inputs(op) != 1 or len(op.results) != 1:
        return None
    if any(it != "parallel" for it in _iterators(op)) or static_shape(op.operands[0].type) is None:
        return None
    body = region_ops(op)
    if len(body) != 1 or body[0].name != "linalg.yield":
        return None
    v = body[0].operands[0]
    if not isinstance(v.owner, ir.Block) or v.arg_number != 0:
        return None
    maps = indexing_maps(op)
    if not is_identity_like(maps[1]) or any(dim_of(e) is None for e in maps[0].results):
        return None
    return op.operands[0], maps[0], maps[1]


def is_lowest(c, elt: ir.Type) -> bool:
    """Whether scalar `c` is the identity of max for element type `elt`."""
    s = str(elt)
    if s in ("f32", "bf16", "f16", "f64"):
        return float(c) == float("-inf")
    if s in EPILOGUE_INT_TYPES:
        return int(c) == -(1 << (EPILOGUE_INT_TYPES[s] - 1))
    return False
