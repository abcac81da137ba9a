"""The roots super tiling visits: the bottom op of each fuse group, in the seed's
post-order, and what the search needs to know about one (`Root`), read
before anything is tiled; the attrs that tag them."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from ..ir_utils import indexing_maps, location_str, loop_ranges, region_ops, static_shape
from ..patterns import FUSE_GROUP, FUSE_GROUP_ID, classify_principal, linear_terms

TILE_ROOT = "torq.tile_root"
# Marks the principal op of the root's group whose reduction loops are tiled.
TILE_REDUCTION = "torq.tile_reduction"
# Position of an op in the visiting order; the attribute follows the op into
# every loop it is fused into, which is how fused ops are recognised.
ORDER = "torq.tiling_order"
# The seed's memory for ops outside any fuse group (they run on the host CPU).
SEED_OUTSIDE_GROUP_BYTES = 10 * 1024
# Footprint of a tiling whose tiles have no static shape: never fits.
UNREPRESENTABLE = 1 << 62


# --- the function's ops ---------------------------------------------------------

def fuse_groups(op: ir.Operation) -> set[int]:
    if FUSE_GROUP not in op.attributes:
        return set()
    return {ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[FUSE_GROUP])}


def _users(op: ir.Operation) -> list[ir.Operation]:
    out = []
    for r in op.results:
        for u in r.uses:
            owner = u.owner
            if not isinstance(owner, ir.Block):
                out.append(owner.operation if hasattr(owner, "operation") else owner)
    return out


def _is_tileable(op: ir.Operation) -> bool:
    """Ops with a TilingInterface implementation that appear in dispatches."""
    return op.name.startswith("linalg.") or op.name == "tensor.pad"


def is_group_bottom(op: ir.Operation) -> bool:
    g = fuse_groups(op)
    return bool(g) and not any(fuse_groups(u) & g for u in _users(op))


def post_order(func: ir.Operation) -> list[ir.Operation]:
    """Tileable ops of the function body in the seed's order: a DFS along def-use
    edges started from each op in block order, an op listed after all its users."""
    seen: set = set()
    order: list[ir.Operation] = []
    for first in region_ops(func):
        if first in seen or not _is_tileable(first):
            continue
        seen.add(first)
        stack = [(first, iter(_users(first)))]
        while stack:
            op, users = stack[-1]
            nxt = next((u for u in users if u not in seen and _is_tileable(u)), None)
            if nxt is None:
                stack.pop()
                order.append(op)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(_users(nxt))))
    return order


@dataclass(frozen=True)
class Root:
    """What the search needs to know about a root, read before anything is tiled
    (plain values: op handles do not survive the tiling). The search's answer is a
    separate `search.TileChoice`: a Root is never changed."""
    order: int
    name: str
    location: str
    groups: tuple[int, ...]
    shape: tuple[int, ...]  # the result's
    loop_of_dim: tuple[int | None, ...]  # loop indexing each result dim (None: not a plain loop)
    n_loops: int
    # The group principal's tileable reduction loops, in the order they are tiled
    # (matmul K; conv input channels, then kernel rows, then columns): (loop, extent).
    reduction_loops: tuple[tuple[int, int], ...] = ()
    principal_loops: int = 0  # loops of the group's principal op

    def reduction_sizes(self, red: list[int] | None) -> list[int] | None:
        """Per-reduction-loop tile sizes as the per-loop sizes of the principal op
        (what transform.structured.tile_using_for takes), None when none is tiled."""
        if not red or not any(red):
            return None
        loops = [0] * self.principal_loops
        for (loop, _), t in zip(self.reduction_loops, red):
            loops[loop] = t
        return loops

    def loop_sizes(self, sizes: list[int]) -> list[int]:
        """Per-result-dim tile sizes as the per-loop sizes transform.structured.fuse takes."""
        loops = [0] * self.n_loops
        for d, t in enumerate(sizes):
            if t:
                loops[self.loop_of_dim[d]] = t
        return loops

    def tileable(self, d: int) -> bool:
        return self.loop_of_dim[d] is not None and self.shape[d] > 1

    def interchange(self, outer: int | None) -> list[int] | None:
        """Loop order putting the loop of result dim `outer` outermost (None: as is)."""
        if outer is None:
            return None
        first = self.loop_of_dim[outer]
        return [first] + [l for l in range(self.n_loops) if l != first]


def root_facts(op: ir.Operation, order: int) -> Root | None:
    shape = static_shape(op.results[0].type)
    if shape is None:
        return None
    if "indexing_maps" in op.attributes:
        maps = indexing_maps(op)
        out_map = maps[len(maps) - len(op.results)]  # the first output's
        loops = tuple(ir.AffineDimExpr(e).position if isinstance(e, ir.AffineDimExpr) else None
                      for e in out_map.results)
        n_loops = out_map.n_dims
    else:
        loops, n_loops = tuple(range(len(shape))), len(shape)
    principal = group_principal(op)
    reduction = (_reduction_loops(principal), indexing_maps(principal)[0].n_dims) if principal is not None else ((), 0)
    return Root(order, op.name, location_str(op), tuple(sorted(fuse_groups(op))), shape, loops, n_loops, *reduction)


def group_principal(bottom: ir.Operation) -> ir.Operation | None:
    """The principal op of the bottom op's group when it is a contraction or sum whose
    reduction may be tiled (`Contraction.steps`):
    the bottom op itself or the producer of one of its operands."""
    groups = fuse_groups(bottom)
    candidates = [bottom] + [v.owner for v in bottom.operands if not isinstance(v.owner, ir.Block)]
    for c in candidates:
        c = c.operation if hasattr(c, "operation") else c
        if FUSE_GROUP_ID not in c.attributes or ir.IntegerAttr(c.attributes[FUSE_GROUP_ID]).value not in groups:
            continue
        con = classify_principal(c)
        if con is not None and con.steps:
            return c
    return None


def _reduction_loops(principal: ir.Operation) -> tuple[tuple[int, int], ...]:
    """(loop, extent) of the principal's reduction loops in tiling order: the ones an
    input reads as a plain dim (matmul K, conv input channels) first, then the kernel
    window's (read in a sum `y + i`), in the order the input map reads them (rows first)."""
    maps = indexing_maps(principal)
    its = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(principal.attributes["iterator_types"])]
    ranges = loop_ranges(principal)
    plain, window = [], []
    for e in maps[0].results:
        dims = [ir.AffineDimExpr(e).position] if isinstance(e, ir.AffineDimExpr) else None
        target = plain
        if dims is None:
            dims = [d for d, _ in (linear_terms(e) or [])]
            target = window
        for d in dims:
            if its[d] == "reduction" and ranges[d] > 1 and all(d != x for x, _ in plain + window):
                target.append((d, ranges[d]))
    return tuple(plain + window)
