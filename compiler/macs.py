"""Compile-time count of the multiply-accumulates (MACs) of a dispatch.

Contract: `count_macs(root)` walks every linalg structured op nested in `root`
(a `flow.dispatch.workgroups`, an extracted `func.func`, a module) without
changing anything, and returns the sum of their MACs, or None when an op that
has MACs has a loop whose range is not static.

The rule, per linalg op (named or generic):
- its loop ranges come from its indexing maps: a map result that is a plain
  loop dimension `d_i` at position j of operand k gives range(d_i) =
  shape(k)[j] (a conv's input map `d1 + d4` gives nothing; the output and
  filter maps name every loop);
- a loop is a reduction loop when no output (init) map uses it;
- the op is contraction-like when it has at least one reduction loop and its
  body multiplies (`arith.mulf`, `arith.muli`, `complex.mul`): then MACs =
  product of all loop ranges (matmul M·N·K, batch matmul B·M·N·K, conv
  N·OH·OW·F·KH·KW·C, depthwise N·OH·OW·C·KH·KW, a layer norm's sum of
  squares S·H);
- every other op counts 0: elementwise ops (a multiply without a reduction)
  and reductions that do not multiply (sum, max, mean, pooling) are vector
  work, not MACs.
- `iree_linalg_ext.attention` (torch's scaled_dot_product_attention) counts
  its two matmuls: Q·Kᵀ = product of the ranges of the loops Q and K read
  (B·M·K1·K2), P·V = product of those V and the result read (B·M·K2·N).

The count is the model's arithmetic, independent of where the dispatch runs:
it is the same for an NPU dispatch and a host fallback, so "share of MACs on
the NPU" = MACs of torq dispatches / MACs of all dispatches. (The simulator's
per-command `macs` may be larger: it counts the padded shapes the slices
really compute.)
"""

from __future__ import annotations

import math

from iree.compiler import ir
from iree.compiler.dialects import linalg

from .ir_utils import indexing_maps, static_shape, walk_ops

MULTIPLY_OPS = frozenset({"arith.mulf", "arith.muli", "complex.mul"})


def _indexing_maps(op: ir.Operation) -> list[ir.AffineMap] | None:
    try:
        maps = linalg.get_indexing_maps(op.opview)
    except Exception:  # not a structured op (linalg.yield, linalg.index, ...)
        return None
    if maps is None:
        return None
    return [ir.AffineMapAttr(a).value for a in maps]


def _num_inits(op: ir.Operation) -> int:
    if "operandSegmentSizes" in op.attributes:
        return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[-1]
    return len(op.results)


def _body_multiplies(op: ir.Operation) -> bool:
    return any(o.operation.name in MULTIPLY_OPS
               for region in op.regions for block in region.blocks for o in block.operations)


def loop_ranges(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int | None]:
    """Static range of each loop of a structured op (None where no operand fixes it)."""
    ranges: list[int | None] = [None] * maps[0].n_dims
    for operand, m in zip(op.operands, maps):
        shape = static_shape(operand.type) if isinstance(operand.type, ir.ShapedType) else ()
        if shape is None:
            continue
        for j, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr) and j < len(shape) and ranges[e.position] is None:
                ranges[e.position] = shape[j]
    return ranges


def op_macs(op: ir.Operation) -> int | None:
    """MACs of one linalg op by the module's rule (0 if it is not contraction-like)."""
    maps = _indexing_maps(op)
    if not maps or len(maps) != len(op.operands):
        return 0
    n_inits = _num_inits(op)
    used_by_outputs = {e.position for m in maps[len(maps) - n_inits:] for e in m.results
                       if isinstance(e, ir.AffineDimExpr)}
    if all(d in used_by_outputs for d in range(maps[0].n_dims)) or not _body_multiplies(op):
        return 0
    ranges = loop_ranges(op, maps)
    if any(r is None for r in ranges):
        return None
    return math.prod(ranges)


ATTENTION = "iree_linalg_ext.attention"


def attention_macs(op: ir.Operation) -> int | None:
    """MACs of an `iree_linalg_ext.attention`: its Q·Kᵀ and P·V matmuls."""
    maps = indexing_maps(op)
    if len(maps) != len(op.operands):
        return None
    ranges = loop_ranges(op, maps)

    def product(*ms: ir.AffineMap) -> int | None:
        dims = {e.position for m in ms for e in m.results if isinstance(e, ir.AffineDimExpr)}
        if any(ranges[d] is None for d in dims):
            return None
        return math.prod(ranges[d] for d in dims)

    qk, pv = product(maps[0], maps[1]), product(maps[2], maps[-1])
    return None if qk is None or pv is None else qk + pv


def count_macs(root: ir.Operation) -> int | None:
    """Sum of `op_macs` over the linalg ops nested in `root` (None if one is unknown)."""
    total = 0
    for op in walk_ops(root):
        if op.name == ATTENTION:
            n = attention_macs(op)
            if n is None:
                return None
            total += n
            continue
        if not op.name.startswith("linalg."):
            continue
        n = op_macs(op)
        if n is None:
            return None
        total += n
    return total
