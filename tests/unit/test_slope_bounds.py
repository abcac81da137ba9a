"""rescale_fit.slope_bounds (Dinkelbach's iteration over pairs of step points, O(n) a round)
against the O(n^2) formula it replaced: per level distance g the least and largest gap
T_(i+g) - T_i, the lower bound the largest g / (least + 1), the upper the least g / (largest - 1)
over the g whose largest gap is at least 2. The same Fractions on every row, padded or not."""

from fractions import Fraction

import numpy as np
import pytest

from torq.compiler.rescale_batch import slope_intervals
from torq.compiler.rescale_fit import slope_bounds


def reference(ts: np.ndarray) -> tuple[Fraction, Fraction | None]:
    t = [int(x) for x in ts]
    lo, hi = Fraction(0), None
    for g in range(1, len(t)):
        gaps = [t[i + g] - t[i] for i in range(len(t) - g)]
        lo = max(lo, Fraction(g, min(gaps) + 1))
        if max(gaps) >= 2:
            hi = Fraction(g, max(gaps) - 1) if hi is None else min(hi, Fraction(g, max(gaps) - 1))
    return lo, hi


def nearly_linear(rng, n: int, step: float, noise: int) -> np.ndarray:
    """Step points of a QDQ chain: i * step plus rounding noise of a few units, kept monotone."""
    t = np.floor(np.arange(n) * step + rng.uniform(0, step)).astype(np.int64)
    return np.maximum.accumulate(t + rng.integers(-noise, noise + 1, n))


def sequences(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 3, 4, 17, 64, 200, 255]))
    big = int(rng.choice([1, 1 << 20, 1 << 31, 1 << 46]))  # spans past i32; products past i64 (2^46 x 255)
    return [
        nearly_linear(rng, n, float(rng.uniform(0.3, 5000)), int(rng.integers(0, 4))),
        nearly_linear(rng, n, float(rng.uniform(1, 3)), 0),  # exact lines: upper bounds from long distances
        np.cumsum(rng.integers(0, 3, n)),  # ties: zero gaps, spans below 2
        np.cumsum(rng.integers(0, 9, n)) * big,
        np.sort(rng.integers(0, 4 * n, n)),
        (np.arange(n) ** 2 // max(1, n // 8)) + rng.integers(0, 2),  # convex
        np.cumsum(np.sort(rng.integers(0, 40, n))[::-1]),  # concave
        np.zeros(n, np.int64),
        np.repeat(np.arange(0, n, 2), 2)[:n] * 7,
    ]


@pytest.mark.parametrize("seed", range(40))
def test_slope_bounds_equal_the_gap_formula(seed):
    for ts in sequences(seed):
        t = np.asarray(ts, np.int64) - int(ts[0])
        assert slope_bounds(t[None]) == [reference(t)], seed


@pytest.mark.parametrize("seed", range(10))
def test_slope_intervals_of_mixed_lengths(seed):
    """Channels of many lengths in one call (padded blocks): each equals its own reference."""
    rng = np.random.default_rng(100 + seed)
    ts_list = [s + int(rng.integers(-10**6, 10**6)) for k in range(6) for s in sequences(1000 * seed + k)]
    ts_list += [np.zeros(0, np.int64), np.array([5], np.int64)]
    rng.shuffle(ts_list)
    assert slope_intervals(ts_list) == [reference(ts) if len(ts) >= 2 else (Fraction(0), None) for ts in ts_list]
