"""compiler/requant_float_contraction.py: recovering int8 weight levels from dequantized f32
weights, the bound on llvm-cpu's f32 rounding of a contraction, and the accumulators that
bound puts near a step (requant_channels.ambiguous_accumulators), each checked by brute force."""

import numpy as np
import pytest

from torq.compiler.requant_channels import ambiguous_accumulators
from torq.compiler.requant_float_contraction import _rows_as_levels, sum_error_bound
from torq.compiler.rescale_fit import NotExact


def ort_weights(rng, rows: int, cols: int, per_channel: bool = True):
    """Weights quantized and dequantized as ONNX Runtime's symmetric int8 QDQ does (scale
    max|w| / 127 in f32, levels round(w / scale)), then dequantized in f32 at compile time."""
    w = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 2, (rows, 1)).astype(np.float32)
    top = np.abs(w).max(1, keepdims=True) if per_channel else np.abs(w).max(keepdims=True)
    scale = (top / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127)
    return (q.astype(np.float32) * scale).astype(np.float32), q, scale


@pytest.mark.parametrize("per_channel", [True, False])
def test_weight_levels_reproduce_every_element(per_channel):
    rng = np.random.default_rng(7)
    w, q, _ = ort_weights(rng, 40, 72, per_channel)
    w[3] = 0  # a zero channel
    levels, scale = _rows_as_levels(w)
    assert levels is not None
    assert np.array_equal(levels.astype(np.float32) * scale[:, None], w)  # fl32(level * scale), bit for bit
    assert np.abs(levels).max() <= 127 and np.array_equal(levels[4:], q[4:])


def test_weight_levels_of_rows_that_do_not_reach_the_range_end():
    """Rows whose largest level is below 127 (PT2E RegNet-Y's grouped convs: at most 123 levels
    of 2^-12) are found too: they sent RegNet's grouped convs to the host."""
    rng = np.random.default_rng(3)
    q = rng.integers(-100, 101, (6, 72))
    q[:, 0] = [123, -118, 97, 64, -90, 127]  # each row's largest level
    scale = np.float32([2.0 ** -12, 3.1e-3, 7.7e-4, 1.5e-2, 2.0 ** -9, 4.4e-3])
    w = (q.astype(np.float32) * scale[:, None]).astype(np.float32)
    levels, found = _rows_as_levels(w)
    assert levels is not None
    assert np.array_equal(levels.astype(np.float32) * found[:, None], w)


def test_weights_that_are_no_int8_levels_are_refused():
    rng = np.random.default_rng(8)
    w, _, _ = ort_weights(rng, 4, 72)
    w[2, 5] = np.nextafter(w[2, 5], np.float32(10))  # one element off the grid of its channel
    assert _rows_as_levels(w)[0] is None


def test_sum_error_bound_holds_for_f32_contractions_in_any_order():
    """llvm-cpu's Y (products rounded or fused, summed in some order from B) against the model
    Y' = fl(fl(fl(A) sx) sw) + B: never more than e accumulator units apart."""
    rng = np.random.default_rng(9)
    n, sx, zx = 72, np.float32(0.0112619316), -128
    w, q, _ = ort_weights(rng, 8, n)
    levels, sw = _rows_as_levels(w)
    b = rng.uniform(-2, 2, 8).astype(np.float32)
    a_top = 255 * np.abs(levels).sum(1)
    e = sum_error_bound(n, a_top, np.abs(b) / (np.float64(sx) * sw))
    worst = 0.0
    for _ in range(300):
        x = rng.integers(-128, 128, n)
        if rng.random() < 0.3:
            x = np.where(rng.random(n) < 0.5, 127, -128)  # extreme inputs: the largest terms
        xs = (x - zx).astype(np.float32) * sx
        for c in range(8):
            order = rng.permutation(n)
            y = b[c]
            for r in order:
                y = np.float32(y + np.float32(xs[r] * w[c, r]))
            A = int(((x - zx) * levels[c]).sum())
            model = np.float32(np.float32(np.float32(A) * sx) * sw[c]) + b[c]
            units = abs(float(y) - float(model)) / (float(sx) * float(sw[c]))
            worst = max(worst, units / e)
    assert 0 < worst <= 1, worst


def test_ambiguous_accumulators_by_brute_force():
    rng = np.random.default_rng(10)
    lo, hi = -5000, 6000
    steps = np.sort(rng.choice(np.arange(lo + 1, hi), 40, replace=False))
    steps = steps[np.concatenate([[True], np.diff(steps) > 30])]
    for error in (0.3, 2.0, 7.5):
        e = int(np.ceil(error)) + 1
        a = np.arange(lo, hi + 1)
        brute = sum(bool(np.any((steps > x - e) & (steps <= x + e))) for x in a)
        assert ambiguous_accumulators(steps, lo, hi, error) == brute


def test_steps_closer_than_the_rounding_are_refused():
    with pytest.raises(NotExact, match="spans an output step"):
        ambiguous_accumulators(np.array([10, 20, 25]), 0, 100, 2.0)
