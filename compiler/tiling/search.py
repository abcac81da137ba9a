"""The default and traffic strategies' search: per root, the tile sizes of least
DDR traffic that fit LRAM, refined for cycles (`choose_tile_sizes`); see
torq-super-tiling's docstring for the rules."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import math
from dataclasses import dataclass

from iree.compiler import ir

from torq.contract.measures import Traffic, program_traffic
from torq.contract.ops import RESULT
from torq.contract.program import Program

from ..ir_text import structure_text
from ..ir_utils import CompileError, element_type, mlir_dtype, static_shape, walk_ops
from ..nss_dma_limit import DmaLimitExceeded
from ..passes import PassOptions
from ..patterns import Unsupported
from ..vector_layout import padded, value_roles, vector_dim, vector_width
from .cost import lowered_program, lowered_tiling, program_cost
from .fit_search import largest_fitting_size
from .footprint_model import FootprintModel, measure
from .needed_bytes import needed_bytes
from .roots import UNREPRESENTABLE, Root
from .transform import root_slice


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@functools.cache
def tile_sizes(extent: int) -> tuple[int, ...]:
    """The sizes below `extent` a parallel dim may be tiled by, ascending: per number of
    tiles, the smallest size giving it (ceil(extent / k)), which is extent / k when k
    divides the extent. Otherwise the tile loop is peeled (tiling/transform.py): full
    tiles and a smaller last one, all of static shape, so a prime extent (ViT's 197
    tokens) tiles by 66 (66, 66, 65) rather than by 1. Cached: O(extent) to build (8 ms
    for a 49,152-word vocabulary), asked for on every fit probe of the dim."""
    return tuple(sorted({-(-extent // k) for k in range(2, extent + 1)}))


def _tile_count(shape: tuple[int, ...], sizes: list[int] | None) -> int:
    return math.prod(-(-n // t) if t else 1 for n, t in zip(shape, sizes or [0] * len(shape)))


# --- default strategy: exact fit, least traffic -------------------------------------

class TileSearch:
    """Fit queries for one root on its slice, remembering the smallest footprint seen."""

    def __init__(self, slice_module: ir.Module, root: Root, options: PassOptions):
        self.root, self.options = root, options
        self.slice = slice_module  # transform.root_slice of the function
        self.budget = options.hw.available_lram_bytes
        self.smallest: int | None = None
        self.footprints: dict[tuple, int] = {}
        self.costs: dict[tuple, tuple[Traffic, int]] = {}
        # `traffic` builds a program without scheduling it; `cost` schedules it if asked later.
        self.traffics: dict[tuple, Traffic] = {}  # of the tilings not costed
        self.programs: dict[tuple, Program] = {}
        # Lowered tilings that fit, kept from `footprint` for `cost` (one lowering per candidate).
        self.lowered: dict[tuple, tuple[ir.Module, ir.Operation]] = {}
        # The probes of each family of tilings and the footprints they predict (footprint_model.py).
        self.models: dict[tuple, FootprintModel] = {}
        self._vector: tuple[int, int] | None | bool = False  # result_vector(), once
        # What the search chose besides the parallel sizes (see TileChoice).
        self.outer: int | None = None
        self.reduction: list[int] | None = None

    def result_vector(self) -> tuple[int, int] | None:
        """(dim, vector width) along which the root's result is vectorised in LRAM
        (vector_layout: conv output channels, matmul N, ...), read from the untiled
        slice lowered to TorqHL; None when it has no TorqHL producer."""
        if self._vector is False:
            self._vector = None
            scratch, clone = lowered_tiling(self.slice, None)
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
        (vector_layout.padded), the largest smaller tile size of d (`tile_sizes`) that is whole
        vectors (or a power of two below the width); None otherwise."""
        vec = self.result_vector()
        if vec is None or vec[0] != d or padded(t, vec[1]) == t:
            return None
        return max((x for x in tile_sizes(self.root.shape[d]) if x < t and padded(x, vec[1]) == x), default=None)

    def footprint(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> int:
        key = _key(sizes, outer, red)
        if key not in self.footprints:
            scratch, clone = None, None
            try:
                scratch, clone = lowered_tiling(self.slice, self.root.loop_sizes(sizes), self.root.interchange(outer),
                                                self.root.reduction_sizes(red))
                fp = UNREPRESENTABLE
                if clone is not None:
                    measured = measure(clone, self.options)
                    fp = measured.footprint
                    family, point = _family(sizes, outer, red)
                    self.models.setdefault(family, FootprintModel(self.options)).add(point, measured)
            except (CompileError, Unsupported):
                if not red and all(n % t == 0 for n, t in zip(self.root.shape, sizes) if t):
                    raise
                fp = UNREPRESENTABLE  # this cut (a peeled tile, an accumulate form) has no TorqHL form
            if fp <= self.budget:
                self.lowered[key] = (scratch, clone)
            self.footprints[key] = fp
            if fp < UNREPRESENTABLE:
                self.smallest = fp if self.smallest is None else min(self.smallest, fp)
        return self.footprints[key]

    def estimate(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> int | None:
        """The footprint when probed, else the footprint model's prediction (None: no prediction)."""
        key = _key(sizes, outer, red)
        if key in self.footprints:
            return self.footprints[key]
        if any(t and n // t == 1 and n % t for n, t in zip(self.root.shape, sizes)):
            return None  # one full tile and a smaller last one: no loop is left, another structure
        family, point = _family(sizes, outer, red)
        return self.models[family].predict(point) if family in self.models else None

    def cost(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> tuple[Traffic, int]:
        key = _key(sizes, outer, red)
        if key not in self.costs:
            program = self.programs.pop(key, None)
            if program is None:
                program = self._program(sizes, outer, red, key)
            self.costs[key] = program_cost(program, self.options)
        return self.costs[key]

    def traffic(self, sizes: list[int], outer: int | None = None, red: list[int] | None = None) -> Traffic:
        """`cost`'s traffic alone: the program is built, not scheduled (kept for a later `cost`)."""
        key = _key(sizes, outer, red)
        if key in self.costs:
            return self.costs[key][0]
        if key not in self.traffics:
            self.programs[key] = self._program(sizes, outer, red, key)
            self.traffics[key] = program_traffic(self.programs[key])
        return self.traffics[key]

    def traffic_within(self, sizes: list[int], outer: int | None, red: list[int] | None,
                       limit: int | None) -> Traffic | None:
        """`traffic`, or None when the tiling's DMAs move more than `limit` bytes (None: no
        limit): a candidate that cannot beat the best so far stops being built there (a
        2-D tiling of 3,584 tiles took 170 ms to build in full)."""
        key = _key(sizes, outer, red)
        if limit is None or key in self.costs or key in self.traffics:
            t = self.traffic(sizes, outer, red)
            return t if limit is None or t.dma_bytes <= limit else None
        try:
            self.programs[key] = self._program(sizes, outer, red, key, limit)
        except DmaLimitExceeded:
            return None
        self.traffics[key] = program_traffic(self.programs[key])
        return self.traffics[key]

    def _program(self, sizes: list[int], outer: int | None, red: list[int] | None, key: tuple,
                 dma_limit: int | None = None) -> Program:
        """The program of a tiling, from the lowered copy `footprint` kept, else lowered now."""
        lowered = self.lowered.pop(key, None)
        if lowered is None:
            lowered = lowered_tiling(self.slice, self.root.loop_sizes(sizes), self.root.interchange(outer),
                                     self.root.reduction_sizes(red))
        return lowered_program(lowered[1], self.options, dma_limit)

    def largest_reduction(self, sizes: list[int]) -> list[int] | None:
        """With the parallel tiling `sizes`, reduction sizes that fit: the first reduction
        loop (in `Root.reduction_loops` order) whose largest divisor below its extent
        fits with the earlier ones at 1 (the footprint grows with the size), or None."""
        red = [0] * len(self.root.reduction_loops)
        for j, (_, extent) in enumerate(self.root.reduction_loops):
            best = largest_fitting_size(
                [t for t in divisors(extent) if t < extent],
                lambda t: self.footprint(sizes, red=red[:j] + [t] + red[j + 1:]), self.budget,
                lambda t: self.estimate(sizes, red=red[:j] + [t] + red[j + 1:]))
            if best is not None:
                red[j] = best
                return red
            red[j] = 1
        return None

    def largest_fitting(self, base: list[int], d: int, outer: int | None = None) -> int | None:
        """Largest tile size t < extent (`tile_sizes`) with base[d] = t fitting; footprint grows with t."""
        return largest_fitting_size(
            tile_sizes(self.root.shape[d]), lambda t: self.footprint(base[:d] + [t] + base[d + 1:], outer),
            self.budget, lambda t: self.estimate(base[:d] + [t] + base[d + 1:], outer))


def _key(sizes: list[int], outer: int | None, red: list[int] | None) -> tuple:
    """A tiling's key in `TileSearch`'s tables (parallel sizes, outer dim, reduction sizes)."""
    return (tuple(sizes), outer) if not red else (tuple(sizes), outer, tuple(red))


def _family(sizes: list[int], outer: int | None, red: list[int] | None) -> tuple[tuple, tuple[int, ...]]:
    """A tiling's family (the dims and reduction loops it tiles, its outer dim: tilings of
    one shape, see footprint_model.py) and its point in it (the sizes of those dims)."""
    dims = tuple(d for d, t in enumerate(sizes) if t)
    loops = tuple(j for j, t in enumerate(red or []) if t)
    return (dims, outer, loops), tuple(sizes[d] for d in dims) + tuple(red[j] for j in loops)


def _seed_order(n: int) -> list[int]:
    """Result dims in seed order; none for a scalar result (a reduction of a whole tensor,
    GroupNorm(1, C)'s sum: only its reduction loops tile)."""
    return ([1, 0] if n > 1 else list(range(n))) + list(range(2, n))


def _first_fitting_sizes(search: TileSearch) -> list[int] | None:
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


def _least_traffic_sizes(search: TileSearch) -> list[int] | None:
    """For each dimension alone, its largest fitting tile (larger tiles along one
    dimension re-read fewer halos and weights), or, on the result's vector dim, the
    largest smaller one of whole vectors when that moves no more bytes and takes no
    more cycles (`TileSearch.aligned_below`); of those, the one with the least
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


def _two_dim_sizes(search: TileSearch) -> list[int] | None:
    """When no dimension fits alone: for each ordered pair (a outer, b inner) of
    tileable dims, the largest a tile that fits with b at 1 (the operand slice
    indexed by a alone, e.g. a matmul's weight columns, stays loaded over the inner
    loop, so a larger t_a means fewer re-reads of what b indexes), also half of it,
    each with the largest fitting t_b; of those, the least predicted DDR traffic,
    then the fewest tiles. Sets `search.outer` to the chosen outer dim."""
    shape = search.root.shape
    dims = [d for d in range(len(shape)) if search.root.tileable(d)]
    fitting = []
    for a in dims:
        for b in dims:
            if a == b:
                continue
            base = [0] * len(shape)
            base[b] = 1
            t_max = search.largest_fitting(base, a, outer=a)
            if t_max is None:
                continue
            for t_a in {t_max, max((t for t in tile_sizes(shape[a]) if t <= t_max // 2), default=t_max)}:
                sizes = [0] * len(shape)
                sizes[a] = t_a
                t_b = search.largest_fitting(sizes, b, outer=a)
                if t_b is None:
                    continue
                sizes[b] = t_b
                fitting.append((sizes, a, None, (_tile_count(shape, sizes), a, b, sizes)))
    scored = _least_traffic_first(search, fitting)
    if not scored:
        return None
    best = min(scored)
    search.outer = best[2]
    return best[4]


def _least_traffic_first(search: TileSearch, candidates: list[tuple]) -> list[tuple]:
    """(DMA bytes, *rest) of the candidates (sizes, outer, reduction sizes, rest) that may move
    the fewest bytes: taken in order of `rest` (fewest tiles first: the cheapest to build and
    mostly the fewest bytes), each built only until its DMAs move more than the least so far.
    Those left out move more than one kept, so the least (bytes, *rest) is the one that
    building every candidate in full finds. Once the least is the slice's needed bytes
    (needed_bytes.py: no tiling moves fewer), the rest are not built: each moves as many
    at best, and at equal bytes the earlier `rest` is the least."""
    scored: list[tuple] = []
    least = None
    floor = needed_bytes(search.slice) if candidates else 0
    for sizes, outer, red, rest in sorted(candidates, key=lambda c: c[3]):
        if least is not None and least <= floor:
            break
        traffic = search.traffic_within(sizes, outer, red, least)
        if traffic is not None:
            scored.append((traffic.dma_bytes, *rest))
            least = traffic.dma_bytes if least is None else min(least, traffic.dma_bytes)
    return scored


# Tile counts tried, per slice, when more tiles may save cycles (see _parallel_sizes).
PARALLEL_TILES_PER_SLICE = (2, 4)


def _parallel_sizes(search: TileSearch, chosen: list[int] | None) -> list[int] | None:
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
    traffic, cycles = search.cost(base, search.outer)
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
            # The largest divisor giving at least `count` tiles, and the balanced size giving
            # about `count` (peeled when it does not divide: its last tile re-reads what the
            # loop keeps resident, so it may move more bytes).
            div = max((x for x in divisors(extent) if extent // x >= count), default=None)
            for t in sorted({div, -(-extent // count)} - {None}, reverse=True):
                if t >= current:
                    continue
                # On the result's vector dim, also the largest tile of whole vectors below t.
                for cut in sorted({t, search.aligned_below(d, t)} - {None} - tried, reverse=True):
                    tried.add(cut)
                    best = _better_cut(search, root, d, cut, best, traffic, cycles, limit)
    return best[2] if any(best[2]) else None


def _better_cut(search: TileSearch, root: Root, d: int, t: int, best: tuple, traffic: Traffic, cycles: int,
                limit: int) -> tuple:
    """`best` (cycles, tiles, sizes), or tiles of t along d when they fit and beat it
    within the traffic limit (see _parallel_sizes)."""
    sizes = [0] * len(root.shape)
    sizes[d] = t
    try:
        # Past the limit it cannot win: its program is built no further, nor scheduled.
        if search.footprint(sizes, search.outer) > search.budget or \
                search.traffic_within(sizes, search.outer, None, limit) is None:
            return best
        t_traffic, t_cycles = search.cost(sizes, search.outer)
    except (CompileError, Unsupported):
        return best  # this cut has no TorqHL form (e.g. a gathering pool): keep the tiling we have
    extra = t_traffic.dma_bytes / max(traffic.dma_bytes, 1) - 1
    # Extra bytes must buy at least as large a share of cycles.
    if t_traffic.dma_bytes <= limit and t_cycles < best[0] and t_cycles <= cycles * (1 - max(extra, 0)):
        return (t_cycles, _tile_count(root.shape, sizes), sizes)
    return best


# Fitting parallel tile sizes tried per dim, largest first, with a tiled reduction.
REDUCTION_PARALLEL_CANDIDATES = 3


# A parallel tiling moving more than this many times the compulsory bytes is compared
# with the reduction tilings (`_rereads`).
REREAD_LIMIT = 1.25


def _rereads(search: TileSearch, sizes: list[int] | None) -> bool:
    """Whether to try tiling the reduction too: no parallel tiling fits, or the best one
    re-reads an operand (more than REREAD_LIMIT x the compulsory bytes: a matmul whose
    rows and weights do not fit together, such as a 3072-wide FFN projection, re-reads
    one per tile of the other) and the root has reduction loops to tile."""
    if sizes is None:
        return True
    if not search.root.reduction_loops:
        return False
    traffic = search.traffic(sizes, search.outer)
    return traffic.dma_bytes > REREAD_LIMIT * traffic.compulsory_bytes


def _reduction_sizes(search: TileSearch, parallel: list[int] | None = None) -> tuple[list[int], list[int]] | None:
    """(parallel sizes, reduction sizes) that fit with the group principal's reduction
    loops tiled too (`Search.largest_reduction`), the accumulator kept in LRAM; None when
    none fits or `parallel` (the best parallel tiling, when one fits) moves no more bytes
    than the best of them. Parallel tilings tried: none, each tileable dim alone
    (its largest tile sizes whose reduction fits, `REDUCTION_PARALLEL_CANDIDATES` of
    them), and only when none of those fits, every tileable dim at 1; the least predicted DDR traffic
    (a smaller parallel tile re-reads the other operand's K-slices more often),
    then the fewest tiles x reduction steps. Sets `search.reduction`."""
    root = search.root
    if not root.reduction_loops:
        return None
    n = len(root.shape)
    dims = [d for d in range(n) if root.tileable(d)]
    ones = [1] * len(root.reduction_loops)  # the smallest reduction tile: some fits iff this does
    options: list[list[int]] = [[0] * n]
    for d in dims:
        cands = tile_sizes(root.shape[d])
        largest = largest_fitting_size(
            cands, lambda t: search.footprint([t if i == d else 0 for i in range(n)], red=ones), search.budget,
            lambda t: search.estimate([t if i == d else 0 for i in range(n)], red=ones))
        if largest is not None:
            below = [t for t in cands if t <= largest][-REDUCTION_PARALLEL_CANDIDATES:]
            options += [[t if i == d else 0 for i in range(n)] for t in reversed(below)]
    scored = _scored_reductions(search, options)
    all_ones = [1 if d in dims else 0 for d in range(n)]
    if not scored:  # the last resort (its program has a tile per output element)
        scored = _scored_reductions(search, [all_ones])
    if not scored:
        # The error's smallest footprint: every tileable dim, parallel and reduction, at 1.
        search.footprint(all_ones, red=ones)
        return None
    best = min(scored)
    if parallel is not None and search.traffic(parallel, search.outer).dma_bytes <= best[0]:
        return None
    search.reduction, search.outer = best[4], None
    return best[3], best[4]


def _scored_reductions(search: TileSearch, options: list[list[int]]) -> list[tuple]:
    """(traffic, tiles x steps, rank, sizes, reduction sizes) of the parallel tilings in
    `options` for which some reduction tiling fits (`TileSearch.largest_reduction`) and
    which may move the fewest bytes (`_least_traffic_first`)."""
    fitting = []
    for rank, sizes in enumerate(options):
        red = search.largest_reduction(sizes)
        if red is None:
            continue
        steps = math.prod(-(-e // t) if t else 1 for (_, e), t in zip(search.root.reduction_loops, red))
        fitting.append((sizes, None, red, (_tile_count(search.root.shape, sizes) * steps, rank, sizes, red)))
    return _least_traffic_first(search, fitting)


# Reduction steps tried below the largest that fits, as fractions of it (`_step_sizes`).
STEP_FRACTIONS = (2, 4)


def _step_sizes(search: TileSearch, sizes: list[int]) -> list[int]:
    """The reduction sizes of a reduction tiling refined for cycles: the largest step that
    fits leaves no room for a second placement of the step operands, so each step's
    DMA-in waits for the previous step's compute (tile_schedule.plan_body). Smaller
    steps (the divisor nearest 1/2 and 1/4 of it, on the one loop largest_reduction
    sized) move the same bytes and may double-buffer; one wins when its program is
    predicted to take fewer cycles and moves no more bytes."""
    red = search.reduction
    j = max(i for i, t in enumerate(red) if t)
    extent = search.root.reduction_loops[j][1]
    traffic, cycles = search.cost(sizes, None, red)
    best = (cycles, red)
    for fraction in STEP_FRACTIONS:
        t = max((x for x in divisors(extent) if x <= red[j] // fraction), default=None)
        if t is None or t == red[j]:
            continue
        cand = red[:j] + [t] + red[j + 1:]
        try:
            if search.footprint(sizes, None, cand) > search.budget or \
                    search.traffic_within(sizes, None, cand, traffic.dma_bytes) is None:
                continue  # past the chosen step's bytes it cannot win: not built further, nor scheduled
            t_traffic, t_cycles = search.cost(sizes, None, cand)
        except (CompileError, Unsupported):
            continue
        if t_traffic.dma_bytes <= traffic.dma_bytes and t_cycles < best[0]:
            best = (t_cycles, cand)
    return best[1]


@dataclass(frozen=True)
class TileChoice:
    """How to tile a root: per-result-dim sizes (0 = untiled dim; None: untiled), the result
    dim whose loop goes outermost (None: loop order), and the sizes of the group principal's
    reduction loops (`Root.reduction_loops` order; None: none tiled, `sizes` may then be all 0)."""
    sizes: list[int] | None
    outer: int | None = None
    reduction: list[int] | None = None


def choose_tile_sizes(func: ir.Operation, root: Root, options: PassOptions,
                      record: dict | None = None, force: bool = False) -> TileChoice:
    """The tiling of the TILE_ROOT op: untiled when its slice fits (`force`: tiled anyway).
    `record` receives the decision. A root whose slice this process has tiled before
    (`_choice_key`: the same ops and shapes, any weights) takes the choice made then."""
    slice_module = root_slice(func)
    key = _choice_key(slice_module, root, options, force)
    made = _CHOICES.get(key)
    if made is None:
        made = _CHOICES[key] = _search(TileSearch(slice_module, root, options), record is not None, force)
        while len(_CHOICES) > CHOICES_KEPT:
            del _CHOICES[next(iter(_CHOICES))]
    choice, made_record = made
    if record is not None:
        record.update(copy.deepcopy(made_record))
        record["location"] = root.location
    return choice


# Choices made in this process, by `_choice_key` (oldest dropped past CHOICES_KEPT): the
# search reads shapes, types, op kinds and inline constants, never a weight's bytes
# (footprints, DMA bytes and cycles are functions of shapes), so the layers of a model,
# which differ in their weights alone, are searched once. Executables are byte-identical
# with and without it (tests/e2e/test_tiling_memo.py).
_CHOICES: dict[str, tuple[TileChoice, dict | None]] = {}
CHOICES_KEPT = 4096


def _choice_key(slice_module: ir.Module, root: Root, options: PassOptions, force: bool) -> str:
    """What the search reads: the root's slice without its blobs' bytes (ir_text.structure_text),
    the root's facts but its location, the pass options and `force`."""
    h = hashlib.sha256()
    for part in (structure_text(slice_module.operation), repr(dataclasses.replace(root, location="")),
                 repr(options), repr(force)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _search(search: TileSearch, recording: bool, force: bool) -> tuple[TileChoice, dict | None]:
    """The tiling `choose_tile_sizes` makes, and its record (without the root's location)."""
    root, options = search.root, search.options
    untiled = search.footprint([0] * len(root.shape))
    sizes = None
    if force or untiled > search.budget:
        sizes = _least_traffic_sizes(search)
        if _rereads(search, sizes) and (tiled := _reduction_sizes(search, sizes)) is not None:
            sizes = tiled[0]
        if sizes is None:
            smallest = (f"smallest footprint {search.smallest} bytes" if search.smallest is not None
                        else "no tiling gives tiles of static shape")
            raise CompileError(
                f"{root.location}: error: {root.name}: cannot fit LRAM even with size-1 tiles: "
                f"{smallest}, budget {search.budget} bytes")
    if options.super_tiling_strategy == "default":
        if search.reduction is None:
            sizes = _parallel_sizes(search, sizes)
        else:
            search.reduction = _step_sizes(search, sizes or [0] * len(root.shape))
    record = None
    if recording:
        lram = search.footprint(sizes or [0] * len(root.shape), search.outer, search.reduction)
        record = tiling_record(root, sizes, lram, untiled, len(search.footprints), search.reduction)
        record["outer_dim"] = search.outer
        record["location"] = None  # the caller's root's
    return TileChoice(sizes, search.outer, search.reduction), record


def tiling_record(root: Root, sizes: list[int] | None, lram: int, untiled: int, evaluated: int,
                  reduction: list[int] | None = None) -> dict:
    red = [(loop, extent, t) for (loop, extent), t in zip(root.reduction_loops, reduction or []) if t]
    return {"root": root.name, "location": root.location, "groups": list(root.groups),
            "shape": list(root.shape), "tiled_dims": [d for d, t in enumerate(sizes or []) if t],
            "tile_sizes": sizes or [0] * len(root.shape), "tiles": _tile_count(root.shape, sizes),
            # Tiled reduction loops of the group's principal op (its loop numbering), their
            # extents and sizes, and the accumulation steps per tile.
            "reduction_dims": [r[0] for r in red], "reduction_extents": [r[1] for r in red],
            "reduction_tile_sizes": [r[2] for r in red],
            "reduction_steps": math.prod(-(-e // t) for _, e, t in red),
            "lram_bytes": lram, "untiled_lram_bytes": untiled, "candidates_evaluated": evaluated}
