"""Integer rescales of a chain of two int8 inputs: a sum (residual add) or a product (gate).

A requantization whose float chain reads two int8 tensors u and v (ONNX QDQ Add or
Mul, a residual add after a convolution, squeeze-excite's gate times its feature
map) is a function q(u, v) on the 65,536 input pairs. The NPU computes it as

    sum:     clamp((u * mu + v * mv + rounding) >> shift, qmin, qmax)
    product: clamp(((u - zu) * (v - zv) * multiplier + rounding) >> shift, qmin, qmax)

in 64-bit integers. `fit_sum` and `fit_product` fit these on all pairs (every
variant of the chain llvm-cpu may compute must be matched within one output
step) and measure the pairs where the rescale differs (`PairFit`): the exact rescale
where one exists (`exact_pair_rescale`, a linear program), else the nearest.
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
    """The `SumRescale` of the chain whose results on the input pairs (u, v) are each of `qs`
    (one per way the host may evaluate it: every one must be matched within one step): exact
    when one exists (`exact_pair_rescale`), else the nearest, fitted on all pairs; raises
    NotExact when none is within one output step of every q in `qs`."""
    q = qs[0]
    free = (q > qmin) & (q < qmax)  # pairs not clamped carry the scales
    if free.sum() < 3:
        raise NotExact("too few unclamped results to fit the scales of the sum")
    design = np.stack([u, v, np.ones(len(u))], 1).astype(np.float64)
    (alpha, beta, gamma), *_ = np.linalg.lstsq(design[free], q[free].astype(np.float64), rcond=None)
    exact = exact_pair_rescale(design, qs, qmin, qmax, np.array([alpha, beta, gamma + 0.5]),
                               lambda w: _sum_rescale(w, qmin, qmax), u, v)
    if exact is not None:
        return _measured(exact, u, v, qs, "sum")
    shift = _sum_shift(alpha, beta, gamma)
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
    return _measured(best[1], u, v, qs, "sum")


def _largest_shift(big: float, reach: float, what: str) -> int:
    """The largest shift keeping a multiplier of scale `big` below 2^31 and a scaled value of
    magnitude `reach` exact in f64 (and so in i64); raises NotExact (`what` ... above 2^31)."""
    shift = min(_MAX_SHIFT - 8, int(math.floor(math.log2(_MAX_MULTIPLIER / big))),
                int(math.floor(math.log2((1 << 53) / reach))))
    if shift < 8:
        raise NotExact(f"{what} above 2^31")
    return shift


def _sum_shift(alpha: float, beta: float, gamma: float) -> int:
    big = max(abs(alpha), abs(beta), 1e-12)
    return _largest_shift(big, big * 256 + abs(gamma) + 1,
                          f"the scales of the sum ({alpha:.6g}, {beta:.6g}) need multipliers")


def _sum_rescale(w: np.ndarray, qmin: int, qmax: int) -> SumRescale | None:
    """The integer form of level = floor(w0 u + w1 v + w2), or None where none fits the widths."""
    try:
        shift = _sum_shift(*w)
    except NotExact:
        return None
    one = 1 << shift
    return SumRescale(int(round(w[0] * one)), int(round(w[1] * one)), int(round(w[2] * one)), shift, qmin, qmax)


def _measured(r, u: np.ndarray, v: np.ndarray, qs: list[np.ndarray], what: str) -> PairFit:
    """The `PairFit` of rescale `r`: raises NotExact if it is over one step off any q in `qs`."""
    g = r(u, v)
    worst = max(int(np.abs(g - x).max()) for x in qs)
    if worst > 1:
        raise NotExact(f"no integer rescale of the {what} within one output step (the nearest is {worst} off)")
    return PairFit(r, max(int((g != x).sum()) for x in qs), len(u))


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
    """The `ProductRescale` of the chain whose results on the input pairs (u, v) are each of
    `qs` (as `fit_sum`): the zero points from a least-squares fit of q ~ a uv + b u + c v + d
    (a (u - zu)(v - zv) expands to it), then multiplier and rounding on the product, exact
    when one exists, else the nearest; raises NotExact when the chain is no such product or
    none is within one output step."""
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
    pmax = float(np.abs(p).max())
    design = np.stack([p, np.ones(len(p))], 1).astype(np.float64)
    (m, d), *_ = np.linalg.lstsq(design[free], q[free].astype(np.float64), rcond=None)
    exact = exact_pair_rescale(design, qs, qmin, qmax, np.array([m, d + 0.5]),
                               lambda w: _product_rescale(zu, zv, w, pmax, qmin, qmax), u, v)
    if exact is not None:
        return _measured(exact, u, v, qs, "product")
    shift = _product_shift(a, pmax)
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
    return _measured(best[1], u, v, qs, "product")


def _product_shift(a: float, pmax: float) -> int:
    big = max(abs(a), 1e-12)
    return _largest_shift(big, big * (pmax + 1), f"the scale of the product ({a:.6g}) needs a multiplier")


def _product_rescale(zu: int, zv: int, w: np.ndarray, pmax: float, qmin: int, qmax: int) -> ProductRescale | None:
    """The integer form of level = floor(w0 (u - zu)(v - zv) + w1), or None where none fits."""
    try:
        shift = _product_shift(w[0], pmax)
    except NotExact:
        return None
    one = 1 << shift
    return ProductRescale(zu, zv, int(round(w[0] * one)), int(round(w[1] * one)), shift, qmin, qmax)


# Pairs whose level boundary lies this close (in levels) to the least-squares guess start the
# linear program; the pairs the integer form then misses are added, up to `_LP_ROUNDS` times.
_NEAR_BOUNDARY = 0.05
_LP_ROUNDS = 8


def exact_pair_rescale(features: np.ndarray, qs: list[np.ndarray], qmin: int, qmax: int, guess: np.ndarray,
                       to_rescale, u: np.ndarray, v: np.ndarray):
    """The integer rescale (`to_rescale` of coefficients w) equal to q = qs[0] on every pair,
    where one exists; else, where the variants in `qs` disagree, one equal to some variant on
    every pair; else None.

    level = floor(features @ w), clamped, is a linear separation of the pairs by level: q <= x
    < q + 1 for x = features @ w (one side only where q is clamped). The w of the largest
    margin is a linear program (HiGHS, scipy.optimize.linprog); f32 rounding moves a few
    pairs off the least-squares scales, which the grid search of the multipliers then misses,
    while this finds the w that still separates them all when there is one (every residual
    add of an ONNX Runtime-quantized ResNet-18). qs[0] is llvm-cpu's default FMA contraction
    (`f32_chain.Chain.contraction_variants`); the others may differ on a few pairs."""
    low, high = np.min(qs, axis=0), np.max(qs, axis=0)
    tries = [(qs[0], qs[0])] + ([(low, high)] if np.any(low != high) else [])
    for lower, upper in tries:
        r = _separating_rescale(features, lower, upper, qmin, qmax, guess, to_rescale, u, v)
        if r is not None:
            return r
    return None


def _separating_rescale(features, lower, upper, qmin, qmax, guess, to_rescale, u, v):
    """`exact_pair_rescale` with levels between `lower` and `upper` on each pair. Only the pairs
    near a level boundary of the least-squares `guess` constrain the first linear program; the
    integer form is checked on all, and the pairs it misses join the next (cutting planes)."""
    x = features @ guess
    near = np.abs(x - np.rint(x)) < _NEAR_BOUNDARY
    for _ in range(_LP_ROUNDS):
        w = _max_margin(features[near], lower[near], upper[near], qmin, qmax)
        r = None if w is None else to_rescale(w)
        if r is None:
            return None
        g = r(u, v)
        missed = (g < lower) | (g > upper)
        if not missed.any():
            return r
        near |= missed
    return None


def _max_margin(features: np.ndarray, lower: np.ndarray, upper: np.ndarray, qmin: int,
                qmax: int) -> np.ndarray | None:
    """The w with lower + t <= features @ w <= upper + 1 - t (the bound of a clamped level
    dropped) at the largest margin t, or None when t > 0 is out of reach."""
    from scipy.optimize import linprog

    ones = np.ones((len(features), 1))
    above, below = lower > qmin, upper < qmax
    rows = np.concatenate([np.hstack([-features, ones])[above], np.hstack([features, ones])[below]])
    bounds = np.concatenate([-lower[above], upper[below] + 1.0]).astype(np.float64)
    cost = np.zeros(features.shape[1] + 1)
    cost[-1] = -1.0
    solved = linprog(cost, A_ub=rows, b_ub=bounds, bounds=[(None, None)] * features.shape[1] + [(None, 1.0)],
                     method="highs")
    if solved.status != 0 or solved.x[-1] <= 0:
        return None
    return solved.x[:-1]
