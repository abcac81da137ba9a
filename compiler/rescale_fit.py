"""Integer rescales of a monotone step function: the exact one, or the nearest.

A requantization maps an accumulator a (an integer on [lo, hi]) to an output
level q(a), a monotone step function (compiler/requant.py evaluates the f32
chain and proves it monotone). The NPU computes, per output channel,

    g(a) = clamp(((a + offset) * multiplier + rounding) >> shift, qmin, qmax)

in 64-bit integers (TOSA rescale's arithmetic with a free rounding term).

- `fit_rescale` finds (offset, multiplier, rounding, shift) with g == q on
  the whole range, or says that none exists (NotExact): the step points
  T_k = min{a : q(a) >= k} must lie on one line (the inequalities in
  requant.py's docstring).
- the nearest rescale is used when none exists (f32 rounding moved some step
  points off every line, the common case for ONNX / torch QDQ scales): the
  least-squares slope of the step points and, around it, the multiplier and
  rounding that put the most step points of g on those of q (a sweep over
  the rounding terms each step point admits), the least total step
  displacement breaking ties (DESIGN "Quantized arithmetic"):
  searched in compiler/rescale_nearest.py, for all channels of a
  requantization at once by compiler/rescale_batch.py.
- `disagreement` measures the result exactly: the number of accumulator
  values on which g and q differ and the largest difference in output steps,
  from both functions' step points (two monotone step functions are constant
  between consecutive step points of either).
The entry points, `fit_channel` / `fit_steps` for one channel and `fit_many`
for many (exact when it can be, else the nearest when allowed, never more
than one output step off anywhere on [lo, hi]), are in
compiler/rescale_batch.py; requant.py finds the step points of all channels
at once with `channel_step_points`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


def _clamp(x, lo, hi):
    """np.clip(x, lo, hi) for integer arrays (np.clip's fixed cost dominates on small ones)."""
    return np.minimum(np.maximum(x, lo), hi)


# Widths the emitted arithmetic must stay within (TOSA rescale's envelope).
_MAX_MULTIPLIER = (1 << 31) - 1
_MAX_SHIFT = 62
_I64 = 1 << 63
# Candidate multipliers tried per shift (the feasible ones form an interval).
_CANDIDATES = 48


class NotExact(Exception):
    """The chain cannot be reproduced (exactly, or within one step); the message says why."""


class NotMonotone(NotExact):
    """The chain is not monotone in the accumulator (no rescale reproduces it; an activation
    quantized with its contraction may still: compiler/requant_fused_activation.py)."""


def _bisect(f, ks: np.ndarray, left: np.ndarray, right: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Per level k: the least a in (left, right] with f(a) >= k, for non-decreasing f with
    f(left) < k and f(right) >= k (either end may stand outside the range, for -inf / +inf).
    A pair that has converged is evaluated at `inside`, a point of its range, and left alone."""
    while np.any(active := right - left > 1):
        mid = np.where(active, left + (right - left) // 2, inside)
        below = f(mid) < ks
        left = np.where(active & below, mid, left)
        right = np.where(active & ~below, mid, right)
    return right


def first_reaching_near(reach, guess: np.ndarray, lo: np.ndarray, hi: np.ndarray, before: np.ndarray,
                        at: np.ndarray) -> np.ndarray:
    """Per pair: the least a in [lo, hi + 1] where a non-decreasing predicate holds (hi + 1:
    nowhere), from a `guess` in [lo, hi + 1] and the predicate one unit before it (`before`,
    at max(guess - 1, lo)) and at it (`at`, at min(guess, hi)): the guess where those say it is
    right, else one unit either way (f32 rounding moves a predicted point by about one), else
    bisected. `reach(pairs, a)` is the predicate of pairs `pairs` (indices) at points `a`; `lo`
    and `hi` are per pair, or one number for all."""
    holds = ((guess == lo) | ~before) & ((guess > hi) | at)
    out = guess.copy()
    idx = np.nonzero(~holds)[0]
    if not len(idx):
        return out
    lo, hi = (np.broadcast_to(np.asarray(v, np.int64), guess.shape) for v in (lo, hi))
    g, p_lo, p_hi = guess[idx], lo[idx], hi[idx]
    up = (g <= p_hi) & ~at[idx]  # the predicate fails at the guess: the point is above it
    near = np.clip(np.where(up, g + 1, g - 2), p_lo, p_hi)
    at_near = reach(idx, near)
    one_off = np.where(up, (g + 1 <= p_hi) & at_near, (g - 1 > p_lo) & ~at_near)
    out[idx] = np.where(up, g + 1, g - 1)
    far = idx[~one_off]
    if len(far):
        out[far] = _bisect(lambda a: reach(far, a).astype(np.int64), np.ones(len(far), np.int64), lo[far] - 1,
                           hi[far] + 1, lo[far])
    return out


def step_points(f, lo: int, hi: int) -> tuple[int, int, np.ndarray]:
    """(q(lo), q(hi), T) of a monotone non-decreasing integer function on [lo, hi]:
    T[i] = min{a in [lo, hi] : f(a) >= q(lo) + 1 + i}, by bisection."""
    g = lambda a: f(a.reshape(-1)).reshape(a.shape)  # noqa: E731
    return channel_step_points(g, [lo], [hi], lambda rows: g)[0]


# Levels whose step points are bisected on the whole range; those between are searched
# around the straight line through their two nearest ones.
_SAMPLED_LEVELS = 16


def channel_step_points(f, lo, hi, rows_f) -> list[tuple[int, int, np.ndarray]]:
    """`step_points` of many channels at once: `f` maps a (channels, points) array of
    accumulators to their levels, channel c non-decreasing on [lo[c], hi[c]]; `rows_f(rows)`
    is the same for the channels `rows` (an index array, repeats allowed), one point each
    (those whose step point is off the line).

    Every `_SAMPLED_LEVELS`-th level (and the last) is bisected on the whole range. A level in
    between lies between its two sampled neighbours' step points; the line through them
    predicts it (f32 rounding moves it a few units off, by at most one on int8 BERT), so f
    is evaluated at the prediction g and at g - 1 for every (channel, level) pair at once:
    where f(g - 1) < k <= f(g), g is the step point (f is non-decreasing); elsewhere
    `_off_line` searches on from there, on those pairs only."""
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    ends = f(np.stack([lo, hi], 1))
    qlo, qhi = ends[:, 0].astype(np.int64), ends[:, 1].astype(np.int64)
    if np.any(qhi < qlo):
        raise NotExact("the chain is not non-decreasing")
    n = qhi - qlo
    levels = np.arange(int(n.max(initial=0)))
    if len(levels) == 0:
        return [(int(qlo[c]), int(qhi[c]), np.zeros(0, np.int64)) for c in range(len(lo))]
    ks = qlo[:, None] + 1 + levels[None, :]
    valid = levels[None, :] < n[:, None]
    last = np.maximum(n - 1, 0)
    # Sampled levels: their own step points, bisected on [lo, hi].
    cols = np.minimum(np.arange(0, len(levels), _SAMPLED_LEVELS)[None, :], last[:, None])
    cols = np.concatenate([cols, last[:, None]], 1)
    right = np.repeat(hi[:, None], cols.shape[1], 1)
    sampled = _bisect(f, np.take_along_axis(ks, cols, 1), np.where(n[:, None] > 0, lo[:, None], right), right,
                      right)
    # The others: between their sampled neighbours a <= level <= b.
    a_col = np.minimum(levels // _SAMPLED_LEVELS, cols.shape[1] - 2)[None, :]
    a_lvl = np.minimum(a_col * _SAMPLED_LEVELS, last[:, None])
    b_lvl = np.minimum(a_lvl + _SAMPLED_LEVELS, last[:, None])
    t_a = np.take_along_axis(sampled, np.broadcast_to(a_col, ks.shape), 1)
    t_b = np.where(b_lvl == last[:, None], sampled[:, -1:], np.take_along_axis(
        sampled, np.broadcast_to(np.minimum(a_col + 1, cols.shape[1] - 2), ks.shape), 1))
    span = np.maximum(b_lvl - a_lvl, 1)
    guess = t_a + ((t_b - t_a) * (levels[None, :] - a_lvl) + span // 2) // span  # in [t_a, t_b]
    at = f(np.concatenate([guess - 1, guess], 1))
    # Pairs of levels a channel lacks stand at hi (unused).
    ts = np.where(valid, guess, hi[:, None])
    up, down = valid & (at[:, len(levels):] < ks), valid & (at[:, :len(levels)] >= ks)
    rows, lvls = np.nonzero(up | down)
    if len(rows):
        ts[rows, lvls] = _off_line(rows_f, rows, ks[rows, lvls], guess[rows, lvls], up[rows, lvls],
                                   t_a[rows, lvls], t_b[rows, lvls])
    return [(int(qlo[c]), int(qhi[c]), ts[c, :n[c]]) for c in range(len(lo))]


def _off_line(rows_f, rows: np.ndarray, ks: np.ndarray, guess: np.ndarray, up: np.ndarray, t_a: np.ndarray,
              t_b: np.ndarray) -> np.ndarray:
    """`channel_step_points`' step point of level ks[i] of channel rows[i] where it is not at
    guess[i]: above it (`up`: f(g) < k) or below (f(g - 1) >= k). The next point that way is
    tried first (where f32 rounding moved the step point by one), then the rest bisected, up to
    the sampled neighbour's step point t_b (f(t_b) >= k), or down to t_a - 1 (f(t_a - 1) < k)."""
    f = rows_f(rows)
    near = np.where(up, guess + 1, guess - 2)
    reached = f(near[:, None])[:, 0] >= ks
    ts = np.where(up, guess + 1, guess - 1)
    far = np.nonzero(up != reached)[0]  # up and not reached at g + 1, or down and reached at g - 2
    if len(far):
        left = np.where(up[far], near[far], t_a[far] - 1)
        right = np.where(up[far], t_b[far], near[far])
        g = rows_f(rows[far])
        ts[far] = _bisect(lambda a: g(a[:, None])[:, 0], ks[far], left, right, right)
    return ts


def brute_force_step_points(f, lo: int, hi: int) -> tuple[int, int, np.ndarray]:
    """The same as `step_points`, by evaluating f at every integer of [lo, hi] (tests)."""
    a = np.arange(lo, hi + 1, dtype=np.int64)
    q = f(a)
    if np.any(np.diff(q) < 0):
        raise NotExact("the chain is not non-decreasing")
    qlo, qhi = int(q[0]), int(q[-1])
    return qlo, qhi, lo + np.searchsorted(q, np.arange(qlo + 1, qhi + 1), side="left").astype(np.int64)


@dataclass
class Rescale:
    """q = clamp(((a + offset) * multiplier + rounding) >> shift, qmin, qmax), exactly (i64)."""
    offset: int
    multiplier: int
    rounding: int
    shift: int
    qmin: int
    qmax: int

    def __call__(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.int64)
        v = ((a + self.offset) * self.multiplier + self.rounding) >> self.shift
        return _clamp(v, self.qmin, self.qmax)


def _best_pairs(t: np.ndarray, n: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row r: (N, D) = (j - i, T_j - T_i + delta[r]) of a pair i < j < n[r] of row r's step
    points (non-decreasing, n[r] >= 2, columns from n[r] on ignored) whose N / D is the largest
    (delta +1; D >= 1) or the least among those with D > 0 (delta -1; the caller ensures that
    the pair (0, n - 1) has one).

    Exact, by Dinkelbach's iteration in integers. With p / q the ratio of the current pair
    (from (0, n - 1)) and H_k = delta (p T_k - q k), H_i - H_j = delta (q N - p D) + p, so a pair
    beats the current one (N / D > p / q; for delta -1, N / D < p / q with D > 0, the only way
    p D > q N) exactly when H_i - H_j > p. Each round takes the pair of largest H_i - H_j
    (the prefix maximum of H before each j) and, where it beats the current pair, moves to it:
    the ratio improves strictly, so the loop ends (in practice within about five rounds,
    each O(n)), and only when no pair beats the current one, whose ratio is then the extreme.
    Columns past n[r] stand at H = `big`, above every H of the row: no pair with one beats."""
    rows, width = t.shape
    last = t[np.arange(rows), n - 1]
    big = 4 * width * (int(last.max(initial=0)) + 2)  # above every |H| (p < width, q <= span + 1)
    exact = np.int64 if big < 1 << 62 else object  # Python integers past i64 (never for i32 accumulators)
    t, delta = t.astype(exact), delta.astype(exact)
    p, q = (n - 1).astype(exact), last.astype(exact) + delta
    k = np.arange(width)
    active = np.arange(rows)
    while len(active):
        ta = t[active]
        h = np.where(k < n[active, None], delta[active, None] * (p[active, None] * ta - q[active, None] * k), big)
        gain = np.maximum.accumulate(h, 1)[:, :-1] - h[:, 1:]  # [r, j - 1]: max_{i<j} H_i - H_j
        j = np.argmax(gain, 1) + 1
        beats = gain[np.arange(len(active)), j - 1] > p[active]
        i = np.argmax(np.where(k < j[:, None], h, -big), 1)
        active, ta, i, j = active[beats], ta[beats], i[beats], j[beats]
        rs = np.arange(len(active))
        p[active], q[active] = j - i, ta[rs, j] - ta[rs, i] + delta[active]
    return p, q


def slope_bounds(t: np.ndarray, lengths: np.ndarray | None = None) -> list[tuple[Fraction, Fraction | None]]:
    """`_slope_interval` of each row of `t`: step points from 0 (non-decreasing), of row r the
    first lengths[r] >= 2 (all when None; the rest is padding). Lower bound: the largest
    (j - i) / (T_j - T_i + 1) over pairs i < j; upper: the least (j - i) / (T_j - T_i - 1) over
    those with T_j - T_i >= 2, None when there is none (the row spans fewer than 2)."""
    rows, width = t.shape
    n = np.full(rows, width, np.int64) if lengths is None else np.asarray(lengths, np.int64)
    upper = np.nonzero(t[np.arange(rows), n - 1] >= 2)[0]
    src = np.concatenate([np.arange(rows), upper])
    delta = np.repeat(np.array([1, -1], np.int64), [rows, len(upper)])
    p, q = _best_pairs(t[src], n[src], delta)
    highs = {int(r): Fraction(int(a), int(b)) for r, a, b in zip(upper, p[rows:], q[rows:])}
    return [(Fraction(int(a), int(b)), highs.get(r)) for r, (a, b) in enumerate(zip(p[:rows], q[:rows]))]


def _slope_interval(ks: np.ndarray, ts: np.ndarray) -> tuple[Fraction, Fraction | None]:
    """Open interval of slopes m of lines with m T_k + r >= k > m (T_k - 1) + r for all k:
    m > (j - k) / (T_j - T_k + 1) and m < (j - k) / (T_j - T_k - 1) for every j > k
    (the levels ks are consecutive: ks[j] - ks[i] = j - i), the extremes of these found by
    `slope_bounds`."""
    if len(ks) < 2:
        return Fraction(0), None
    return slope_bounds((np.asarray(ts, np.int64) - ts[0])[None])[0]


def fit_rescale(qlo: int, qhi: int, ts: np.ndarray, lo: int, hi: int) -> Rescale:
    """An exact `Rescale` of the non-decreasing step function with values qlo..qhi and
    step points `ts` on [lo, hi]; raises NotExact when none exists (module docstring)."""
    if qlo == qhi:
        return Rescale(0, 0, 0, 0, qlo, qlo)
    ks = np.arange(qlo + 1, qhi + 1, dtype=np.int64)
    return rescale_in_interval(qlo, qhi, ts, lo, hi, *_slope_interval(ks, ts))


def rescale_in_interval(qlo: int, qhi: int, ts: np.ndarray, lo: int, hi: int, m_lo: Fraction,
                        m_hi: Fraction | None) -> Rescale:
    """`fit_rescale` given the open interval of slopes its step points admit (`_slope_interval`):
    per shift from the largest the interval allows down, up to `_CANDIDATES` multipliers
    of the interval, the first that puts every step point in place (`rescale_at`)."""
    ks = np.arange(qlo + 1, qhi + 1, dtype=np.int64)
    top, shift = slope_top(len(ks), m_lo, m_hi)
    tried = 0
    reach = int(np.abs(ks).max()) + 1, int(np.abs(ts).max()) + 1
    for s in range(shift, -1, -1):
        # Python ints (object arrays) where k 2^s can exceed i64 before the (checked) emitted
        # arithmetic does; int64 otherwise.
        wide = not fits_i64(reach, s)
        ks_s, ts_s = (ks.astype(object), ts.astype(object)) if wide else (ks, ts)
        for m in shift_candidates(m_lo, top, s):
            tried += 1
            r_low, r_high = int((ks_s * (1 << s) - m * ts_s).max()), int((ks_s * (1 << s) - 1 - m * (ts_s - 1)).min())
            r = rescale_at(qlo, qhi, lo, hi, m, s, r_low, r_high)
            if r is not None:
                return r
        if tried > 40 * _CANDIDATES:
            break
    raise NotExact(f"no multiplier below 2^31 reproduces its {len(ks)} step points "
                   f"(slopes between {float(m_lo):.9g} and {float(top):.9g} per accumulator unit)")


def slope_top(levels: int, m_lo: Fraction, m_hi: Fraction | None) -> tuple[Fraction, int]:
    """(the upper end of the slopes searched, the first shift tried) of `rescale_in_interval`;
    raises NotExact when the interval is empty."""
    if m_hi is not None and m_lo >= m_hi:
        raise NotExact(f"its {levels} step points lie on no line (f32 rounding moved some off the "
                       f"exact scale), so no integer multiplier/shift reproduces them; not approximated")
    top = m_hi if m_hi is not None else m_lo * 2 + 1
    return top, max(0, min(_MAX_SHIFT, int(math.floor(math.log2(_MAX_MULTIPLIER / float(top))))))


def fits_i64(reach: tuple[int, int], s: int) -> bool:
    """Whether k 2^s - m T stays well inside i64 for |k| < reach[0], |T| < reach[1], m <= 2^31."""
    return reach[0] * (1 << s) + (_MAX_MULTIPLIER + 1) * reach[1] < 1 << 62


def shift_candidates(m_lo: Fraction, top: Fraction, s: int) -> list[int]:
    """The multipliers `rescale_in_interval` tries at shift s, in order: those from m_lo 2^s to
    top 2^s (rounded outwards), at most `_CANDIDATES` of them evenly spread around the middle."""
    lo_m = (m_lo.numerator << s) // m_lo.denominator
    hi_m = -((-top.numerator << s) // top.denominator)
    cands = range(max(lo_m, 1), min(hi_m, _MAX_MULTIPLIER) + 1)
    if len(cands) > _CANDIDATES:
        mid, step = len(cands) // 2, len(cands) // _CANDIDATES  # step >= 1: increasing, distinct
        return [cands[mid + d * step] for d in range(-(_CANDIDATES // 2), _CANDIDATES // 2)]
    return list(cands)


def rescale_at(qlo: int, qhi: int, lo: int, hi: int, m: int, s: int, r_low: int, r_high: int) -> Rescale | None:
    """The exact rescale of multiplier m and shift s whose intercepts (offset m + rounding) lie in
    [r_low, r_high] (the least), or None when there is none or it does not fit the emitted
    arithmetic (`intercept_rescale`)."""
    return None if r_low > r_high else intercept_rescale(qlo, qhi, lo, hi, s, m, r_low)


def intercept_rescale(qlo: int, qhi: int, lo: int, hi: int, shift: int, m: int, total: int) -> Rescale | None:
    """The rescale of multiplier `m` and intercept `total` = offset m + rounding (0 <= rounding < m),
    or None when the offset does not fit 32 bits (a + offset stays an accumulator-sized i32) or
    its products on [lo, hi] do not fit i64."""
    offset = total // m
    rounding = total - offset * m
    if not (-(1 << 31) <= offset < (1 << 31)) or \
            max(abs((lo + offset) * m + rounding), abs((hi + offset) * m + rounding)) >= _I64:
        return None
    return Rescale(offset, m, rounding, shift, qlo, qhi)


def _mirror(r: Rescale) -> Rescale:
    """The rescale of a -> g(-a) for the rescale g of a non-decreasing function."""
    return Rescale(-r.offset, -r.multiplier, r.rounding, r.shift, r.qmin, r.qmax)


@dataclass
class ChannelFit:
    """The rescale of one channel and how far it is from the chain it replaces."""
    rescale: Rescale
    differing: int  # accumulator values in [lo, hi] where the rescale's level differs from the chain's
    step_span: int  # accumulator values from the first step point to the last (where levels change)
    # Accumulator values whose level llvm-cpu's f32 rounding may move by a step: those near a
    # step point, when the chain stands for an f32 contraction (requant_float_contraction).
    ambiguous: int = 0
    # Transitions held where a level off would be more than one step at the result
    # (compiler/requant_compose.py); 0 when the nearest rescale needed none.
    steep_held: int = 0
    # When none holds them all: the accumulator values on which the result is more than one
    # step off (the level one off at a steep transition), and the most steps there.
    composed_off: int = 0
    composed_steps: int = 0

    @property
    def exact(self) -> bool:
        return self.differing == 0


def checked_fit(steps: tuple[int, int, np.ndarray], glo: int, ghi: int, mirrored: bool, r: Rescale,
                exact: bool, measured: tuple[int, int] | None = None) -> ChannelFit:
    """The `ChannelFit` of rescale `r` (exact, or the nearest) of g with `steps` on [glo, ghi],
    measured (or given its `disagreement`, `measured`): raises NotExact if it is more than one
    output step off anywhere."""
    qlo, qhi, ts = steps
    span = int(ts[-1] - ts[0] + 1) if len(ts) else 0
    differing, worst = measured if measured is not None else \
        disagreement(ts, rescale_step_points(r, np.arange(qlo + 1, qhi + 1), glo, ghi), glo, ghi)
    if exact and differing:  # cannot happen if fit_rescale is right: never emit it unchecked
        raise NotExact(f"internal check failed: the exact rescale differs on {differing} accumulator values")
    if worst > 1:
        raise NotExact(f"no integer rescale within one output step (the nearest is {worst} steps off)")
    return ChannelFit(_mirror(r) if mirrored else r, differing, span)


def first_reaching(f, ks: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per level k: min{a in [lo, hi] : f(a) >= k} of non-decreasing f, or hi + 1 if none."""
    left = np.full(ks.shape, lo - 1, np.int64)  # lo - 1 stands for -inf
    right = np.full(ks.shape, hi + 1, np.int64)  # hi + 1 stands for +inf
    return _bisect(f, ks, left, right, np.full(ks.shape, lo, np.int64))


def unique_sorted(x: np.ndarray) -> np.ndarray:
    """np.unique of a 1-D array: its distinct values in order. numpy 2.4's np.unique hashes
    integers before sorting them, ten times slower on the few thousand step points and cuts
    a measure compares per channel (about 10 s of a PT2E EfficientNet compile)."""
    x = np.sort(np.asarray(x).reshape(-1))
    return x[np.append(True, x[1:] != x[:-1])] if len(x) else x


def rescale_step_points(r: Rescale, ks: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """`first_reaching` of a non-decreasing rescale, in closed form where i64 holds it."""
    if len(ks) == 0 or not closed_form_holds(r, int(ks[0]), int(ks[-1])):
        return first_reaching(r, ks, lo, hi)
    u = closed_form_step_points(ks.astype(np.int64), r.multiplier, r.rounding, r.shift, r.offset)
    u = np.where(ks <= r.qmin, lo, np.where(ks > r.qmax, hi + 1, u))
    return _clamp(u, lo, hi + 1)


def closed_form_holds(r: Rescale, k_first: int, k_last: int) -> bool:
    """Whether `closed_form_step_points` of `r` on levels k_first..k_last stays in i64."""
    return r.multiplier > 0 and max(abs(k_first), abs(k_last)) * (1 << r.shift) + abs(r.rounding) < 1 << 62


def closed_form_step_points(ks, multiplier, rounding, shift, offset):
    """((a + offset) m + R) >> s >= k  iff  a >= ceil((k 2^s - R) / m) - offset (m > 0), per
    level k; the parameters are numbers or arrays broadcasting with `ks` (i64)."""
    return -((rounding - ks * (np.int64(1) << shift)) // multiplier) - offset  # ceil division


def disagreement(ts: np.ndarray, us: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """(accumulator values in [lo, hi] where q and g differ, max |g - q| in steps), for
    non-decreasing q and g with the same level at lo and step points `ts` and `us`
    (level qlo + 1 + i first reached at ts[i] / us[i]; hi + 1 when never)."""
    ts, us = np.sort(ts), np.sort(us)
    if np.array_equal(ts, us):  # the same step points: the same function (an exact rescale)
        return 0, 0
    pts = unique_sorted(np.concatenate([[lo], ts, us]))
    pts = pts[pts <= hi]
    ends = np.append(pts[1:], hi + 1)
    d = np.searchsorted(us, pts, "right") - np.searchsorted(ts, pts, "right")
    return int((ends - pts)[d != 0].sum()), int(np.abs(d).max(initial=0))
