"""torq-unroll-index-dims: a generic that reads its loop indices in arithmetic becomes
one generic per index value of those dims, each reading boxes of its inputs.

Contract: takes Torq dispatch functions (generic linalg ops). IREE writes Llama's
rotate_half (`cat(-x[..., D/2:], x[..., :D/2])`, with x viewed as [..., 2, D/2]) as
one parallel generic with no inputs whose body reads x with `tensor.extract` at
(d0, d1, 1 - d2, d3) and negates where 1 - d2 == 1: the value read and the sign
depend on the index d2, which no slice computes.

A parallel generic whose body reads a value defined outside it with
`tensor.extract`, and uses `linalg.index` of a dim of extent 2..`MAX_VALUES` in
anything but an extract coordinate, is split along each such dim into one generic
per index value (`transform.structured.split`: the pieces write boxes of the result,
assembled with `tensor.insert_slice`, disjoint and covering it; a piece split again,
three or more values, is flattened into the same one-level assembly). In a piece that
index is a constant (0 on its unit dim, plus the piece's offset), and canonicalize
folds the arithmetic. Then each `tensor.extract` of an outside value whose
coordinates are loop indices (each at most once, maybe plus a constant) or
constants becomes an input operand: the box of that value it reads
(`tensor.extract_slice`, offsets the constants, the loop extents elsewhere; of
what the value slices when it is a box load itself), each box dim read along a loop dim (a
constant's unit dim along a unit loop dim, the piece's own). A piece whose
body reads no index any more is an elementwise generic the patterns know (rotate_half:
a negation of one half, a copy of the other). Functions without such a generic are
unchanged, and so is a function where some piece would still read an index (the
rewrite runs on a copy, kept only when it succeeds): its dispatch stays on the host
and says why.

A generic whose index is read as digits of a collapsed dim (quotients and remainders by
constants, too many pieces to split along) has that dim expanded into one loop dim per
digit first (compiler/index_digits.py): the function's argument and result types may then
change to the expanded shapes, which the target reshapes at the call.
"""

from __future__ import annotations

import math

from iree.compiler import ir
from iree.compiler.dialects.transform import interpreter

from ..box_reads import box_map, static_box
from ..index_arith import index_plus_constant, simplify_indices
from ..index_digits import expand_digit_dims
from ..ir_utils import (
    clone_remapped,
    constant_of,
    defined_outside,
    erase_unused,
    functions,
    indexing_maps,
    iterator_types,
    loop_ranges,
    region_ops,
    replace_function,
    static_insert,
    static_shape,
    static_slice,
    walk_ops,
)
from ..pass_managers import parse_script, run_pipeline
from ..patterns.inits import single_user
from ..patterns.row_gather import row_gather
from . import PassOptions

NAME = "torq-unroll-index-dims"
MAX_VALUES = 4  # per dim; the pieces of one generic at most MAX_VALUES ** 2
_SPLIT = "torq.unroll_split"


def _index_ops(op: ir.Operation) -> dict[int, list[ir.Operation]]:
    found: dict[int, list[ir.Operation]] = {}
    for o in region_ops(op):
        if o.name == "linalg.index":
            found.setdefault(ir.IntegerAttr(o.attributes["dim"]).value, []).append(o)
    return found


def _reads_outside_value(op: ir.Operation) -> bool:
    return any(o.name == "tensor.extract" and defined_outside(o.operands[0], op) for o in region_ops(op))


def _computes_with(v: ir.Value) -> bool:
    return any(u.owner.name != "tensor.extract" or u.operand_number == 0 for u in v.uses)


def _reads_computed_index(op: ir.Operation) -> bool:
    """A parallel generic reading a value defined outside it at coordinates computed from
    its loop indices: the form this pass rewrites."""
    return op.name == "linalg.generic" and all(it == "parallel" for it in iterator_types(op)) and \
        _reads_outside_value(op) and any(_computes_with(o.results[0]) for group in _index_ops(op).values() for o in group)


def _divisor(v: ir.Value, found: int | None = None) -> int | None:
    """c when every use of index value `v` (through a split's offset `affine.apply`) is an
    extract coordinate or the numerator of a divsi / remsi by the constant c, else None."""
    for u in v.uses:
        o = u.owner
        if o.name == "tensor.extract" and u.operand_number > 0:
            continue
        if o.name == "affine.apply":
            found = _divisor(o.results[0], found)
        elif o.name in ("arith.divsi", "arith.remsi") and u.operand_number == 0 and \
                constant_of(o.operands[1]) is not None and found in (None, int(constant_of(o.operands[1]))):
            found = int(constant_of(o.operands[1]))
        else:
            return None
        if found is None:
            return None
    return found


def _computed_dims(op: ir.Operation) -> list[tuple[int, int]]:
    """(dim, split step) of each dim whose index the body uses other than as an extract
    coordinate: step 1 (one piece per index value) for an extent of 2..MAX_VALUES; step c
    for a dim IREE collapsed, read only as quotient and remainder by c (`d / c`, `d % c`),
    in 2..MAX_VALUES pieces of c (in each, both fold: compiler/index_arith.py)."""
    if not _reads_computed_index(op):
        return []
    ranges = loop_ranges(op)
    dims = []
    for d, ops in _index_ops(op).items():
        if not any(_computes_with(o.results[0]) for o in ops):
            continue
        if 2 <= ranges[d] <= MAX_VALUES:
            dims.append((d, 1))
            continue
        steps = {_divisor(o.results[0]) for o in ops}
        step = steps.pop() if len(steps) == 1 else None
        if step and step < ranges[d] and ranges[d] % step == 0 and ranges[d] // step <= MAX_VALUES:
            dims.append((d, step))
    return dims


def _split_once(func: ir.Operation, op: ir.Operation, dim: int, step: int) -> None:
    """Splits `op` after index `step` of `dim` (transform.structured.split)."""
    op.attributes[_SPLIT] = ir.UnitAttr.get()
    seq = parse_script(f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %op = transform.structured.match attributes {{{_SPLIT}}} in %root : (!transform.any_op) -> !transform.any_op
    %pieces = transform.structured.split %op after {step} {{dimension = {dim}}} : !transform.any_op
    transform.yield
  }}
}}""")
    interpreter.apply_named_sequence(func, seq.body.operations[0], seq)
    for o in walk_ops(func):
        if _SPLIT in o.attributes:
            del o.attributes[_SPLIT]


def _pin_unit_indices(op: ir.Operation) -> None:
    """`linalg.index d` of a dim of extent 1 is 0."""
    ranges = loop_ranges(op)
    for d, ops in _index_ops(op).items():
        if ranges[d] == 1:
            with ir.InsertionPoint(op), op.location:
                zero = ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                                           attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), 0)})
            for o in ops:
                o.results[0].replace_all_uses_with(zero.results[0])
                o.erase()


def _simplify(func: ir.Operation) -> None:
    """Pins unit dims' indices to 0 and folds what the ranges decide (compiler/index_arith.py)."""
    for o in walk_ops(func):
        if o.name == "linalg.generic":
            _pin_unit_indices(o)
            simplify_indices(o)


def _unroll(func: ir.Operation) -> bool:
    """Splits every generic along its computed dims until each has extent 1; True if any."""
    changed = False
    while True:
        todo = [(o, _computed_dims(o)) for o in walk_ops(func)]
        todo = [(o, dims) for o, dims in todo if dims]
        if not todo:
            return changed
        op, dims = todo[0]
        if math.prod(loop_ranges(op)[d] // step for d, step in dims) > MAX_VALUES ** 2:
            return changed
        _split_once(func, op, *dims[0])
        _simplify(func)
        changed = True


def _index_arith(o: ir.Operation) -> bool:
    """Whether `o` computes a loop index plus a constant (`index_arith.index_plus_constant`)."""
    return o.name in ("arith.addi", "affine.apply") and index_plus_constant(o.results[0])[0] is not None


def _only_coordinate(v: ir.Value) -> bool:
    """Whether index value `v` is read only as an extract coordinate, itself or plus a constant
    (a piece's digit offset: Falcon's key column 8 h + c in the piece of h = 1)."""
    return all((u.owner.name == "tensor.extract" and u.operand_number > 0) or
               (_index_arith(u.owner) and _only_coordinate(u.owner.results[0])) for u in v.uses)


def _box_of(extract: ir.Operation, ranges: list[int]) -> tuple[list[int], list[int], list[int]] | None:
    """(offsets, sizes, the loop dim each box dim is read along) of the box `extract` reads, or
    None when a coordinate is neither a loop index (each at most once) nor a constant."""
    offsets, sizes, dims = [], [], []
    for c in extract.operands[1:]:
        index, offset = index_plus_constant(c)
        owner = c.owner
        if isinstance(owner, ir.Block):
            return None
        if index is not None:
            d = ir.IntegerAttr(index.attributes["dim"]).value
            if d in dims:
                return None
            offsets.append(offset)
            sizes.append(ranges[d])
            dims.append(d)
        elif owner.name == "arith.constant":
            offsets.append(ir.IntegerAttr(owner.attributes["value"]).value)
            sizes.append(1)
        else:
            return None
    source = static_shape(extract.operands[0].type)
    if source is None or any(o < 0 or o + s > n for o, s, n in zip(offsets, sizes, source)):
        return None
    # A constant coordinate reads a unit dim of the box: read along a unit loop dim no
    # other coordinate uses (the piece's own, after a split per index value), so the box
    # keeps its rank; without one (a piece of a quotient split) the box drops those dims
    # (a rank-reducing slice), None in `dims`.
    spare = [d for d, n in enumerate(ranges) if n == 1 and d not in dims]
    constants = [i for i, c in enumerate(extract.operands[1:]) if c.owner.name == "arith.constant"]
    if len(spare) < len(constants):
        spare = []
    for k, i in enumerate(constants):
        dims.insert(i, spare[k] if spare else None)
    return offsets, sizes, dims


def _merge_slices(func: ir.Operation) -> None:
    """Each static unit-stride slice of such a slice becomes one slice of what that slices:
    the split's pieces and the extracts' boxes slice values that may be box loads
    themselves (Falcon's rotary reads q out of its fused QKV), and a slice of a slice is no
    DMA box. The outer slice's dims are matched as `box_reads.box_map` matches them; a dim
    it dropped is read at its offset, size 1."""
    for op in [o for o in region_ops(func) if o.name == "tensor.extract_slice"]:
        inner, outer = static_box(op), op.operands[0].owner
        if inner is None or inner.strided or isinstance(outer, ir.Block) or outer.name != "tensor.extract_slice":
            continue
        box = static_box(outer)
        m = box_map(outer.operands[0].type, box, op.operands[0].type) if box and not box.strided else None
        if m is None:
            continue
        kept = [i for i, e in enumerate(m.results) if not isinstance(e, ir.AffineConstantExpr)]
        offsets, sizes = list(box.offsets), [1] * len(box.sizes)
        for i, o, n in zip(kept, inner.offsets, inner.sizes):
            offsets[i] += o
            sizes[i] = n
        with ir.InsertionPoint(op), op.location:
            op.results[0].replace_all_uses_with(static_slice(outer.operands[0], offsets, sizes, op.results[0].type))
        op.erase()


def _flatten_inserts(func: ir.Operation) -> None:
    """Splitting a piece again (three or more index values) writes the new pieces into a
    slice of the first split's result and puts the slice back where it came from
    (`extract_slice D[O]`, pieces inserted into it, the whole inserted into D at O): each
    piece goes into D at O plus its own offset instead, one flat assembly of disjoint
    boxes, as a single split gives (the NSS program writes it box by box)."""
    while True:
        nests = [n for o in region_ops(func) if o.name == "tensor.insert_slice" and (n := _nested_pieces(o))]
        if not nests:
            return
        outer, extract, inserts = nests[0]
        base, at = outer.operands[1], static_box(outer).offsets
        with ir.InsertionPoint(outer), outer.location:
            for ins in inserts:
                box = static_box(ins)
                base = static_insert(ins.operands[0], base, [a + o for a, o in zip(at, box.offsets)], box.sizes)
        outer.results[0].replace_all_uses_with(base)
        for op in [outer, *reversed(inserts), extract]:
            op.erase()


def _nested_pieces(outer: ir.Operation) -> tuple | None:
    """(outer, the extract_slice, the inserts into it, first first) when `outer` inserts at a
    static box of D a chain of static inserts into the slice of D at that same box, each value
    read once and no insert dropping dims; else None."""
    d, v, inserts = outer.operands[1], outer.operands[0], []
    while not isinstance(v.owner, ir.Block) and v.owner.name == "tensor.insert_slice" and single_user(v):
        inserts.append(v.owner)
        v = v.owner.operands[1]
    extract = v.owner
    if not inserts or isinstance(extract, ir.Block) or extract.name != "tensor.extract_slice" or \
            extract.operands[0] != d or not single_user(v):
        return None
    boxes = [static_box(o) for o in (outer, extract, *inserts)]
    if any(b is None or b.strided for b in boxes) or boxes[0].offsets != boxes[1].offsets or \
            boxes[0].sizes != boxes[1].sizes or \
            any(len(static_shape(o.operands[0].type)) != len(static_shape(o.operands[1].type))
                for o in (outer, *inserts)):
        return None
    return outer, extract, inserts[::-1]


def _box_slice(op: ir.Operation, extract: ir.Operation, box: tuple) -> ir.Value:
    """The box of the extracted value as a tensor.extract_slice before `op`."""
    offsets, sizes, dims = box
    elt = ir.RankedTensorType(extract.operands[0].type).element_type
    kept = [n for n, d in zip(sizes, dims) if d is not None]
    with ir.InsertionPoint(op), op.location:
        return static_slice(extract.operands[0], offsets, sizes, ir.RankedTensorType.get(kept, elt))


def _reads_as_inputs(op: ir.Operation) -> None:
    """Rebuilds a one-result generic whose only index uses are outside extracts' coordinates
    with those boxes as inputs after its own (module docstring)."""
    body = region_ops(op)
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - 1
    extracts = [o for o in body if o.name == "tensor.extract"]
    if len(op.results) != 1 or list(block.arguments[n_in].uses) or not extracts or \
            any(o.name == "linalg.index" and not _only_coordinate(o.results[0]) for o in body) or \
            not all(defined_outside(e.operands[0], op) for e in extracts):
        return
    ranges = loop_ranges(op)
    boxes = [_box_of(e, ranges) for e in extracts]
    if any(b is None for b in boxes):
        return
    n = len(ranges)
    inputs = list(op.operands[:n_in]) + [_box_slice(op, e, b) for e, b in zip(extracts, boxes)]
    maps = [ir.AffineMapAttr.get(m) for m in indexing_maps(op)[:n_in]] + \
        [ir.AffineMapAttr.get(ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in b[2] if d is not None]))
         for b in boxes]
    out_type = op.results[0].type
    with ir.InsertionPoint(op), op.location:
        empty = ir.Operation.create("tensor.empty", results=[out_type])
        new = ir.Operation.create(
            "linalg.generic", results=[out_type], operands=inputs + [empty.results[0]],
            attributes={"indexing_maps": ir.ArrayAttr.get(maps + [ir.AffineMapAttr.get(indexing_maps(op)[-1])]),
                        "iterator_types": op.attributes["iterator_types"],
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(inputs), 1])},
            regions=1)
    nb = new.regions[0].blocks.append(*[ir.RankedTensorType(v.type).element_type for v in inputs],
                                      block.arguments[n_in].type)
    new_args = list(nb.arguments)
    mapping = dict(zip(list(block.arguments)[:n_in], new_args[:n_in]))
    mapping.update({e.results[0]: a for e, a in zip(extracts, new_args[n_in:])})
    with ir.InsertionPoint(nb), op.location:
        clone_remapped([o for o in body if o.name not in ("tensor.extract", "linalg.index") and not _index_arith(o)],
                       mapping)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def unroll_function(func: ir.Operation) -> ir.Operation:
    """`func` unrolled (a new function in its place), or `func` itself when some piece would
    still read an index: the function is then left as it was, so the dispatch's host
    remark names the index read, not a half-done rewrite."""
    if not any(_reads_computed_index(o) for o in walk_ops(func)):
        return func
    scratch = ir.Module.create()
    clone = func.clone(ip=ir.InsertionPoint(scratch.body))
    _simplify(clone)
    # A dim read as several digits (Qwen3's collapsed heads x halves x columns), too wide to
    # split along: one loop dim per digit first (compiler/index_digits.py).
    if expand_digit_dims(clone, lambda o: _reads_computed_index(o) and not _computed_dims(o)):
        _simplify(clone)
    _unroll(clone)
    run_pipeline("builtin.module(canonicalize,cse)", scratch.operation)
    for op in [o for o in walk_ops(clone) if o.name == "linalg.generic" and _reads_outside_value(o)]:
        _reads_as_inputs(op)
    _merge_slices(clone)
    # The boxes, empties and constants the rewrite left unused (not canonicalize, which
    # would also rewrite the function's other ops).
    erase_unused(lambda: region_ops(clone), ("tensor.extract_slice", "tensor.empty", "arith.constant"))
    _flatten_inserts(clone)  # once the pieces no longer write into slices of the result
    if any(o.name == "linalg.generic" and _reads_outside_value(o) and row_gather(o) is None for o in walk_ops(clone)):
        return func
    return replace_function(func, clone)


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        unroll_function(func)
