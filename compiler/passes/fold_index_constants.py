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
anything else is unchanged, and so is a generic another linalg op accumulates into (a
generalized fill: the NPU patterns read it as that op's init).

A generic that also reads inputs may compute a float from its indices alone inside
its body: torch's average pooling with count_include_pad=False divides each window
sum by the number of positions inside the input, `(min(i + 2, 56) - max(i - 1, 0)) *
(...)` of the output row and column (EfficientFormer, PoolFormer, TensorFlow's
'SAME' pooling in ONNX). Each such float value (a maximal index-only subexpression
that the rest of the body reads) is evaluated here over the loop dims it varies
along and becomes a constant input of the generic, read along those dims; the body
reads the new block argument instead. Bodies that read a tensor with
`tensor.extract` are left to torq-unroll-index-dims (rotate_half's sign and index).
"""

from __future__ import annotations

import math

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith

from ..ir_utils import (
    functions,
    generic_with_inputs,
    indexing_maps,
    iterator_types,
    loop_ranges,
    map_dims,
    n_inputs,
    region_ops,
    replace_with_op,
    static_shape,
    walk_ops,
)
from ..patterns.inits import fill_value
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


def _evaluated(o: ir.Operation, args: list, grid: np.ndarray):
    """The value of index-only body op `o` over the loop `grid` from its operands' `args`,
    or None when `o` is no such op."""
    if o.name == "linalg.index":
        return grid[ir.IntegerAttr(o.attributes["dim"]).value]
    if o.name == "arith.constant":
        return _scalar_constant(o)
    if o.name == "arith.cmpi":
        predicate = ir.IntegerAttr(o.attributes["predicate"]).value
        if predicate not in _CMP:
            return None
        a, b = (_signed(np.asarray(x), v.type) for x, v in zip(args, o.operands))
        return _CMP[predicate](a, b).astype(np.int64)
    if o.name == "arith.select":
        return np.where(args[0] != 0, args[1], args[2])
    if o.name in _EVAL:
        return _wrap(np.asarray(_EVAL[o.name](*args)), o.results[0].type)
    if o.name in _CASTS:
        x = _signed(np.asarray(args[0]), o.operands[0].type) if o.name != "arith.trunci" else args[0]
        return _wrap(np.asarray(x), o.results[0].type)
    return None


def _index_only(op: ir.Operation) -> dict:
    """Each body value of generic `op` computed from its loop indices and scalar constants
    alone -> its value over the loop grid (an array of the loops' rank, of extent 1 along
    the dims it is computed without: numpy broadcasts the index arrays)."""
    grid = np.indices(loop_ranges(op), dtype=np.int64, sparse=True)
    env: dict = {}
    for o in region_ops(op):
        args = [_value_of(v, env) for v in o.operands]
        value = None if any(a is None for a in args) or len(o.results) != 1 else _evaluated(o, args, grid)
        if value is not None:
            env[o.results[0]] = value
    return env


def evaluate(op: ir.Operation) -> np.ndarray | None:
    """The result of index-only generic `op` (see module docstring), or None."""
    shape = static_shape(op.results[0].type) if len(op.results) == 1 else None
    if op.name != "linalg.generic" or len(op.operands) != 1 or shape is None or \
            any(it != "parallel" for it in iterator_types(op)) or np.prod(shape) > MAX_ELEMENTS or \
            list(op.regions[0].blocks[0].arguments[0].uses) or \
            map_dims(indexing_maps(op)[0]) != list(range(len(shape))):  # the result in loop order
        return None
    yielded = region_ops(op)[-1].operands[0]
    value = _value_of(yielded, _index_only(op))
    return None if value is None else np.broadcast_to(value, loop_ranges(op)).reshape(shape)


def _float_roots(op: ir.Operation, env: dict) -> list[ir.Value]:
    """The index-only f32 values (not scalar constants) that other body ops read (the pass
    runs before torq-convert-dtypes: a float here is f32)."""
    roots = []
    for o in region_ops(op):
        if o.name in ("linalg.yield", "arith.constant") or (o.results and o.results[0] in env):
            continue
        for v in o.operands:
            if v in env and np.ndim(env[v]) and str(v.type) == "f32" and v not in roots:
                roots.append(v)
    return roots


def with_constant_inputs(op: ir.Operation) -> None:
    """`op` with each index-only float value of its body read from a constant input (module
    docstring); unchanged when there is none."""
    body = [o.name for o in region_ops(op)]
    if len(op.results) != 1 or "linalg.index" not in body or "tensor.extract" in body or \
            any(static_shape(v.type) is None for v in op.operands):
        return
    env = _index_only(op)
    roots = _float_roots(op, env)
    ranges = loop_ranges(op)
    dims = [[d for d, n in enumerate(np.shape(env[v])) if n > 1] for v in roots]
    if not roots or any(math.prod(ranges[d] for d in ds) > MAX_ELEMENTS for ds in dims):
        return
    consts, maps = [], []
    for v, ds in zip(roots, dims):
        value = np.broadcast_to(env[v], [ranges[d] if d in ds else 1 for d in range(len(ranges))])
        value = np.ascontiguousarray(value.reshape([ranges[d] for d in ds]), dtype=np.float32)
        with ir.InsertionPoint(op), op.location:
            consts.append(arith.ConstantOp(ir.RankedTensorType.get(list(value.shape), v.type),
                                           ir.DenseElementsAttr.get(value)).result)
        maps.append(ir.AffineMap.get(len(ranges), 0, [ir.AffineExpr.get_dim(d) for d in ds]))
    generic_with_inputs(op, consts, maps, roots)  # (drops the index arithmetic that made them)


def _is_init(op: ir.Operation) -> bool:
    """Whether `op` is a fill a linalg generic accumulates into: the patterns read it as that
    generic's init (linalg's elementwise fusion leaves a generalized fill yielding its
    constant, which `evaluate` would fold)."""
    if fill_value(op) is None:
        return False
    for use in op.results[0].uses:
        user = use.owner
        if user.name == "linalg.generic" and use.operand_number >= n_inputs(user):
            return True
    return False


def fold_function(func: ir.Operation) -> None:
    for op in [o for o in walk_ops(func) if o.name == "linalg.generic"]:
        if _is_init(op):
            continue
        value = evaluate(op)
        if value is None:
            with_constant_inputs(op)
            continue
        t = ir.RankedTensorType(op.results[0].type)
        dtype = _NP_TYPES.get(str(t.element_type))
        if dtype is None:
            continue
        dense = ir.DenseElementsAttr.get(np.ascontiguousarray(value.astype(dtype)))
        if dense.type != t:
            continue
        replace_with_op(op, "arith.constant", {"value": dense})


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        fold_function(func)
