"""torq-split-box-reads: an elementwise op that reads part of an input reads a box read of it.

Contract: takes Torq dispatch functions (generic linalg ops) after the requantization
lowering and the unit-dim folds, before the support check. A slice IREE fuses into an
elementwise op (MobileViT's q, k and v taken from the one qkv tensor, then transposed
for k; EdgeNeXt's channel split before its convs), or a box read of dispatch extraction
that linalg's elementwise fusion folded into the rescale after it
(torq-lower-requantization), leaves an all-parallel generic reading an input through a
map of constants and `d + c` offsets. That is neither a box read (it computes, or
transposes) nor an elementwise op (its map has no dim there), so the dispatch had no NPU
pattern ("no Torq pattern (loops 4x4x64x20: p p p p)").

A strided read is the same case: FastViT's and MobileOne's 1x1 stride-2 depthwise
branch, which IREE folds into the elementwise consumer of the 3x3 stride-2 conv beside
it as x[c, 2y, 2x] * w[c] (IREE's own llvm-cpu then fails on the dispatch), or into a
requantization as its residual.

Such a generic (all parallel, one result, not itself a box read, every input read
through a map whose results are dims `d`, strided offsets `d * s + c` or constants `c`
(`ir_utils.box_term`), each dim once, inside the input) reads, for each input with a
stride, an offset or a constant, a box read of it instead (`box_reads.copy_generic`: the
box in the input's dim order, the constant dims dropped) through the map of the dims
alone, so a transposed slice is a box read followed by a permuted elementwise read. The
generic then is an elementwise op the patterns know, and the box read joins its group as
a DMA box (patterns.groups._box_reads_of), a strided one (`DmaIn.strides`) where the map
had a stride. What the function computes is unchanged.
"""

from __future__ import annotations

from iree.compiler import ir

from ..box_reads import copy_generic
from ..ir_utils import (
    box_term,
    box_term_expr,
    functions,
    indexing_maps,
    iterator_types,
    loop_ranges,
    n_inputs,
    static_shape,
    walk_ops,
)
from ..patterns import box_read, is_elementwise
from . import PassOptions

NAME = "torq-split-box-reads"


def _box(read: ir.AffineMap, source: ir.Type, ranges: list[int]) -> tuple[list[tuple[int | None, int, int]], list[int]] | None:
    """(each source dim's (loop dim or None, stride, offset): `ir_utils.box_term`, the shape
    of the box without its constant dims) of an input read through `read`, or None when the
    read is no box a copy generic can take, or all of the input (unit dims read at 0, dims
    maybe permuted: no box read, and left to the patterns as it is)."""
    src = static_shape(source)
    terms = [box_term(e) for e in read.results]
    if src is None or None in terms:
        return None
    dims = [d for d, _, _ in terms if d is not None]
    if len(set(dims)) != len(dims):
        return None
    shape, whole = [], True
    for (d, st, c), extent in zip(terms, src):
        size = 1 if d is None else ranges[d]
        if size < 1 or c + (size - 1) * st >= extent:
            return None
        whole = whole and c == 0 and size == extent
        if d is not None:
            shape.append(size)
    return None if whole else (terms, shape)  # a whole source (unit dims read at 0): no box


def _split(op: ir.Operation) -> bool:
    """Rewrites `op` (module docstring) if it is such a generic; whether it was."""
    if op.name != "linalg.generic" or len(op.results) != 1 or box_read(op) is not None or \
            any(it != "parallel" for it in iterator_types(op)) or is_elementwise(op):
        return False
    if any(static_shape(v.type) is None for v in list(op.operands) + list(op.results)):
        return False  # a loop's range is known from static shapes only
    maps, ranges = indexing_maps(op), loop_ranges(op)
    if not all(isinstance(e, ir.AffineDimExpr) for e in maps[-1].results):
        return False  # the result is written whole, along dims
    boxes = {}
    for k in range(n_inputs(op)):
        if all(isinstance(e, ir.AffineDimExpr) for e in maps[k].results):
            continue
        found = _box(maps[k], op.operands[k].type, ranges)
        if found is None:
            return False
        boxes[k] = found
    if not boxes:
        return False
    for k, (terms, shape) in boxes.items():
        source = op.operands[k]
        elt = ir.RankedTensorType(source.type).element_type
        kept = [d for d, _, _ in terms if d is not None]
        exprs, j = [], 0
        for d, st, c in terms:  # the box read's own map: its dim j where the source keeps a loop dim
            exprs.append(box_term_expr(None if d is None else j, st, c))
            j += d is not None
        with ir.InsertionPoint(op), op.location:
            piece = copy_generic(source, ir.AffineMap.get(len(shape), 0, exprs),
                                 ir.RankedTensorType.get(shape, elt))
        op.operands[k] = piece
        maps[k] = ir.AffineMap.get(maps[k].n_dims, 0, [ir.AffineExpr.get_dim(d) for d in kept])
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    return True


def split_function(func: ir.Operation) -> int:
    """Splits the box reads out of `func`'s generics; returns how many generics changed."""
    return sum(_split(op) for op in [o for o in walk_ops(func) if o.name == "linalg.generic"])


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        split_function(func)
