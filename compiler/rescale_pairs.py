"""Integer rescales of a chain of two int8 inputs: a sum (residual add) or a product (gate).

A requantization whose float chain reads two int8 tensors u and v (ONNX QDQ Add or
Mul, a residual add after a convolution, squeeze-excite's gate times its feature
map) is a function q(u, v) on the 65,536 input pairs. The NPU computes it as

    sum:     clamp((u * mu + v * mv + rounding) >> shift, qmin, qmax)
    product: clamp(((u - zu) * (v - zv) * multiplier + rounding) >> shift, qmin, qmax)

in 64-bit integers. `fit_sum` and `fit_product` fit these on all pairs (every
variant of the chain llvm-cpu may compute must be matched within one output
step) and measure the pairs where the rescale differs (`PairFit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .rescale_fit import _MAX_MULTIPLIER, _MAX_SHIFT, NotExact


@dataclass
class SumRescale:
    """q = clamp((u * mu + v * mv + rounding) >> shift, qmin, qmax) of two integer inputs, in i64:
    the integer form of requantizing the sum of two dequantized int8 tensors (a residual add)."""
    mu: int
    mv: int
    rounding: int
    shift: int
    qmin: int
    qmax: int

    def __call__(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        s = np.asarray(u, np.int64) * self.mu + np.asarray(v, np.int64) * self.mv + self.rounding
        return np.clip(s >> self.shift, self.qmin, self.qmax)


@dataclass
class ProductRescale:
    """q = clamp(((u - zu) * (v - zv) * multiplier + rounding) >> shift, qmin, qmax) of two integer
    inputs, in i64: the integer form of requantizing the product of two dequantized int8
    tensors (squeeze-excite's gate times its feature map)."""
    zu: int
    zv: int
    multiplier: int
    rounding: int
    shift: int
    qmin: int
    qmax: int

    def __call__(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        p = (np.asarray(u, np.int64) - self.zu) * (np.asarray(v, np.int64) - self.zv)
        return np.clip((p * self.multiplier + self.rounding) >> self.shift, self.qmin, self.qmax)


@dataclass
class PairFit:
    """The integer rescale fitted to a chain of two int8 inputs, measured on every pair."""
    rescale: SumRescale | ProductRescale
    differing: int  # input pairs (of `pairs`) on which the rescale's level differs from the chain's
    pairs: int


# Multipliers tried around the least-squares scales, per input and direction.
_SUM_MULTIPLIERS = 3


def fit_sum(u: np.ndarray, v: np.ndarray, qs: list[np.ndarray], qmin: int, qmax: int) -> PairFit:
    """The `SumRescale` nearest the chain whose results on the input pairs (u, v) are each of `qs`
    (one per way the host may evaluate it: every one must be matched within one step), fitted
    on all pairs; raises NotExact when none is within one output step of every q in `qs`."""
    q = qs[0]
    free = (q > qmin) & (q < qmax)  # pairs not clamped carry the scales
    if free.sum() < 3:
        raise NotExact("too few unclamped results to fit the scales of the sum")
    design = np.stack([u[free], v[free], np.ones(int(free.sum()))], 1).astype(np.float64)
    (alpha, beta, gamma), *_ = np.linalg.lstsq(design, q[free].astype(np.float64), rcond=None)
    big = max(abs(alpha), abs(beta), 1e-12)
    shift = min(_MAX_SHIFT - 8, int(math.floor(math.log2(_MAX_MULTIPLIER / big))),
                int(math.floor(math.log2((1 << 53) / (big * 256 + abs(gamma) + 1)))))
    if shift < 8:
        raise NotExact(f"the scales of the sum ({alpha:.6g}, {beta:.6g}) need multipliers above 2^31")
    one = 1 << shift
    mu0, mv0 = int(round(alpha * one)), int(round(beta * one))
    spread = max(1, one >> 14)  # the least-squares scales are this uncertain
    best = None
    for du in range(-_SUM_MULTIPLIERS, _SUM_MULTIPLIERS + 1):
        for dv in range(-_SUM_MULTIPLIERS, _SUM_MULTIPLIERS + 1):
            mu, mv = mu0 + du * spread, mv0 + dv * spread
            r, matched = _best_rounding(u * mu + v * mv, q, qmin, qmax, one)
            key = (-matched, abs(du) + abs(dv))
            if best is None or key < best[0]:
                best = (key, SumRescale(mu, mv, r, shift, qmin, qmax))
    g = best[1](u, v)
    worst = max(int(np.abs(g - x).max()) for x in qs)
    if worst > 1:
        raise NotExact(f"no integer rescale of the sum within one output step (the nearest is {worst} off)")
    return PairFit(best[1], max(int((g != x).sum()) for x in qs), len(u))


def _best_rounding(s: np.ndarray, q: np.ndarray, qmin: int, qmax: int, one: int) -> tuple[int, int]:
    """(R, pairs matched): the rounding term R with (s + R) >> shift, clamped, equal to q on the most
    pairs. Pair i matches for R in [q one - s, (q + 1) one - s), open-ended where q is clamped;
    a sweep over the interval ends finds the R inside the most intervals."""
    lo_end = np.where(q <= qmin, np.iinfo(np.int64).min // 4, q * one - s)
    hi_end = np.where(q >= qmax, np.iinfo(np.int64).max // 4, (q + 1) * one - s)
    # Events as 2 x position + 1 for a start, 2 x position for an end: one sort puts them in
    # order, an interval's end before a start at the same position.
    events = np.concatenate([lo_end * 2 + 1, hi_end * 2])
    events.sort()
    inside = np.cumsum((events & 1) * 2 - 1)
    k = int(np.argmax(inside))
    return int(events[k] >> 1), int(inside[k])


def fit_product(u: np.ndarray, v: np.ndarray, qs: list[np.ndarray], qmin: int, qmax: int) -> PairFit:
    """The `ProductRescale` nearest the chain whose results on the input pairs (u, v) are each of
    `qs` (as `fit_sum`): the zero points from a least-squares fit of q ~ a uv + b u + c v + d
    (a (u - zu)(v - zv) expands to it), then multiplier and rounding on the product; raises
    NotExact when the chain is no such product or none is within one output step."""
    q = qs[0]
    free = (q > qmin) & (q < qmax)
    if free.sum() < 4:
        raise NotExact("too few unclamped results to fit the scale of the product")
    uf, vf = u[free].astype(np.float64), v[free].astype(np.float64)
    design = np.stack([uf * vf, uf, vf, np.ones(len(uf))], 1)
    (a, b, c, _), *_ = np.linalg.lstsq(design, q[free].astype(np.float64), rcond=None)
    if abs(a) < 1e-12:
        raise NotExact("the chain of two int8 inputs is neither a sum nor a product")
    zu, zv = int(round(-c / a)), int(round(-b / a))
    if max(abs(zu), abs(zv)) > 1 << 16:
        raise NotExact(f"the product's zero points ({-c / a:.6g}, {-b / a:.6g}) are out of range")
    p = (u.astype(np.int64) - zu) * (v.astype(np.int64) - zv)
    big = abs(a)
    shift = min(_MAX_SHIFT - 8, int(math.floor(math.log2(_MAX_MULTIPLIER / big))),
                int(math.floor(math.log2((1 << 53) / (big * float(np.abs(p).max() + 1))))))
    if shift < 8:
        raise NotExact(f"the scale of the product ({a:.6g}) needs a multiplier above 2^31")
    one = 1 << shift
    m0, spread = int(round(a * one)), max(1, one >> 14)
    best = None
    while True:  # around the best multiplier so far, ever finer: the exact one where it exists
        for dm in range(-_SUM_MULTIPLIERS, _SUM_MULTIPLIERS + 1):
            m = m0 + dm * spread
            r, matched = _best_rounding(p * m, q, qmin, qmax, one)
            key = (-matched, abs(m - int(round(a * one))))
            if best is None or key < best[0]:
                best = (key, ProductRescale(zu, zv, m, r, shift, qmin, qmax))
        if spread == 1 or best[0][0] == -len(q):
            break
        m0, spread = best[1].multiplier, max(1, spread >> 4)
    g = best[1](u, v)
    worst = max(int(np.abs(g - x).max()) for x in qs)
    if worst > 1:
        raise NotExact(f"no integer rescale of the product within one output step (the nearest is {worst} off)")
    return PairFit(best[1], max(int((g != x).sum()) for x in qs), len(u))
