"""A floor under the DDR bytes any tiling of a root's slice moves, read from the slice's IR
without tiling it: super tiling's `_least_traffic_first` builds no candidate that cannot
move fewer bytes than the least so far.

Why it is a floor. A program moves at least its compulsory bytes (contract.measures
`compulsory_bytes`: each output not in place whole, and of each input the union of the
boxes its DMA-ins read). Whatever the tiling, every element of the function's results is
computed, so every input element some op needs to compute them is read into LRAM by a
DMA-in. The needed elements counted here are those of a `linalg.generic` whose every
iteration is needed (`_whole`), read through an indexing map of loop dims and constants:
the map's image of the op's loop ranges, a box. Anything else (another op, a map with
sums or strides, an input reached through a reshape, a pad, a slice or a gather)
counts nothing, which only lowers the floor."""

from __future__ import annotations

import math

from iree.compiler import ir

from torq.contract.measures import union_volume
from torq.contract.program import DTYPE_BYTES

from ..ir_utils import (
    element_type,
    indexing_maps,
    iterator_types,
    loop_ranges,
    map_dims,
    mlir_dtype,
    n_inputs,
    static_shape,
)
from ..passes.mark_in_place_updates import IN_PLACE_RESULTS


def needed_bytes(slice_module: ir.Module) -> int:
    """Bytes every tiling's program of the slice (`transform.root_slice`) moves at least:
    its results whole (none when some result is updated in place) and the input elements
    its ops need (module docstring)."""
    func = slice_module.body.operations[0].operation
    block = func.regions[0].blocks[0]
    ret = [o.operation for o in block.operations][-1]
    total = 0
    if IN_PLACE_RESULTS not in func.attributes:
        total += sum(_nbytes(v.type) for v in ret.operands)
    whole: dict = {}
    for arg in block.arguments:
        shape = static_shape(arg.type)
        if shape is None:
            continue
        boxes = [box for use in arg.uses if (box := _read_box(use.owner, use.operand_number, whole)) is not None]
        total += union_volume(tuple(shape), boxes) * DTYPE_BYTES[mlir_dtype(element_type(arg.type))]
    return total


def _nbytes(t: ir.Type) -> int:
    shape = static_shape(t)
    return 0 if shape is None else math.prod(shape) * DTYPE_BYTES[mlir_dtype(element_type(t))]


def _generic(op) -> ir.Operation | None:
    op = op.operation if hasattr(op, "operation") else op
    return op if op.name == "linalg.generic" else None


def _loop_ranges(op: ir.Operation) -> list[int] | None:
    """The generic's loop ranges (ir_utils.loop_ranges); None when one is unknown (0 there:
    counting nothing only lowers the floor)."""
    ranges = loop_ranges(op)
    return ranges if all(ranges) else None


def _dims(m: ir.AffineMap) -> list[int] | None:
    """The loop dims of a map whose results are all distinct loop dims, else None."""
    dims = map_dims(m)
    return dims if dims is not None and len(set(dims)) == len(dims) else None


def _body_reads(op: ir.Operation, k: int) -> bool:
    """Whether the body uses operand k's element, and reads no tensor (a gather) besides its operands."""
    body = op.regions[0].blocks[0]
    if any(o.operation.name == "tensor.extract" for o in body.operations):
        return False
    return any(True for _ in body.arguments[k].uses)


def _whole(op: ir.Operation, memo: dict) -> bool:
    """Whether every iteration of generic `op` is needed: each result is returned or read whole
    (a map of distinct loop dims) by a generic whose iterations all are, and the output maps
    are distinct loop dims, the dims they leave out reductions (each iteration adds to a
    needed element)."""
    if op in memo:
        return memo[op]
    memo[op] = False  # no cycles in SSA; a guard all the same
    iterators = iterator_types(op)
    ok = _loop_ranges(op) is not None
    for m in indexing_maps(op)[n_inputs(op):]:
        dims = _dims(m)
        ok = ok and dims is not None and all(it == "reduction" for d, it in enumerate(iterators) if d not in dims)
    for r in op.results:
        for use in r.uses:
            user = use.owner
            user = user.operation if hasattr(user, "operation") else user
            if user.name == "func.return":
                continue
            g = _generic(user)
            k = use.operand_number
            ok = ok and g is not None and k < n_inputs(g) and \
                _dims(indexing_maps(g)[k]) is not None and _body_reads(g, k) and _whole(g, memo)
    memo[op] = ok
    return ok


def _read_box(owner, k: int, memo: dict) -> tuple[tuple, tuple] | None:
    """(offsets, sizes) of the elements generic `owner` needs of its input operand k (the
    image of its loop ranges under the operand's map of loop dims and constants), or None."""
    op = _generic(owner)
    if op is None or k >= n_inputs(op) or not _body_reads(op, k) or not _whole(op, memo):
        return None
    ranges = _loop_ranges(op)
    offsets, sizes = [], []
    for e in indexing_maps(op)[k].results:
        if isinstance(e, ir.AffineDimExpr):
            offsets.append(0)
            sizes.append(ranges[e.position])
        elif isinstance(e, ir.AffineConstantExpr):
            offsets.append(e.value)
            sizes.append(1)
        else:
            return None
    return tuple(offsets), tuple(sizes)
