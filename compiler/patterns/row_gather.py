"""Row gathers: an embedding lookup, `out[i..., r...] = table[indices[i...], r...]`.

IREE writes torch's `embedding` / `index_select` on dim 0 (and a row picked by a
runtime position, as a decode step's mask row) as a `linalg.generic` over the
result whose only input is the index tensor and whose body reads the table with
`tensor.extract` at (the index, then `linalg.index` of the result's remaining
dims), after asserting, as torch's embedding does, that the index lies in
[0, rows). Such a generic computes nothing: the NSS program makes its result with a
gather DMA (contract/program.py `DmaIn`, gather form), which reads the indices
into LRAM and moves the rows they name (compiler/nss_gathers.py), and fails the run on an index outside [0, rows),
which covers the asserts. A lookup IREE fused into the op that consumes it reads a
gathered view instead (`GATHER_VIEW`, torq-split-fused-gathers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir

from torq.contract.program import DTYPE_BYTES

from ..ir_utils import (
    constant_of,
    defined_outside,
    indexing_maps,
    iterator_types,
    map_dims,
    n_inputs,
    region_ops,
    static_shape,
)

INDEX_CASTS = ("arith.index_cast", "arith.index_castui")
_SLT, _SGE, _ULT = 2, 5, 6  # arith.cmpi predicates
# A gathered view (torq-split-fused-gathers): an unregistered op `torq.gather`(table, ids)
# whose element (i..., r...) is table[ids[i...], r...]. Like the padded view it has no
# TilingInterface; a tile reads a box of it, which the NSS program loads with a DMA-in of
# the box's ids and a gather DMA-in of their rows (nss_gathers.gather_operand).
GATHER_VIEW = "torq.gather"
INDEX_ELEMENT_TYPES = ("i32", "i64")


@dataclass(frozen=True)
class RowGather:
    """`result` = rows of `table` (its dim 0) chosen by the integers `indices`: the result's
    leading dims are the indices' dims, its other dims the table's dims after the first."""

    op: ir.Operation
    table: ir.Value
    indices: ir.Value

    @property
    def result(self) -> ir.Value:
        return self.op.results[0]


def index_dim(v: ir.Value) -> int | None:
    """d for a `linalg.index d` value, else None."""
    if isinstance(v.owner, ir.Block) or v.owner.name != "linalg.index":
        return None
    return ir.IntegerAttr(v.owner.attributes["dim"]).value


def bounds_checks_only(asserts: list[ir.Operation], rows: int, index: ir.Value) -> bool:
    """Whether each `cf.assert` checks the index (as read, or cast to index) against
    [0, rows), as torch's embedding does: the gather DMA fails the run on exactly those."""
    cast = [u.owner for u in index.uses if u.owner.name in INDEX_CASTS]
    index_values = [index, *(c.results[0] for c in cast)]
    for a in asserts:
        cond = a.operands[0].owner
        if isinstance(cond, ir.Block) or cond.name != "arith.cmpi" or cond.operands[0] not in index_values:
            return False
        bound = constant_of(cond.operands[1])
        predicate, bound = ir.IntegerAttr(cond.attributes["predicate"]).value, None if bound is None else int(bound)
        if (predicate, bound) not in ((_SLT, rows), (_ULT, rows), (_SGE, 0)):
            return False
    return True


def _gathered_table(op: ir.Operation) -> tuple[ir.Value, list[ir.Value]] | None:
    """(table, extract coordinates) of a body that only yields one `tensor.extract` of a
    value defined outside the op, with nothing else in it but the coordinates' ops and
    bounds checks of the index."""
    body = region_ops(op)
    names = [o.name for o in body]
    if names[-1] != "linalg.yield" or names.count("tensor.extract") != 1 or \
            any(n not in ("linalg.yield", "tensor.extract", "linalg.index", "arith.cmpi", "cf.assert",
                          *INDEX_CASTS) for n in names):
        return None
    asserts = [o for o in body if o.name == "cf.assert"]
    if names.count("arith.cmpi") != len(asserts):
        return None
    value = body[-1].operands[0]
    if isinstance(value.owner, ir.Block) or value.owner.name != "tensor.extract":
        return None
    extract = value.owner
    table = extract.operands[0]
    rows = static_shape(table.type)
    if not defined_outside(table, op) or not rows or not bounds_checks_only(asserts, rows[0], op.regions[0].blocks[0].arguments[0]):
        return None
    return table, list(extract.operands[1:])


def row_gather(op: ir.Operation) -> RowGather | None:
    """The row gather `op` is, or None (see the module docstring for the form)."""
    if op.name != "linalg.generic" or n_inputs(op) != 1 or len(op.results) != 1 or \
            any(it != "parallel" for it in iterator_types(op)):
        return None
    found = _gathered_table(op)
    if found is None:
        return None
    table, coords = found
    indices = op.operands[0]
    idx_shape, out_shape = static_shape(indices.type), static_shape(op.results[0].type)
    table_shape = static_shape(table.type)
    if idx_shape is None or out_shape is None or table_shape is None or not coords:
        return None
    if str(ir.ShapedType(indices.type).element_type) not in INDEX_ELEMENT_TYPES or \
            ir.ShapedType(table.type).element_type != ir.ShapedType(op.results[0].type).element_type:
        return None
    q = len(idx_shape)
    in_map, out_map = indexing_maps(op)
    if map_dims(out_map) != list(range(len(out_shape))) or map_dims(in_map) != list(range(q)):
        return None
    first = coords[0].owner
    if isinstance(first, ir.Block) or first.name not in INDEX_CASTS or \
            first.operands[0] != op.regions[0].blocks[0].arguments[0]:
        return None
    if [index_dim(c) for c in coords[1:]] != list(range(q, len(out_shape))) or \
            tuple(table_shape[1:]) != tuple(out_shape[q:]):
        return None
    return RowGather(op, table, indices)


def gathered_box(v: ir.Value) -> tuple[ir.Operation, ir.Operation | None] | None:
    """(gathered view, the `tensor.extract_slice` of it `v` is, or None when `v` is the view
    itself), or None when `v` reads no gathered view."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    if owner.name == GATHER_VIEW:
        return owner, None
    source = owner.operands[0].owner if owner.name == "tensor.extract_slice" else None
    if source is not None and not isinstance(source, ir.Block) and source.name == GATHER_VIEW:
        return source, owner
    return None


def gather_index_bytes(v: ir.Value) -> int:
    """Bytes of the ids a gathered box (`gathered_box`) needs in LRAM beside its rows, else 0."""
    found = gathered_box(v)
    if found is None:
        return 0
    ids = found[0].operands[1]
    q = len(static_shape(ids.type))
    return math.prod(static_shape(v.type)[:q]) * DTYPE_BYTES[str(ir.ShapedType(ids.type).element_type)]
