"""compiler/rescale_pairs.py on chains of two int8 inputs built in f32 as ONNX QDQ builds them."""

import numpy as np
import pytest

from torq.compiler.rescale_fit import NotExact
from torq.compiler.rescale_pairs import _best_rounding, fit_product, fit_sum


def test_best_rounding_is_the_most_matching_rounding():
    """The rounding term found by the interval sweep matches as many pairs as the best of
    every candidate tried by brute force (clamped levels included)."""
    rng = np.random.default_rng(3)
    s = rng.integers(-5000, 5000, 300).astype(np.int64)
    one = 64
    q = np.clip(np.floor_divide(s + 17, one) + (rng.random(300) < 0.1), -20, 20)
    r, matched = _best_rounding(s, q, -20, 20, one)
    g = lambda r: np.clip(np.floor_divide(s + r, one), -20, 20)  # noqa: E731
    assert matched == int((g(r) == q).sum())
    assert matched == max(int((g(x) == q).sum()) for x in range(-200, 200))


def int8_pairs():
    u, v = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    return u.ravel().astype(np.int64), v.ravel().astype(np.int64)


def qdq(combine, u, v, su, sv, sy, zu, zv, zy):
    """ONNX QDQ Add (combine np.add) or Mul (np.multiply) of two int8 tensors in f32:
    rint(combine((u - zu) su, (v - zv) sv) / sy) + zy, clamped to int8."""
    su, sv, sy = np.float32(su), np.float32(sv), np.float32(sy)
    t = combine((u - zu).astype(np.float32) * su, (v - zv).astype(np.float32) * sv).astype(np.float32)
    return np.clip(np.rint((t / sy).astype(np.float32)) + zy, -128, 127).astype(np.int64)


def qdq_add(u, v, *scales):
    return qdq(np.add, u, v, *scales)


def qdq_mul(u, v, *scales):
    return qdq(np.multiply, u, v, *scales)


@pytest.mark.parametrize("su,sv,sy,zu,zv,zy", [(0.0459, 0.0198, 0.0194, 43, -128, -128),
                                               (0.0113, 0.0131, 0.0203, 0, 5, 3),
                                               (0.3, 0.031, 0.0194, 43, -128, -128)])
def test_fit_sum_of_two_dequantized_int8(su, sv, sy, zu, zv, zy):
    """ONNX QDQ Add in f32: rint(((u - zu) su + (v - zv) sv) / sy) + zy, clamped to int8."""
    u, v = int8_pairs()
    q = qdq_add(u, v, su, sv, sy, zu, zv, zy)
    fit = fit_sum(u, v, [q], -128, 127)
    g = fit.rescale(u, v)
    assert np.abs(g - q).max() <= 1
    assert fit.differing == int((g != q).sum()) and fit.pairs == 65536
    assert fit.differing < 0.002 * 65536, fit.differing
    assert abs(fit.rescale.mu) < 2 ** 31 and abs(fit.rescale.mv) < 2 ** 31


def test_fit_sum_refuses_a_product():
    u, v = int8_pairs()
    q = np.clip(np.rint(u * v / 100.0), -128, 127).astype(np.int64)  # not a sum: no line fits
    with pytest.raises(NotExact, match="within one output step"):
        fit_sum(u, v, [q], -128, 127)


def test_fit_sum_with_round_scales_misses_only_ties():
    """su / sy = 11/20 and sv / sy = 13/20 exactly: the real sum lands on a .5 tie whenever
    11 u + 13 (v - 5) = 10 (mod 20), and f32 rounding breaks those ties either way; a linear
    integer form breaks them (mostly) one way: its misses are ties, fewer than half of them, and
    a handful elsewhere where a slight tilt that matches more ties costs a clamp boundary."""
    u, v = int8_pairs()
    t = (u.astype(np.float32) * np.float32(0.011) + (v - 5).astype(np.float32) * np.float32(0.013))
    q = np.clip(np.rint((t.astype(np.float32) / np.float32(0.02)).astype(np.float32)) + 3, -128, 127)
    fit = fit_sum(u, v, [q.astype(np.int64)], -128, 127)
    ties = (11 * u + 13 * (v - 5)) % 20 == 10
    g = fit.rescale(u, v)
    assert np.abs(g - q).max() <= 1
    assert 0 < fit.differing <= ties.sum() // 2
    assert ((g != q) & ~ties).sum() <= 0.01 * ties.sum()


@pytest.mark.parametrize("su,sv,sy,zu,zv,zy", [(0.0031, 0.0197, 0.0105, -128, 3, -128),
                                               (0.0022, 0.0020, 0.0011, -128, -128, -128),
                                               (0.0417, 0.0133, 0.0390, 10, -7, 4)])
def test_fit_product_of_two_dequantized_int8(su, sv, sy, zu, zv, zy):
    """ONNX QDQ Mul in f32 (squeeze-excite's gate times the feature map):
    rint(((u - zu) su) ((v - zv) sv) / sy) + zy, clamped to int8; the zero points come back."""
    u, v = int8_pairs()
    q = qdq_mul(u, v, su, sv, sy, zu, zv, zy)
    fit = fit_product(u, v, [q], -128, 127)
    g = fit.rescale(u, v)
    assert (fit.rescale.zu, fit.rescale.zv) == (zu, zv)
    assert np.abs(g - q).max() <= 1
    assert fit.differing == int((g != q).sum()) and fit.pairs == 65536
    assert fit.differing < 0.005 * 65536, fit.differing
    assert abs(fit.rescale.multiplier) < 2 ** 31


def test_fit_product_exact_with_a_power_of_two_scale():
    """q = floor((u + 3)(v - 5) / 256 + 1/2): the integer form (p * 2^k + 2^(k+7)) >> (k+8) is exact."""
    u, v = int8_pairs()
    q = np.clip(np.floor((u + 3) * (v - 5) / 256 + 0.5), -128, 127).astype(np.int64)
    fit = fit_product(u, v, [q], -128, 127)
    assert (fit.rescale.zu, fit.rescale.zv, fit.differing) == (-3, 5, 0)


def test_fit_product_refuses_what_is_no_product():
    u, v = int8_pairs()
    q = np.clip(np.rint((u.astype(np.float64) ** 2 - v * 37) / 300.0), -128, 127).astype(np.int64)
    with pytest.raises(NotExact):
        fit_product(u, v, [q], -128, 127)


# Seeded random QDQ scales on which the search around the least-squares multipliers alone
# missed 28, 30, 121, 33 and 50 pairs of a residual add, and 10, 8 and 153 of a squeeze-excite
# gate: f32 rounding moved them off the scales, and a line through all the level boundaries
# still exists.
@pytest.mark.parametrize("kind,scales", [("sum", (0.046074, 0.0322986, 0.0378273, 24, -10, -26)),
                                         ("sum", (0.0378345, 0.0129045, 0.0438431, -122, -124, -27)),
                                         ("sum", (0.027384, 0.028819, 0.0403604, -114, -51, -76)),
                                         ("sum", (0.0480745, 0.0116944, 0.0487683, 56, -59, 39)),
                                         ("sum", (0.0194841, 0.0317435, 0.020206, -21, 15, -55)),
                                         ("product", (0.0260793, 0.0475727, 0.0061943, 26, 50, -82)),
                                         ("product", (0.0344811, 0.0395677, 0.0080688, 26, -24, 22)),
                                         ("product", (0.0031, 0.0197, 0.0105, -128, 3, -128))])
def test_exact_where_one_exists(kind, scales):
    u, v = int8_pairs()
    q = qdq(np.add if kind == "sum" else np.multiply, u, v, *scales)
    fit = (fit_sum if kind == "sum" else fit_product)(u, v, [q], -128, 127)
    assert fit.differing == 0 and np.array_equal(fit.rescale(u, v), q)
    r = fit.rescale
    assert all(abs(m) < 2 ** 31 for m in ((r.mu, r.mv) if kind == "sum" else (r.multiplier,)))


def test_variants_that_disagree_on_a_pair():
    """Two ways the host may evaluate the chain (FMA contractions) that differ on a pair: the
    rescale equals the first (llvm-cpu's default) everywhere and so differs from the other on
    that pair; where the first has none, one equal to either on each pair."""
    u, v = int8_pairs()
    q = qdq_add(u, v, 0.046074, 0.0322986, 0.0378273, 24, -10, -26)
    other = q.copy()
    other[(u == 3) & (v == 7)] += 1
    fit = fit_sum(u, v, [q, other], -128, 127)
    assert np.array_equal(fit.rescale(u, v), q) and fit.differing == 1
    odd = q.copy()
    odd[(u == 3) & (v == 7)] += 1  # no line separates this one
    fit = fit_sum(u, v, [odd, q], -128, 127)
    g = fit.rescale(u, v)
    assert np.all((g == q) | (g == odd)) and fit.differing == 1
