"""The seed strategy: the RFC's footprint estimate on the untiled function and
its tile sizes (`seed_footprints`, `seed_tile_sizes`)."""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import region_ops, static_shape, tensor_nbytes
from ..passes import PassOptions
from .roots import SEED_OUTSIDE_GROUP_BYTES, Root, fuse_groups, is_group_bottom
from .search import TileSearch, divisors, tiling_record
from .transform import clone_function, root_slice, tile_and_fuse

# --- seed strategy: the RFC's estimate ----------------------------------------------

def seed_footprints(func: ir.Operation, ops: list[ir.Operation], options: PassOptions) -> list[tuple[int, int]]:
    """(footprint, available memory) of each op of `ops`, as the seed estimates them on
    the untiled function: a group's bottom op counts the group's input tensors and
    its output, its other ops 0; an op outside any group its tensor operands."""
    top = region_ops(func)
    out = []
    for op in ops:
        g = fuse_groups(op)
        if not g:
            fp = sum(_bytes(v) for v in op.operands)
            out.append((fp, SEED_OUTSIDE_GROUP_BYTES))
            continue
        if not is_group_bottom(op):
            out.append((0, options.hw.available_lram_bytes))
            continue
        members = [o for o in top if fuse_groups(o) & g]
        produced = {r for o in members for r in o.results}
        inputs = {v for o in members for v in o.operands if v not in produced and not _is_empty(v)}
        out.append((sum(_bytes(v) for v in inputs) + _bytes(op.results[0]), options.hw.available_lram_bytes))
    return out


def _bytes(v: ir.Value) -> int:
    return tensor_nbytes(v.type) if static_shape(v.type) is not None else 0


def _is_empty(v: ir.Value) -> bool:
    return not isinstance(v.owner, ir.Block) and v.owner.name == "tensor.empty"


def _fused_orders(func: ir.Operation, root: Root, sizes: list[int]) -> set[int]:
    """Orders of the ops tiling the TILE_ROOT op by `sizes` puts in its loop (on a copy)."""
    scratch, clone = clone_function(func)
    return set(tile_and_fuse(scratch.operation, root.loop_sizes(sizes)).orders) or {root.order}


def seed_tile_sizes(func: ir.Operation, root: Root, table: list[tuple[int, int]], options: PassOptions,
                    record: dict | None = None) -> list[int] | None:
    fp, available = table[root.order]
    d = 1 if len(root.shape) > 1 else 0
    sizes = None
    factor = estimate = 0
    if fp > available and root.tileable(d):
        extent = root.shape[d]
        factor = -(-fp // available)
        while True:
            most = -(-extent // factor)
            sizes = [0] * len(root.shape)
            sizes[d] = max(t for t in divisors(extent) if t <= most)
            biggest = max(table[j][0] for j in _fused_orders(func, root, sizes) | {root.order})
            estimate = -(-biggest // factor)
            if estimate <= available:
                break
            factor = -(-biggest // available)
    if record is not None:
        search = TileSearch(root_slice(func), root, options)
        record.update(tiling_record(root, sizes, search.footprint(sizes or [0] * len(root.shape)),
                              search.footprint([0] * len(root.shape)), len(search.footprints)))
        record.update({"seed_footprint_bytes": fp, "seed_available_bytes": available,
                       "seed_factor": factor, "seed_estimate_bytes": estimate})
    return sizes
