"""contract/timing._Accesses (the DDR hazard check) against the definition: a loop over every
earlier access, the latest-ending overlapping one, the first recorded on a tie."""

import random

from torq.contract.timing import _Accesses


def _loop(recorded, offsets, sizes):
    t, who = 0, -1
    for o, s, end, cmd in recorded:
        if end > t and all(a < b + m and b < a + n for a, n, b, m in zip(offsets, sizes, o, s)):
            t, who = end, cmd
    return t, who


def test_matches_the_loop_on_random_boxes():
    rng = random.Random(0)
    for _ in range(300):
        rank = rng.randint(1, 3)
        acc, recorded = _Accesses(rank), []
        for cmd in range(rng.randint(1, 40)):  # past the first growth of the arrays (8)
            box = (tuple(rng.randint(0, 6) for _ in range(rank)), tuple(rng.randint(1, 4) for _ in range(rank)))
            assert acc.latest_overlapping(*box) == _loop(recorded, *box)
            end = rng.randint(1, 10)  # ties are frequent
            acc.add(*box, end, cmd)
            recorded.append((*box, end, cmd))


def test_disjoint_boxes_do_not_wait():
    acc = _Accesses(2)
    acc.add((0, 0), (2, 2), 100, 7)
    assert acc.latest_overlapping((2, 0), (2, 2)) == (0, -1)
    assert acc.latest_overlapping((1, 1), (2, 2)) == (100, 7)
