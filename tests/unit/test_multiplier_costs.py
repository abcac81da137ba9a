"""rescale_fit._multiplier_costs counts the rounding intervals around each candidate from the
sweep's order alone (the starts are met in sorted order); the reference here inverts the
sweep's permutation instead, as it did before. Same costs and roundings, ties included."""

import numpy as np
import pytest

from torq.compiler.rescale_fit import _NEAREST_ROUNDINGS, _clamp, _multiplier_costs


def reference(ks_shifted, ts, mults, lo, hi):
    n, m = ts.shape[-1], mults[:, :, None]
    cs = np.sort(ks_shifted[:, None, :] - m * ts[:, None, :], axis=-1)
    order = np.argsort(np.concatenate([cs + m, cs], -1), axis=-1, kind="stable")
    ended_before = np.cumsum(order < n, axis=-1)
    where = np.empty_like(order)
    np.put_along_axis(where, order, np.broadcast_to(np.arange(2 * n), order.shape), -1)
    inside = np.arange(1, n + 1) - np.take_along_axis(ended_before, where[..., n:], -1)
    top = np.argsort(-inside, axis=-1, kind="stable")[..., :_NEAREST_ROUNDINGS]
    rs = np.take_along_axis(cs, top, -1)
    us = -((rs[..., None] - ks_shifted[:, None, None, :]) // mults[:, :, None, None])
    cost = np.abs(_clamp(us, lo[:, None, None, None], hi[:, None, None, None] + 1) - ts[:, None, None, :]).sum(-1)
    best = np.argmin(cost, -1)[..., None]
    return np.take_along_axis(cost, best, -1)[..., 0], np.take_along_axis(rs, best, -1)[..., 0]


def case(seed: int):
    """Channels of step points near a line of `step` units per level, candidate multipliers
    around its slope; with `line`, an exact line of d = 2^s / m0 units per level and noise of
    0 or 1 unit, so most c_k = k 2^s - m T_k and interval ends c_k + m coincide."""
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
    lo, hi = ts[:, 0] - int(rng.integers(0, 50)), ts[:, -1] + int(rng.integers(0, 50))
    return ks_shifted, ts, mults, lo, hi


@pytest.mark.parametrize("seed", range(40))
def test_multiplier_costs_equal_the_permutation_sweep(seed):
    args = case(seed)
    got, want = _multiplier_costs(*args), reference(*args)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), seed
