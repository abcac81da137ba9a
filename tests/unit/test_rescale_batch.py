"""compiler/rescale_batch.py fits many channels at once: a channel's result (rescale, measured
disagreement, or the reason it refuses) must not depend on the channels fitted beside it, and
every rescale must be what its measure says (checked here by brute force on the accumulators)."""

import numpy as np
import pytest

from torq.compiler.rescale_batch import fit_many, fit_steps, slope_intervals
from torq.compiler.rescale_fit import NotExact, _slope_interval, step_points


def qdq_channel(scale: float, bias: float, zero_point: int):
    """An ONNX-style requantization of an accumulator, f32 like the host: round(a s + b) + z, clamped."""
    def f(a):
        v = np.asarray(a, np.float64).astype(np.float32) * np.float32(scale) + np.float32(bias)
        return np.clip(np.rint(v.astype(np.float32)) + zero_point, -128, 127).astype(np.int64)
    return f


def channels(seed: int, count: int):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        scale = float(rng.uniform(2e-4, 3e-3)) * (1 if rng.random() < 0.8 else 40)  # some with few levels
        f = qdq_channel(scale, float(rng.uniform(-3, 3)), int(rng.integers(-10, 10)))
        lo, hi = -int(rng.integers(20_000, 200_000)), int(rng.integers(20_000, 200_000))
        out.append((step_points(f, lo, hi), lo, hi, bool(rng.random() < 0.3)))
    out.append(((5, 5, np.zeros(0, np.int64)), -10, 10, False))  # one level only
    out.append(((5, 6, np.array([3], np.int64)), -10, 10, False))  # one step point
    return out


def _same(a, b):
    if isinstance(a, NotExact) or isinstance(b, NotExact):
        return str(a) == str(b)
    return a.rescale == b.rescale and a.differing == b.differing and a.step_span == b.step_span


@pytest.mark.parametrize("nearest", [True, False])
def test_fit_many_equals_each_channel_alone(nearest):
    chans = channels(7, 40)
    got = fit_many([c[0] for c in chans], [c[1] for c in chans], [c[2] for c in chans], [c[3] for c in chans],
                   nearest)
    for (steps, lo, hi, mirrored), fit in zip(chans, got):
        try:
            want = fit_steps(steps, lo, hi, mirrored, nearest)
        except NotExact as e:
            want = e
        assert _same(want, fit), (steps[:2], want, fit)
    assert any(isinstance(f, NotExact) for f in got) != nearest  # both paths taken
    assert any(not isinstance(f, NotExact) and f.exact for f in got)


def test_fits_measured_right_by_brute_force():
    """Each fitted rescale against its chain on every accumulator of its range: the levels
    differ on exactly `differing` values, by at most one step."""
    rng = np.random.default_rng(7)
    inexact = 0
    for _ in range(24):
        scale = float(rng.uniform(2e-4, 3e-3)) * (1 if rng.random() < 0.8 else 40)
        f = qdq_channel(scale, float(rng.uniform(-3, 3)), int(rng.integers(-10, 10)))
        lo, hi = -int(rng.integers(20_000, 200_000)), int(rng.integers(20_000, 200_000))
        fit = fit_steps(step_points(f, lo, hi), lo, hi, False)
        a = np.arange(lo, hi + 1, dtype=np.int64)
        d = fit.rescale(a) - f(a)
        assert int(np.count_nonzero(d)) == fit.differing and np.abs(d).max(initial=0) <= 1
        inexact += fit.differing > 0
    assert inexact  # the nearest rescale's measure is checked too, not only exact ones


def test_slope_intervals_equal_per_channel():
    rng = np.random.default_rng(2)
    ts_list = [np.cumsum(rng.integers(0, 9, int(rng.integers(1, 30)))).astype(np.int64) for _ in range(50)]
    ts_list += [np.array([4, 9, 9, 15], np.int64)] * 3  # same length: one block
    want = [_slope_interval(np.arange(1, len(t) + 1, dtype=np.int64), t) for t in ts_list]
    assert slope_intervals(ts_list) == want


def test_disagreements_equal_the_per_channel_measure():
    """The batched measure of many channels' rescales equals `disagreement` of each, on chains
    with their own rescale and with rescales of other scales (step points far apart, where
    the intervals overlap and the channel is left to the per-channel measure)."""
    from torq.compiler.rescale_batch import disagreements
    from torq.compiler.rescale_fit import Rescale, disagreement, rescale_step_points

    rng = np.random.default_rng(11)
    chans = channels(5, 30)
    steps, lo, hi = [c[0] for c in chans], [c[1] for c in chans], [c[2] for c in chans]
    fits = fit_many(steps, lo, hi, [False] * len(chans), True)
    rescales = []
    for (qlo, qhi, _), fit in zip(steps, fits):
        r = fit.rescale
        if rng.random() < 0.4:  # another multiplier: far from the chain
            r = Rescale(r.offset, int(r.multiplier * rng.uniform(0.9, 1.1)) or 1, r.rounding, r.shift, qlo, qhi)
        rescales.append(r)
    got = disagreements(list(range(len(chans))), steps, lo, hi, rescales)
    assert len(got) > len(chans) // 2 and any(d for d, _ in got.values())
    for c, (differing, worst) in got.items():
        qlo, qhi, ts = steps[c]
        us = rescale_step_points(rescales[c], np.arange(qlo + 1, qhi + 1), lo[c], hi[c])
        assert (differing, worst) == disagreement(ts, us, lo[c], hi[c]), c
    assert len(got) < len(chans)  # some channels left to the per-channel measure


def test_exact_rescales_equal_the_search_of_each_channel():
    """`exact_rescales` tries each channel's first multiplier for all channels at once; what it
    returns is `rescale_in_interval`'s own answer (or refusal), exact lines and QDQ chains alike,
    whether the first multiplier holds or the search goes on."""
    from torq.compiler.rescale_batch import exact_rescales
    from torq.compiler.rescale_fit import Rescale, rescale_in_interval

    rng = np.random.default_rng(3)
    chans = [(c[0], c[1], c[2]) for c in channels(11, 120)]
    for _ in range(60):  # exact integer rescales: their step points lie on a line
        r = Rescale(int(rng.integers(-500, 500)), int(rng.integers(1, 1 << 20)), 0, int(rng.integers(10, 30)),
                    -128, 127)
        lo, hi = -int(rng.integers(1_000, 100_000)), int(rng.integers(1_000, 100_000))
        chans.append((step_points(r, lo, hi), lo, hi))
    items = [(*steps, lo, hi, *slope_intervals([steps[2]])[0]) for steps, lo, hi in chans]
    got = exact_rescales(items)
    found = 0
    for item, r in zip(items, got):
        try:
            want = Rescale(0, 0, 0, 0, item[0], item[0]) if item[0] == item[1] else rescale_in_interval(*item)
        except NotExact as e:
            want = e
        assert (str(want) == str(r)) if isinstance(want, NotExact) else want == r, (item[:2], want, r)
        found += not isinstance(r, NotExact)
    assert 60 <= found < len(items)  # both outcomes
