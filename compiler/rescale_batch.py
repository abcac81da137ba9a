"""The rescales of all channels of a requantization at once (compiler/rescale_fit.py per channel).

A per-channel requantization of a contraction has hundreds to thousands of channels
(BERT's FFN: 3,072 per matmul), each with up to 255 step points. Fitting them one by one
costs a millisecond each in numpy calls on small arrays; here the array work of
all channels with the same number of levels is done in one go:

- `slope_intervals`: the exact-slope interval of each channel (`rescale_fit._slope_interval`),
  of a block of channels at once (`rescale_fit.slope_bounds`);
- `exact_rescales`: `rescale_fit.rescale_in_interval` of many channels, the first multiplier
  each tries checked for all of them at once;
- `nearest_many`: `rescale_fit.nearest_rescale` of many channels, every stage of the
  coarse-to-fine multiplier search (`rescale_fit.MultiplierSearch`) priced for all of them in one `_multiplier_costs`;
- `fit_many`: the rescale of each channel (exact, else with `nearest` the nearest), with
  these two, measured by `rescale_fit.checked_fit`; given what the level becomes at the
  result (a requant_compose.Downstream), `_hold_steep` refits a nearest rescale whose level
  one off would be several output steps there (`constrained_nearest`: the multiplier
  interval that holds those transitions, `_held_multipliers`, priced by
  `_multiplier_costs` with `sides`), or, where none holds them, takes the intercept that
  leaves the fewest (`_fewest_steep_off`) and counts them.

`fit_steps`, `fit_channel`, `nearest_rescale` and `derive_rescale` are the same for one
channel (one-element calls): there is one implementation of the search, and a channel's
result does not depend on the channels fitted beside it (tests/unit/test_rescale_batch.py).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np

from .rescale_fit import (
    _MAX_MULTIPLIER,
    _NEAREST_MULTIPLIERS,
    _NEAREST_ROUNDINGS,
    INFEASIBLE,
    ChannelFit,
    MultiplierSearch,
    NotExact,
    Rescale,
    _clamp,
    _multiplier_costs,
    _rescale_step_points,
    checked_fit,
    closed_form_holds,
    closed_form_step_points,
    fits_i64,
    nearest_candidates,
    nearest_result,
    rescale_at,
    rescale_in_interval,
    shift_candidates,
    slope_bounds,
    slope_top,
    step_points,
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
    """`rescale_fit.nearest_rescale` of each (steps, lo, hi), or the NotExact it raises."""
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
    fine search of `rescale_fit.MultiplierSearch`, each stage priced for all channels at once."""
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
    us = [_rescale_step_points(rescales[c], ks, glos[c], ghis[c]) for c, ks in zip(todo, levels)]
    missed = [ks[u != steps[c][2]] for c, ks, u in zip(todo, levels, us)]
    try:  # first only where the rescale is off, then every transition where that is steep
        devs = downstream.deviations(todo, missed)
        steep = [i for i, (b, a) in enumerate(devs) if np.any((b > 1) | (a > 1))]
        full = downstream.deviations([todo[i] for i in steep], [levels[i] for i in steep])
    except NotExact as e:
        for c in todo:
            out[c] = _refusal(e)
        return {}
    held = {}
    for i, devs_i in zip(steep, full):
        c, ks, ts = todo[i], levels[i], steps[todo[i]][2]
        sides = devs_i[0] > 1, devs_i[1] > 1
        if not steep_mismatches(ts, us[i], sides):
            continue
        try:
            refit = constrained_nearest(steps[c], glos[c], ghis[c], sides)
            if not _within_one(ts, _rescale_step_points(refit, ks, glos[c], ghis[c])[None])[0]:
                raise NotExact("the refit is more than one level off its own chain")
        except NotExact:  # the fewest steep mismatches its multiplier allows, measured
            rescales[c] = _fewest_steep_off(steps[c], glos[c], ghis[c], sides, rescales[c])
            u = _rescale_step_points(rescales[c], ks, glos[c], ghis[c])
            worst = max(int(d[m].max(initial=0)) for d, m in zip(devs_i, (u > ts, u < ts)))
            held[c] = (0, steep_mismatches(ts, u, sides), worst)
            continue
        if steep_mismatches(ts, _rescale_step_points(refit, ks, glos[c], ghis[c]), sides):
            out[c] = NotExact("internal check failed: the refitted rescale misses a steep transition")
            continue
        rescales[c] = refit
        held[c] = (int(np.count_nonzero(sides[0] | sides[1])), 0, 0)
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
    totals = np.unique(np.concatenate([[r.offset * m + r.rounding], c[sides[0]], c[sides[1]] + m - 1]))
    us = _clamp(-((totals[:, None] - ks[None, :]) // m), lo, hi + 1)
    off = (np.maximum(us - ts, 0) * sides[0] + np.maximum(ts - us, 0) * sides[1]).sum(1)
    cost = np.abs(us - ts).sum(1)
    within = _within_one(ts, us)
    best = int(np.lexsort((cost, off, ~within))[0])
    if not within[best]:
        return r
    try:
        return nearest_result(qlo, qhi, lo, hi, r.shift, m, int(totals[best]))
    except NotExact:
        return r


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


def constrained_nearest(steps: tuple[int, int, np.ndarray], lo: int, hi: int,
                        sides: tuple[np.ndarray, np.ndarray]) -> Rescale:
    """The nearest rescale (as `nearest_rescale`) among those not below the chain at the
    transitions `sides[0]` and not above it at `sides[1]`: multipliers from the interval in
    which some rounding term meets them all (`_held_multipliers`), around the least-squares
    one, priced with those constraints (`rescale_fit._multiplier_costs`); raises NotExact
    when none does."""
    qlo, qhi, ts = steps
    ts = np.asarray(ts, np.int64)
    slope = float(_least_squares_slopes(ts[None].astype(np.float64))[0])
    shift, m0, mults = nearest_candidates(qlo, qhi, ts, lo, hi, slope)
    ks = np.arange(qlo + 1, qhi + 1, dtype=np.int64)
    m_lo, m_hi = _held_multipliers(ks, ts, sides, shift)
    if m_lo > m_hi:
        raise NotExact(f"no integer rescale holds its {int(np.count_nonzero(sides[0] | sides[1]))} steep transitions")
    spread = np.linspace(m_lo, m_hi, _NEAREST_MULTIPLIERS + 1).round().astype(np.int64)
    cands = np.unique(np.concatenate([np.clip(mults, m_lo, m_hi), spread]))
    cost, rounding = _multiplier_costs(ks[None] * (1 << shift), ts[None], cands[None], np.array([lo]), np.array([hi]),
                                       sides=(sides[0][None], sides[1][None]))
    if not np.any(cost[0] < INFEASIBLE):
        raise NotExact("internal check failed: no rounding term in the multiplier interval that holds the steep "
                       "transitions")
    j = min(range(len(cands)), key=lambda i: (int(cost[0, i]), abs(int(cands[i]) - m0)))
    return nearest_result(qlo, qhi, lo, hi, shift, int(cands[j]), int(rounding[0, j]))


def _held_multipliers(ks: np.ndarray, ts: np.ndarray, sides: tuple[np.ndarray, np.ndarray],
                      shift: int) -> tuple[int, int]:
    """The interval of multipliers m (shift `shift`) for which some rounding term R holds the
    transitions: R >= c_i = i 2^s - m T_i where below is steep (i) and R <= c_j + m - 1 where
    above is (j), so c_i <= c_j + m - 1 for every such pair: m (T_i - T_j + 1) >= (i - j) 2^s + 1,
    a bound on m per pair (empty when lower > upper)."""
    i, j = np.nonzero(sides[0])[0], np.nonzero(sides[1])[0]
    d = (ts[i][:, None] - ts[j][None, :] + 1).ravel()
    e = ((ks[i][:, None] - ks[j][None, :]) * (1 << shift) + 1).ravel()
    m_lo, m_hi = 1, _MAX_MULTIPLIER
    if np.any((d == 0) & (e > 0)):
        return 1, 0
    if np.any(d > 0):
        m_lo = max(m_lo, int((-((-e[d > 0]) // d[d > 0])).max()))  # ceil(e / d)
    if np.any(d < 0):
        m_hi = min(m_hi, int((e[d < 0] // d[d < 0]).min()))  # floor(e / d), d < 0
    return m_lo, m_hi


def disagreements(channels: list[int], steps: list, glos: list[int], ghis: list[int],
                  rescales: list[Rescale]) -> dict[int, tuple[int, int]]:
    """`rescale_fit.disagreement` of each channel's rescale with its step points, for the
    channels where it is found for many at once (the others are left to `checked_fit`).

    With the rescale's step points U_k in closed form (`_rescale_step_points`, where i64
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
    """Whether `_rescale_step_points` of `r` on these levels is its closed form, with the
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
