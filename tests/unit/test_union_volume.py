"""contract/measures.union_volume (compulsory bytes) against a boolean mask of the tensor."""

import random

import numpy as np

from torq.contract.measures import union_volume


def _mask_count(shape, boxes) -> int:
    mask = np.zeros(shape, dtype=bool)
    for off, sizes in boxes:
        mask[tuple(slice(max(0, o), max(0, o + s)) for o, s in zip(off, sizes))] = True
    return int(mask.sum())


def test_hand_checked_boxes():
    assert union_volume((4, 4), []) == 0
    assert union_volume((4, 4), [((0, 0), (2, 2)), ((1, 1), (2, 2))]) == 7  # overlap of 1 counted once
    assert union_volume((4, 4), [((0, 0), (4, 4)), ((1, 1), (1, 1))]) == 16
    assert union_volume((6,), [((0,), (2,)), ((4,), (2,))]) == 4  # a gap between the boxes
    assert union_volume((), [((), ())]) == 1


def test_random_boxes_match_the_mask():
    rng = random.Random(0)
    for _ in range(2000):
        shape = tuple(rng.randint(1, 9) for _ in range(rng.randint(0, 4)))
        boxes = [(tuple(rng.randint(-2, n) for n in shape), tuple(rng.randint(0, n + 1) for n in shape))
                 for _ in range(rng.randint(0, 6))]
        assert union_volume(shape, boxes) == _mask_count(shape, boxes), (shape, boxes)
