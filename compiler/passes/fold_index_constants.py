"""torq-fold-index-constants: a generic computed from its loop indices alone is a constant.

Contract: takes Torq dispatch functions (generic linalg ops). Hugging Face models build
their attention masks from positions (GPT-2's causal mask: `d % 16 <= (d / 16) % 16`
over a flattened [16, 16]; BERT's expanded mask), and IREE leaves such a generic in a
dispatch of its own: no inputs, a body of `linalg.index` and integer arithmetic, no
slice form. Its result depends on nothing the call passes, so it is evaluated here,
at compile time, exactly (integer arithmetic as arith defines it: division truncates,
remainders take the dividend's sign, casts wrap, an i1 true is -1 when read as signed) and replaced by a dense constant,
which the NSS program copies into the result with DMAs (patterns: a constant result
is a copy). Only all-parallel generics with one result that does not read its init and
writes it in loop order (identity map), at most `MAX_ELEMENTS` elements, whose body uses only the ops in `_EVAL` are folded;
anything else is unchanged.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from ..ir_utils import indexing_maps, iterator_types, loop_ranges, map_dims, region_ops, static_shape, walk_ops
from . import PassOptions

NAME = "torq-fold-index-constants"
MAX_ELEMENTS = 1 << 20  # a larger constant would bloat the executable more than it saves


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q)


_CMP = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal}
_EVAL = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
    "arith.divsi": _trunc_div, "arith.remsi": lambda a, b: a - b * _trunc_div(a, b),
    "arith.floordivsi": lambda a, b: a // b, "arith.minsi": np.minimum, "arith.maxsi": np.maximum,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
}
_CASTS = ("arith.index_cast", "arith.extsi", "arith.trunci", "arith.sitofp")
_NP_TYPES = {"i1": bool, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "f32": np.float32}


def _width(t: ir.Type) -> int | None:
    if isinstance(t, ir.IndexType):
        return 64
    return ir.IntegerType(t).width if isinstance(t, ir.IntegerType) else None


def _wrap(x: np.ndarray, t: ir.Type) -> np.ndarray:
    """`x` as a value of integer type `t` (two's complement wrap, held as int64; i1 as its
    bit, 0 or 1), or as f32."""
    w = _width(t)
    if w is None:
        return x.astype(np.float64).astype(np.float32)
    x = x.astype(np.int64)
    if w == 1:
        return x & 1
    if w < 64:
        x = (x + (1 << (w - 1))) % (1 << w) - (1 << (w - 1))
    return x


def _signed(x: np.ndarray, t: ir.Type) -> np.ndarray:
    """The signed value of `x` held as type `t`: an i1 bit 1 is -1 (extsi, sitofp)."""
    return -x if _width(t) == 1 else x


def _scalar_constant(op: ir.Operation):
    attr = op.attributes["value"]
    if isinstance(attr, ir.BoolAttr):
        return np.int64(ir.BoolAttr(attr).value)
    if isinstance(attr, ir.IntegerAttr):
        return _wrap(np.asarray(ir.IntegerAttr(attr).value), op.results[0].type)
    if isinstance(attr, ir.FloatAttr):
        return np.float32(ir.FloatAttr(attr).value)
    return None


def _value_of(v: ir.Value, env: dict):
    if v in env:
        return env[v]
    owner = v.owner
    if not isinstance(owner, ir.Block) and owner.name == "arith.constant" and not isinstance(v.type, ir.ShapedType):
        return _scalar_constant(owner)
    return None


def evaluate(op: ir.Operation) -> np.ndarray | None:
    """The result of index-only generic `op` (see module docstring), or None."""
    shape = static_shape(op.results[0].type) if len(op.results) == 1 else None
    if op.name != "linalg.generic" or len(op.operands) != 1 or shape is None or \
            any(it != "parallel" for it in iterator_types(op)) or np.prod(shape) > MAX_ELEMENTS or \
            list(op.regions[0].blocks[0].arguments[0].uses) or \
            map_dims(indexing_maps(op)[0]) != list(range(len(shape))):  # the result in loop order
        return None
    grid = np.indices(loop_ranges(op), dtype=np.int64)
    env: dict = {}
    for o in region_ops(op):
        args = [_value_of(v, env) for v in o.operands]
        if any(a is None for a in args):
            return None
        if o.name == "linalg.index":
            env[o.results[0]] = grid[ir.IntegerAttr(o.attributes["dim"]).value]
        elif o.name == "arith.constant":
            env[o.results[0]] = _scalar_constant(o)
        elif o.name == "arith.cmpi":
            predicate = ir.IntegerAttr(o.attributes["predicate"]).value
            if predicate not in _CMP:
                return None
            a, b = (_signed(np.asarray(x), v.type) for x, v in zip(args, o.operands))
            env[o.results[0]] = _CMP[predicate](a, b).astype(np.int64)
        elif o.name == "arith.select":
            env[o.results[0]] = np.where(args[0] != 0, args[1], args[2])
        elif o.name in _EVAL:
            env[o.results[0]] = _wrap(np.asarray(_EVAL[o.name](*args)), o.results[0].type)
        elif o.name in _CASTS:
            x = _signed(np.asarray(args[0]), o.operands[0].type) if o.name != "arith.trunci" else args[0]
            env[o.results[0]] = _wrap(np.asarray(x), o.results[0].type)
        elif o.name == "linalg.yield":
            return np.broadcast_to(args[0], loop_ranges(op)).reshape(shape)
        else:
            return None
    return None


def fold_function(func: ir.Operation) -> None:
    for op in [o for o in walk_ops(func) if o.name == "linalg.generic"]:
        value = evaluate(op)
        if value is None:
            continue
        t = ir.RankedTensorType(op.results[0].type)
        dtype = _NP_TYPES.get(str(t.element_type))
        if dtype is None:
            continue
        dense = ir.DenseElementsAttr.get(np.ascontiguousarray(value.astype(dtype)))
        if dense.type != t:
            continue
        with ir.InsertionPoint(op), op.location:
            const = ir.Operation.create("arith.constant", results=[t], attributes={"value": dense})
        op.results[0].replace_all_uses_with(const.results[0])
        op.erase()


def run(module: ir.Module, options: PassOptions) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            fold_function(op.operation)
