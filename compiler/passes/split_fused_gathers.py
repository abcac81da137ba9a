"""torq-split-fused-gathers: an embedding lookup fused into a computation reads a gathered view.

Contract: takes Torq dispatch functions (generic linalg ops). IREE fuses the embedding
lookup of GPT-2 / BERT (`wte[ids] + wpe[pos]`) or Gemma (`embed[ids] * sqrt(d)`) into the
elementwise op that consumes it: the generic's inputs are the token ids and the other
operands, and its body reads the table with `tensor.extract` at (the id cast to index,
then `linalg.index` of the row dims), after torch's bounds asserts. No slice computes a
data-dependent read, so the dispatch had no NPU form.

Such a generic (all parallel, one result, not itself a pure row gather, exactly one
extract of a value defined outside it, of that form) becomes the same generic reading a
gathered view instead: `torq.gather`(table, ids) (`patterns.GATHER_VIEW`, unregistered,
like the padded view: tiling leaves it outside the tile loops), whose element (i..., r...)
is table[ids[i...], r...], read through the ids' map followed by the row dims. The
asserts go (the gather DMA fails the run on an index outside [0, rows)); the ids stay an
input only if the body still reads them. The generic is then an elementwise op the
patterns know, and the NSS program loads each tile's box of the view with a DMA-in of
its ids and a gather DMA-in of the rows they name (nss_gathers.gather_operand).
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import (
    clone_remapped,
    defined_outside,
    functions,
    indexing_maps,
    iterator_types,
    loop_ranges,
    map_dims,
    n_inputs,
    region_ops,
    static_shape,
    walk_ops,
)
from ..patterns.row_gather import (
    GATHER_VIEW,
    INDEX_CASTS,
    INDEX_ELEMENT_TYPES,
    bounds_checks_only,
    index_dim,
    row_gather,
)
from . import PassOptions

NAME = "torq-split-fused-gathers"


def _fused_read(op: ir.Operation):
    """(extract op, ids input position, row loop dims) of a fused embedding read, or None."""
    if op.name != "linalg.generic" or len(op.results) != 1 or row_gather(op) is not None or \
            any(it != "parallel" for it in iterator_types(op)):
        return None
    body = region_ops(op)
    extracts = [o for o in body if o.name == "tensor.extract"]
    if len(extracts) != 1:
        return None
    e = extracts[0]
    table, coords = e.operands[0], list(e.operands[1:])
    shape = static_shape(table.type)
    first = coords[0].owner if coords else None
    if not defined_outside(table, op) or not shape or first is None or isinstance(first, ir.Block) or first.name not in INDEX_CASTS:
        return None
    arg = first.operands[0]
    if not isinstance(arg.owner, ir.Block) or arg.owner.owner != op or arg.arg_number >= n_inputs(op) or \
            str(arg.type) not in INDEX_ELEMENT_TYPES:
        return None
    rows = [index_dim(c) for c in coords[1:]]
    if None in rows:
        return None
    ids_dims = map_dims(indexing_maps(op)[arg.arg_number])
    ranges = loop_ranges(op)
    if ids_dims is None or len(set(ids_dims + rows)) != len(ids_dims) + len(rows) or \
            [ranges[d] for d in rows] != list(shape[1:]):
        return None
    if not bounds_checks_only([o for o in body if o.name == "cf.assert"], shape[0], arg):
        return None
    return e, arg.arg_number, rows


def _dropped(op: ir.Operation, e: ir.Operation) -> set:
    """The body ops the view replaces: the extract, the asserts with their comparisons, and
    the casts and loop indices nothing else reads."""
    body = region_ops(op)
    drop = {e, *(o for o in body if o.name == "cf.assert")}
    drop |= {a.operands[0].owner for a in body if a.name == "cf.assert"}
    changed = True
    while changed:
        changed = False
        for o in body:
            if o not in drop and o.name in (*INDEX_CASTS, "linalg.index") and \
                    all(u.owner in drop for r in o.results for u in r.uses):
                drop.add(o)
                changed = True
    return drop


def _split(op: ir.Operation, e: ir.Operation, k: int, rows: list[int]) -> None:
    block = op.regions[0].blocks[0]
    n_in = n_inputs(op)
    drop = _dropped(op, e)
    maps = indexing_maps(op)
    ids = op.operands[k]
    keep_ids = any(u.owner not in drop for u in block.arguments[k].uses)
    kept = [i for i in range(n_in) if i != k or keep_ids]
    table = e.operands[0]
    elt = ir.RankedTensorType(table.type).element_type
    view_type = ir.RankedTensorType.get(list(static_shape(ids.type)) + list(static_shape(table.type)[1:]), elt)
    view_map = ir.AffineMap.get(maps[k].n_dims, 0, list(maps[k].results) + [ir.AffineDimExpr.get(d) for d in rows])
    with ir.InsertionPoint(op), op.location:
        view = ir.Operation.create(GATHER_VIEW, results=[view_type], operands=[table, ids])
        new = ir.Operation.create(
            "linalg.generic", results=[op.results[0].type],
            operands=[op.operands[i] for i in kept] + [view.results[0], op.operands[n_in]],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(maps[i]) for i in kept] +
                                                          [ir.AffineMapAttr.get(view_map),
                                                           ir.AffineMapAttr.get(maps[n_in])]),
                        "iterator_types": op.attributes["iterator_types"],
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(kept) + 1, 1])},
            regions=1)
    args = list(block.arguments)
    nb = new.regions[0].blocks.append(*[args[i].type for i in kept], elt, args[n_in].type)
    new_args = list(nb.arguments)
    mapping = {args[i]: a for i, a in zip(kept, new_args)}
    mapping[e.results[0]] = new_args[len(kept)]
    mapping[args[n_in]] = new_args[-1]
    with ir.InsertionPoint(nb), op.location:
        clone_remapped([o for o in region_ops(op) if o not in drop], mapping)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def split_function(func: ir.Operation) -> None:
    for op in [o for o in walk_ops(func) if o.name == "linalg.generic"]:
        found = _fused_read(op)
        if found is not None:
            _split(op, *found)


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        split_function(func)
