"""torq-split-elementwise-results: an elementwise generic with several results becomes a chain
of single-result generics.

Contract: takes Torq dispatch functions (generic linalg ops). IREE fuses an
elementwise tail that yields an intermediate value too into one generic with
several results: DenseNet's average pooling divides the window sum by 4 and
yields both the mean (the concatenation's part) and the next layer's
batch norm + ReLU of it; MobileNetV3 yields a batch norm's output and the
hardsigmoid of it. One TorqHL op writes one result, so such a generic had no
Torq form, and neither had the pooling or matmul it is the epilogue of.

Each elementwise generic with N > 1 results whose output maps are
permutations and whose body does not read its outputs becomes N generics, in
result order, each over the original loops with its result's output map:
generic k computes yield value k from the original inputs it needs and,
where that value is computed from an earlier yield value j, from the result
of generic j (read through j's output map) instead of computing it again (so
the mean above is the pool's epilogue, and the batch norm reads the mean).
Values the chain shares but no result yields are computed again by each
generic that needs them. A result that yields the same value as an earlier
one in the same layout is that result; in another layout (wav2vec2's bias
add, yielded both as is and transposed) it is a copy of it. The
function computes exactly what it did, op for op. Other ops are unchanged.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import clone_remapped, functions, indexing_maps, iterator_types, n_inputs, walk_ops
from . import PassOptions

NAME = "torq-split-elementwise-results"


def _splittable(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) < 2:
        return False
    if any(it != "parallel" for it in iterator_types(op)):
        return False
    maps = indexing_maps(op)
    n_in = n_inputs(op)
    if not all(m.is_permutation for m in maps[n_in:]):
        return False
    block = op.regions[0].blocks[0]
    return not any(list(a.uses) for a in list(block.arguments)[n_in:])


def _slice(yielded: ir.Value, body: list[ir.Operation], stop: dict) -> list[ir.Operation]:
    """The body ops `yielded` is computed by, in body order, not looking past values in `stop`."""
    needed: set = set()
    todo = [yielded]
    producers = {r: o for o in body for r in o.results}
    while todo:
        v = todo.pop()
        if v in stop or v not in producers:
            continue
        o = producers[v]
        if o in needed:
            continue
        needed.add(o)
        todo.extend(o.operands)
    return [o for o in body if o in needed]


def _split(op: ir.Operation) -> None:
    block = op.regions[0].blocks[0]
    n_in = n_inputs(op)
    body = [o.operation for o in block.operations]
    yields = list(body[-1].operands)
    body = body[:-1]
    maps = ir.ArrayAttr(op.attributes["indexing_maps"])
    made: dict = {}  # yield value -> (the new generic's result, its output map)
    for k, y in enumerate(yields):
        out_map = maps[n_in + k]
        if y in made and str(made[y][1]) == str(out_map):
            op.results[k].replace_all_uses_with(made[y][0])
            continue
        ops = _slice(y, body, made)  # [] for a value made in another layout: a copy of it
        used = {v for o in ops for v in o.operands} | {y}
        args = [a for a in list(block.arguments)[:n_in] if a in used]
        earlier = [v for v in made if v in used]
        operands = [op.operands[a.arg_number] for a in args] + [made[v][0] for v in earlier]
        in_maps = [maps[a.arg_number] for a in args] + [made[v][1] for v in earlier]
        with ir.InsertionPoint(op), op.location:
            new = ir.Operation.create(
                "linalg.generic", results=[op.results[k].type],
                operands=operands + [op.operands[n_in + k]],
                attributes={"indexing_maps": ir.ArrayAttr.get(in_maps + [out_map]),
                            "iterator_types": op.attributes["iterator_types"],
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(operands), 1])},
                regions=1)
        types = [a.type for a in args] + [ir.RankedTensorType(made[v][0].type).element_type for v in earlier]
        nb = new.regions[0].blocks.append(*types, list(block.arguments)[n_in + k].type)
        mapping = dict(zip(args + earlier, list(nb.arguments)))
        with ir.InsertionPoint(nb), op.location:
            clone_remapped(ops, mapping)
            ir.Operation.create("linalg.yield", operands=[mapping.get(y, y)])
        made.setdefault(y, (new.results[0], out_map))
        op.results[k].replace_all_uses_with(new.results[0])
    op.erase()


def split_function(func: ir.Operation) -> None:
    for op in [o for o in walk_ops(func) if _splittable(o)]:
        _split(op)


def split_requantization_results(func: ir.Operation) -> None:
    """Splits, as this pass does, only the generics that read an integer contraction's i32
    accumulator: a requantization with a second result computed from its int8 value (GhostNet:
    the conv's map quantized, and that requantized to the concatenation's scale), which
    torq-lower-requantization, running before this pass, then lowers one result at a time."""
    from ..requant import integer_contraction_input

    for op in [o for o in walk_ops(func) if _splittable(o) and integer_contraction_input(o) is not None
               and _later_results_from_earlier(o)]:
        _split(op)


def _later_results_from_earlier(op: ir.Operation) -> bool:
    """Whether each result after the first reads the generic's i32 inputs only through earlier
    yielded values (split otherwise, the accumulator would have two readers, which the
    requantization refuses)."""
    block = op.regions[0].blocks[0]
    body = [o.operation for o in block.operations]
    yields = list(body[-1].operands)
    wide = [a for a in list(block.arguments)[:n_inputs(op)] if str(a.type) == "i32"]
    return not any(x in wide for k in range(1, len(yields))
                   for o in _slice(yields[k], body[:-1], set(yields[:k])) for x in o.operands)


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        split_function(func)
