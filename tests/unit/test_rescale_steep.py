"""rescale_batch._hold_steep refits the nearest rescales of all channels whose level is one off
at a steep transition at once (`constrained_many`, `_held_multipliers` by Newton's iteration,
`_fewest_steep_off` in f64); the references here are the per-channel code it replaced (the
bound of every pair of steep transitions, i64 floor division). Same rescales, the same
refusals, ties included."""

import numpy as np
import pytest
from test_requant_compose import noisy_chain

from torq.compiler import rescale_batch
from torq.compiler.rescale_batch import (
    _fewest_steep_off,
    _held_multipliers,
    _least_squares_slopes,
    _within_one,
    constrained_many,
    fit_many,
    steep_mismatches,
)
from torq.compiler.rescale_fit import _MAX_MULTIPLIER, NotExact, Rescale, _clamp, rescale_step_points, step_points
from torq.compiler.rescale_nearest import (
    _NEAREST_MULTIPLIERS,
    INFEASIBLE,
    _multiplier_costs,
    nearest_candidates,
    nearest_result,
)


def reference_held(ks, ts, sides, shift):
    """The multiplier interval from the bound of every pair (i below, j above)."""
    i, j = np.nonzero(sides[0])[0], np.nonzero(sides[1])[0]
    d = (ts[i][:, None] - ts[j][None, :] + 1).ravel()
    e = ((ks[i][:, None] - ks[j][None, :]) * (1 << shift) + 1).ravel()
    m_lo, m_hi = 1, _MAX_MULTIPLIER
    if np.any((d == 0) & (e > 0)):
        return 1, 0
    if np.any(d > 0):
        m_lo = max(m_lo, int((-((-e[d > 0]) // d[d > 0])).max()))
    if np.any(d < 0):
        m_hi = min(m_hi, int((e[d < 0] // d[d < 0]).min()))
    return m_lo, m_hi


def reference_constrained(steps, lo, hi, sides):
    qlo, qhi, ts = steps
    ts = np.asarray(ts, np.int64)
    slope = float(_least_squares_slopes(ts[None].astype(np.float64))[0])
    shift, m0, mults = nearest_candidates(qlo, qhi, ts, lo, hi, slope)
    ks = np.arange(qlo + 1, qhi + 1, dtype=np.int64)
    m_lo, m_hi = reference_held(ks, ts, sides, shift)
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


def reference_fewest(steps, lo, hi, sides, r):
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


def reference_hold_steep(steps, glos, ghis, rescales, exact, out, downstream):
    """The per-channel loop `_hold_steep` was."""
    todo = [c for c in range(len(steps)) if out[c] is None and not exact[c]]
    levels = [np.arange(steps[c][0] + 1, steps[c][1] + 1) for c in todo]
    us = [rescale_step_points(rescales[c], ks, glos[c], ghis[c]) for c, ks in zip(todo, levels)]
    missed = [ks[u != steps[c][2]] for c, ks, u in zip(todo, levels, us)]
    devs = downstream.deviations(todo, missed)
    steep = [i for i, (b, a) in enumerate(devs) if np.any((b > 1) | (a > 1))]
    full = downstream.deviations([todo[i] for i in steep], [levels[i] for i in steep])
    held = {}
    for i, devs_i in zip(steep, full):
        c, ks, ts = todo[i], levels[i], steps[todo[i]][2]
        sides = devs_i[0] > 1, devs_i[1] > 1
        if not steep_mismatches(ts, us[i], sides):
            continue
        try:
            refit = reference_constrained(steps[c], glos[c], ghis[c], sides)
            if not _within_one(ts, rescale_step_points(refit, ks, glos[c], ghis[c])[None])[0]:
                raise NotExact("the refit is more than one level off its own chain")
        except NotExact:
            rescales[c] = reference_fewest(steps[c], glos[c], ghis[c], sides, rescales[c])
            u = rescale_step_points(rescales[c], ks, glos[c], ghis[c])
            worst = max(int(d[m].max(initial=0)) for d, m in zip(devs_i, (u > ts, u < ts)))
            held[c] = (0, steep_mismatches(ts, u, sides), worst)
            continue
        if steep_mismatches(ts, rescale_step_points(refit, ks, glos[c], ghis[c]), sides):
            out[c] = NotExact("internal check failed: the refitted rescale misses a steep transition")
            continue
        rescales[c] = refit
        held[c] = (int(np.count_nonzero(sides[0] | sides[1])), 0, 0)
    return held


def random_sides(rng, n: int):
    """Steep transitions below and above, sparse to dense (dense ones hold for no multiplier)."""
    density = float(rng.choice([0.01, 0.05, 0.3, 0.9]))
    return rng.random(n) < density, rng.random(n) < density


def line_steps(rng, n: int, step: float, noise: int) -> np.ndarray:
    return np.maximum.accumulate(np.floor(np.arange(n) * step).astype(np.int64) + rng.integers(-noise, noise + 1, n))


@pytest.mark.parametrize("seed", range(6))
def test_held_multipliers_equal_every_pair(seed):
    rng = np.random.default_rng(seed)
    rows, n = 40, int(rng.choice([3, 30, 255]))
    ts = np.stack([line_steps(rng, n, float(rng.uniform(1, 5000)), int(rng.integers(0, 4))) for _ in range(rows)])
    ts -= rng.integers(-10**6, 10**6, (rows, 1))
    if seed == 5:  # past i64 in Newton's iteration (m T up to 2^31 times a span near 2^32): Python integers
        ts = np.stack([line_steps(rng, n, 2.0**32 / n, 3) for _ in range(rows)]) - (1 << 31)
    shifts = [int(s) for s in rng.integers(0, 40, rows)]
    sides = [random_sides(rng, n) for _ in range(rows)]
    sides[0] = (np.zeros(n, bool), sides[0][1])  # only one side steep: every multiplier
    sides[1] = (np.ones(n, bool), np.ones(n, bool))  # both sides at every transition
    m_lo, m_hi = _held_multipliers(ts, np.stack([s[0] for s in sides]), np.stack([s[1] for s in sides]), shifts)
    empty = 0
    for r in range(rows):
        want = reference_held(np.arange(n, dtype=np.int64), ts[r], sides[r], shifts[r])
        if want[0] > want[1]:
            assert m_lo[r] > m_hi[r], r
            empty += 1
        else:
            assert (m_lo[r], m_hi[r]) == want, r
    assert 0 < empty < rows  # both outcomes


def noisy_channels(seed: int, count: int):
    """Channels whose step points lie off every line, with random steep sides."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        lo, hi = -8_000_000, 8_000_000  # all 255 levels: one block of channels
        steps = step_points(noisy_chain(seed * 100 + k), lo, hi)
        out.append((steps, lo, hi, random_sides(rng, len(steps[2]))))
    return out


def test_constrained_many_equals_each_channel():
    items = noisy_channels(1, 16)
    items.append(((0, 3, np.array([5, 4, 3], np.int64)), -10, 10, (np.ones(3, bool), np.zeros(3, bool))))  # refused
    got = constrained_many(items)
    kinds = set()
    for item, r in zip(items, got):
        try:
            want = reference_constrained(*item)
        except NotExact as e:
            want = e
        assert (str(want) == str(r)) if isinstance(want, NotExact) else want == r
        kinds.add(type(r).__name__)
    assert kinds == {"Rescale", "NotExact"}


@pytest.mark.parametrize("f64", [True, False])
def test_fewest_steep_off_equals_the_integer_reference(f64, monkeypatch):
    if not f64:
        monkeypatch.setattr(rescale_batch, "_EXACT_F64", 0)
    rng = np.random.default_rng(4)
    moved = clamped = 0
    for steps, lo, hi, sides in noisy_channels(2, 12):
        r = rescale_batch.nearest_rescale(*steps, lo, hi)
        for m in (r.multiplier, int(r.multiplier * rng.uniform(0.98, 1.02))):  # far off: levels past the range
            for lo_c, hi_c in ((lo, hi), (int(steps[2][0]), int(steps[2][-1]))):  # the range ends at the step points
                r_m = Rescale(r.offset, m, r.rounding, r.shift, r.qmin, r.qmax)
                got, want = _fewest_steep_off(steps, lo_c, hi_c, sides, r_m), reference_fewest(steps, lo_c, hi_c,
                                                                                              sides, r_m)
                assert got == want
                moved += got != r_m
                clamped += lo_c != lo
    assert moved and clamped


class TablesAfter:
    """A table per channel after the fitted level (the `Downstream` protocol fit_many uses)."""

    def __init__(self, tables: list[np.ndarray]):
        self.tables = tables

    def deviations(self, channels, transitions):
        return [(np.abs(self.tables[c][ks - 1 + 128] - self.tables[c][ks + 128]),
                 np.abs(self.tables[c][ks + 128] - self.tables[c][ks - 1 + 128])) for c, ks in zip(channels, transitions)]


def tables(seed: int, count: int) -> list[np.ndarray]:
    """Monotone tables rising by 2 per level on a stretch of up to 40 levels, by 1 or 0 elsewhere
    (as test_requant_compose.table_with_jumps)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        rise = rng.integers(0, 2, 256)
        a = int(rng.integers(0, 200))
        rise[a:a + int(rng.integers(2, 40))] = 2
        out.append(np.clip(np.cumsum(rise) - 128, -128, 127))
    return out


def test_hold_steep_equals_the_per_channel_loop(monkeypatch):
    """Each chain thrice, with different tables after it (different steep transitions in one
    block of channels)."""
    lo, hi = [-4_000_000] * 24, [4_000_000] * 24
    steps = [step_points(noisy_chain(seed), lo[0], hi[0]) for seed in range(8)] * 3
    downstream = TablesAfter(tables(3, len(steps)))
    got = fit_many(steps, lo, hi, [False] * len(steps), True, downstream)
    monkeypatch.setattr(rescale_batch, "_hold_steep", reference_hold_steep)
    want = fit_many(steps, lo, hi, [False] * len(steps), True, downstream)
    fields = ("rescale", "differing", "steep_held", "composed_off", "composed_steps")
    for g, w in zip(got, want):
        assert str(g) == str(w) if isinstance(w, NotExact) else [getattr(g, f) for f in fields] == \
            [getattr(w, f) for f in fields]
    assert any(f.steep_held for f in got) and any(f.composed_off for f in got)  # both refits taken
