"""rescale_nearest._multiplier_costs counts the rounding intervals around each candidate from the
sweep's order alone (the starts are met in sorted order, at 2k + 1 - their position), takes the
best by argmax passes (`_first_largest`) and counts the costs in bands of the sorted c_k
(`_band_costs`) where the clamp leaves them alone; the reference here is the code it replaced:
it inverts the sweep's permutation, sorts the counts (stably) and sums the costs level by
level in i64. Same costs and roundings, ties included, with `sides` too."""

import numpy as np
import pytest

from torq.compiler import rescale_nearest
from torq.compiler.rescale_fit import _clamp
from torq.compiler.rescale_nearest import (
    _NEAREST_ROUNDINGS,
    INFEASIBLE,
    _first_largest,
    _multiplier_costs,
    _sorted_counts,
)


def reference(ks_shifted, ts, mults, lo, hi, sides=None):
    n, m = ts.shape[-1], mults[:, :, None]
    cs_unsorted = ks_shifted[:, None, :] - m * ts[:, None, :]
    cs = np.sort(cs_unsorted, axis=-1)
    order = np.argsort(np.concatenate([cs + m, cs], -1), axis=-1, kind="stable")
    ended_before = np.cumsum(order < n, axis=-1)
    where = np.empty_like(order)
    np.put_along_axis(where, order, np.broadcast_to(np.arange(2 * n), order.shape), -1)
    inside = np.arange(1, n + 1) - np.take_along_axis(ended_before, where[..., n:], -1)
    top = np.argsort(-inside, axis=-1, kind="stable")[..., :_NEAREST_ROUNDINGS]
    rs = np.take_along_axis(cs, top, -1)
    if sides is not None:
        r_lo = np.where(sides[0][:, None, :], cs_unsorted, cs[..., :1]).max(-1)
        r_hi = np.where(sides[1][:, None, :], cs_unsorted + m - 1, cs[..., -1:] + m - 1).min(-1)
        rs = _clamp(np.concatenate([rs, r_lo[..., None], r_hi[..., None]], -1), r_lo[..., None], r_hi[..., None])
    us = -((rs[..., None] - ks_shifted[:, None, None, :]) // mults[:, :, None, None])
    cost = np.abs(_clamp(us, lo[:, None, None, None], hi[:, None, None, None] + 1) - ts[:, None, None, :]).sum(-1)
    if sides is not None:
        cost = np.where((r_lo > r_hi)[..., None], INFEASIBLE, cost)
    best = np.argmin(cost, -1)[..., None]
    return np.take_along_axis(cost, best, -1)[..., 0], np.take_along_axis(rs, best, -1)[..., 0]


def case(seed: int):
    """Channels of step points near a line of `step` units per level, candidate multipliers
    around its slope; with `line`, an exact line of d = 2^s / m0 units per level and noise of
    0 or 1 unit, so most c_k = k 2^s - m T_k and interval ends c_k + m coincide. Every third
    seed, the range [lo, hi] ends at or near the first and last step points (the clamp then
    moves some rescale step points)."""
    rng = np.random.default_rng(seed)
    channels, n, width = int(rng.integers(1, 6)), int(rng.choice([2, 5, 40, 255])), int(rng.integers(1, 9))
    shift = int(rng.integers(0, 20))
    line = seed % 2 == 0
    m0 = 1 << int(rng.integers(0, shift + 1)) if line else None
    step = (1 << shift) / m0 if line else float(rng.uniform(0.5, 300))
    noise = rng.integers(0, 2, (channels, n)) if line else rng.integers(-3, 4, (channels, n)) * int(rng.integers(0, 2))
    ts = np.maximum.accumulate(np.floor(np.arange(n) * step).astype(np.int64) + noise, axis=1)
    ts -= int(rng.integers(0, 10_000))
    ks_shifted = (np.arange(n, dtype=np.int64)[None, :] + rng.integers(-128, 0, (channels, 1))) * (1 << shift)
    m0 = m0 or max(1, int(round((1 << shift) / step)))
    spread = int(rng.choice([1, 2, 50]))
    mults = np.maximum(1, m0 + rng.integers(-spread, spread + 1, (channels, width)))
    margin = 3 if seed % 3 == 0 else 50
    lo, hi = ts[:, 0] - rng.integers(0, margin, channels), ts[:, -1] + rng.integers(0, margin, channels)
    return ks_shifted, ts, mults, lo, hi


def sides_of(seed: int, ts: np.ndarray):
    """Random steep transitions below and above (some channels with none, some with both)."""
    rng = np.random.default_rng(1000 + seed)
    density = rng.choice([0.0, 0.02, 0.2], (len(ts), 1))
    return rng.random(ts.shape) < density, rng.random(ts.shape) < density[::-1]


@pytest.mark.parametrize("seed", range(60))
def test_multiplier_costs_equal_the_permutation_sweep(seed):
    args = case(seed)
    got, want = _multiplier_costs(*args), reference(*args)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), seed


@pytest.mark.parametrize("seed", range(40))
def test_constrained_multiplier_costs_equal_the_reference(seed):
    args = case(seed)
    sides = sides_of(seed, args[1])
    got, want = _multiplier_costs(*args, sides=sides), reference(*args, sides=sides)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), seed


@pytest.mark.parametrize("bands", [0, 2])
def test_costs_level_by_level_equal_the_reference(bands, monkeypatch):
    """Past `_MAX_BANDS` values of U_k - T_k (some or all rows) the costs are summed level by level."""
    monkeypatch.setattr(rescale_nearest, "_MAX_BANDS", bands)
    for seed in range(30):
        args = case(seed)
        got, want = _multiplier_costs(*args), reference(*args)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), seed


def test_first_largest_is_the_stable_sort():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 4, 5, 30):
        x = rng.integers(1, 4, (6, 5, n))  # many ties
        assert np.array_equal(_first_largest(x.copy(), 4), np.argsort(-x, axis=-1, kind="stable")[..., :4])


@pytest.mark.parametrize("limit", [1 << 62, 1 << 20])
def test_sorted_counts_equal_searchsorted(limit, monkeypatch):
    """Row by row; with a low `_SEARCH_LIMIT`, the rows searched in several parts."""
    monkeypatch.setattr(rescale_nearest, "_SEARCH_LIMIT", limit)
    rng = np.random.default_rng(8)
    rows = np.sort(rng.integers(-(1 << 40), 1 << 40, (50, 1)) + rng.integers(0, 1 << 17, (50, 30)), -1)
    rows[::7] = rows[::7, :1]  # rows of one value
    ends = rng.integers(-(1 << 18), 1 << 18, (50, 12))
    got = _sorted_counts(rows, ends)
    want = np.stack([np.searchsorted(r - r[0], e, "right") for r, e in zip(rows, ends)])
    assert np.array_equal(got, want)
