"""compiler/rescale_fit.py on hand-checked step functions and against TFLite's baseline.

The nearest rescale is judged by `disagreement`, which is checked here by brute
force; the baseline is TFLite's QuantizeMultiplier (a normalised 31-bit
multiplier of the real scale and round-half-up), written out independently.
"""

import math

import numpy as np
import pytest

from torq.compiler.rescale_batch import fit_channel, nearest_rescale
from torq.compiler.rescale_fit import (
    NotExact,
    Rescale,
    _slope_interval,
    brute_force_step_points,
    channel_step_points,
    disagreement,
    first_reaching,
    fit_rescale,
    step_points,
)


def brute_disagreement(f, g, lo, hi):
    a = np.arange(lo, hi + 1, dtype=np.int64)
    d = g(a) - f(a)
    return int((d != 0).sum()), int(np.abs(d).max())


def test_disagreement_hand_checked():
    # q steps to 1 at 0 and to 2 at 10; g one accumulator late on the first step: differs at a = 0 only.
    assert disagreement(np.array([0, 10]), np.array([1, 10]), -5, 20) == (1, 1)
    # g reaches both levels two and three accumulators late: a in [0, 3) differ, by 2 at a = 1.
    assert disagreement(np.array([0, 1]), np.array([2, 3]), -5, 20) == (3, 2)
    # g never reaches level 2 on the range (hi + 1): a in [10, 20] differ.
    assert disagreement(np.array([0, 10]), np.array([0, 21]), -5, 20) == (11, 1)


def test_first_reaching_matches_brute_force():
    r = Rescale(3, 5, 2, 4, -7, 9)
    ks = np.arange(-6, 11)  # 10 is never reached
    want = [next((a for a in range(-200, 201) if r(np.array([a]))[0] >= k), 201) for k in ks]
    assert list(first_reaching(r, ks, -200, 200)) == want


def perturbed_line(lo, hi, moved):
    """floor((3a + 1) / 7) with the step point of level `moved` one accumulator late."""
    line = Rescale(0, 3, 1, 0, -(1 << 40), 1 << 40)
    base = lambda a: np.floor_divide(3 * np.asarray(a, np.int64) + 1, 7)  # noqa: E731
    t = next(a for a in range(lo, hi + 1) if base(np.array([a]))[0] >= moved)

    def f(a):
        a = np.asarray(a, np.int64)
        return base(a) - (a == t)
    return f, base, line


def test_nearest_recovers_the_line_under_one_moved_step():
    lo, hi = -230, 230
    f, base, _ = perturbed_line(lo, hi, moved=20)
    qlo, qhi, ts = step_points(f, lo, hi)
    with pytest.raises(NotExact):
        fit_rescale(qlo, qhi, ts, lo, hi)  # no line through the moved step: not exact
    r = nearest_rescale(qlo, qhi, ts, lo, hi)
    # The nearest rescale is the original line: it differs from f at the moved step point only.
    assert brute_disagreement(f, r, lo, hi) == (1, 1)
    assert brute_disagreement(base, r, lo, hi) == (0, 0)
    fit = fit_channel(f, lo, hi, 1)
    assert (fit.differing, fit.exact) == (1, False)
    assert fit.step_span == int(ts[-1] - ts[0] + 1)
    with pytest.raises(NotExact):
        fit_channel(f, lo, hi, 1, nearest=False)


def test_decreasing_function_is_mirrored():
    lo, hi = -230, 230
    f, _, _ = perturbed_line(lo, hi, moved=-5)
    g = lambda a: f(-np.asarray(a, np.int64))  # noqa: E731  non-increasing
    fit = fit_channel(g, lo, hi, -1)
    assert fit.rescale.multiplier < 0
    assert brute_disagreement(g, fit.rescale, lo, hi) == (fit.differing, 1)


def qdq_chain(sx, sw, sy, zy, bias):
    """ONNX QDQ requantization in f32, op by op: rint((a * sx * sw + bias) / sy) + zy, clamped."""
    sx, sw, sy, zy, bias = (np.float32(v) for v in (sx, sw, sy, zy, bias))

    def f(a):
        t = (np.asarray(a).astype(np.float32) * sx).astype(np.float32) * sw
        t = (t.astype(np.float32) + bias).astype(np.float32)
        return np.clip(np.rint((t / sy).astype(np.float32)) + zy, -128, 127).astype(np.int64)
    return f


def tflite_rescale(sx, sw, sy, zy, bias) -> Rescale:
    """TFLite's integer requantization of the same chain: the integer bias round(bias / (sx sw))
    added to the accumulator, QuantizeMultiplier's normalised multiplier of sx sw / sy, and
    round-half-up (the single-rounding form, one rounding at the shift)."""
    real = float(np.float32(sx)) * float(np.float32(sw)) / float(np.float32(sy))
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2^exponent, mantissa in [0.5, 1)
    multiplier = int(round(mantissa * (1 << 31)))
    if multiplier == 1 << 31:
        multiplier, exponent = multiplier // 2, exponent + 1
    shift = 31 - exponent
    bias_q = int(round(float(np.float32(bias)) / (float(np.float32(sx)) * float(np.float32(sw)))))
    return Rescale(bias_q, multiplier, (1 << (shift - 1)) + int(zy) * (1 << shift), shift, -128, 127)


@pytest.mark.parametrize("seed", range(6))
def test_nearest_no_worse_than_tflite_quantize_multiplier(seed):
    rng = np.random.default_rng(seed)
    sx, sw = rng.uniform(0.005, 0.05), rng.uniform(0.0005, 0.01)
    sy, zy, bias = rng.uniform(0.01, 0.2), int(rng.integers(-20, 20)), rng.uniform(-0.5, 0.5)
    f = qdq_chain(sx, sw, sy, zy, bias)
    lo, hi = -400_000, 400_000
    fit = fit_channel(f, lo, hi, 1)
    ours = brute_disagreement(f, fit.rescale, lo, hi)
    assert ours == (fit.differing, 1 if fit.differing else 0)  # the reported measure is exact
    base = brute_disagreement(f, tflite_rescale(sx, sw, sy, zy, bias), lo, hi)
    assert ours[0] <= base[0], (ours, base)


def test_step_points_agree_with_brute_force_on_a_qdq_chain():
    f = qdq_chain(0.02, 0.003, 0.05, 3, 0.1)
    assert all(np.array_equal(x, y) for x, y in zip(step_points(f, -30_000, 30_000),
                                                     brute_force_step_points(f, -30_000, 30_000)))


def test_channel_step_points_where_the_line_misses():
    """Curved and flat-then-steep channels: where the line through the sampled levels misses
    the step point, by one (tried next) or more (bisected up to a sampled neighbour), on
    those levels only, every step point brute force finds is found."""
    curves = [lambda a: np.floor(np.sqrt(np.maximum(a, 0) * 40.0)).astype(np.int64),
              lambda a: np.where(a < 5000, a // 1000, 5 + (a - 5000) // 7),
              lambda a: np.floor_divide(3 * a + 1, 7)]
    lo, hi = np.array([0, 0, -900]), np.array([20_000, 6_000, 900])

    def f(a):  # (channels, points), channel c is curves[c]
        return np.stack([curves[c](a[c]) for c in range(len(curves))])

    asked = []

    def rows_f(rows):
        asked.append(set(rows.tolist()))
        return lambda a: np.stack([curves[c](a[i]) for i, c in enumerate(rows)])

    got = channel_step_points(f, lo, hi, rows_f)
    for c, curve in enumerate(curves):
        want = brute_force_step_points(curve, int(lo[c]), int(hi[c]))
        assert got[c][:2] == want[:2] and np.array_equal(got[c][2], want[2]), c
    # The line's predictions for 3a + 1 // 7 are at most one off (tried next to them only);
    # the curved channels' further off (then bisected).
    assert asked == [{0, 1, 2}, {0, 1}]


def test_slope_interval_matches_every_pair():
    """The bounds from the least and largest gap per level distance equal those of all pairs
    (m > (j - i) / (T_j - T_i + 1), m < (j - i) / (T_j - T_i - 1)), levels skipped included."""
    from fractions import Fraction
    for seed in range(30):
        rng = np.random.default_rng(seed)
        ts = np.cumsum(rng.integers(0, 9, int(rng.integers(2, 60)))).astype(np.int64) - 40
        ks = np.arange(1, len(ts) + 1, dtype=np.int64)
        i, j = np.triu_indices(len(ts), 1)
        pairs = [(int(j_ - i_), int(ts[j_] - ts[i_])) for i_, j_ in zip(i, j)]
        lo = max((Fraction(g, d + 1) for g, d in pairs), default=Fraction(0))
        hi = min((Fraction(g, d - 1) for g, d in pairs if d >= 2), default=None)
        assert _slope_interval(ks, ts) == (lo, hi), seed


@pytest.mark.parametrize("r", [Rescale(3, 5, 2, 4, -7, 9), Rescale(-40, 123457, 99, 20, -128, 127),
                               Rescale(0, 1, 0, 0, -3, 3)])
def test_closed_form_step_points_match_bisection(r):
    from torq.compiler.rescale_fit import rescale_step_points

    ks = np.arange(-10, 12)
    assert np.array_equal(rescale_step_points(r, ks, -3000, 3000), first_reaching(r, ks, -3000, 3000))
