"""The rescales of all channels of a requantization at once (compiler/rescale_fit.py per channel).

A per-channel requantization of a contraction has hundreds to thousands of channels
(BERT's FFN: 3,072 per matmul), each with up to 255 step points. Fitting them one by one
costs a millisecond each in numpy calls on small arrays; here the array work of
all channels with the same number of levels is done in one go:

- `slope_intervals`: the exact-slope interval of each channel (`rescale_fit._slope_interval`),
  of a block of channels at once (`rescale_fit.slope_bounds`);
- `exact_rescales`: `rescale_fit.rescale_in_interval` of many channels, the first multiplier
  each tries checked for all of them at once;
- `nearest_many`: `nearest_rescale` of many channels, every stage of the
  coarse-to-fine multiplier search (`rescale_nearest.MultiplierSearch`) priced for all of them in one `_multiplier_costs`;
- `fit_many`: the rescale of each channel (exact, else with `nearest` the nearest), with
  these two, measured by `rescale_fit.checked_fit`; given what the level becomes at the
  result (a requant_compose.Downstream), `_hold_steep` refits a nearest rescale whose level
  one off would be several output steps there (`constrained_many`: the multiplier
  interval that holds those transitions, `_held_multipliers`, priced by
  `_multiplier_costs` with `sides`, for all such channels of one length at once), or,
  where none holds them, takes the intercept that leaves the fewest (`_fewest_steep_off`)
  and counts them.

`fit_steps`, `fit_channel`, `nearest_rescale` and `derive_rescale` are the same for one
channel (one-element calls): there is one implementation of the search, and a channel's
result does not depend on the channels fitted beside it (tests/unit/test_rescale_batch.py;
the steep refit against the per-channel code it replaced: tests/unit/test_rescale_steep.py).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np

from .rescale_fit import (
    _MAX_MULTIPLIER,
    ChannelFit,
    NotExact,
    Rescale,
    _clamp,
    checked_fit,
    closed_form_holds,
    closed_form_step_points,
    fits_i64,
    rescale_at,
    rescale_in_interval,
    rescale_step_points,
    shift_candidates,
    slope_bounds,
    slope_top,
    step_points,
    unique_sorted,
)
from .rescale_nearest import (
    _EXACT_F64,
    _NEAREST_MULTIPLIERS,
    _NEAREST_ROUNDINGS,
    INFEASIBLE,
    MultiplierSearch,
    _multiplier_costs,
    nearest_candidates,
    nearest_result,
)

# Elements of the largest temporary array (a block of channels' search costs).
_BLOCK_ELEMENTS = 1 << 22
# Step points in a block of channels whose slope intervals are found together (each
# round of `rescale_fit.slope_bounds` makes a few arrays of twice as many elements).
_SLOPE_ELEMENTS = 1 << 18


def _refusal(e: NotExact) -> NotExact:
    """`e` as a value to return: a fresh exception, without the traceback whose frames would
    hold this module's arrays (and every other local) in a reference cycle."""
    return NotExact(str(e))


def _by_length(arrays: list) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = defaultdict(list)
    for i, a in enumerate(arrays):
        groups[len(a)].append(i)
    return groups


def slope_intervals(ts_list: list[np.ndarray]) -> list[tuple[Fraction, Fraction | None]]:
    """`rescale_fit._slope_interval` of each channel's step points (levels consecutive): the
    channels of two or more levels in blocks of similar lengths, each padded to its longest."""
    out: list = [(Fraction(0), None)] * len(ts_list)
    idx = sorted((i for i, ts in enumerate(ts_list) if len(ts) >= 2), key=lambda i: len(ts_list[i]))
    block = max(1, _SLOPE_ELEMENTS // max((len(ts_list[i]) for i in idx), default=1))
    for a in range(0, len(idx), block):
        rows = idx[a:a + block]
        lengths = np.array([len(ts_list[i]) for i in rows], np.int64)
        t = np.zeros((len(rows), int(lengths[-1])), np.int64)  # the padding is ignored
        t[np.arange(t.shape[1]) < lengths[:, None]] = np.concatenate([ts_list[i] for i in rows])
        t -= t[:, :1]
        for i, bounds in zip(rows, slope_bounds(t, lengths)):
            out[i] = bounds
    return out


def exact_rescales(items: list[tuple]) -> list[Rescale | NotExact]:
    """`rescale_fit.rescale_in_interval` of each (qlo, qhi, ts, lo, hi, m_lo, m_hi), or the
    NotExact it raises: the first multiplier it tries (the one that holds for most channels:
    10,706 of int8 BERT's 11,326 exact ones) tried for all channels of one length at once, in
    i64 where `fits_i64`; the channels where it does not hold searched one by one."""
    out: list = [None] * len(items)
    first: dict[int, list[int]] = defaultdict(list)  # levels -> channels whose first candidate is tried here
    tries: dict[int, tuple[int, int]] = {}
    for c, (qlo, qhi, ts, lo, hi, m_lo, m_hi) in enumerate(items):
        if qlo == qhi:
            out[c] = Rescale(0, 0, 0, 0, qlo, qlo)
            continue
        try:
            top, s = slope_top(len(ts), m_lo, m_hi)
        except NotExact as e:
            out[c] = _refusal(e)
            continue
        cands = shift_candidates(m_lo, top, s)
        if cands and fits_i64((max(abs(qlo + 1), abs(qhi)) + 1, max(abs(int(ts[0])), abs(int(ts[-1]))) + 1), s):
            first[len(ts)].append(c)
            tries[c] = s, cands[0]
    for n, cs in first.items():
        ts = np.stack([np.asarray(items[c][2], np.int64) for c in cs])
        ks = np.array([items[c][0] + 1 for c in cs], np.int64)[:, None] + np.arange(n)
        shifted = ks << np.array([tries[c][0] for c in cs], np.int64)[:, None]
        m = np.array([tries[c][1] for c in cs], np.int64)[:, None]
        r_lows, r_highs = (shifted - m * ts).max(1), (shifted - 1 - m * (ts - 1)).min(1)
        for c, r_low, r_high in zip(cs, r_lows.tolist(), r_highs.tolist()):
            qlo, qhi, _, lo, hi, _, _ = items[c]
            out[c] = rescale_at(qlo, qhi, lo, hi, tries[c][1], tries[c][0], r_low, r_high)
    for c, item in enumerate(items):
        if out[c] is None:
            try:
                out[c] = rescale_in_interval(*item)
            except NotExact as e:
                out[c] = _refusal(e)
    return out


def _least_squares_slopes(ts: np.ndarray) -> np.ndarray:
    """Per row: levels per accumulator unit of the least-squares line of the levels (one per
    column) over the step points."""
    x = np.arange(ts.shape[1], dtype=np.float64)
    x -= x.mean()
    y = ts - ts.mean(1, keepdims=True)
    with np.errstate(divide="ignore"):
        return (x * x).sum() / (y * x).sum(1)


def nearest_many(items: list[tuple[tuple[int, int, np.ndarray], int, int]]) -> list[Rescale | NotExact]:
    """`nearest_rescale` of each (steps, lo, hi), or the NotExact it raises."""
    out: list = [None] * len(items)
    for n, idx in _by_length([ts for (_, _, ts), _, _ in items]).items():
        searched = []
        slopes = _least_squares_slopes(np.stack([items[i][0][2] for i in idx]).astype(np.float64))
        for i, slope in zip(idx, slopes):
            (qlo, qhi, ts), lo, hi = items[i]
            try:
                if n < 2 or ts[-1] == ts[0]:
                    raise NotExact("its levels change at a single accumulator value; no slope to fit")
                searched.append((i, *nearest_candidates(qlo, qhi, np.asarray(ts, np.int64), lo, hi, float(slope))))
            except NotExact as e:
                out[i] = _refusal(e)
        block = max(1, _BLOCK_ELEMENTS // (n * 16 * _NEAREST_ROUNDINGS))
        for a in range(0, len(searched), block):
            for (i, shift, _, _), (m, total) in zip(searched[a:a + block], _search(items, searched[a:a + block])):
                (qlo, qhi, _), lo, hi = items[i]
                try:
                    out[i] = nearest_result(qlo, qhi, lo, hi, shift, m, total)
                except NotExact as e:
                    out[i] = _refusal(e)
    return out


def _search(items: list, searched: list) -> list[tuple[int, int]]:
    """(m, R) of each searched channel (index, shift, m0, candidate multipliers): the coarse-to-
    fine search of `rescale_nearest.MultiplierSearch`, each stage priced for all channels at once."""
    kss = np.stack([np.arange(items[i][0][0] + 1, items[i][0][1] + 1, dtype=np.int64) * (1 << shift)
                    for i, shift, _, _ in searched])
    ts = np.stack([np.asarray(items[i][0][2], np.int64) for i, _, _, _ in searched])
    lo = np.array([items[i][1] for i, _, _, _ in searched], np.int64)
    hi = np.array([items[i][2] for i, _, _, _ in searched], np.int64)
    searches = [MultiplierSearch(mults, m0) for _, _, m0, mults in searched]
    wanted = [s.wanted() for s in searches]
    while any(w is not None for w in wanted):
        width = max(len(w) for w in wanted if w is not None)
        pick = np.array([(w or [0]) + [(w or [0])[-1]] * (width - len(w or [0])) for w in wanted])
        mults = np.stack([np.asarray(c[3])[p] for c, p in zip(searched, pick)])
        cost, rounding = _multiplier_costs(kss, ts, mults, lo, hi)
        for s, w, c, r in zip(searches, wanted, cost, rounding):
            if w is not None:
                s.priced(c[:len(w)], r[:len(w)])
        wanted = [s.wanted() if w is not None else None for s, w in zip(searches, wanted)]
    return [s.result() for s in searches]


def fit_many(steps: list[tuple[int, int, np.ndarray]], glos: list[int], ghis: list[int], mirrored: list[bool],
             nearest: bool, downstream=None) -> list[ChannelFit | NotExact]:
    """`rescale_fit.fit_steps` of each channel, or the NotExact it raises; with a `downstream`
    (requant_compose.Downstream: what the level becomes at the result), a nearest rescale
    that would put the result more than one step off is refitted with the steep transitions
    held (`_hold_steep`)."""
    intervals = slope_intervals([ts for qlo, qhi, ts in steps])
    out: list = [None] * len(steps)
    rescales: list = [None] * len(steps)
    exact = [True] * len(steps)
    todo = []
    exact_fits = exact_rescales([(*steps[c], glos[c], ghis[c], *intervals[c]) for c in range(len(steps))])
    for c, r in enumerate(exact_fits):
        if not isinstance(r, NotExact):
            rescales[c] = r
        elif nearest:
            todo.append(c)
        else:
            out[c] = r
    for c, r in zip(todo, nearest_many([(steps[c], glos[c], ghis[c]) for c in todo])):
        if isinstance(r, NotExact):
            out[c] = r
        else:
            rescales[c], exact[c] = r, False
    held = _hold_steep(steps, glos, ghis, rescales, exact, out, downstream) if downstream is not None else {}
    measured = disagreements([c for c in range(len(steps)) if out[c] is None], steps, glos, ghis, rescales)
    for c in range(len(steps)):
        if out[c] is None:
            try:
                out[c] = checked_fit(steps[c], glos[c], ghis[c], mirrored[c], rescales[c], exact[c], measured.get(c))
                out[c].steep_held, out[c].composed_off, out[c].composed_steps = held.get(c, (0, 0, 0))
            except NotExact as e:
                out[c] = _refusal(e)
    return out


def _hold_steep(steps: list, glos: list[int], ghis: list[int], rescales: list, exact: list[bool], out: list,
                downstream) -> dict[int, tuple[int, int, int]]:
    """Refits (in `rescales`) each nearest rescale whose level is one off the chain's at a
    transition where `downstream` makes that more than one output step
    (compiler/requant_compose.py); returns {channel: (steep transitions held, accumulator
    values still more than one step off at the result, the most steps there)}: the second
    nonzero when no rescale near the step points holds them (then the intercept that leaves
    the fewest is taken)."""
    todo = [c for c in range(len(steps)) if out[c] is None and not exact[c]]
    levels = [np.arange(steps[c][0] + 1, steps[c][1] + 1) for c in todo]
    us = [rescale_step_points(rescales[c], ks, glos[c], ghis[c]) for c, ks in zip(todo, levels)]
    missed = [ks[u != steps[c][2]] for c, ks, u in zip(todo, levels, us)]
    try:  # first only where the rescale is off, then every transition where that is steep
        devs = downstream.deviations(todo, missed)
        steep = [i for i, (b, a) in enumerate(devs) if np.any((b > 1) | (a > 1))]
        full = downstream.deviations([todo[i] for i in steep], [levels[i] for i in steep])
    except NotExact as e:
        for c in todo:
            out[c] = _refusal(e)
        return {}
    held, unheld = {}, []
    refit = [(i, devs_i, (devs_i[0] > 1, devs_i[1] > 1)) for i, devs_i in zip(steep, full)]
    refit = [(i, devs_i, sides) for i, devs_i, sides in refit if steep_mismatches(steps[todo[i]][2], us[i], sides)]
    for (i, devs_i, sides), r in zip(refit, constrained_many([(steps[todo[i]], glos[todo[i]], ghis[todo[i]], sides)
                                                              for i, _, sides in refit])):
        c, ts = todo[i], steps[todo[i]][2]
        u = None if isinstance(r, NotExact) else rescale_step_points(r, levels[i], glos[c], ghis[c])
        if u is None or not _within_one(ts, u[None])[0]:  # none, or more than one level off its own chain
            unheld.append((i, devs_i, sides))
        elif steep_mismatches(ts, u, sides):
            out[c] = NotExact("internal check failed: the refitted rescale misses a steep transition")
        else:
            rescales[c] = r
            held[c] = (int(np.count_nonzero(sides[0] | sides[1])), 0, 0)
    for i, devs_i, sides in unheld:  # the fewest steep mismatches its multiplier allows, measured
        c, ts = todo[i], steps[todo[i]][2]
        rescales[c] = _fewest_steep_off(steps[c], glos[c], ghis[c], sides, rescales[c])
        u = rescale_step_points(rescales[c], levels[i], glos[c], ghis[c])
        worst = max(int(d[m].max(initial=0)) for d, m in zip(devs_i, (u > ts, u < ts)))
        held[c] = (0, steep_mismatches(ts, u, sides), worst)
    return held


def _fewest_steep_off(steps: tuple, lo: int, hi: int, sides: tuple[np.ndarray, np.ndarray], r: Rescale) -> Rescale:
    """Rescale `r` with the intercept (same multiplier and shift) that leaves the fewest
    accumulator values at steep mismatches, the least total step displacement breaking ties:
    tried at every intercept where a steep transition starts or stops being held."""
    qlo, qhi, ts = steps
    ts = np.asarray(ts, np.int64)
    ks = np.arange(qlo + 1, qhi + 1, dtype=np.int64) << r.shift
    m = r.multiplier
    c = ks - m * ts
    totals = unique_sorted(np.concatenate([[r.offset * m + r.rounding], c[sides[0]], c[sides[1]] + m - 1]))
    d = _intercept_offsets(ks, ts, m, totals, lo, hi)
    # Per intercept: U_k - T_k where the rescale is below the chain (pos), T_k - U_k where above
    # (neg, in place of d: a fresh array of this size costs as much as the arithmetic, in page faults).
    pos = np.maximum(d, 0)
    neg = np.subtract(pos, d, out=d)
    s0, s1, ones = (v.astype(d.dtype) for v in (*sides, np.ones(len(ts), bool)))
    off, cost = pos @ s0 + neg @ s1, pos @ ones + neg @ ones
    return _least_steep_off(qlo, qhi, lo, hi, r, totals, off, cost, _rows_within_one(ts, pos, neg, hi - lo))


def _rows_within_one(ts: np.ndarray, pos: np.ndarray, neg: np.ndarray, span: int) -> np.ndarray:
    """`_within_one` of the rows of pos - neg = U - T (`pos` is overwritten): max(U_k, T_k) <=
    min(U_k+1, T_k+1) at each k, pos_k + neg_k+1 <= T_k+1 - T_k, on the rows laid end to end
    (contiguous, several times faster than on the rows' overlapping slices); at the end of a
    row the step stands at 2 span + 3, above any pos + neg (each at most span + 1), so
    nothing is compared across rows."""
    apart = np.subtract(pos, np.append(np.diff(ts), 2 * span + 3).astype(pos.dtype), out=pos)
    flat = apart.ravel()
    np.add(flat[:-1], neg.ravel()[1:], out=flat[:-1])
    return apart.max(1) <= 0


def _least_steep_off(qlo: int, qhi: int, lo: int, hi: int, r: Rescale, totals: np.ndarray, off: np.ndarray,
                     cost: np.ndarray, within: np.ndarray) -> Rescale:
    """`_fewest_steep_off`'s choice: the intercept of least (steep mismatches, cost) among those
    at most one level off, the first among equals; `r` when there is none."""
    best = int(np.lexsort((cost, off, ~within))[0])
    if not within[best]:
        return r
    try:
        return nearest_result(qlo, qhi, lo, hi, r.shift, r.multiplier, int(totals[best]))
    except NotExact:
        return r


def _intercept_offsets(ks: np.ndarray, ts: np.ndarray, m: int, totals: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per intercept t of `totals` and level k: clamp(U_k, lo, hi + 1) - T_k of the rescale of
    multiplier m and intercept t, U_k - T_k = ceil((c_k - t) / m) (c_k = k 2^s - m T_k): in f64
    where that is exact (as `rescale_nearest._rounding_costs`: the differences, and their sums
    over the levels, below 2^52), several times faster than i64 floor division; else in i64."""
    c = ks - m * ts
    base = min(int(c.min()), int(totals.min()))
    reach = max(int(c.max()), int(totals.max())) - base
    if reach < _EXACT_F64 and len(ts) * (reach // m + 2) < _EXACT_F64 and hi - lo + 2 < _EXACT_F64:
        d = (c - base).astype(np.float64)[None, :] - (totals - base).astype(np.float64)[:, None]
        np.divide(d, m, out=d)
        np.ceil(d, out=d)
        # The clamp only where the least and greatest differences could reach it.
        if (int(c.min()) - int(totals.max())) // m < lo - int(ts.min()) or \
                -((int(totals.min()) - int(c.max())) // m) > hi + 1 - int(ts.max()):
            np.maximum(d, (lo - ts).astype(np.float64), out=d)
            np.minimum(d, (hi + 1 - ts).astype(np.float64), out=d)
        return d
    return _clamp(-((totals[:, None] - ks[None, :]) // m), lo, hi + 1) - ts


def _within_one(ts: np.ndarray, us: np.ndarray) -> np.ndarray:
    """Per row of step points `us` (and of `ts`, or one `ts` for all): whether the rescale is
    at most one level off the chain everywhere: the intervals [min(T_k, U_k), max(T_k, U_k))
    where they differ do not overlap."""
    ts = np.asarray(ts, np.int64)
    first, last = np.minimum(us, ts), np.maximum(us, ts)
    return np.all(last[:, :-1] <= first[:, 1:], axis=1)


def steep_mismatches(ts: np.ndarray, us: np.ndarray, sides: tuple[np.ndarray, np.ndarray]) -> int:
    """The accumulator values on which a rescale with step points `us` (the chain's: `ts`) puts
    the result more than one step off: its level below the chain's at a transition steep
    below (U_k > T_k), or above at one steep above (`sides`, per transition)."""
    ts = np.asarray(ts, np.int64)
    return int((np.maximum(us - ts, 0) * sides[0]).sum() + (np.maximum(ts - us, 0) * sides[1]).sum())


def constrained_many(items: list[tuple[tuple[int, int, np.ndarray], int, int, tuple[np.ndarray, np.ndarray]]]
                     ) -> list[Rescale | NotExact]:
    """Per (steps, lo, hi, sides): the nearest rescale (as `nearest_rescale`) among those not
    below the chain at the transitions `sides[0]` and not above it at `sides[1]`, or the
    NotExact saying there is none: multipliers from the interval in which some rounding term
    meets them all (`_held_multipliers`), around the least-squares one, priced with those
    constraints (`rescale_nearest._multiplier_costs`), for all channels of one length at once."""
    out: list = [None] * len(items)
    for n, idx in _by_length([steps[2] for steps, _, _, _ in items]).items():
        ts = np.stack([np.asarray(items[i][0][2], np.int64) for i in idx])
        searched = []
        for row, (i, slope) in enumerate(zip(idx, _least_squares_slopes(ts.astype(np.float64)))):
            (qlo, qhi, _), lo, hi, _ = items[i]
            try:
                searched.append((row, *nearest_candidates(qlo, qhi, ts[row], lo, hi, float(slope))))
            except NotExact as e:
                out[i] = _refusal(e)
        if not searched:
            continue
        rows = np.array([row for row, _, _, _ in searched], np.int64)
        below, above = (np.stack([items[idx[r]][3][side] for r in rows]) for side in (0, 1))
        m_lo, m_hi = _held_multipliers(ts[rows], below, above, [shift for _, shift, _, _ in searched])
        priced = []
        for (row, shift, m0, mults), lo_m, hi_m, b, a in zip(searched, m_lo.tolist(), m_hi.tolist(), below, above):
            if lo_m > hi_m:
                out[idx[row]] = NotExact(f"no integer rescale holds its {int(np.count_nonzero(b | a))} steep "
                                         f"transitions")
                continue
            spread = np.linspace(lo_m, hi_m, _NEAREST_MULTIPLIERS + 1).round().astype(np.int64)
            priced.append((idx[row], row, shift, m0, unique_sorted(np.concatenate([np.clip(mults, lo_m, hi_m), spread]))))
        width = max((len(p[4]) for p in priced), default=1)
        block = max(1, _BLOCK_ELEMENTS // (n * width * (_NEAREST_ROUNDINGS + 2)))
        for a in range(0, len(priced), block):
            for (i, *_), r in zip(priced[a:a + block], _constrained_rescales(items, ts, priced[a:a + block])):
                out[i] = r
    return out


def _constrained_rescales(items: list, ts: np.ndarray, priced: list) -> list[Rescale | NotExact]:
    """`constrained_many`'s rescale of each (item index, row of `ts`, shift, m0, candidate
    multipliers), the candidates priced for all at once (each row padded with its last)."""
    width = max(len(p[4]) for p in priced)
    cands = np.stack([np.pad(p[4], (0, width - len(p[4])), mode="edge") for p in priced])
    rows = [p[1] for p in priced]
    ks = np.stack([np.arange(items[i][0][0] + 1, items[i][0][1] + 1, dtype=np.int64) * (1 << s)
                   for i, _, s, _, _ in priced])
    lo, hi = (np.array([items[i][k] for i, *_ in priced], np.int64) for k in (1, 2))
    sides = tuple(np.stack([items[i][3][k] for i, *_ in priced]) for k in (0, 1))
    cost, rounding = _multiplier_costs(ks, ts[rows], cands, lo, hi, sides=sides)
    # the least (cost, |m - m0|), the first among equals
    near = np.abs(cands - np.array([p[3] for p in priced], np.int64)[:, None])
    j = np.argmin(np.where(cost == cost.min(1, keepdims=True), near, INFEASIBLE), 1)
    out: list = []
    for (i, _, shift, _, _), c, r, m, jr in zip(priced, cost, rounding, cands, j.tolist()):
        (qlo, qhi, _), lo_c, hi_c, _ = items[i]
        try:
            if not c[jr] < INFEASIBLE:
                raise NotExact("internal check failed: no rounding term in the multiplier interval that holds the "
                               "steep transitions")
            out.append(nearest_result(qlo, qhi, lo_c, hi_c, shift, int(m[jr]), int(r[jr])))
        except NotExact as e:
            out.append(_refusal(e))
    return out


def _held_multipliers(ts: np.ndarray, below: np.ndarray, above: np.ndarray, shifts: list[int]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per row (step points of consecutive levels, shift `shifts[r]`): the interval of
    multipliers m for which some rounding term R holds the transitions, (1, 0) when it is
    empty: R >= c_i = i 2^s - m T_i where below is steep (i) and R <= c_j + m - 1 where above
    is (j), so F(m) = max_i c_i - min_j c_j - m + 1 <= 0.

    F is the maximum over the pairs (i, j) of the lines e - m d (d = T_i - T_j + 1,
    e = (i - j) 2^s + 1): convex, so the m where it is <= 0 form an interval. Its ends are
    found by Newton's iteration from 1 up and from 2^31 - 1 down (`_held_end`), each step to
    where the line of a pair attaining F crosses 0: O(levels) per step where the bound of
    every pair is O(levels^2)."""
    m_lo = np.ones(len(shifts), np.int64)
    m_hi = np.full(len(shifts), _MAX_MULTIPLIER, np.int64)
    both = np.nonzero(below.any(1) & above.any(1))[0]  # else every m holds them
    t = ts[both] - ts[both, :1]
    bound = (ts.shape[1] << max(shifts, default=0)) + (_MAX_MULTIPLIER + 1) * (int(t.max(initial=0)) + 2)
    exact = np.int64 if bound < 1 << 61 else object  # Python integers past i64
    ks = np.arange(ts.shape[1]).astype(exact)[None, :] * np.array([1 << shifts[r] for r in both], exact)[:, None]
    t = t.astype(exact)
    low = _held_end(ks, t, below[both], above[both], 2 * bound, True)
    some = np.nonzero(low)[0]
    m_lo[both], m_hi[both] = np.where(low > 0, low, 1), 0
    m_hi[both[some]] = _held_end(ks[some], t[some], below[both[some]], above[both[some]], 2 * bound, False)
    return m_lo, m_hi


def _held_end(ks: np.ndarray, ts: np.ndarray, below: np.ndarray, above: np.ndarray, big: int, up: bool) -> np.ndarray:
    """Per row: the least m >= 1 (`up`) or the greatest m <= 2^31 - 1 with F(m) <= 0
    (`_held_multipliers`; ks: i 2^s), 0 when there is none. Where F(m) > 0, of the pairs
    attaining it the one of least d going up (greatest going down; equal c_i with the lesser
    T_i have the lesser i) bounds F from below with the steepest descent that way: where
    it does not descend, neither does F, and none holds; else no m before its root does."""
    rows, n = ts.shape
    m = np.full(rows, 1 if up else _MAX_MULTIPLIER, np.int64)
    found = np.zeros(rows, np.int64)
    active = np.arange(rows)
    while len(active):
        c = ks[active] - m[active, None] * ts[active]
        tops, bots = np.where(below[active], c, -big), np.where(above[active], c, big)
        if up:  # the first top and the last bottom
            i, j = np.argmax(tops, 1), n - 1 - np.argmin(bots[:, ::-1], 1)
        else:
            i, j = n - 1 - np.argmax(tops[:, ::-1], 1), np.argmin(bots, 1)
        r = np.arange(len(active))
        ma = m[active]
        f = tops[r, i] - bots[r, j] - ma + 1
        d, e = ts[active, i] - ts[active, j] + 1, ks[active, i] - ks[active, j] + 1
        found[active[f <= 0]] = ma[f <= 0]
        if up:
            nxt = -((-e) // np.where(d > 0, d, 1))
            go = (f > 0) & (d > 0) & (nxt <= _MAX_MULTIPLIER)
        else:
            nxt = e // np.where(d < 0, d, -1)
            go = (f > 0) & (d < 0) & (nxt >= 1)
        m[active[go]] = nxt[go].astype(np.int64)
        active = active[go]
    return found


def disagreements(channels: list[int], steps: list, glos: list[int], ghis: list[int],
                  rescales: list[Rescale]) -> dict[int, tuple[int, int]]:
    """`rescale_fit.disagreement` of each channel's rescale with its step points, for the
    channels where it is found for many at once (the others are left to `checked_fit`).

    With the rescale's step points U_k in closed form (`rescale_step_points`, where i64
    holds it) beside the chain's T_k, both non-decreasing: the functions differ exactly on
    [min(T_k, U_k), max(T_k, U_k)) for each k, so where those intervals do not overlap they
    differ on sum |U_k - T_k| accumulator values, by at most one step."""
    out: dict[int, tuple[int, int]] = {}
    usable = [c for c in channels if _closed_form(steps[c], rescales[c])]
    for n, idx in _by_length([steps[c][2] for c in usable]).items():
        cs = [usable[i] for i in idx]
        ts = np.stack([np.asarray(steps[c][2], np.int64) for c in cs])
        ks = np.array([steps[c][0] + 1 for c in cs], np.int64)[:, None] + np.arange(n)
        m, r, s, off = (np.array([getattr(rescales[c], f) for c in cs], np.int64)[:, None]
                        for f in ("multiplier", "rounding", "shift", "offset"))
        lo, hi = (np.array([g[c] for c in cs], np.int64)[:, None] for g in (glos, ghis))
        us = _clamp(closed_form_step_points(ks, m, r, s, off), lo, hi + 1)
        sorted_rows = np.all(np.diff(ts, axis=1) >= 0, axis=1)
        apart = _within_one(ts, us)
        differing = np.abs(us - ts).sum(1)
        for i, c in enumerate(cs):
            if sorted_rows[i] and apart[i]:
                out[c] = (int(differing[i]), int(differing[i] > 0))
    return out


def _closed_form(steps: tuple, r: Rescale) -> bool:
    """Whether `rescale_step_points` of `r` on these levels is its closed form, with the
    levels all inside the rescale's clamp (none pinned to an end)."""
    qlo, qhi, ts = steps
    return len(ts) > 0 and r.qmin <= qlo and qhi <= r.qmax and closed_form_holds(r, qlo + 1, qhi)


def _one(result):
    if isinstance(result, NotExact):
        raise result
    return result


def fit_steps(steps: tuple[int, int, np.ndarray], glo: int, ghi: int, mirrored: bool,
              nearest: bool = True) -> ChannelFit:
    """`fit_many` of one channel: from the `step_points` of g on [glo, ghi] (g(b) = f(-b) when
    `mirrored`); raises NotExact."""
    return _one(fit_many([steps], [glo], [ghi], [mirrored], nearest)[0])


def fit_channel(f, lo: int, hi: int, direction: int, nearest: bool = True) -> ChannelFit:
    """The rescale of monotone `f` on [lo, hi]: exact when one exists, else (with `nearest`)
    the nearest, checked to be at most one output step off everywhere; raises NotExact.

    A non-increasing f is fitted as g(b) = f(-b) and mirrored (negative multiplier).
    """
    g = f if direction >= 0 else (lambda b: f(-b))
    glo, ghi = (lo, hi) if direction >= 0 else (-hi, -lo)
    return fit_steps(step_points(g, glo, ghi), glo, ghi, direction < 0, nearest)


def derive_rescale(f, lo: int, hi: int, direction: int) -> Rescale:
    """The exact rescale of monotone `f` on [lo, hi] (direction +1, -1 or 0); raises NotExact."""
    return fit_channel(f, lo, hi, direction, nearest=False).rescale


def nearest_rescale(qlo: int, qhi: int, ts: np.ndarray, lo: int, hi: int) -> Rescale:
    """The rescale whose step points are nearest the step points `ts` of a non-decreasing step
    function with levels qlo..qhi on [lo, hi] (`nearest_many` of one); raises NotExact."""
    return _one(nearest_many([((qlo, qhi, np.asarray(ts, np.int64)), lo, hi)])[0])
