"""The nearest integer rescale of a step function that no rescale reproduces exactly.

compiler/rescale_fit.py fits the exact rescale of a requantization's step points when one
exists; when f32 rounding moved some step points off every line (the common case for
ONNX / torch QDQ scales) the nearest is searched here: around the least-squares slope
(`nearest_candidates`), the multipliers priced by how many step points of the rescale
land on the chain's, the least total displacement breaking ties (`_multiplier_costs`,
optionally holding steep transitions, compiler/requant_compose.py), coarse to fine
(`MultiplierSearch`); compiler/rescale_batch.py runs the search for all channels of a
requantization at once. DESIGN "Quantized arithmetic".
"""

from __future__ import annotations

import math

import numpy as np

from .rescale_fit import _MAX_MULTIPLIER, _MAX_SHIFT, NotExact, Rescale, _clamp, intercept_rescale, unique_sorted

# Multipliers tried around the least-squares slope, in both directions.
_NEAREST_MULTIPLIERS = 32
# Rounding terms (those matching the most step points) whose exact cost is compared.
_NEAREST_ROUNDINGS = 4
# Candidate multipliers priced first (every _COARSE-th), before refining around the best.
_COARSE = 8


# The cost of a multiplier no rounding term satisfies the constraints with.
INFEASIBLE = np.iinfo(np.int64).max


def _multiplier_costs(ks_shifted: np.ndarray, ts: np.ndarray, mults: np.ndarray, lo: np.ndarray,
                      hi: np.ndarray, sides: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per channel c and multiplier mults[c, j]: (least sum |U_k - T_k| over the rounding
    terms R tried, that R); ks_shifted (k 2^s) and ts are (channels, levels), lo and hi
    (channels,).

    Level k is reached at T_k exactly when R is in [c_k, c_k + m), c_k = k 2^s - m T_k: the R in
    the most of these intervals is one of the c_k (a sweep over the sorted c and c + m, the
    ends before the starts at equal values), and among the `_NEAREST_ROUNDINGS` best of those
    the least sum |U_k - T_k|, U_k = ceil((k 2^s - R) / m), wins.

    `sides` (two (channels, levels) masks) constrains the levels where the rescale may not be
    below the chain (U_k <= T_k, so R >= c_k) or above it (U_k >= T_k, so R < c_k + m)
    (compiler/requant_compose.py): the R tried are clipped into the interval these leave, its
    ends tried too, and a multiplier that leaves none costs `INFEASIBLE`."""
    n, m = ts.shape[-1], mults[:, :, None]
    cs_unsorted = ks_shifted[:, None, :] - m * ts[:, None, :]
    cs = np.sort(cs_unsorted, axis=-1)
    order = np.argsort(np.concatenate([cs + m, cs], -1), axis=-1, kind="stable")
    # The starts keep their (sorted) order in the sweep: the k-th start met is c_k, at position
    # p_k = k + (ends met before it), so k + 1 - (those ends) = 2 k + 1 - p_k intervals hold it.
    at = np.flatnonzero(order >= n).reshape(cs.shape) - 2 * n * np.arange(mults.size).reshape(*mults.shape, 1)
    rs = np.take_along_axis(cs, _first_largest(2 * np.arange(n) + 1 - at, _NEAREST_ROUNDINGS), -1)
    if sides is not None:
        r_lo = np.where(sides[0][:, None, :], cs_unsorted, cs[..., :1]).max(-1)
        r_hi = np.where(sides[1][:, None, :], cs_unsorted + m - 1, cs[..., -1:] + m - 1).min(-1)
        rs = _clamp(np.concatenate([rs, r_lo[..., None], r_hi[..., None]], -1), r_lo[..., None], r_hi[..., None])
    cost = _rounding_costs(cs_unsorted, cs, rs, ks_shifted, ts, mults, lo, hi)
    if sides is not None:
        cost = np.where((r_lo > r_hi)[..., None], INFEASIBLE, cost)
    best = np.argmin(cost, -1)[..., None]
    return np.take_along_axis(cost, best, -1)[..., 0], np.take_along_axis(rs, best, -1)[..., 0]


def _first_largest(x: np.ndarray, k: int) -> np.ndarray:
    """np.argsort(-x, kind="stable")[..., :k] (per row of the last axis: the indices of its k
    largest values, the largest first, the first of equals first) by k passes of argmax (which
    takes the first of equals), each pick then set below every value: O(k n) per row where the
    sort is O(n log n), several times faster for the 4 of 255. Overwrites `x`."""
    picks = []
    for _ in range(min(k, x.shape[-1])):
        i = np.argmax(x, -1)[..., None]
        picks.append(i)
        np.put_along_axis(x, i, np.iinfo(x.dtype).min, -1)
    return np.concatenate(picks, -1)


# Values of U_k - T_k beyond which `_rounding_costs` sums level by level (`_level_costs`).
_MAX_BANDS = 64
# Keys of one search of `_sorted_counts` stay below this (i64).
_SEARCH_LIMIT = 1 << 62


def _rounding_costs(cs_unsorted: np.ndarray, cs: np.ndarray, rs: np.ndarray, ks_shifted: np.ndarray,
                    ts: np.ndarray, mults: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per channel c, multiplier j and rounding term rs[c, j, i]: sum_k |clamp(U_k, lo, hi + 1) - T_k|
    with U_k = ceil((k 2^s - R) / m), the rescale's step points (`cs_unsorted`: c_k = k 2^s - m T_k;
    `cs`: the same sorted).

    U_k - T_k = ceil((c_k - R) / m) is d exactly for the c_k in (R + (d - 1) m, R + d m]. The c_k
    lie within a few m of each other (the step points are near a line) and R among them, so
    there are a few such d, from d_min (at the least c_k) to d_max (the greatest); where the
    clamp leaves every U_k alone (lo - T_k <= d_min and d_max <= hi + 1 - T_k for every k), the
    sum is counted from the sorted c_k (`_band_costs`: a few searches per R where summing takes
    an operation per level). Elsewhere, and when there are more than `_MAX_BANDS` values of d,
    level by level (`_level_costs`)."""
    m = mults[..., None]
    d_min, d_max = -((rs - cs[..., :1]) // m), -((rs - cs[..., -1:]) // m)
    below, above = int(max(-d_min.min(), 0)), int(max(d_max.max(), 0))
    if below + above > _MAX_BANDS:
        return _level_costs(cs_unsorted, cs[..., 0], cs[..., -1], rs, ks_shifted, ts, mults, lo, hi)
    cost = _band_costs(cs, rs, mults, below, above)
    clamped = (d_min < (lo - ts.min(-1))[:, None, None]) | (d_max > (hi + 1 - ts.max(-1))[:, None, None])
    if clamped.any():
        cost = np.where(clamped, _level_costs(cs_unsorted, cs[..., 0], cs[..., -1], rs, ks_shifted, ts, mults, lo, hi),
                        cost)
    return cost


def _band_costs(cs: np.ndarray, rs: np.ndarray, mults: np.ndarray, below: int, above: int) -> np.ndarray:
    """`_rounding_costs` unclamped, d = ceil((c_k - R) / m) from -`below` to `above`: sum |d| =
    sum over e >= 1 of #(d >= e) + #(d <= -e), #(d >= e) = #(c_k > R + (e - 1) m) and
    #(d <= -e) = #(c_k <= R - e m), counted in the sorted `cs` (`_sorted_counts`)."""
    n = cs.shape[-1]
    steps = np.concatenate([np.arange(above), -np.arange(1, below + 1)])
    ends = (rs - cs[..., :1])[..., None] + steps * mults[..., None, None]  # R + e m, from each row's least c_k
    counts = _sorted_counts(cs.reshape(-1, n), ends.reshape(mults.size, -1)).reshape(ends.shape)
    return (n - counts[..., :above]).sum(-1) + counts[..., above:].sum(-1)


def _sorted_counts(rows: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per row r (non-decreasing) and end e of ends[r] (relative to rows[r, 0]): #(rows[r] - rows[r, 0]
    <= e). One search of the rows laid end to end, row r's values (from 0 to its span) and its
    ends (clipped to [-1, span]) moved up by r (the greatest span + 1), so that a row's ends
    count the rows before it whole and none after; in as many parts as i64 requires."""
    count, n = rows.shape
    rel = rows - rows[:, :1]
    stride = int(rel[:, -1].max(initial=0)) + 1
    per = max(1, _SEARCH_LIMIT // stride)
    out = np.empty(ends.shape, np.int64)
    for a in range(0, count, per):
        r = slice(a, min(count, a + per))
        base = np.arange(r.stop - a, dtype=np.int64)[:, None]
        flat = (rel[r] + base * stride).ravel()
        at = _clamp(ends[r], -1, rel[r, -1:]) + base * stride
        out[r] = np.searchsorted(flat, at.ravel(), "right").reshape(at.shape) - base * n
    return out


# Below this magnitude an i64 converts to f64 exactly and a quotient of two such rounds to the
# right side of every integer (its distance to one is at least 1 / divisor).
_EXACT_F64 = 1 << 52


def _level_costs(cs: np.ndarray, c_min: np.ndarray, c_max: np.ndarray, rs: np.ndarray, ks_shifted: np.ndarray,
                 ts: np.ndarray, mults: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`_rounding_costs` level by level (`cs`: c_k = k 2^s - m T_k, from c_min to c_max per (c, j)).

    U_k - T_k = ceil((c_k - R) / m): where these differences, the costs and the range are below
    2^52 the division is done in f64, exact there and about ten times faster than i64 floor
    division; otherwise in i64."""
    m = mults[:, :, None, None]
    span = c_max - c_min + mults  # |c_k - R| is at most this (R lies in [c_min, c_max + m))
    if span.max() < _EXACT_F64 and ts.shape[-1] * (int((span // mults).max()) + 2) < _EXACT_F64 and \
            int((hi - lo).max()) + 2 < _EXACT_F64:
        d = (cs - c_min[..., None]).astype(np.float64)[:, :, None, :] - \
            (rs - c_min[..., None]).astype(np.float64)[..., None]
        np.divide(d, m, out=d)
        np.ceil(d, out=d)
        below, above = (lo[:, None] - ts).astype(np.float64), (hi[:, None] + 1 - ts).astype(np.float64)
        if np.any(d.min(-1) < below[:, None, None].max(-1)) or np.any(d.max(-1) > above[:, None, None].min(-1)):
            np.clip(d, below[:, None, None, :], above[:, None, None, :], out=d)
        return np.abs(d, out=d).sum(-1).astype(np.int64)
    us = -((rs[..., None] - ks_shifted[:, None, None, :]) // m)
    return np.abs(_clamp(us, lo[:, None, None, None], hi[:, None, None, None] + 1) - ts[:, None, None, :]).sum(-1)


class MultiplierSearch:
    """The least (cost, |m - m0|) among the sorted candidate `mults`, searched every
    `_COARSE`-th first, then around the best at halving distances: 15 of 65 candidates
    priced. (Pricing all: 0.13% fewer differing accumulator values on an int8 ResNet-18,
    a model's requantizations 3.6x slower to fit.) The caller prices what `wanted` asks
    (`_multiplier_costs`), for one channel or many side by side."""

    def __init__(self, mults: np.ndarray, m0: int):
        self.mults, self.m0 = mults, m0
        self.known: dict = {}
        self.step = _COARSE // 2
        self.asked = self._unknown([*range(0, len(mults), _COARSE), len(mults) - 1])

    def _unknown(self, idx) -> list[int]:
        return sorted({i for i in idx if 0 <= i < len(self.mults)} - self.known.keys())

    def wanted(self) -> list[int] | None:
        """The candidate indices to price next, or None when the search is done."""
        while not self.asked:
            if not self.step:
                return None
            best = min(self.known.values())[2]
            self.asked = self._unknown([best - self.step, best + self.step])
            self.step //= 2
        return self.asked

    def priced(self, costs, roundings) -> None:
        for i, c, r in zip(self.asked, costs, roundings):
            self.known[i] = (int(c), abs(int(self.mults[i]) - self.m0), i, int(r))
        self.asked = []

    def result(self) -> tuple[int, int]:
        """(m, R) of the best candidate priced."""
        _, _, i, r = min(self.known.values())
        return int(self.mults[i]), r


def nearest_candidates(qlo: int, qhi: int, ts: np.ndarray, lo: int, hi: int,
                       slope: float) -> tuple[int, int, np.ndarray]:
    """(shift, least-squares multiplier m0, the sorted candidate multipliers around it) of
    `nearest_rescale`, from the least-squares `slope` of the levels over the step points."""
    if not slope > 0:
        raise NotExact("its step points do not increase with the level")
    reach = max(abs(lo), abs(hi), 1)
    kmax = max(abs(qlo + 1), abs(qhi)) + 1
    # Largest shift keeping the multiplier below 2^31 and every product of the search in i64.
    shift = min(_MAX_SHIFT, int(math.floor(math.log2(_MAX_MULTIPLIER / slope))),
                60 - kmax.bit_length(), int(math.floor(math.log2((1 << 60) / (slope * reach)))))
    if shift < 0:
        raise NotExact(f"its slope ({slope:.6g} levels per accumulator unit) needs a multiplier above 2^31")
    m0 = int(round(slope * (1 << shift)))
    width = max(1, int(ts[-1] - ts[0]))
    spread = max(1, int(math.ceil(m0 * 2.0 / width)))  # the least-squares slope is this uncertain
    js = np.arange(-_NEAREST_MULTIPLIERS, _NEAREST_MULTIPLIERS + 1)
    return shift, m0, unique_sorted(np.clip(m0 + (spread * js) // _NEAREST_MULTIPLIERS, 1, _MAX_MULTIPLIER))


def nearest_result(qlo: int, qhi: int, lo: int, hi: int, shift: int, m: int, total: int) -> Rescale:
    """`rescale_fit.intercept_rescale`, raising NotExact where it has none."""
    r = intercept_rescale(qlo, qhi, lo, hi, shift, m, total)
    if r is None:
        raise NotExact("the nearest rescale's intercept does not fit the 32-bit offset")
    return r
