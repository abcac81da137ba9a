"""An activation quantized with its contraction: tables of an integer level the NPU makes.

PT2E's X86InductorQuantizer quantizes conv + hardswish as one pattern: the
accumulator is dequantized, put through the activation and only then
quantized, q_c(a) = g(B_c(a)): B_c the dequantized accumulator (per channel,
increasing), g the activation and the quantize, one function of an f32 value
for every channel. g is not monotone (hardswish dips to -0.375 at -1.5), so
no rescale reproduces q_c. ONNX Runtime quantizes the conv's output first and
requant_split builds a table of that level; here the NPU makes such a level
itself, on a grid of step h over x = B_c(a), per channel c in 64-bit integers:

    u = R_c(a)                          round((x - x_lo) / h), clamped to [-1, 255 n - 1]
    q = E_0[j_0] + ... + E_{n-1}[j_{n-1}],   j_i = clamp(u - 255 i + 1, 0, 255)
    q = min(q, max(R2_c(a), L))         where g has a linear part above the grid

- x_lo is where g first changes level and h the narrowest level's width
  (`_grid`, from g on a dense sample), so a grid cell holds at most one level
  change; n segments of 255 cells cover g up to its last change. A segment's
  table is one slice lookup (256 entries; int8 is too coarse for the slope of
  g at the output's step).
- Segment i's table holds g at its cells' points, less the level its
  predecessors end on: below the segment (j_i = 0) it adds 0, above it
  (j_i = 255) its own last level. E_0[0] is g's level left of the grid.
- Where g ends in a linear part (hardswish above 3, SiLU and GELU far right:
  its level changes one up each, evenly spaced, `_linear_start`), the grid
  stops below it and its top cell sums to 127; there R2_c, the nearest
  rescale of the chain on those accumulators (requant_channels.fit_channels,
  about 0.01% off as any monotone requantization), decides. Floored at L, the
  largest level the segments sum to below the top, R2_c leaves the rest to
  them. Without that part (or if its fit fails) the grid covers g to its last
  change.

A transcendental activation (SiLU's exp, GELU's erf) is measured against the
correctly rounded chain, and also with those results moved by
TRANSCENDENTAL_ULPS either way (llvm-cpu's approximations): no value more
than one step off either.

The measure (`_measure`) is exact on every accumulator value of each
channel's range. g's direction is proven piecewise on the f32 axis
(f32_chain's analysis; a piece where it fails is halved while wider than a
cell). On a monotone piece g's level changes at thresholds, bisected once on
the f32 order; a channel's chain changes level where B_c first reaches one,
bisected per channel on B alone. Pieces with no proof (hardswish on [-3, 0])
are evaluated on every accumulator they hold, within a budget. Both functions
are then step functions known on all of [lo, hi]: the values where they
differ are counted, and any more than one step apart refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from .f32_chain import Chain, from_order_key, order_key, type_name
from .passes import RequantMode
from .requant_channels import channel_directions, fit_channels
from .requant_split import TRANSCENDENTAL_ULPS, ActivationTable, backward_slice, dependents
from .requant_summary import RequantSummary
from .rescale_fit import (
    NotExact,
    Rescale,
    _bisect,
    closed_form_holds,
    closed_form_step_points,
    first_reaching_near,
    intercept_rescale,
    rescale_step_points,
    unique_sorted,
)

# Points g is sampled on to place the grid.
_SAMPLES = 1 << 20
# Accumulator values evaluated one by one where g's direction is not proven, per dispatch.
EXHAUSTIVE_BUDGET = 1 << 26
# Halvings of a piece of the f32 axis where g's direction is not proven, and proofs asked at most.
_SPLITS = 40
_PROOFS = 20_000
# Table segments (slice lookups per element) the NPU spends on one activation at most.
MAX_SEGMENTS = 16
_CELLS = 255  # grid cells per segment: t = -127..127; t = -128 is "below the segment"
_TOP = 127  # the level the grid's top cell sums to when a linear rescale decides above it
# Channels compared at once: their cuts (a few thousand each) stay in the core's cache; all
# 768 of a DeiT MLP at once take twice as long, one at a time half again as long.
_CHANNELS_PER_BATCH = 64
# Grid cells across the narrowest level, the most first: the share of accumulators one step
# off falls with it (about 1 / (4 cells) at that level).
_CELLS_PER_LEVEL = (4, 2, 1)


@dataclass
class FusedActivationFit:
    """The NPU's form of the chain (module docstring) and how far it is from it."""
    level_rescales: list[Rescale]  # R_c, clamped to [-1, 255 n - 1]
    tables: list[ActivationTable]  # E_i, indexed by j_i - 128
    linear_rescales: list[Rescale] | None  # R2_c above the grid, floored at L (None: no linear part)
    differing: list[int]  # per channel: accumulator values where the level differs
    step_span: list[int]  # per channel: accumulators from the chain's first level change to its last
    exhaustive: int  # accumulator values evaluated one by one (g's direction unproven there)

    def summary(self, kind: str) -> RequantSummary:
        return RequantSummary(kind, self.differing, self.step_span,
                              table_entries=sum(len(t.entries) for t in self.tables), table_ambiguous=0,
                              activation_segments=len(self.tables))


def composite(r: Rescale, tables: list[ActivationTable], a: np.ndarray, linear: Rescale | None = None,
              sums: np.ndarray | None = None) -> np.ndarray:
    """The NPU's level of accumulators `a`: the sum of the segments' lookups, and its minimum
    with the floored linear rescale where there is one; `sums`: `summed_levels(tables)`, when
    the caller has it."""
    sums = summed_levels(tables) if sums is None else sums
    q = sums[np.clip(r(a) + 1, 0, len(sums) - 1)]
    return q if linear is None else np.minimum(q, linear(a))


def summed_levels(tables: list[ActivationTable]) -> np.ndarray:
    """The segments' lookups summed, at grid level u = -1 .. _CELLS * len(tables) - 1 (index
    u + 1): below it every segment reads its first entry, above it its last, so the sum at
    any u is this table's at u clipped to that range. One lookup per accumulator instead of
    one per segment (a measure compares thousands of cuts per channel)."""
    u = np.arange(-1, _CELLS * len(tables))
    return sum(t.entries[segment_index(u, i)] for i, t in enumerate(tables))


def segment_index(u: np.ndarray, i: int) -> np.ndarray:
    """Segment i's table index of level u: 0 below the segment, 255 from its last cell on."""
    return np.clip(u - _CELLS * i + 1, 0, _CELLS)


def split_dequantized(ops: list[ir.Operation], result: ir.Value, acc: ir.Value, channels: list, host
                      ) -> tuple[Chain, Chain] | None:
    """(B, g): the chain as g(B_c(a)), B the earliest f32 value of the accumulator after which
    nothing reads a per-channel value (g a function of B alone); None when it has no such form
    or B is a product llvm-cpu may fuse into g's first add."""
    per_channel = set(channels[0][0]) if channels else set()
    acc_dep = dependents(ops, acc)
    for o in ops:
        b = o.results[0] if len(o.results) == 1 else None
        if b is None or b not in acc_dep or type_name(b.type) != "f32":
            continue
        b_ops = backward_slice(ops, b)
        g_ops = [x for x in ops if x not in b_ops]
        inside = {r for x in g_ops for r in x.results}
        outside = [v for x in g_ops for v in x.operands if v not in inside]
        if any(v in per_channel or (v in acc_dep and v != b) for v in outside):
            continue
        if o.name == "arith.mulf":
            return None
        return Chain(b_ops, b, acc, host), Chain(g_ops, result, b, host)
    return None


def fit_fused_activation(ops: list[ir.Operation], result: ir.Value, acc: ir.Value, host, channels: list,
                         kind: str, mode: RequantMode) -> FusedActivationFit:
    """The form of the module docstring for a chain computing int8 `result` from accumulator
    `acc` that is not monotone in it; `channels` as fit_channels'. Raises NotExact when the
    chain is not g(B_c(a)) with B_c increasing, or anything is more than one step off (with
    `mode` EXACT: any difference)."""
    if type_name(result.type) != "i8":
        raise NotExact("an activation quantized with its contraction to another type than int8")
    split = split_dequantized(ops, result, acc, channels, host)
    if split is None:
        raise NotExact("the chain is not monotone in the accumulator, and not an activation of its dequantized "
                       "value")
    b_chain, g_chain = split
    ends = b_chain.for_channels([v for v, _, _ in channels])(np.array([[lo, hi] for _, lo, hi in channels]))
    if any(d != 1 for d in channel_directions(b_chain, channels, f"{kind} dequantized accumulator")):
        raise NotExact("the dequantized accumulator does not increase with it")
    chain = Chain(ops, result, acc, host)
    changes = _level_changes(g_chain, np.float32(ends.min()), np.float32(ends.max()))
    for linear in (True, False):  # with a linear part above the grid where g has one, else the grid alone
        grid = _grid(changes, linear)
        if grid is None:
            continue
        x_lo, step, n, left, top = grid
        r = [_level_rescale(float(b_lo), float(b_hi), lo, hi, x_lo, step, n)
             for (_, lo, hi), (b_lo, b_hi) in zip(channels, ends)]
        tables = _tables(g_chain, x_lo, step, n, left, top)
        try:
            r2 = _linear_rescales(chain, channels, r, tables, kind) if top else None
        except NotExact:
            continue
        return _measured(chain, b_chain, g_chain, channels, r, tables, r2, kind, mode)
    raise AssertionError("unreachable: the grid alone is always tried")


def _measured(chain: Chain, b_chain: Chain, g_chain: Chain, channels: list, r: list[Rescale],
              tables: list[ActivationTable], r2: list[Rescale] | None, kind: str, mode: RequantMode
              ) -> FusedActivationFit:
    """The fit with its measure; SiLU's / GELU's also with exp / erf a few ulps off (llvm-cpu's)."""
    differing, spans, exhaustive, starts = _measure(chain, b_chain, g_chain, channels, r, tables, r2, kind)
    if g_chain.transcendental:  # each variant proven on its own, from the pieces found first
        for ulps in (-TRANSCENDENTAL_ULPS, TRANSCENDENTAL_ULPS):
            exhaustive += _measure(chain.with_ulps(ulps), b_chain, g_chain.with_ulps(ulps), channels, r, tables,
                                   r2, f"{kind} (its transcendental function {ulps:+d} ulps)", starts)[2]
    if mode is RequantMode.EXACT and sum(differing):
        raise NotExact(f"the {kind} requantization through the activation tables differs on {sum(differing)} "
                       f"accumulator values")
    return FusedActivationFit(r, tables, r2, differing, spans, exhaustive)


def _linear_rescales(chain: Chain, channels: list, r: list[Rescale], tables: list[ActivationTable], kind: str
                     ) -> list[Rescale]:
    """R2_c: the nearest rescale of the chain where u is the grid's top (a constant 127 for a
    channel whose range does not get there), its clamp floored at L, the largest level the
    segments sum to below the top."""
    top = _CELLS * len(tables) - 1
    sums = composite(Rescale(0, 1, 0, 0, -1, top), tables, np.arange(-1, top))
    floor = int(sums.max())
    starts = [int(rescale_step_points(x, np.array([top]), lo, hi)[0]) for x, (_, lo, hi) in zip(r, channels)]
    rows = [c for c, (a, (_, _, hi)) in enumerate(zip(starts, channels)) if a <= hi]
    out = [Rescale(0, 0, 0, 0, _TOP, _TOP)] * len(channels)
    if rows:
        fits = fit_channels(chain, [(channels[c][0], starts[c], channels[c][2]) for c in rows], (0,),
                            f"{kind} above the activation's grid", RequantMode.NEAREST)
        for c, f in zip(rows, fits):
            x = f.rescale
            if x.multiplier < 0:
                raise NotExact(f"the {kind} requantization decreases above the activation's grid")
            out[c] = Rescale(x.offset, x.multiplier, x.rounding, x.shift, max(x.qmin, floor), max(x.qmax, floor))
    return out


@dataclass
class _LevelChanges:
    """g sampled densely over the span where it changes level: where it changes (`at`), by how
    many levels (`rise`), its level left of the span, the span's width and the samples' spacing."""
    at: np.ndarray
    rise: np.ndarray
    left: int
    span: float
    spacing: float


def _level_changes(g: Chain, x_min: np.float32, x_max: np.float32) -> _LevelChanges:
    """g on `_SAMPLES` points of [x_min, x_max], then as many on the span where it changes."""
    xs = np.linspace(float(x_min), float(x_max), _SAMPLES).astype(np.float32)
    q = np.asarray(g(xs), np.int64)
    changes = np.nonzero(q[1:] != q[:-1])[0]
    if not len(changes):
        raise NotExact("the activation is constant on the accumulator range")
    lo_x, hi_x = xs[changes[0]], xs[min(changes[-1] + 1, len(xs) - 1)]
    left = int(q[0])
    xs = np.linspace(float(lo_x), float(hi_x), _SAMPLES).astype(np.float32)
    q = np.asarray(g(xs), np.int64)
    moved = np.nonzero(q[1:] != q[:-1])[0]
    return _LevelChanges(xs[1:][moved], q[1:][moved] - q[:-1][moved], left, float(hi_x - lo_x), float(xs[1] - xs[0]))


def _grid(changes: _LevelChanges, linear: bool) -> tuple[float, float, int, int, bool] | None:
    """(x_lo, h, n, g's level left of x_lo, whether the grid's top cell stands for a linear part
    above it): x_lo g's first change, h the narrowest level's width up to the linear part
    (`_linear_start`) or the last change, n the segments that cover that. None when `linear`
    and g has no linear part."""
    at = changes.at
    k = _linear_start(at, changes.rise) if linear else len(at) - 1
    if k is None:
        return None
    x_lo = float(at[0])
    widths = np.diff(at[:k + 1])
    narrowest = max(float(widths.min()) if len(widths) else changes.span, changes.spacing)
    for cells in _CELLS_PER_LEVEL:  # the finest the segments allow
        step = narrowest / cells
        n = int((float(at[k]) - x_lo) / step + 1.5 * linear) // _CELLS + 1
        if n <= MAX_SEGMENTS:
            return x_lo, step, n, changes.left, linear
    raise NotExact(f"the activation needs {n} table segments at its narrowest level's width (at most {MAX_SEGMENTS})")


def _linear_start(at: np.ndarray, rise: np.ndarray) -> int | None:
    """The first of g's level changes (at `at`, by `rise` levels) from which on every change is
    one level up and they lie within 0.1 of a level of a line (a rescale's steps), at least 16
    of them; None when there is no such tail."""
    n = len(at)
    for k in np.linspace(0, max(n - 16, 0), 48).astype(int):
        if n - k < 16 or np.any(rise[k:] != 1):
            continue
        j = np.arange(n - k, dtype=np.float64)
        line = np.polyfit(j, at[k:].astype(np.float64), 1)
        if line[0] > 0 and np.max(np.abs(np.polyval(line, j) - at[k:])) <= 0.1 * line[0]:
            return int(k)
    return None


def _tables(g: Chain, x_lo: float, step: float, n: int, left: int, top: bool) -> list[ActivationTable]:
    """E_i: g at segment i's cells less the level before the segment; 0 below it. With `top`
    the last cell sums to 127, so that the linear rescale decides there (`composite`)."""
    points = (x_lo + step * np.arange(_CELLS * n)).astype(np.float32)
    levels = np.asarray(g(points), np.int64)
    if top:
        levels[-1] = _TOP
    levels = levels.reshape(n, _CELLS)
    before = np.concatenate([[left], levels[:-1, -1]])
    return [ActivationTable(-128, np.concatenate([[left if i == 0 else 0], levels[i] - (before[i] if i else 0)]), 0)
            for i in range(n)]


def _level_rescale(b_lo: float, b_hi: float, lo: int, hi: int, x_lo: float, step: float, n: int) -> Rescale:
    """R of one channel: u = round((B(a) - x_lo) / h), clamped to [-1, 255 n - 1], with B(a)
    taken as its straight line through the range's ends (B(lo), B(hi))."""
    slope = (b_hi - b_lo) / max(hi - lo, 1)
    m_real = slope / step  # cells per accumulator unit
    if not m_real > 0:
        raise NotExact("the dequantized accumulator is constant on its range")
    u = (b_lo - slope * lo - x_lo) / step  # u at a = 0
    shift = int(np.clip(30 - int(np.ceil(np.log2(m_real))), 0, 62))
    m = int(round(m_real * (1 << shift)))
    r = intercept_rescale(-1, _CELLS * n - 1, lo, hi, shift, m, int(np.floor((u + 0.5) * (1 << shift))))
    if m <= 0 or r is None:
        raise NotExact("the activation table's level does not fit the rescale arithmetic")
    return r


# --- the measure ---------------------------------------------------------------------------

def _measure(chain: Chain, b_chain: Chain, g_chain: Chain, channels: list, rs: list[Rescale],
             tables: list[ActivationTable], r2: list[Rescale] | None, kind: str, seeds: np.ndarray | None = None
             ) -> tuple[list[int], list[int], int, np.ndarray]:
    """Per channel: the accumulator values of [lo, hi] where `composite` differs from the chain,
    and the chain's step span; the values evaluated one by one. NotExact where one is more than
    one step off, or the unproven pieces hold more than `EXHAUSTIVE_BUDGET` values."""
    bs = b_chain.for_channels([v for v, _, _ in channels])
    lo = np.array([c[1] for c in channels], np.int64)
    hi = np.array([c[2] for c in channels], np.int64)
    ends = bs(np.stack([lo, hi], 1))
    finest = 4 * float(np.min((ends[:, 1].astype(np.float64) - ends[:, 0]) / np.maximum(hi - lo, 1)))
    starts, dirs = _pieces(g_chain, np.float32(ends.min()), np.float32(ends.max()), finest, seeds)
    breaks = unique_sorted(np.concatenate([_level_starts(g_chain, starts, dirs),
                                           _thresholds(g_chain, starts, dirs, np.float32(ends.max()))]))
    levels = np.asarray(g_chain(breaks), np.int64)
    reach = _first_reaching(bs, breaks, lo, hi, ends)  # (channels, breaks)
    spans = {p: _piece_ends(reach, starts, breaks, p, hi) for p in np.nonzero(dirs == 2)[0]}
    total = sum(int(np.sum(stop - first)) for first, stop in spans.values())
    if total > EXHAUSTIVE_BUDGET:
        raise NotExact(f"the activation's direction is unproven on {total} accumulator values, more than the "
                       f"{EXHAUSTIVE_BUDGET} evaluated one by one")
    one_by_one = _one_by_one(chain, channels, spans)
    sums = summed_levels(tables)
    batches = [slice(k, k + _CHANNELS_PER_BATCH) for k in range(0, len(channels), _CHANNELS_PER_BATCH)]
    batches = [_compare(reach[b], levels, one_by_one[b], rs[b], r2[b] if r2 else None, sums, lo[b], hi[b])
               for b in batches]
    differing, step_spans = (np.concatenate(x) for x in zip(*batches))
    bad = np.nonzero(differing < 0)[0]
    if len(bad):
        raise NotExact(f"{kind} through the activation table, channel {bad[0]}: more than one output step off")
    return differing.tolist(), step_spans.tolist(), total, starts


def _level_starts(g: Chain, starts: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """The pieces' starts but those of a constant piece after a constant piece of the same
    level: g does not change there (most pieces are the bisection's, constant on either side
    of a level change), and each start costs an evaluation per channel in `_first_reaching`."""
    levels = np.asarray(g(starts), np.int64)
    same = (dirs[1:] == 0) & (dirs[:-1] == 0) & (levels[1:] == levels[:-1])
    return starts[np.append(True, ~same)]


def _one_by_one(chain: Chain, channels: list, spans: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per channel: (accumulators, the chain's levels there) of the unproven pieces, `spans`
    their [first, stop) per channel; evaluated in batches of all channels."""
    out: list[tuple[list, list]] = [([], []) for _ in channels]
    pieces = list(spans.values())
    full = chain.for_channels([v for v, _, _ in channels])
    for k in range(0, len(pieces), 64):
        first = np.stack([f for f, _ in pieces[k:k + 64]], 1)  # (channels, pieces)
        count = np.maximum(np.stack([s for _, s in pieces[k:k + 64]], 1) - first, 0)
        rows = np.repeat(np.arange(len(channels)), count.sum(1))
        starts = np.repeat(first.reshape(-1), count.reshape(-1))
        offsets = np.arange(len(starts)) - np.repeat(np.cumsum(count.reshape(-1)) - count.reshape(-1),
                                                       count.reshape(-1))
        a = starts + offsets
        q = np.asarray(full.channel_rows(rows)(a[:, None])[:, 0], np.int64) if len(a) else a
        bounds = np.searchsorted(rows, np.arange(len(channels) + 1))
        for c in range(len(channels)):
            out[c][0].append(a[bounds[c]:bounds[c + 1]])
            out[c][1].append(q[bounds[c]:bounds[c + 1]])
    empty = np.zeros(0, np.int64)
    return [(np.concatenate(a) if a else empty, np.concatenate(v) if v else empty) for a, v in out]


def _piece_ends(reach: np.ndarray, starts: np.ndarray, breaks: np.ndarray, p: int, hi: np.ndarray):
    """Per channel: the accumulators [first, stop) whose B falls in piece p."""
    first = reach[:, int(np.searchsorted(breaks, starts[p]))]
    stop = reach[:, int(np.searchsorted(breaks, starts[p + 1]))] if p + 1 < len(starts) else hi + 1
    return first, stop


def _compare(reach: np.ndarray, levels: np.ndarray, one_by_one: list[tuple[np.ndarray, np.ndarray]],
             rs: list[Rescale], r2: list[Rescale] | None, sums: np.ndarray, lo: np.ndarray, hi: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per channel c: (the values of [lo_c, hi_c] where the chain differs from `composite`, -1
    if two steps or more; the chain's step span). The chain of channel c is the step function
    taking `levels` from reach[c] and the one-by-one values from their accumulators (the later
    entry of equal ones).

    All channels at once, in channel-major keys: channel c's accumulator a is key
    base_c + a - lo_c, its range one block of hi_c - lo_c + 1 keys. Both functions are step
    functions, constant between the cuts: the chain's entries, R's step points at the grid
    levels where `sums` changes (most cells repeat their neighbour's level), R2's at each of
    its levels, and lo_c."""
    width = hi - lo + 1
    base = np.concatenate([[0], np.cumsum(width)[:-1]])
    key, value = _chain_entries(reach, levels, one_by_one, base, lo, hi)
    step_points = [_step_points(rs, np.nonzero(sums[1:] != sums[:-1])[0], lo, hi)]
    linear = [x for x in r2 or [] if x.multiplier > 0]
    if linear:
        ks = np.arange(min(x.qmin for x in linear) + 1, max(x.qmax for x in linear) + 1)
        step_points.append(_step_points(r2, ks, lo, hi))
    points = np.concatenate(step_points, 1)
    points = ((points - lo[:, None]) + base[:, None])[points <= hi[:, None]]
    # Cuts tagged in their lowest bit, the chain's entries 0: first among equal keys, they
    # mark the cuts where the chain takes its next value.
    tagged = np.sort(np.concatenate([key << 1, (base << 1) | 1, (points << 1) | 1]))
    tagged = tagged[np.append(True, (tagged[1:] >> 1) != (tagged[:-1] >> 1))]
    cuts, is_entry = tagged >> 1, (tagged & 1) == 0
    firsts = np.searchsorted(cuts, base)
    if not is_entry[firsts].all():  # a range starts below B's first break: g's level there is unknown
        raise NotExact("the activation's pieces do not cover the accumulator range")
    counts = np.diff(np.append(firsts, len(cuts)))  # cuts per channel (repeat: cheaper than a gather)
    q = value[np.cumsum(is_entry) - 1]
    from_lo = cuts - np.repeat(base, counts)  # a - lo
    off = np.abs(_composite_rows(rs, r2, sums, counts, from_lo + np.repeat(lo, counts)) - q)
    length = np.diff(np.append(cuts, base[-1] + width[-1]))
    differing = np.add.reduceat(np.where(off > 0, length, 0), firsts)
    differing[np.maximum.reduceat(off, firsts) > 1] = -1
    changed = np.append(False, q[1:] != q[:-1])
    changed[firsts] = False  # (a channel's first cut: no change from the channel before)
    spans = np.maximum.reduceat(np.where(changed, from_lo + 1, 0), firsts)
    return differing, spans


def _chain_entries(reach: np.ndarray, levels: np.ndarray, one_by_one: list[tuple[np.ndarray, np.ndarray]],
                   base: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, values) of the chains' entries (`_compare`) inside their ranges, sorted, one
    per key: the later of equal ones."""
    counts = np.array([len(a) for a, _ in one_by_one])
    at = np.concatenate([reach.reshape(-1), *(a for a, _ in one_by_one)])
    lows, highs, offsets = (np.concatenate([np.repeat(x, reach.shape[1]), np.repeat(x, counts)])
                            for x in (lo, hi, base - lo))
    value = np.concatenate([np.broadcast_to(levels, reach.shape).reshape(-1), *(v for _, v in one_by_one)])
    inside = (at >= lows) & (at <= highs)  # (below lo, a key would fall in the channel before)
    key, value = at[inside] + offsets[inside], value[inside]
    order = np.argsort(key, kind="stable")
    key, value = key[order], value[order]
    last = np.append(key[1:] != key[:-1], True)
    return key[last], value[last]


def _step_points(rs: list[Rescale], ks: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(channels, len(ks)): `rescale_step_points` of each channel's rescale at levels `ks`
    (lo below its qmin, hi + 1 above its qmax and where its multiplier is 0: a constant)."""
    out = np.full((len(rs), len(ks)), hi[:, None] + 1, np.int64)
    if not len(ks):
        return out
    closed = [c for c, x in enumerate(rs) if closed_form_holds(x, int(ks[0]), int(ks[-1]))]
    p = np.array([[rs[c].multiplier, rs[c].rounding, rs[c].shift, rs[c].offset, rs[c].qmin, rs[c].qmax]
                  for c in closed], np.int64).reshape(-1, 6)
    u = closed_form_step_points(ks[None, :].astype(np.int64), *(p[:, i:i + 1] for i in range(4)))
    u = np.where(ks[None, :] <= p[:, 4:5], lo[closed, None], np.where(ks[None, :] > p[:, 5:6], hi[closed, None] + 1, u))
    out[closed] = np.clip(u, lo[closed, None], hi[closed, None] + 1)
    for c in set(range(len(rs))) - set(closed):
        if rs[c].multiplier > 0:
            out[c] = rescale_step_points(rs[c], ks, int(lo[c]), int(hi[c]))
    return out


def _composite_rows(rs: list[Rescale], r2: list[Rescale] | None, sums: np.ndarray, counts: np.ndarray,
                    a: np.ndarray) -> np.ndarray:
    """`composite` at accumulators `a`: counts[c] of them (in order) of channel c."""
    q = sums[np.clip(_rescale_rows(rs, counts, a) + 1, 0, len(sums) - 1)]
    return q if r2 is None else np.minimum(q, _rescale_rows(r2, counts, a))


def _rescale_rows(rs: list[Rescale], counts: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Rescale rs[c] of the counts[c] accumulators of `a` that are channel c's
    (Rescale.__call__ with a rescale per channel)."""
    p = np.repeat(np.array([[x.offset, x.multiplier, x.rounding, x.shift, x.qmin, x.qmax] for x in rs], np.int64).T,
                  counts, axis=1)
    return np.minimum(np.maximum(((a + p[0]) * p[1] + p[2]) >> p[3], p[4]), p[5])


def _first_reaching(bs: Chain, xs: np.ndarray, lo: np.ndarray, hi: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(channels, len(xs)): the least a in [lo, hi + 1] with B_c(a) >= x (hi + 1: none), from
    the a of B_c's line through its `ends` (B at lo and hi), which B all but follows."""
    m = len(xs)
    slope = (ends[:, 1].astype(np.float64) - ends[:, 0]) / np.maximum(hi - lo, 1)
    with np.errstate(all="ignore"):
        guess = lo[:, None] + np.ceil((xs[None, :].astype(np.float64) - ends[:, :1]) / slope[:, None])
    guess = np.clip(np.nan_to_num(guess, nan=0.0), lo[:, None], hi[:, None] + 1).astype(np.int64)
    at = bs(np.concatenate([np.maximum(guess - 1, lo[:, None]), np.minimum(guess, hi[:, None])], 1))
    targets = np.broadcast_to(xs[None, :], guess.shape).reshape(-1)

    def reach(pairs, a):
        return bs.channel_rows(pairs // m)(a[:, None])[:, 0] >= targets[pairs]

    return first_reaching_near(reach, guess.reshape(-1), np.repeat(lo, m), np.repeat(hi, m),
                               (at[:, :m] >= xs[None, :]).reshape(-1),
                               (at[:, m:] >= xs[None, :]).reshape(-1)).reshape(guess.shape)


def _pieces(g: Chain, x_min: np.float32, x_max: np.float32, finest: float, seeds: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, dirs): the f32 axis over [x_min, x_max] cut into pieces, each from its start to
    the next one's (the last to x_max), with g's direction proven on it (+1, -1, 0) or 2 when
    not. Unproven pieces are halved (on the f32 values) while wider than `finest` (a few
    accumulator units of the steepest channel: narrower, the accumulators are evaluated one by
    one) and the proofs asked stay under `_PROOFS`: what stays unproven holds g's level
    changes where its direction flips (hardswish's minimum) or f32 rounding wiggles. `seeds`:
    the starts of pieces to begin from (another variant's), each proven again. The pieces of
    one depth are proven in one evaluation (`Chain.directions`)."""
    keys = order_key(seeds) if seeds is not None else order_key(np.array([x_min], np.float32))
    k1, k2 = keys, np.append(keys[1:], order_key(x_max) + 1)  # each piece is [k1, k2 - 1] in keys
    starts, dirs = [], []
    asked = 0
    for depth in range(_SPLITS + 1):
        x = from_order_key(np.stack([k1, k2 - 1], 1))
        d = g.directions(x)
        asked += len(d)
        split = (d == 2) & (k2 - k1 > 1) & (x[:, 1].astype(np.float64) - x[:, 0] > finest)
        if depth == _SPLITS or asked >= _PROOFS:
            split[:] = False
        starts.append(k1[~split])
        dirs.append(d[~split])
        if not split.any():
            break
        lo, hi = k1[split], k2[split]
        mid = order_key(((x[split, 0].astype(np.float64) + x[split, 1]) / 2).astype(np.float32))
        mid = np.minimum(np.maximum(mid, lo + 1), hi - 1)
        k1, k2 = np.concatenate([lo, mid]), np.concatenate([mid, hi])
    # (not merged: two monotone pieces may step back where they meet)
    starts, dirs = np.concatenate(starts), np.concatenate(dirs)
    order = np.argsort(starts, kind="stable")
    return from_order_key(starts[order]), dirs[order]


def _thresholds(g: Chain, starts: np.ndarray, dirs: np.ndarray, x_max: np.float32) -> np.ndarray:
    """The f32 values inside proven pieces where g's level changes: per piece and level k
    between its ends' levels, the least x of the piece with g(x) >= k (increasing) or <= k
    (decreasing), bisected on the f32 order."""
    keys = order_key(starts)
    last = np.append(keys[1:] - 1, order_key(x_max))
    q1, q2 = (np.asarray(g(from_order_key(k)), np.int64) for k in (keys, last))
    rows, ks, sense = [], [], []
    for p, d in enumerate(dirs):
        if d in (1, -1) and q1[p] != q2[p]:
            lv = np.arange(min(q1[p], q2[p]) + 1, max(q1[p], q2[p]) + 1) if d == 1 else \
                np.arange(min(q1[p], q2[p]), max(q1[p], q2[p]))
            rows += [p] * len(lv)
            ks += list(lv * d)
            sense += [d] * len(lv)
    if not rows:
        return np.zeros(0, np.float32)
    rows, ks, sense = np.array(rows), np.array(ks, np.int64), np.array(sense, np.int64)
    f = lambda k: np.asarray(g(from_order_key(k)), np.int64) * sense  # noqa: E731
    t = _bisect(f, ks, keys[rows] - 1, last[rows], keys[rows])
    return from_order_key(t)

