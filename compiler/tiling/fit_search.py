"""The fit search of super tiling: the largest of a root's ascending candidate tile sizes
whose LRAM footprint fits, in few probes (each a tiling, a lowering and an allocation),
helped by the footprint model's predictions when it has them (footprint_model.py)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .roots import UNREPRESENTABLE


def largest_fitting_size(cands: Sequence[int], footprint, budget: int, estimate=None) -> int | None:
    """The largest of the ascending sizes `cands` whose footprint(t) fits `budget`; None when
    not even the first fits. A tile's footprint grows with its size, about linearly (the
    buffers a tile dim indexes scale with it, padding aside). `estimate(t)`, when given, is
    the footprint model's prediction (footprint_model.py; None where it has none): once it
    predicts, the largest size it says fits is probed (the allocator confirms it) and the
    next size is taken not to fit on its word; a prediction the probe contradicts ends the
    model's say in this search. Otherwise the search keeps a bracket (largest size known
    to fit, smallest known not to), bisects it until two probes give a line, then probes
    where the line through the two latest probes meets the budget; a predicted size that
    fits is confirmed by probing the next one, and when two steps in a row do not halve
    the bracket the next one bisects it. On a footprint that grows with t this finds what
    bisection finds, in fewer probes (each a lowering and an allocation)."""
    lo, hi = -1, len(cands)  # cands[lo] fits (-1: none known), cands[hi] does not (len: none known)
    seen: list[tuple[int, int]] = []  # (size, footprint) of the probes with a representable footprint
    widths = [hi - lo]
    confirm = False
    while hi - lo > 1:
        modelled = _modelled_bound(cands, estimate, budget, lo, hi) if estimate is not None else None
        if modelled is not None:
            i, boundary = modelled
            if i == lo:  # the model says the next size does not fit
                hi = lo + 1
                break
            f = footprint(cands[i])
            if f < UNREPRESENTABLE:
                seen.append((cands[i], f))
            if (f <= budget) == (i == boundary - 1):  # the probe agrees with the model
                lo, hi = (i, boundary) if f <= budget else (lo, i)
            else:  # the model was wrong here: the bracket alone from now on
                (lo, hi), estimate = ((i, hi) if f <= budget else (lo, i)), None
            continue
        predicted = False
        if confirm:
            i = lo + 1
        elif len(seen) < 2 or (len(widths) > 2 and widths[-1] > widths[-3] // 2):
            i = (lo + hi) // 2
        else:
            i, predicted = _predicted_index(cands, seen, budget, lo, hi), True
        f = footprint(cands[i])
        if f < UNREPRESENTABLE:
            seen.append((cands[i], f))
        if f <= budget:
            lo = i
        else:
            hi = i
        confirm = predicted and lo == i
        widths.append(hi - lo)
    return cands[lo] if lo >= 0 else None


def _modelled_bound(cands: Sequence[int], estimate, budget: int, lo: int, hi: int) -> tuple[int, int] | None:
    """(i, b): bisecting (lo, hi) on the model's predictions, cands[b] is the smallest
    size it says does not fit (or hi) and i = b - 1 the largest it says fits (lo when none
    does); when none does and none is known to fit (lo = -1), i = 0 with b = 0, a probe
    of the smallest size. None when a prediction it needs is missing."""
    a, b = lo, hi
    while b - a > 1:
        m = (a + b) // 2
        f = estimate(cands[m])
        if f is None:
            return None
        a, b = (m, b) if f <= budget else (a, m)
    return (a, b) if a >= 0 else (0, 0)


def _predicted_index(cands: Sequence[int], seen: list[tuple[int, int]], budget: int, lo: int, hi: int) -> int:
    """The index in (lo, hi) of the largest size the line through the two latest probes
    predicts to fit (the middle when they give no rising line)."""
    (t0, f0), (t1, f1) = seen[-2], seen[-1]
    if t0 == t1 or (f1 - f0) * (t1 - t0) <= 0:
        return (lo + hi) // 2
    t = t0 + (budget - f0) * (t1 - t0) / (f1 - f0)
    return min(max(bisect.bisect_right(cands, t) - 1, lo + 1), hi - 1)
