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

Strategies (`--torq-super-tiling-strategy`):
- `seed`: the first dimension in seed order with a fitting size (exact fit
  check; the seed's footprint estimate is not reproduced yet);
- `default`: for each dimension alone its largest fitting tile, then the one
  with the least predicted DDR traffic (the NSS program of the candidate is
  built and its DMA bytes counted: halos, weight and input re-reads), ties to
  the fewest tiles; when no dimension fits alone, the seed order's
  multi-dimension search. Reduction dimensions are not tiled yet.
"""

from __future__ import annotations

import math

from iree.compiler import ir, passmanager
from iree.compiler.dialects.transform import interpreter

from ..ir_utils import CompileError, location_str, static_shape, walk_ops
from ..patterns import FUSE_GROUP
from ..traffic import Traffic, program_traffic
from . import PassOptions
from .assign_lram_addresses import plan_function
from .build_nss_program import build_program
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


def _lowered_tiling(func: ir.Operation, sizes: list[int] | None) -> tuple[ir.Module, ir.Operation | None]:
    """A scratch copy of `func` with the TILE_ROOT op tiled by `sizes` and lowered to
    TorqHL; the function is None when some tile has no static shape. Keep the
    module alive while using the function."""
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    if sizes and any(sizes):
        tile_and_fuse(scratch.operation, sizes)
    clone = scratch.body.operations[0].operation
    if _has_dynamic_tensors(clone):
        return scratch, None  # e.g. a fused reshape whose slice sizes depend on the loop
    lower_function(clone)
    return scratch, clone


def footprint(func: ir.Operation, sizes: list[int] | None, options: PassOptions) -> int:
    """LRAM bytes the function needs if the TILE_ROOT op is tiled with `sizes`."""
    scratch, clone = _lowered_tiling(func, sizes)
    if clone is None:
        return UNREPRESENTABLE
    end, _ = plan_function(clone, options, annotate=False)
    return end


# Footprint of a tiling whose tiles have no static shape: never fits.
UNREPRESENTABLE = 1 << 62


def _has_dynamic_tensors(func: ir.Operation) -> bool:
    return any(isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape
               for op in walk_ops(func) for r in op.results)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile_count(shape: tuple[int, ...], sizes: list[int] | None) -> int:
    return math.prod(-(-n // t) if t else 1 for n, t in zip(shape, sizes or [0] * len(shape)))


def predicted_traffic(func: ir.Operation, sizes: list[int] | None, options: PassOptions) -> Traffic:
    """DDR traffic of the program the function becomes with the TILE_ROOT op tiled by
    `sizes` (a tiling `footprint` accepted, so its tiles have static shapes)."""
    scratch, clone = _lowered_tiling(func, sizes)
    plan_function(clone, options, annotate=True)
    program, _ = build_program(clone, options)
    return program_traffic(program)


class _Search:
    """Fit queries for one root, remembering the smallest footprint seen (for the error)."""

    def __init__(self, func: ir.Operation, options: PassOptions):
        self.func, self.options = func, options
        self.budget = options.hw.available_lram_bytes
        self.smallest: int | None = None
        self.footprints: dict[tuple, int] = {}

    def footprint(self, sizes: list[int]) -> int:
        key = tuple(sizes)
        if key not in self.footprints:
            fp = footprint(self.func, sizes, self.options)
            self.footprints[key] = fp
            if fp < UNREPRESENTABLE:
                self.smallest = fp if self.smallest is None else min(self.smallest, fp)
        return self.footprints[key]

    def largest_fitting(self, base: list[int], d: int, extent: int) -> int | None:
        """Largest divisor t < extent with base[d] = t fitting; footprint grows with t."""
        cands = [t for t in _divisors(extent) if t < extent]
        lo, hi, best = 0, len(cands) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            trial = base.copy()
            trial[d] = cands[mid]
            if self.footprint(trial) <= self.budget:
                best, lo = cands[mid], mid + 1
            else:
                hi = mid - 1
        return best


def _seed_order(n: int) -> list[int]:
    return ([1, 0] if n > 1 else [0]) + list(range(2, n))


def _seed_order_sizes(search: _Search, shape: tuple[int, ...]) -> list[int] | None:
    """Seed order: the first dimension (second, first, rest) with a fitting size; if
    none fits alone, keep it at 1 and go on to the next."""
    sizes = [0] * len(shape)
    for d in _seed_order(len(shape)):
        if shape[d] == 1:
            continue
        best = search.largest_fitting(sizes, d, shape[d])
        if best is not None:
            sizes[d] = best
            return sizes
        sizes[d] = 1
    return None


def _least_traffic_sizes(search: _Search, shape: tuple[int, ...]) -> list[int] | None:
    """For each dimension alone, its largest fitting tile (larger tiles along one
    dimension re-read fewer halos and weights); of those, the one with the least
    predicted DDR traffic, then the fewest tiles. Falls back to the seed order's
    multi-dimension search when no single dimension fits."""
    scored = []
    for rank, d in enumerate(_seed_order(len(shape))):
        if shape[d] == 1:
            continue
        best = search.largest_fitting([0] * len(shape), d, shape[d])
        if best is None:
            continue
        sizes = [0] * len(shape)
        sizes[d] = best
        traffic = predicted_traffic(search.func, sizes, search.options)
        scored.append((traffic.dma_bytes, _tile_count(shape, sizes), rank, sizes))
    if scored:
        return min(scored)[3]
    return _seed_order_sizes(search, shape)


STRATEGIES = {"seed": _seed_order_sizes, "default": _least_traffic_sizes}


def choose_tile_sizes(func: ir.Operation, root: ir.Operation, options: PassOptions,
                      record: dict | None = None) -> list[int] | None:
    """Tile sizes for the TILE_ROOT op (0 = untiled dim), or None when it fits untiled.

    `record`, if given, receives the decision for `--torq-dump-tiling`.
    """
    search = _Search(func, options)
    shape = static_shape(root.results[0].type)
    untiled = search.footprint([0] * len(shape))
    sizes = None
    if untiled > search.budget:
        sizes = STRATEGIES[options.super_tiling_strategy](search, shape)
        if sizes is None:
            raise CompileError(
                f"{location_str(root)}: error: {root.name}: cannot fit LRAM even with size-1 tiles: smallest "
                f"footprint {search.smallest} bytes, budget {search.budget} bytes")
    if record is not None:
        record.update({
            "root": root.name, "location": location_str(root), "groups": sorted(_groups(root)),
            "shape": list(shape), "tiled_dims": [d for d, t in enumerate(sizes or []) if t],
            "tile_sizes": sizes or [0] * len(shape), "tiles": _tile_count(shape, sizes),
            "lram_bytes": search.footprint(sizes or [0] * len(shape)), "untiled_lram_bytes": untiled,
            "candidates_evaluated": len(search.footprints)})
    return sizes


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
        record: dict | None = {} if options.tiling_log is not None else None
        try:
            sizes = choose_tile_sizes(func, root, options, record)
            if sizes is not None:
                tile_and_fuse(_enclosing_module(func), sizes)
            if record is not None:
                record["fused_groups"] = _fused_groups(func) if sizes is not None else []
                options.tiling_log.append(record)
        finally:
            for op in walk_ops(func):
                if TILE_ROOT in op.attributes:
                    del op.attributes[TILE_ROOT]


def _fused_groups(func: ir.Operation) -> list[int]:
    """Fuse groups with an op inside the innermost tile loop made last."""
    loops = [op for op in walk_ops(func) if op.name == "scf.for"]
    if not loops:
        return []
    return sorted({g for op in walk_ops(loops[-1]) for g in _groups(op)})


def _enclosing_module(op: ir.Operation) -> ir.Operation:
    p = op.parent
    while p.name != "builtin.module":
        p = p.parent
    return p


def run(module: ir.Module, options: PassOptions) -> None:
    for op in list(module.body.operations):
        if op.operation.name == "func.func":
            tile_function(op.operation, options)
