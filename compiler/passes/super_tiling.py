"""torq-super-tiling: tile and fuse each group so that every tile fits LRAM.

Contract: takes a marked function (torq-mark-patterns-for-super-tiling) and
leaves it with some roots tiled: a root is the bottom op of a fuse group (no
user shares one of its groups); tiling it with tile-consumer-and-fuse-producers
(`transform.structured.fuse`) pulls its whole group, and every producer, into
the tile loop. Roots are visited in the seed's order: a DFS along def-use
edges from each op in block order, an op listed once all its users are
(post-order, so consumers come before their producers). Tile sizes are chosen
per dimension of the root's result and handed to the transform as sizes of
the loops those dimensions index (read from the root's result indexing map:
a permuted result tiles the permuted loop). Reduction loops are tiled only
when nothing else fits (`traffic` and `default`, see *Reduction tiling*).
Tile sizes divide the tiled dimension, so every tile has a static shape.

Strategies (`--torq-super-tiling-strategy`):

- `default`: `traffic`'s tiling, then refined for cycles (`_parallel_sizes`):
  DMA overlaps compute only across tiles with distinct buffer sets, so along
  the chosen dim (every tileable dim for a root left untiled) tilings with 2
  and 4 tiles per slice, and 2x and 4x the chosen count, are tried; one
  replaces the `traffic` choice when it fits, its program is predicted by
  contract/timing.py to take fewer cycles, and it moves at most
  `--torq-tiling-traffic-slack` (default 0) more DDR bytes, each extra 1% of
  bytes buying at least 1% fewer cycles. 2-D tilings are kept as they are.
  The predictions see torq-build-nss-program's slice use: a body with one
  buffer set splits each compute over all slices, so both slices already
  work where one tile's buffers fill LRAM, without the halo re-reads of
  smaller tiles; hence no slack by default (the sample CNN at 224x224 runs
  at 65% of the roofline with it, and MobileNetV2's stem conv moves no more
  bytes than the seed's tiling).
- `traffic` (exact fit, least DDR traffic): a root's *slice* is the root plus the untiled ops that
  feed it (a scratch copy of the function returning only the root's result).
  A tiling fits when `lram_allocator` (what torq-assign-lram-addresses runs)
  places every buffer of the slice, tiled and lowered to TorqHL, within
  `TorqHw.available_lram_bytes`. A root whose untiled slice fits stays
  untiled. Otherwise, for each tileable result dimension alone, the largest
  fitting divisor (binary search: footprint grows with the tile), or on the
  result's vector dim (compiler/vector_layout.py) the largest smaller one of
  whole vectors when that moves no more bytes and takes no more cycles (a
  tile padded in LRAM wastes lanes); of those,
  the one whose NSS program moves the fewest DMA bytes (`traffic`: halos,
  weight and input re-reads), ties to the fewest tiles, then the seed order
  (dim 1, dim 0, dims 2...). When no dimension fits alone, the seed order's
  multi-dimension search: the first dimension with a fitting size, earlier
  ones kept at 1. A producer fused into one consumer's loop that still feeds
  another consumer stays in the function for it and is a root of its own
  later (the seed's multi-consumer TODO): the consumer's slice includes it,
  so that consumer is tiled with the producer recomputed in its loop when
  the two do not fit together. Last, the untiled rest of the function is
  allocated as a whole; while it does not fit, its root with the largest
  untiled slice is tiled. When no parallel tiling fits, the reduction dims
  are tiled too (*Reduction tiling*). Nothing fitting even with size-1
  tiles (parallel and reduction) is a compile error naming the op, its
  location, the smallest footprint reached (all tileable dims at 1) and
  the budget.

*Reduction tiling* (`traffic` and `default`, not `seed`): when even one
output row / channel does not fit (a fully connected layer whose weights
are many times the LRAM, a conv over many input channels), the reduction
loops of the group's principal op are tiled as well, if its op has an
accumulate form (contract/ops.py: conv2d, not grouped, and matmul): matmul
K; conv input channels, then kernel rows, then kernel columns
(`Root.reduction_loops`; the first whose largest fitting divisor exists,
earlier ones at 1). Parallel tilings tried with it: none, each tileable
dim alone (its largest sizes for which some reduction size fits) and all
tileable dims at 1; the least predicted DDR traffic wins, then the fewest
tiles x steps. On the IR, the root is tiled and fused as usual, then the
principal (tagged TILE_REDUCTION) is tiled along its reduction loops with
`transform.structured.tile_using_for`: an scf.for innermost in the tile
loop whose iter_arg is the accumulator, initialised from the group's fill;
the group's epilogue ops stay after it, so they run once on the full sum.
torq-lower-to-torq-hl makes the loop body an accumulate-form op on an f32 /
i32 accumulator that stays in LRAM across the steps (no partial-sum DMA;
its operand slices are streamed), so the fit counts the accumulator once
plus one step's slices.
- `seed` (the seed RFC's estimate, no allocator): an op is a candidate when
  no earlier tiling fused it. Its footprint is, for a group's bottom op, the
  bytes of the group's input tensors plus its output (0 for the group's
  other ops), and for an op outside any group the bytes of its tensor
  operands; the memory available is `available_lram_bytes` for group ops and
  10 KiB for others. A footprint over the available memory gives factor =
  ceil(footprint / available) and tiles result dim 1 (dim 0 of a rank-1
  result) to ceil(extent / factor), rounded down to a divisor of the extent
  (tiles must have static shapes). While the largest original footprint of
  the ops fused into the loop, divided by the factor, exceeds the available
  memory, the factor becomes ceil(that footprint / available) and the root
  is retiled. Ops fused into a loop are never revisited. This estimate can
  overflow (whole weights, halos, fused intermediates); the allocator in
  torq-assign-lram-addresses then stops the compile with a one-line error.

`--torq-dump-tiling`: one record per root visited (its shape, tiled dims,
sizes, tile count, LRAM footprint of its slice, fused groups; tiled
reduction loops of the principal op, their extents and sizes, and the
accumulation steps per tile; the seed's footprint, factor and estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir, passmanager
from iree.compiler.dialects.transform import interpreter

from torq.contract.measures import Traffic, program_traffic
from torq.contract.ops import OPS, RESULT
from torq.contract.timing import schedule

from ..ir_utils import (CompileError, element_type, indexing_maps, location_str, loop_ranges, mlir_dtype,
                        region_ops, static_shape, tensor_nbytes, walk_ops)
from ..patterns import FUSE_GROUP, FUSE_GROUP_ID, Unsupported, classify_principal, linear_terms
from . import PassOptions
from .assign_lram_addresses import assign_function, lram_footprint
from .build_nss_program import build_program
from .lower_to_torq_hl import lower_function
from ..vector_layout import padded, value_roles, vector_dim, vector_width

NAME = "torq-super-tiling"
# --torq-super-tiling-strategy values (see the module docstring).
STRATEGIES = ("default", "traffic", "seed")
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

def _groups(op: ir.Operation) -> set[int]:
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


def _is_group_bottom(op: ir.Operation) -> bool:
    g = _groups(op)
    return bool(g) and not any(_groups(u) & g for u in _users(op))


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


@dataclass
class Root:
    """What the search needs to know about a root, read before anything is tiled
    (plain values: op handles do not survive the tiling)."""
    order: int
    name: str
    location: str
    groups: tuple[int, ...]
    shape: tuple[int, ...]  # the result's
    loop_of_dim: tuple[int | None, ...]  # loop indexing each result dim (None: not a plain loop)
    n_loops: int
    outer: int | None = None  # result dim whose loop the chosen tiling puts outermost (None: loop order)
    # The group principal's tileable reduction loops, in the order they are tiled
    # (matmul K; conv input channels, then kernel rows, then columns): (loop, extent).
    reduction_loops: tuple[tuple[int, int], ...] = ()
    principal_loops: int = 0  # loops of the group's principal op
    reduction: list[int] | None = None  # chosen size per reduction_loops entry (0: untiled), None: none tiled

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
    root = Root(order, op.name, location_str(op), tuple(sorted(_groups(op))), shape, loops, n_loops)
    principal = group_principal(op)
    if principal is not None:
        root.reduction_loops = _reduction_loops(principal)
        root.principal_loops = indexing_maps(principal)[0].n_dims
    return root


def group_principal(bottom: ir.Operation) -> ir.Operation | None:
    """The principal op of the bottom op's group when it is a contraction whose
    reduction may be tiled (an op with an accumulate form in the op table, contract/ops.py, not grouped):
    the bottom op itself or the producer of one of its operands."""
    groups = _groups(bottom)
    candidates = [bottom] + [v.owner for v in bottom.operands if not isinstance(v.owner, ir.Block)]
    for c in candidates:
        c = c.operation if hasattr(c, "operation") else c
        if FUSE_GROUP_ID not in c.attributes or ir.IntegerAttr(c.attributes[FUSE_GROUP_ID]).value not in groups:
            continue
        con = classify_principal(c)
        if con is not None and OPS[con.kind].accumulates and "G" not in con.attrs.get("input_dims", ""):
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


# --- tiling on the IR ------------------------------------------------------------

def tile_and_fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None = None,
                  reduction: list[int] | None = None) -> None:
    """Tile the op tagged TILE_ROOT in `module_op` by `loop_sizes` (one per loop,
    0 = untiled), fusing its producers; `interchange` orders the loops (outermost
    first). Loop-invariant code motion then hoists a slice that depends only on
    an outer loop (a weight slice in a 2-D nest) out of the inner one, so it is
    loaded once per outer iteration (tile_schedule.invariant_loops).
    `reduction` (one size per loop of the op tagged TILE_REDUCTION, the group's
    principal) then tiles its reduction loops inside the tile loop
    (`tile_reduction`)."""
    if any(loop_sizes):
        _fuse(module_op, loop_sizes, interchange)
    if reduction and any(reduction):
        tile_reduction(module_op, reduction)


def tile_reduction(module_op: ir.Operation, sizes: list[int]) -> None:
    """Tile the reduction loops of the op tagged TILE_REDUCTION by `sizes` (one per loop
    of the op, nonzero only on reduction loops) with transform.structured.tile_using_for:
    an scf.for per tiled loop, innermost, whose iter_arg is the accumulator, initialised
    from the op's init (the group's fill, outside the loop); the group's epilogue ops
    stay after the loop, so they run once on the full sum."""
    _apply_tiling(module_op, TILE_REDUCTION, "tile_using_for", sizes, "", "canonicalize,cse")


def _fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None) -> None:
    _apply_tiling(module_op, TILE_ROOT, "fuse", loop_sizes, f" interchange {interchange}" if interchange else "",
                  "canonicalize,cse,loop-invariant-code-motion")


def _apply_tiling(module_op: ir.Operation, tag: str, transform: str, sizes: list[int], options: str,
                  cleanup: str) -> None:
    """Runs transform.structured.`transform` (fuse / tile_using_for) with `sizes` on the op
    tagged `tag` in `module_op` (one loop per nonzero size), then the `cleanup` passes."""
    n_loops = sum(1 for s in sizes if s)
    loops = "".join([", !transform.any_op"] * n_loops)
    seq = ir.Module.parse(f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %op = transform.structured.match attributes {{{tag}}} in %root : (!transform.any_op) -> !transform.any_op
    %tiled{f', %loops:{n_loops}' if n_loops else ''} = transform.structured.{transform} %op tile_sizes {sizes}{options}
        : (!transform.any_op) -> (!transform.any_op{loops})
    transform.yield
  }}
}}""")
    interpreter.apply_named_sequence(module_op, seq.body.operations[0], seq)
    passmanager.PassManager.parse(f"builtin.module({cleanup})").run(module_op)


def _root_loop(func: ir.Operation) -> ir.Operation | None:
    """The outermost tile loop holding the TILE_ROOT op (after tiling it)."""
    for op in region_ops(func):
        if op.name == "scf.for" and any(TILE_ROOT in o.attributes for o in walk_ops(op)):
            return op
    return None


def _orders_in(loop: ir.Operation) -> set[int]:
    return {ir.IntegerAttr(o.attributes[ORDER]).value for o in walk_ops(loop) if ORDER in o.attributes}


def _clone(func: ir.Operation) -> tuple[ir.Module, ir.Operation]:
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    return scratch, scratch.body.operations[0].operation


def root_slice(func: ir.Operation) -> ir.Module:
    """A scratch module with a copy of `func` that returns only the TILE_ROOT op's
    result: the root and what feeds it (canonicalize drops every other op)."""
    scratch, clone = _clone(func)
    root = next(op for op in walk_ops(clone) if TILE_ROOT in op.attributes)
    value = root.results[0]
    ret = region_ops(clone)[-1]
    with ir.InsertionPoint(ret), ret.location:
        ir.Operation.create("func.return", operands=[value])
    inputs = list(ir.FunctionType(ir.TypeAttr(clone.attributes["function_type"]).value).inputs)
    clone.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [value.type]))
    del root, value
    ret.erase()
    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(scratch.operation)
    return scratch


def _has_dynamic_tensors(func: ir.Operation) -> bool:
    return any(isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape
               for op in walk_ops(func) for r in op.results)


def _lowered_tiling(source: ir.Module | ir.Operation, loop_sizes: list[int] | None,
                    interchange: list[int] | None = None,
                    reduction: list[int] | None = None) -> tuple[ir.Module, ir.Operation | None]:
    """A copy of the function (`source`, or the one in module `source`) with its
    TILE_ROOT op tiled by `loop_sizes` (and its TILE_REDUCTION op's reduction loops
    by `reduction`) and lowered to TorqHL; the function is None when some tile has
    no static shape. Keep the module alive while using the function."""
    func = source.body.operations[0].operation if isinstance(source, ir.Module) else source
    scratch, clone = _clone(func)
    if (loop_sizes and any(loop_sizes)) or (reduction and any(reduction)):
        tile_and_fuse(scratch.operation, loop_sizes or [], interchange, reduction)
        clone = scratch.body.operations[0].operation
    if _has_dynamic_tensors(clone):
        return scratch, None  # e.g. a fused reshape whose slice sizes depend on the loop
    lower_function(clone)
    return scratch, clone


def footprint(source: ir.Module | ir.Operation, loop_sizes: list[int] | None, options: PassOptions,
              interchange: list[int] | None = None, reduction: list[int] | None = None) -> int:
    """LRAM bytes (allocator end, one buffer set) the function (`source`, or the one
    in module `source`) needs with its TILE_ROOT op tiled by `loop_sizes`."""
    scratch, clone = _lowered_tiling(source, loop_sizes, interchange, reduction)
    if clone is None:
        return UNREPRESENTABLE
    return lram_footprint(clone, options)


def predicted_cost(source: ir.Module | ir.Operation, loop_sizes: list[int] | None,
                   options: PassOptions, interchange: list[int] | None = None,
                   reduction: list[int] | None = None) -> tuple[Traffic, int]:
    """DDR traffic and cycles (contract/timing.py's schedule, the simulator's own
    model) of the program the function in `source` becomes with its TILE_ROOT op
    tiled by `loop_sizes` (a tiling `footprint` accepted)."""
    scratch, clone = _lowered_tiling(source, loop_sizes, interchange, reduction)
    assign_function(clone, options)
    program, _ = build_program(clone, options)
    return program_traffic(program), schedule(program, options.hw).makespan


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile_count(shape: tuple[int, ...], sizes: list[int] | None) -> int:
    return math.prod(-(-n // t) if t else 1 for n, t in zip(shape, sizes or [0] * len(shape)))


# --- default strategy: exact fit, least traffic -------------------------------------

class _Search:
    """Fit queries for one root on its slice, remembering the smallest footprint seen."""

    def __init__(self, func: ir.Operation, root: Root, options: PassOptions):
        self.root, self.options = root, options
        self.slice = root_slice(func)
        self.budget = options.hw.available_lram_bytes
        self.smallest: int | None = None
        self.footprints: dict[tuple, int] = {}
        self.costs: dict[tuple, tuple[Traffic, int]] = {}
        self._vector: tuple[int, int] | None | bool = False  # result_vector(), once

    def result_vector(self) -> tuple[int, int] | None:
        """(dim, vector width) along which the root's result is vectorised in LRAM
        (vector_layout: conv output channels, matmul N, ...), read from the untiled
        slice lowered to TorqHL; None when it has no TorqHL producer."""
        if self._vector is False:
            self._vector = None
            scratch, clone = _lowered_tiling(self.slice, None)
            ret = [o for o in walk_ops(clone) if o.name == "func.return"] if clone is not None else []
            if ret and len(ret[0].operands) == 1:
                v = ret[0].operands[0]
                roles = [r for r in value_roles(v) if r[2] == RESULT]
                shape = static_shape(v.type)
                if roles and shape:
                    kind, attrs, _ = roles[0]
                    d = vector_dim(kind, attrs, RESULT, len(shape))
                    if d is not None:
                        self._vector = (d, vector_width(self.options.hw, mlir_dtype(element_type(v.type))))
            del ret, clone, scratch
        return self._vector

    def aligned_below(self, d: int, t: int) -> int | None:
        """When dim d is the result's vector dim and a tile of t would be padded in LRAM
        (vector_layout.padded), the largest smaller divisor of d's extent that is whole
        vectors (or a power of two below the width); None otherwise."""
        vec = self.result_vector()
        if vec is None or vec[0] != d or padded(t, vec[1]) == t:
            return None
        return max((x for x in _divisors(self.root.shape[d]) if x < t and padded(x, vec[1]) == x), default=None)

    def footprint(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> int:
        key = (tuple(sizes), outer) if not red else (tuple(sizes), outer, tuple(red))
        if key not in self.footprints:
            if red:
                try:
                    fp = footprint(self.slice, self.root.loop_sizes(sizes), self.options,
                                   self.root.interchange(outer), self.root.reduction_sizes(red))
                except (CompileError, Unsupported):
                    fp = UNREPRESENTABLE  # this cut has no TorqHL accumulate form
            else:
                fp = footprint(self.slice, self.root.loop_sizes(sizes), self.options, self.root.interchange(outer))
            self.footprints[key] = fp
            if fp < UNREPRESENTABLE:
                self.smallest = fp if self.smallest is None else min(self.smallest, fp)
        return self.footprints[key]

    def cost(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> tuple[Traffic, int]:
        key = (tuple(sizes), outer) if not red else (tuple(sizes), outer, tuple(red))
        if key not in self.costs:
            self.costs[key] = predicted_cost(self.slice, self.root.loop_sizes(sizes), self.options,
                                             self.root.interchange(outer), self.root.reduction_sizes(red))
        return self.costs[key]

    def traffic(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> Traffic:
        return self.cost(sizes, outer, red)[0]

    def largest_reduction(self, sizes: list[int]) -> list[int] | None:
        """With the parallel tiling `sizes`, reduction sizes that fit: the first reduction
        loop (in `Root.reduction_loops` order) whose largest divisor below its extent
        fits with the earlier ones at 1 (the footprint grows with the size), or None."""
        red = [0] * len(self.root.reduction_loops)
        for j, (_, extent) in enumerate(self.root.reduction_loops):
            best = _largest_fitting_divisor(
                extent, lambda t: self.footprint(sizes, red=red[:j] + [t] + red[j + 1:]) <= self.budget)
            if best is not None:
                red[j] = best
                return red
            red[j] = 1
        return None

    def largest_fitting(self, base: list[int], d: int, outer: int | None = None) -> int | None:
        """Largest divisor t < extent with base[d] = t fitting; footprint grows with t."""
        return _largest_fitting_divisor(
            self.root.shape[d], lambda t: self.footprint(base[:d] + [t] + base[d + 1:], outer) <= self.budget)


def _largest_fitting_divisor(extent: int, fits) -> int | None:
    """The largest divisor t < extent with fits(t), by binary search (a tile's
    footprint grows with its size); None when not even 1 fits."""
    cands = [t for t in _divisors(extent) if t < extent]
    lo, hi, best = 0, len(cands) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(cands[mid]):
            best, lo = cands[mid], mid + 1
        else:
            hi = mid - 1
    return best


def _seed_order(n: int) -> list[int]:
    return ([1, 0] if n > 1 else [0]) + list(range(2, n))


def _first_fitting_sizes(search: _Search) -> list[int] | None:
    """Seed order: the first dimension (second, first, rest) with a fitting size; if
    none fits alone, keep it at 1 and go on to the next."""
    shape = search.root.shape
    sizes = [0] * len(shape)
    for d in _seed_order(len(shape)):
        if not search.root.tileable(d):
            continue
        best = search.largest_fitting(sizes, d)
        if best is not None:
            sizes[d] = best
            return sizes
        sizes[d] = 1
    return None


def _least_traffic_sizes(search: _Search) -> list[int] | None:
    """For each dimension alone, its largest fitting tile (larger tiles along one
    dimension re-read fewer halos and weights), or, on the result's vector dim, the
    largest smaller one of whole vectors when that moves no more bytes and takes no
    more cycles (`_Search.aligned_below`); of those, the one with the least
    predicted DDR traffic, then the fewest tiles. Falls back to the seed order's
    multi-dimension search when no single dimension fits."""
    shape = search.root.shape
    scored = []
    for rank, d in enumerate(_seed_order(len(shape))):
        if not search.root.tileable(d):
            continue
        best = search.largest_fitting([0] * len(shape), d)
        if best is None:
            continue
        sizes = [0] * len(shape)
        sizes[d] = best
        traffic, cycles = search.cost(sizes)
        aligned = search.aligned_below(d, best)
        if aligned is not None:  # whole vectors when that costs no bytes and no cycles
            a_sizes = [0] * len(shape)
            a_sizes[d] = aligned
            a_traffic, a_cycles = search.cost(a_sizes)
            if a_traffic.dma_bytes <= traffic.dma_bytes and a_cycles <= cycles:
                sizes, traffic = a_sizes, a_traffic
        scored.append((traffic.dma_bytes, _tile_count(shape, sizes), rank, sizes))
    if scored:
        return min(scored)[3]
    return _two_dim_sizes(search) or _first_fitting_sizes(search)


def _two_dim_sizes(search: _Search) -> list[int] | None:
    """When no dimension fits alone: for each ordered pair (a outer, b inner) of
    tileable dims, the largest a tile that fits with b at 1 (the operand slice
    indexed by a alone, e.g. a matmul's weight columns, stays loaded over the inner
    loop, so a larger t_a means fewer re-reads of what b indexes), also half of it,
    each with the largest fitting t_b; of those, the least predicted DDR traffic,
    then the fewest tiles. Sets `search.root.outer` to the chosen outer dim."""
    shape = search.root.shape
    dims = [d for d in range(len(shape)) if search.root.tileable(d)]
    scored = []
    for a in dims:
        for b in dims:
            if a == b:
                continue
            base = [0] * len(shape)
            base[b] = 1
            t_max = search.largest_fitting(base, a, outer=a)
            if t_max is None:
                continue
            for t_a in {t_max, max((t for t in _divisors(shape[a]) if t <= t_max // 2), default=t_max)}:
                sizes = [0] * len(shape)
                sizes[a] = t_a
                t_b = search.largest_fitting(sizes, b, outer=a)
                if t_b is None:
                    continue
                sizes[b] = t_b
                scored.append((search.traffic(sizes, outer=a).dma_bytes, _tile_count(shape, sizes), a, b, sizes))
    if not scored:
        return None
    best = min(scored)
    search.root.outer = best[2]
    return best[4]


# Tile counts tried, per slice, when more tiles may save cycles (see _parallel_sizes).
PARALLEL_TILES_PER_SLICE = (2, 4)


def _parallel_sizes(search: _Search, chosen: list[int] | None) -> list[int] | None:
    """Refines a tiling that moves the fewest bytes for cycles: the slices compute
    in parallel and DMA overlaps compute only across tiles (distinct buffer sets),
    so a root left untiled or cut in few tiles may run faster in more. Along the
    chosen dim (every tileable dim when untiled), tiles giving 2 and 4 tiles per
    slice, and 2x and 4x the chosen tile count, are tried (on the result's vector
    dim also the largest tile of whole vectors below each); one wins when it fits,
    its program is predicted (contract/timing.py) to take fewer cycles, and it moves
    no more DDR bytes than `chosen` (e.g. output channels: the input stays loaded,
    each weight slice is read once) plus `PassOptions.tiling_traffic_slack` of them,
    when the share of extra bytes buys at least as large a share of cycles:
    where one tile's buffers fill LRAM, the slices share one buffer set (each
    compute split over them, its tiles one after the other), and smaller tiles
    (which re-read halo rows) get several sets, so DMA overlaps compute."""
    root = search.root
    base = chosen or [0] * len(root.shape)
    if sum(1 for t in base if t) > 1:
        return chosen  # 2-D tilings keep their shape
    traffic, cycles = search.cost(base, root.outer)
    limit = int(traffic.dma_bytes * (1 + search.options.tiling_traffic_slack))
    best = (cycles, _tile_count(root.shape, base), base)
    dims = [d for d, t in enumerate(base) if t] or [d for d in range(len(root.shape)) if root.tileable(d)]
    slices = search.options.hw.slices
    for d in dims:
        extent, current = root.shape[d], base[d] or root.shape[d]
        # Tile counts: a few per slice, and 2x / 4x the current count (when one
        # tile's buffers leave no room for a second buffer set).
        counts = {per_slice * slices for per_slice in PARALLEL_TILES_PER_SLICE}
        counts |= {k * (extent // current) for k in (2, 4)}
        tried = set()
        for count in sorted(counts):
            t = max((x for x in _divisors(extent) if extent // x >= count), default=None)
            if t is None or t >= current:
                continue
            # On the result's vector dim, also the largest tile of whole vectors below t.
            for cut in sorted({t, search.aligned_below(d, t)} - {None} - tried, reverse=True):
                tried.add(cut)
                best = _better_cut(search, root, d, cut, best, traffic, cycles, limit)
    return best[2] if any(best[2]) else None


def _better_cut(search: _Search, root: Root, d: int, t: int, best: tuple, traffic: Traffic, cycles: int,
                limit: int) -> tuple:
    """`best` (cycles, tiles, sizes), or tiles of t along d when they fit and beat it
    within the traffic limit (see _parallel_sizes)."""
    sizes = [0] * len(root.shape)
    sizes[d] = t
    try:
        if search.footprint(sizes, root.outer) > search.budget:
            return best
        t_traffic, t_cycles = search.cost(sizes, root.outer)
    except (CompileError, Unsupported):
        return best  # this cut has no TorqHL form (e.g. a gathering pool): keep the tiling we have
    extra = t_traffic.dma_bytes / max(traffic.dma_bytes, 1) - 1
    # Extra bytes must buy at least as large a share of cycles.
    if t_traffic.dma_bytes <= limit and t_cycles < best[0] and t_cycles <= cycles * (1 - max(extra, 0)):
        return (t_cycles, _tile_count(root.shape, sizes), sizes)
    return best


# Fitting parallel tile sizes tried per dim, largest first, with a tiled reduction.
REDUCTION_PARALLEL_CANDIDATES = 3


def _reduction_sizes(search: _Search) -> tuple[list[int], list[int]] | None:
    """When no parallel tiling fits: (parallel sizes, reduction sizes) that fit with the
    group principal's reduction loops tiled too (`Search.largest_reduction`), the
    accumulator kept in LRAM. Parallel tilings tried: none, each tileable dim alone
    (its largest divisors whose reduction fits, `REDUCTION_PARALLEL_CANDIDATES` of
    them) and every tileable dim at 1; of those, the least predicted DDR traffic
    (a smaller parallel tile re-reads the other operand's K-slices more often),
    then the fewest tiles x reduction steps. Sets `search.root.reduction`."""
    root = search.root
    if not root.reduction_loops:
        return None
    n = len(root.shape)
    dims = [d for d in range(n) if root.tileable(d)]
    options: list[list[int]] = [[0] * n]
    for d in dims:
        fitting = 0
        for t in sorted((t for t in _divisors(root.shape[d]) if t < root.shape[d]), reverse=True):
            sizes = [t if i == d else 0 for i in range(n)]
            if search.largest_reduction(sizes) is not None:
                options.append(sizes)
                fitting += 1
                if fitting == REDUCTION_PARALLEL_CANDIDATES:
                    break
    options.append([1 if d in dims else 0 for d in range(n)])
    scored = []
    for rank, sizes in enumerate(options):
        red = search.largest_reduction(sizes)
        if red is None:
            continue
        steps = math.prod(-(-e // t) if t else 1 for (_, e), t in zip(root.reduction_loops, red))
        scored.append((search.traffic(sizes, red=red).dma_bytes, _tile_count(root.shape, sizes) * steps, rank,
                       sizes, red))
    if not scored:
        # The error's smallest footprint: every tileable dim, parallel and reduction, at 1.
        search.footprint(options[-1], red=[1] * len(root.reduction_loops))
        return None
    best = min(scored)
    root.reduction = best[4]
    return best[3], best[4]


def choose_tile_sizes(func: ir.Operation, root: Root, options: PassOptions,
                      record: dict | None = None, force: bool = False) -> list[int] | None:
    """Per-result-dim tile sizes for the TILE_ROOT op (0 = untiled dim), or None when
    its slice fits untiled (`force`: tile it anyway); `root.reduction` receives the
    reduction sizes when the group's reduction loops must be tiled too (and the
    sizes may then be all 0). `record` receives the decision."""
    search = _Search(func, root, options)
    untiled = search.footprint([0] * len(root.shape))
    sizes = None
    if force or untiled > search.budget:
        sizes = _least_traffic_sizes(search)
        if sizes is None and (tiled := _reduction_sizes(search)) is not None:
            sizes = tiled[0]
        if sizes is None:
            smallest = (f"smallest footprint {search.smallest} bytes" if search.smallest is not None
                        else "no tiling gives tiles of static shape")
            raise CompileError(
                f"{root.location}: error: {root.name}: cannot fit LRAM even with size-1 tiles: "
                f"{smallest}, budget {search.budget} bytes")
    if options.super_tiling_strategy == "default" and root.reduction is None:
        sizes = _parallel_sizes(search, sizes)
    if record is not None:
        record.update(_record(root, sizes, search.footprint(sizes or [0] * len(root.shape), root.outer,
                                                            root.reduction), untiled, len(search.footprints)))
        record["outer_dim"] = root.outer
    return sizes


def _record(root: Root, sizes: list[int] | None, lram: int, untiled: int, evaluated: int) -> dict:
    red = [(loop, extent, t) for (loop, extent), t in zip(root.reduction_loops, root.reduction or []) if t]
    return {"root": root.name, "location": root.location, "groups": list(root.groups),
            "shape": list(root.shape), "tiled_dims": [d for d, t in enumerate(sizes or []) if t],
            "tile_sizes": sizes or [0] * len(root.shape), "tiles": _tile_count(root.shape, sizes),
            # Tiled reduction loops of the group's principal op (its loop numbering), their
            # extents and sizes, and the accumulation steps per tile.
            "reduction_dims": [r[0] for r in red], "reduction_extents": [r[1] for r in red],
            "reduction_tile_sizes": [r[2] for r in red],
            "reduction_steps": math.prod(-(-e // t) for _, e, t in red),
            "lram_bytes": lram, "untiled_lram_bytes": untiled, "candidates_evaluated": evaluated}


# --- seed strategy: the RFC's estimate ----------------------------------------------

def seed_footprints(func: ir.Operation, ops: list[ir.Operation], options: PassOptions) -> list[tuple[int, int]]:
    """(footprint, available memory) of each op of `ops`, as the seed estimates them on
    the untiled function: a group's bottom op counts the group's input tensors and
    its output, its other ops 0; an op outside any group its tensor operands."""
    top = region_ops(func)
    out = []
    for op in ops:
        g = _groups(op)
        if not g:
            fp = sum(_bytes(v) for v in op.operands)
            out.append((fp, SEED_OUTSIDE_GROUP_BYTES))
            continue
        if not _is_group_bottom(op):
            out.append((0, options.hw.available_lram_bytes))
            continue
        members = [o for o in top if _groups(o) & g]
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
    scratch, clone = _clone(func)
    tile_and_fuse(scratch.operation, root.loop_sizes(sizes))
    loop = _root_loop(scratch.body.operations[0].operation)
    return _orders_in(loop) if loop is not None else {root.order}


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
            sizes[d] = max(t for t in _divisors(extent) if t <= most)
            biggest = max(table[j][0] for j in _fused_orders(func, root, sizes) | {root.order})
            estimate = -(-biggest // factor)
            if estimate <= available:
                break
            factor = -(-biggest // available)
    if record is not None:
        search = _Search(func, root, options)
        record.update(_record(root, sizes, search.footprint(sizes or [0] * len(root.shape)),
                              search.footprint([0] * len(root.shape)), len(search.footprints)))
        record.update({"seed_footprint_bytes": fp, "seed_available_bytes": available,
                       "seed_factor": factor, "seed_estimate_bytes": estimate})
    return sizes


# --- the pass -----------------------------------------------------------------------

def _outside_op(func: ir.Operation, order: int) -> ir.Operation | None:
    """The op with ORDER `order` in the function body (not in a tile loop), if any."""
    for op in region_ops(func):
        if ORDER in op.attributes and ir.IntegerAttr(op.attributes[ORDER]).value == order:
            return op
    return None


class _Tiler:
    def __init__(self, func: ir.Operation, options: PassOptions):
        self.func, self.options = func, options
        self.seed = options.super_tiling_strategy == "seed"
        self.fused: set[int] = set()  # orders of ops fused into some tile loop
        self.table: list[tuple[int, int]] = []

    def run(self) -> None:
        i64 = ir.IntegerType.get_signless(64)
        ops = post_order(self.func)
        for i, op in enumerate(ops):
            op.attributes[ORDER] = ir.IntegerAttr.get(i64, i)
        if self.seed:
            self.table = seed_footprints(self.func, ops, self.options)
        roots = [i for i, op in enumerate(ops) if _is_group_bottom(op) or (self.seed and not _groups(op))]
        del ops  # handles die with the first tiling
        try:
            for k in roots:
                if self.seed and k in self.fused:
                    continue  # the seed never revisits a fused op
                self.visit(k)
            if not self.seed:
                self.fit_function_body(roots)
        finally:
            for op in walk_ops(self.func):
                for name in (ORDER, TILE_ROOT, TILE_REDUCTION):
                    if name in op.attributes:
                        del op.attributes[name]

    def visit(self, order: int, force: bool = False) -> bool:
        """Tile the root with this order if it needs it; False if it is no longer outside a loop."""
        op = _outside_op(self.func, order)
        root = root_facts(op, order) if op is not None else None
        if root is None:
            return False  # fused into loops only (the original is gone), or no static shape
        op.attributes[TILE_ROOT] = ir.UnitAttr.get()
        if not self.seed and root.reduction_loops:
            group_principal(op).attributes[TILE_REDUCTION] = ir.UnitAttr.get()
        del op
        record: dict | None = {} if self.options.tiling_log is not None else None
        if self.seed:
            sizes = seed_tile_sizes(self.func, root, self.table, self.options, record)
        else:
            sizes = choose_tile_sizes(self.func, root, self.options, record, force)
        if root.reduction is not None and not any(sizes):
            # Only the reduction is tiled: its loop is the "tile loop" of the root.
            tile_and_fuse(_enclosing_module(self.func), [], None, root.reduction_sizes(root.reduction))
            if record is not None:
                record["fused_groups"] = sorted(root.groups)
        elif sizes is not None:
            tile_and_fuse(_enclosing_module(self.func), root.loop_sizes(sizes), root.interchange(root.outer),
                          root.reduction_sizes(root.reduction))
            loop = _root_loop(self.func)
            self.fused |= _orders_in(loop)
            if record is not None:
                record["fused_groups"] = sorted({g for o in walk_ops(loop) for g in _groups(o)})
        elif record is not None:
            record["fused_groups"] = []
        for o in walk_ops(self.func):
            for name in (TILE_ROOT, TILE_REDUCTION):
                if name in o.attributes:
                    del o.attributes[name]
        if record is not None:
            self.options.tiling_log.append(record)
        return True

    def fit_function_body(self, roots: list[int]) -> None:
        """Tile untiled roots, largest slice first, until what runs outside tile loops
        fits as a whole (their values stay in LRAM between them)."""
        budget = self.options.hw.available_lram_bytes
        while True:
            scratch, clone = _clone(self.func)
            lower_function(clone)
            end = lram_footprint(clone, self.options)
            del clone, scratch
            if end <= budget:
                return
            sizes = []
            for k in roots:
                op = _outside_op(self.func, k)
                if op is None or (root := root_facts(op, k)) is None:
                    continue
                op.attributes[TILE_ROOT] = ir.UnitAttr.get()
                del op
                sizes.append((footprint(root_slice(self.func), None, self.options), k))
                for o in walk_ops(self.func):
                    if TILE_ROOT in o.attributes:
                        del o.attributes[TILE_ROOT]
            if not sizes:
                return  # nothing left to tile: torq-assign-lram-addresses reports the overflow
            self.visit(max(sizes)[1], force=True)


def tile_function(func: ir.Operation, options: PassOptions) -> None:
    _Tiler(func, options).run()


def _enclosing_module(op: ir.Operation) -> ir.Operation:
    p = op.parent
    while p.name != "builtin.module":
        p = p.parent
    return p


def run(module: ir.Module, options: PassOptions) -> None:
    for op in list(module.body.operations):
        if op.operation.name == "func.func":
            tile_function(op.operation, options)
