"""`tensor.pad` folded into its consumers (`padding_fold`, `PAD_VIEW`) and the
results that are copies of inputs (`data_movement_reason`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from torq.contract.ops import OPS

from ..ir_utils import constant_of, indexing_maps, int_array, region_ops, static_shape
from ..ir_utils import iterator_types as _iterators
from ..ir_utils import loop_ranges as _loop_ranges
from .contraction import linear_terms
from .inits import is_zero_fill
from .model import Unsupported
from .reduction import classify_principal
from .row_gather import GATHER_VIEW, row_gather

# What a folded `tensor.pad` becomes (torq-fold-padding): an unregistered
# `torq.pad` op with the same operand and result and attrs `low` / `high`.
# It has no TilingInterface, so tiling leaves it outside the tile loops and
# a tile reads a static box of the padded tensor; the NSS program reads only
# the part of that box inside the source tensor and hands the rest to the
# consuming op as its `pad` attr (see torq-build-nss-program).
PAD_VIEW = "torq.pad"


@dataclass
class Padding:
    """Static low / high padding amounts per dim of a `tensor.pad` and its value."""
    low: list[int]
    high: list[int]
    value: float | int


def _window_extents(op: ir.Operation) -> dict[int, int]:
    """Input dim -> window extent ((k - 1) * dilation + 1) of each dim the principal
    `op` reads as `out * stride + k * dilation` through its first operand."""
    its, ranges = _iterators(op), _loop_ranges(op)
    out = {}
    for i, e in enumerate(indexing_maps(op)[0].results):
        terms = linear_terms(e)
        if terms is None or len(terms) != 2:
            continue
        (a, ca), (b, cb) = terms
        red, c = (a, ca) if its[a] == "reduction" else (b, cb)
        out[i] = (ranges[red] - 1) * c + 1
    return out


def padding_fold(op: ir.Operation) -> Padding:
    """The padding of a `tensor.pad` whose every user can pad its input itself.

    Foldable: static amounts, a constant pad value, and every user a principal
    whose op pads its input (`OpDef.pads_input`: the convs and poolings, with
    any constant value: zero, -inf for max pooling, the input zero point of an
    int8 conv) reading the padded
    tensor as its input (first operand) only, with padding only on the dims
    it slides its window over (H, W), each amount smaller than the window
    extent (so every output reads at least one real element), or the
    function's return (a result the NSS program writes padded: any dims, any
    amounts). Raises Unsupported otherwise.
    """
    try:
        low = int_array(op.attributes["static_low"])
        high = int_array(op.attributes["static_high"])
    except KeyError:
        raise Unsupported("padding with dynamic amounts") from None
    if len(op.operands) != 1 or any(x < 0 for x in low + high):
        raise Unsupported("padding with dynamic or negative amounts")
    body = region_ops(op)
    value = constant_of(body[-1].operands[0]) if body and body[-1].name == "tensor.yield" else None
    if value is None or value.ndim != 0:
        raise Unsupported("padding with a value that is not a constant")
    users = [u.owner for u in op.results[0].uses]
    if not users:
        raise Unsupported("padding nothing reads")
    for user in users:
        if not isinstance(user, ir.Block) and user.name == "func.return":
            continue  # a result: written out padded (see data_movement_reason)
        con = classify_principal(user) if not isinstance(user, ir.Block) else None
        kind = con.kind if con is not None else None
        if kind is None or not OPS[kind].pads_input:
            raise Unsupported(f"padding read by {user.name if not isinstance(user, ir.Block) else 'a block'} "
                              f"(only a conv or pooling input folds its padding)")
        if [i for i, v in enumerate(user.operands) if v == op.results[0]] != [0]:
            raise Unsupported(f"padding read by {kind} other than as its input")
        extents = _window_extents(user)
        for d, (lo, hi) in enumerate(zip(low, high)):
            if (lo or hi) and d not in extents:
                raise Unsupported(f"padding of input dim {d} of {kind}, which is no window dim")
            if (lo or hi) and max(lo, hi) >= extents[d]:
                raise Unsupported(f"padding of {max(lo, hi)} on input dim {d} of {kind}, not smaller "
                                  f"than its window extent {extents[d]}")
    return Padding(low, high, int(value) if value.dtype.kind in "iu" else float(value))


def _copy_of_argument(v: ir.Value) -> bool:
    """Whether `v` is a function argument or a `tensor.extract_slice` (a box) of one."""
    if isinstance(v.owner, ir.Block):
        return True
    return v.owner.name == "tensor.extract_slice" and isinstance(v.owner.operands[0].owner, ir.Block)


def assembled_boxes(v: ir.Value) -> tuple[list[ir.Value], list[tuple[int, ...]]]:
    """(parts, their offsets) of a result assembled from boxes (`assembled_parts`), or two
    empty lists. The chain follows the insert_slices' destinations only, so a part may
    itself be a tiled result (a loop, or a peeled remainder inserted into one)."""
    parts, offsets, _ = _assembly(v)
    return parts, offsets


def _assembly(v: ir.Value) -> tuple[list[ir.Value], list[tuple[int, ...]], list[ir.Operation]]:
    """`assembled_boxes` and the chain's insert_slice ops (three empty lists for no chain)."""
    parts, offsets, links = [], [], []
    while not isinstance(v.owner, ir.Block) and v.owner.name == "tensor.insert_slice":
        op = v.owner
        if len(op.operands) != 2 or any(x != 1 for x in int_array(op.attributes["static_strides"])):
            return [], [], []
        if int_array(op.attributes["static_sizes"]) != list(static_shape(op.operands[0].type)):
            return [], [], []  # a part of another rank: its box in the result is no DMA box of it
        parts.append(op.operands[0])
        offsets.append(tuple(int_array(op.attributes["static_offsets"])))
        links.append(op)
        v = op.operands[1]
        if len(list(v.uses)) != 1:
            return [], [], []
    if not parts or isinstance(v.owner, ir.Block) or v.owner.name != "tensor.empty":
        return [], [], []
    covered = np.zeros(static_shape(v.type), np.int8)
    for part, off in zip(parts, offsets):
        covered[tuple(slice(o, o + n) for o, n in zip(off, static_shape(part.type)))] += 1
    return (parts[::-1], offsets[::-1], links) if (covered == 1).all() else ([], [], [])


def data_movement_ops(func: ir.Operation) -> set:
    """The function-level ops the NSS program performs with DMAs alone, which need no Torq
    lowering: a box of an argument (`tensor.extract_slice`, dispatch extraction makes them
    for copies), each link of the insert_slice chain that assembles a returned result
    (`assembled_boxes`: a DMA-out into its box) and a gathered view of arguments or
    constants (`GATHER_VIEW`: gather DMA-ins)."""
    ops = region_ops(func)
    moves = {op for v in ops[-1].operands for op in _assembly(v)[2]}
    for op in ops:
        if op.name == "tensor.extract_slice" and isinstance(op.operands[0].owner, ir.Block) or \
                op.name == GATHER_VIEW and all(isinstance(v.owner, ir.Block) or constant_of(v) is not None
                                               for v in op.operands):
            moves.add(op)
    return moves


def assembled_parts(v: ir.Value) -> list[ir.Value] | None:
    """The values a result assembled from boxes is made of, or None if `v` is no such result:
    a chain of `tensor.insert_slice` (static boxes, unit strides) into a `tensor.empty`,
    each link used only by the next, the boxes disjoint and covering the result
    (torq-unroll-index-dims makes them; the NSS program DMAs each part into its box)."""
    return assembled_boxes(v)[0] or None


def data_movement_reason(func: ir.Operation) -> str:
    """Why some result of `func` is neither computed by a Torq group nor a copy the NSS
    program makes with DMAs alone, or "" if every result is one of those.

    A copy is a constant, a function argument, a static box of one (`tensor.extract_slice`),
    a row gather (`row_gather`) of one (or of a constant) by indices that are one,
    a result assembled from computed boxes (`assembled_parts`), or a `tensor.pad` with static amounts and a constant value (`padding_fold`) of
    either: torq-build-nss-program DMAs the source box through LRAM into the
    result (tiled to fit LRAM) and fills a padding's border with its value.
    """
    ret = region_ops(func)[-1]
    for i, v in enumerate(ret.operands):
        owner = v.owner
        if _copy_of_argument(v) or constant_of(v) is not None:
            continue
        gather = row_gather(owner) if not isinstance(owner, ir.Block) else None
        if gather is not None:
            if not _copy_of_argument(gather.indices) or not (_copy_of_argument(gather.table) or
                                                             constant_of(gather.table) is not None):
                return f"result {i} gathers rows of, or by, a value that is no copy of an input"
            continue
        parts = assembled_parts(v)
        if parts is not None:
            if not all(_copy_of_argument(p) or p.owner.name.startswith("linalg.") for p in parts):
                return f"result {i} is assembled from boxes that are neither computed nor copies of an input"
            continue
        if owner.name == "tensor.pad":
            if not _copy_of_argument(owner.operands[0]):
                return f"result {i} pads a value that is no copy of an input"
            try:
                padding_fold(owner)
            except Unsupported as e:
                return f"result {i}: tensor.pad: {e}"
            continue
        if owner.name.startswith("linalg.") and not is_zero_fill(owner):
            continue  # computed by its group (match_group decides)
        what = "a zero fill" if owner.name.startswith("linalg.") else f"'{owner.name}'"
        return f"result {i} is {what}, neither computed nor a copy or padding of an input"
    return ""
