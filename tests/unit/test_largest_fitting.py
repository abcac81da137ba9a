"""tiling.search._largest_fitting (super tiling's fit search) against plain bisection."""

import random

from torq.compiler.tiling.roots import UNREPRESENTABLE
from torq.compiler.tiling.search import _largest_fitting, tile_sizes


def _bisection(cands, footprint, budget):
    best = None
    for t in cands:  # the definition: every size up to the boundary fits
        if footprint(t) <= budget:
            best = t
        else:
            break
    return best


def _counting(footprint):
    calls = []

    def f(t):
        calls.append(t)
        return footprint(t)
    return f, calls


def test_linear_footprint_few_probes():
    cands = list(tile_sizes(1500))
    f, calls = _counting(lambda t: 40_000 + 4_000 * t)
    assert _largest_fitting(cands, f, 500_000) == _bisection(cands, lambda t: 40_000 + 4_000 * t, 500_000) == 108  # 115 fits; tile_sizes has 108 then 125
    assert len(calls) <= 5  # bisection over these 76 sizes takes 6 or 7


def test_nothing_fits_and_everything_fits():
    cands = list(tile_sizes(64))
    assert _largest_fitting(cands, lambda t: 10**9, 100) is None
    assert _largest_fitting(cands, lambda t: 1, 100) == cands[-1]
    assert _largest_fitting([], lambda t: 1, 100) is None


def test_random_growing_footprints_match_bisection():
    rng = random.Random(0)
    for _ in range(500):
        cands = sorted(rng.sample(range(1, 400), rng.randint(1, 60)))
        base, slope, pad = rng.randint(0, 10_000), rng.randint(1, 3_000), rng.choice([1, 8, 32])
        unrepresentable_from = rng.choice([None, rng.randint(1, 400)])

        def footprint(t, base=base, slope=slope, pad=pad, cut=unrepresentable_from):
            if cut is not None and t >= cut:
                return UNREPRESENTABLE
            return base + slope * (-(-t // pad) * pad) + rng.randint(0, slope // 2)  # padded, noisy, still growing

        values = {t: footprint(t) for t in cands}
        for t0, t1 in zip(cands, cands[1:]):  # make it nondecreasing
            values[t1] = max(values[t1], values[t0])
        budget = rng.randint(0, base + slope * 400)
        assert _largest_fitting(cands, values.__getitem__, budget) == _bisection(cands, values.__getitem__, budget)
