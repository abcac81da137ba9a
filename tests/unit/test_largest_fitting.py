"""tiling.fit_search.largest_fitting_size (super tiling's fit search) against plain bisection."""

import random

from torq.compiler.tiling.fit_search import largest_fitting_size
from torq.compiler.tiling.roots import UNREPRESENTABLE
from torq.compiler.tiling.search import tile_sizes


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
    assert largest_fitting_size(cands, f, 500_000) == _bisection(cands, lambda t: 40_000 + 4_000 * t, 500_000) == 108  # 115 fits; tile_sizes has 108 then 125
    assert len(calls) <= 5  # bisection over these 76 sizes takes 6 or 7


def test_nothing_fits_and_everything_fits():
    cands = list(tile_sizes(64))
    assert largest_fitting_size(cands, lambda t: 10**9, 100) is None
    assert largest_fitting_size(cands, lambda t: 1, 100) == cands[-1]
    assert largest_fitting_size([], lambda t: 1, 100) is None


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
        assert largest_fitting_size(cands, values.__getitem__, budget) == _bisection(cands, values.__getitem__, budget)


def test_exact_model_confirms_its_choice_with_one_probe():
    """With the footprint model's prediction (estimate) exact, the search probes the size it
    predicts to be the largest fitting (the smallest when it predicts none), and nothing else."""
    cands = list(tile_sizes(1500))

    def fp(t):
        return 40_000 + 4_000 * (-(-t // 16) * 16)  # padded to 16: not a line

    for budget in (10_000, 100_000, 500_000, 10**9):
        f, calls = _counting(fp)
        assert largest_fitting_size(cands, f, budget, fp) == _bisection(cands, fp, budget)
        assert len(calls) == 1, (budget, calls)


def test_model_that_says_too_much_fits_is_overruled_by_the_probe():
    """A prediction below the real footprint (a body the model does not see is larger) is
    caught by the probe confirming it; the search then brackets without the model."""
    rng = random.Random(1)
    for _ in range(300):
        cands = sorted(rng.sample(range(1, 400), rng.randint(1, 60)))
        base, slope = rng.randint(0, 10_000), rng.randint(1, 3_000)
        floor = rng.choice([0, rng.randint(0, base + slope * 400)])  # e.g. an op run once, outside the loops

        def footprint(t, base=base, slope=slope, floor=floor):
            return max(base + slope * t, floor)

        def estimate(t, base=base, slope=slope):
            return base + slope * t if t % 3 else None  # blind to the floor, sometimes silent

        budget = rng.randint(0, base + slope * 400)
        assert (largest_fitting_size(cands, footprint, budget, estimate)
                == _bisection(cands, footprint, budget)), (cands, base, slope, floor, budget)
