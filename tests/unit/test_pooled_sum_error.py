"""requant_pooling.summation_error: the bound on llvm-cpu's f32 rounding of a pooled sum, at the
integer sum S, checked by brute force on f32 sums in random orders (terms of mostly one sign, as
a pool of ReLU or SiLU outputs, where the bound through S is far below the worst case)."""

import numpy as np
import pytest

from torq.compiler.requant_pooling import PooledSum, summation_error


@pytest.mark.parametrize("w_range", [(-2, 255), (-128, 127), (0, 40)])
def test_pooled_sum_error_bound_holds(w_range):
    rng = np.random.default_rng(sum(map(abs, w_range)))
    n, c = 3136, np.float32(0.0123)
    pooled = PooledSum(None, 0, float(c), n, [], w_range)
    worst = 0.0
    for trial in range(60):
        hi = rng.integers(w_range[0] + 1, w_range[1] + 1)  # some pools near the bottom of the range
        w = rng.integers(w_range[0], hi + 1, n)
        terms = (w.astype(np.float32) * c).astype(np.float32)
        acc = np.float32(0)
        for t in terms[rng.permutation(n)]:
            acc = np.float32(acc + t)
        S = int(w.sum())
        units = abs(float(acc) - float(c) * S) / float(c)
        bound = float(summation_error(pooled, np.array([S]))[0])
        worst = max(worst, units / bound)
    assert 0 < worst <= 1, worst


def test_bound_through_the_sum_is_below_the_worst_case_for_one_signed_terms():
    pooled = PooledSum(None, 0, 1.0, 3136, [], (-2, 255))
    worst_case = float(summation_error(pooled, np.array([255 * 3136]))[0])  # every term 255
    near_zero = float(summation_error(pooled, np.array([3136 * 10]))[0])
    assert near_zero < worst_case / 10
