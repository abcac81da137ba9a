"""A loop dim a generic reads as digits becomes one loop dim per digit (torq-unroll-index-dims).

Qwen3 normalises q and k per head, so IREE fuses the rotary into a generic over the
collapsed row of H heads x 2 halves x D/2 columns: the body reads the half index as
`(d / (D/2)) % 2` and the head as `d / D`, and the loop dim (H*D wide) has too many
pieces of D/2 to split along. Such an index, read only through quotients and remainders
by constants (`d % c`, `d / c`, again on those), spans digit ranges of the mixed-radix
number d: `(d mod hi) div lo` for cut points lo < hi. When the cut points divide each
other and the extent, the dim is expanded into one loop dim per digit, outermost first:
- each operand indexed by the dim gets the digit dims in its place (its type expanded,
  [.., 128, ..] -> [.., 8, 2, 8, ..]): a function argument's type changes (the target
  reshapes the call's operand, `flow.tensor.reshape`, which moves no data), and so does
  the result's (the target reshapes the call's result back);
- each quotient and remainder becomes the digits it spans (`digit`, or
  `digit_hi * size_lo + digit_lo` across two).
A digit of extent 2..MAX_VALUES is then one the unroll splits along. Only a parallel
generic whose operands indexed by the dim are arguments it alone reads (or an empty init)
and whose result the function returns is expanded; any other stays as it is.
"""

from __future__ import annotations

import math

from iree.compiler import ir

from .ir_utils import (
    block_ops,
    clone_remapped,
    constant_of,
    erase_unused,
    indexing_maps,
    iterator_types,
    loop_ranges,
    map_dims,
    region_ops,
    static_shape,
    sync_function_type,
)

Span = tuple[int, int]  # (lo, hi): the value is (d mod hi) div lo


def digit_spans(indices: list[ir.Value], extent: int) -> dict[ir.Value, Span] | None:
    """The span of each of `indices` (`linalg.index` of one dim, (1, extent)) and of every
    quotient / remainder by a constant taken of them, transitively; None when one divides
    past the extent."""
    spans: dict[ir.Value, Span] = {v: (1, extent) for v in indices}
    todo = list(indices)
    while todo:
        v = todo.pop()
        lo, hi = spans[v]
        for use in v.uses:
            o = use.owner
            c = constant_of(o.operands[1]) if o.name in ("arith.divsi", "arith.remsi") and \
                use.operand_number == 0 else None
            if c is None or c.size != 1 or int(c) < 2:
                continue  # any other use reads the value itself
            cut = lo * int(c)
            if cut >= hi:
                return None  # a quotient that is 0, or a remainder that is the value
            spans[o.results[0]] = (cut, hi) if o.name == "arith.divsi" else (lo, cut)
            todo.append(o.results[0])
    return spans


def _consumed(v: ir.Value, spans: dict[ir.Value, Span]) -> bool:
    """Whether something besides a further quotient / remainder in `spans` reads `v`."""
    return any(not all(r in spans for r in u.owner.results) for u in v.uses)


def digit_sizes(spans: dict[ir.Value, Span], extent: int) -> list[int] | None:
    """The digit extents, outermost first, of the cut points of the spans something reads
    (`(d / 8) / 2` makes no digit of `d / 8`); None when they do not divide each other and
    the extent, or when there is only one digit."""
    cuts = sorted({1, extent} | {x for v, span in spans.items() if _consumed(v, spans) for x in span})
    if any(b % a for a, b in zip(cuts, cuts[1:])) or len(cuts) < 3:
        return None
    return [b // a for a, b in zip(cuts, cuts[1:])][::-1]


def _expandable_operands(op: ir.Operation, d: int) -> list[int] | None:
    """The operand positions whose map reads dim d, when every map is a projection of the
    loops and each such operand is an argument `op` alone reads or its empty init, and the
    result is only returned; else None."""
    maps = [map_dims(m) for m in indexing_maps(op)]
    if any(m is None for m in maps) or len(op.results) != 1 or \
            any(u.owner.name != "func.return" for u in op.results[0].uses):
        return None
    positions = [k for k, m in enumerate(maps) if d in m]
    n_in = len(op.operands) - 1
    for k in positions:
        v = op.operands[k]
        if k == n_in:
            if isinstance(v.owner, ir.Block) or v.owner.name != "tensor.empty":
                return None
        elif not isinstance(v.owner, ir.Block) or len(list(v.uses)) != 1:
            return None
    return positions


def _expanded_type(t: ir.Type, at: int, sizes: list[int]) -> ir.Type:
    shape = list(static_shape(t))
    return ir.RankedTensorType.get(shape[:at] + sizes + shape[at + 1:], ir.RankedTensorType(t).element_type)


def _expanded_map(m: ir.AffineMap, d: int, k: int) -> ir.AffineMap:
    """Map `m` over the loops with dim d replaced by k digit dims d..d+k-1."""
    out = []
    for e in map_dims(m):
        out += list(range(d, d + k)) if e == d else [e + k - 1 if e > d else e]
    return ir.AffineMap.get(m.n_dims + k - 1, 0, [ir.AffineDimExpr.get(e) for e in out])


def _digit_value(span: Span, digits: list[ir.Value], strides: list[int]) -> ir.Value:
    """(d mod hi) div lo from the digit indices (outermost first, `strides` their place
    values), built at the insertion point."""
    index = ir.IndexType.get()
    value = None
    for digit, stride in zip(digits, strides):
        if not span[0] <= stride < span[1]:
            continue
        term = digit
        if stride // span[0] != 1:
            k = ir.Operation.create("arith.constant", results=[index],
                                    attributes={"value": ir.IntegerAttr.get(index, stride // span[0])})
            term = ir.Operation.create("arith.muli", results=[index], operands=[digit, k.results[0]]).results[0]
        if value is not None:
            term = ir.Operation.create("arith.addi", results=[index], operands=[value, term]).results[0]
        value = term
    return value


def expand_digits(op: ir.Operation, d: int, spans: dict[ir.Value, Span], sizes: list[int]) -> bool:
    """Rewrites the parallel generic `op` with loop dim d expanded into digit dims of `sizes`
    (module docstring); False, with nothing changed, when its operands do not allow it."""
    positions = _expandable_operands(op, d)
    if positions is None:
        return False
    k, maps = len(sizes), indexing_maps(op)
    new_maps = [_expanded_map(m, d, k) for m in maps]
    operands = list(op.operands)
    for p in positions:
        at = map_dims(maps[p]).index(d)
        t = _expanded_type(operands[p].type, at, sizes)
        if p < len(operands) - 1:
            operands[p].set_type(t)  # a function argument: the call reshapes its operand
        else:
            with ir.InsertionPoint(op), op.location:
                operands[p] = ir.Operation.create("tensor.empty", results=[t]).results[0]
    out_type = operands[-1].type
    iterators = list(ir.ArrayAttr(op.attributes["iterator_types"]))
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(
            "linalg.generic", results=[out_type], operands=operands,
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps]),
                        "iterator_types": ir.ArrayAttr.get(iterators[:d] + [iterators[d]] * k + iterators[d + 1:]),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(operands) - 1, 1])},
            regions=1)
    block = op.regions[0].blocks[0]
    nb = new.regions[0].blocks.append(*[a.type for a in block.arguments])
    mapping = dict(zip(block.arguments, nb.arguments))
    body = region_ops(op)
    with ir.InsertionPoint(nb), op.location:
        index = ir.IndexType.get()
        digits = [ir.Operation.create("linalg.index", results=[index],
                                      attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d + i)}
                                      ).results[0] for i in range(k)]
        strides = [math.prod(sizes[i + 1:]) for i in range(k)]
        for v, span in spans.items():  # the rest are read only by these, which are not cloned
            if _consumed(v, spans):
                mapping[v] = _digit_value(span, digits, strides)
        clone_remapped([o for o in body if not any(r in spans for r in o.results)], mapping)
    for o in block_ops(nb):
        if o.name == "linalg.index":
            dim = ir.IntegerAttr(o.attributes["dim"]).value
            if o.results[0] not in digits and dim > d:
                o.attributes["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim + k - 1)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    erase_unused(lambda: block_ops(nb), ("arith.constant", "arith.muli", "arith.addi", "linalg.index"))
    return True


def expand_digit_dims(func: ir.Operation, wanted) -> bool:
    """Expands, in each parallel generic of `func` that `wanted(op)` selects, the first loop
    dim its body reads as two or more digits; syncs the function's type. True if any."""
    changed = False
    for op in [o for o in region_ops(func) if o.name == "linalg.generic"]:
        if not wanted(op) or any(it != "parallel" for it in iterator_types(op)):
            continue
        ranges = loop_ranges(op)
        indices: dict[int, list[ir.Value]] = {}
        for o in region_ops(op):
            if o.name == "linalg.index":
                indices.setdefault(ir.IntegerAttr(o.attributes["dim"]).value, []).append(o.results[0])
        for d, values in sorted(indices.items()):
            spans = digit_spans(values, ranges[d])
            sizes = digit_sizes(spans, ranges[d]) if spans else None
            if sizes and expand_digits(op, d, spans, sizes):
                changed = True
                break
    if changed:
        sync_function_type(func)
    return changed
