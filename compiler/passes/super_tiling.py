"""torq-super-tiling: tile and fuse each group so that every tile fits LRAM.

Contract: takes a marked function (torq-mark-patterns-for-super-tiling).
Walks the bottom ops of the fuse groups consumers first (post-order over the
data flow); a bottom op that is not already inside a tile loop and whose
untiled program does not fit is tiled with tile-consumer-and-fuse-producers
(`transform.structured.fuse`), which pulls its whole group (and every
producer) into the loop. Fit is decided by the LRAM allocator that
torq-assign-lram-addresses uses, run on the real buffers of the candidate
tiling (the candidate is tiled and lowered on a scratch copy). Tile sizes
divide the tiled dimension, so tiles have static shapes. Dimensions are
tried in the seed order (second dimension, then the others); within a
dimension the largest fitting size wins. When even size-1 tiles do not fit,
the pass fails naming the op, its location, the smallest footprint reached
and the budget.

This is the seed strategy with an exact fit check; the traffic-minimising
strategy is a separate issue.
"""

from __future__ import annotations

from iree.compiler import ir, passmanager
from iree.compiler.dialects.transform import interpreter

from ..ir_utils import CompileError, location_str, static_shape, walk_ops
from ..patterns import FUSE_GROUP
from . import PassOptions
from .assign_lram_addresses import plan_function
from .lower_to_torq_hl import lower_function

NAME = "torq-super-tiling"
TILE_ROOT = "torq.tile_root"


def _groups(op: ir.Operation) -> set[int]:
    if FUSE_GROUP not in op.attributes:
        return set()
    return {ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[FUSE_GROUP])}


def bottom_ops(func: ir.Operation) -> list[ir.Operation]:
    """Group bottom ops (no user shares a group), consumers first."""
    out = []
    for op in walk_ops(func):
        g = _groups(op)
        if not g:
            continue
        users = [u.owner for r in op.results for u in r.uses]
        if not any(_groups(u) & g for u in users if not isinstance(u, ir.Block)):
            out.append(op)
    return list(reversed(out))


def _inside_loop(op: ir.Operation) -> bool:
    p = op.parent
    while p is not None and p.name != "func.func":
        if p.name == "scf.for":
            return True
        p = p.parent
    return False


def tile_and_fuse(module_op: ir.Operation, sizes: list[int]) -> None:
    """Tile the op tagged TILE_ROOT in `module_op` with `sizes`, fusing producers."""
    n_loops = sum(1 for s in sizes if s)
    loops = ", ".join(["!transform.any_op"] * n_loops)
    seq = ir.Module.parse(f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %op = transform.structured.match attributes {{{TILE_ROOT}}} in %root : (!transform.any_op) -> !transform.any_op
    %tiled{', %loops:' + str(n_loops) if n_loops else ''} = transform.structured.fuse %op tile_sizes {sizes}
        : (!transform.any_op) -> (!transform.any_op{', ' + loops if n_loops else ''})
    transform.yield
  }}
}}""")
    interpreter.apply_named_sequence(module_op, seq.body.operations[0], seq)
    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module_op)


def footprint(func: ir.Operation, sizes: list[int] | None, options: PassOptions) -> int:
    """LRAM bytes the function needs if the TILE_ROOT op is tiled with `sizes`."""
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    if sizes and any(sizes):
        tile_and_fuse(scratch.operation, sizes)
    clone = scratch.body.operations[0].operation
    lower_function(clone)
    end, _ = plan_function(clone, options, annotate=False)
    return end


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choose_tile_sizes(func: ir.Operation, root: ir.Operation, options: PassOptions) -> list[int] | None:
    budget = options.hw.available_lram_bytes
    shape = static_shape(root.results[0].type)
    if footprint(func, None, options) <= budget:
        return None
    n = len(shape)
    order = ([1, 0] if n > 1 else [0]) + list(range(2, n))
    sizes = [0] * n
    smallest = None
    for d in order:
        if shape[d] == 1:
            continue
        cands = [t for t in _divisors(shape[d]) if t < shape[d]]
        lo, hi, best = 0, len(cands) - 1, None
        while lo <= hi:  # largest fitting divisor; footprint grows with the tile size
            mid = (lo + hi) // 2
            trial = sizes.copy()
            trial[d] = cands[mid]
            fp = footprint(func, trial, options)
            smallest = fp if smallest is None else min(smallest, fp)
            if fp <= budget:
                best, lo = cands[mid], mid + 1
            else:
                hi = mid - 1
        if best is not None:
            sizes[d] = best
            return sizes
        sizes[d] = 1
    raise CompileError(
        f"{location_str(root)}: error: {root.name}: cannot fit LRAM even with size-1 tiles: smallest "
        f"footprint {smallest} bytes, budget {budget} bytes")


def _next_root(func: ir.Operation, visited: set) -> ir.Operation | None:
    """First bottom op (consumers first) outside any tile loop not yet visited.

    Recomputed after every tiling: tiling a consumer fuses its producers into
    the loop and erases the originals, so handles collected before would
    dangle (use after free in the bindings).
    """
    for op in bottom_ops(func):
        key = frozenset(_groups(op))
        if key not in visited and not _inside_loop(op):
            visited.add(key)
            return op
    return None


def tile_function(func: ir.Operation, options: PassOptions) -> None:
    unit = ir.UnitAttr.get()
    visited: set = set()
    while (root := _next_root(func, visited)) is not None:
        root.attributes[TILE_ROOT] = unit
        try:
            sizes = choose_tile_sizes(func, root, options)
            if sizes is not None:
                tile_and_fuse(_enclosing_module(func), sizes)
        finally:
            for op in walk_ops(func):
                if TILE_ROOT in op.attributes:
                    del op.attributes[TILE_ROOT]


def _enclosing_module(op: ir.Operation) -> ir.Operation:
    p = op.parent
    while p.name != "builtin.module":
        p = p.parent
    return p


def run(module: ir.Module, options: PassOptions) -> None:
    for op in list(module.body.operations):
        if op.operation.name == "func.func":
            tile_function(op.operation, options)
