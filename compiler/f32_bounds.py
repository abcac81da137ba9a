"""What a requantization chain's value does over an accumulator range: direction and enclosure.

compiler/f32_chain.py evaluates a chain on the ends of a range and derives,
op by op, whether each value is monotone on the whole range (its
direction) and, where it is not, an enclosure: bounds every value on the
range lies within, by interval arithmetic on its operands' bounds (a
monotone value's bounds are its values at the ends). Both rest on f32
rounding being monotone: fl(x op y) is monotone in the exact x op y, so
the rounded results at the corners of the operands' intervals bound it.

An enclosure that is one integer at the chain's result proves the level
constant on the range where the direction does not (hardswish's
x * relu6(x + 3) / 6 on a piece of [-3, 0]: a negative increasing factor
times a positive increasing one; SiLU's x / (1 + exp(-x)) far left).

Everything here is per row: a value's points are its last axis, and each
row of them (one range's ends) has its own direction and bounds, so many
ranges are analysed in one evaluation. A direction is +1 / -1 (monotone),
0 (constant) or NaN (not monotone, or unknown); a bound is NaN when unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Val:
    v: np.ndarray
    dir: np.ndarray  # per row: +1 / -1 monotone in a, 0 constant, NaN not monotone
    t: str  # "f32" or an integer type name
    # Per row, bounds of the value over the range where it is not monotone (NaN: unknown).
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None


UNKNOWN = np.float64(np.nan)


def combine(d1, d2):
    """Direction of a sum of values of directions d1 and d2 (monotone when they agree)."""
    if np.ndim(d1) == 0 and np.ndim(d2) == 0:  # (a value evaluation's: no per-row arrays to build)
        d1, d2 = float(d1), float(d2)
        return np.float64(d2 if d1 == 0 else d1 if d2 == 0 or d1 == d2 else np.nan)
    return np.where(d1 == 0, d2, np.where(d2 == 0, d1, np.where(d1 == d2, d1, np.nan)))


def _rows(v: np.ndarray, reduce) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return reduce(v, -1) if v.ndim else v


def sign(v: np.ndarray) -> np.ndarray:
    """Per row, the sign of the value's first point (a constant's sign); 0 for a NaN."""
    s = np.sign(np.asarray(v[..., 0] if np.ndim(v) else v, np.float64))
    return np.where(np.isnan(s), 0.0, s)


def neg(d):
    return -d


def _range_sign(x: Val, strict: bool = False) -> np.ndarray:
    """Per row: +1 / -1 when monotone `x` is >= 0 / <= 0 (> 0 / < 0 when `strict`) on the
    whole range evaluated: a monotone value's extremes are at the range's ends, which are
    among the points (`Chain.direction` evaluates exactly those); NaN when its sign changes."""
    lo, hi = _rows(x.v, np.min), _rows(x.v, np.max)
    pos = (lo > 0) | ((lo == 0) & (not strict))
    neg_ = (hi < 0) | ((hi == 0) & (not strict))
    s = np.where(pos, 1.0, np.where(neg_, -1.0, np.nan))
    return np.where(np.isnan(x.dir) | np.isnan(lo) | np.isnan(hi), np.nan, s)


def mul_dir(x: Val, y: Val) -> np.ndarray:
    """Direction of x * y. With one factor constant, the other's times its sign. With both
    monotone and each of one sign on the range, |x| |y| is a product of non-negative monotone
    values, monotone when their directions agree (f32 rounding is monotone), and x y is it
    times the two signs (hardswish's x * relu6(x + 3) / 6 on x >= 0)."""
    if _unknown_times_any(x.dir, y.dir):
        return UNKNOWN
    by_constant = _by_constant(x, y, True)
    monotone = (x.dir != 0) & (y.dir != 0) & ~np.isnan(x.dir) & ~np.isnan(y.dir)
    if not np.any(monotone):  # (a value evaluation of many points: the range signs not needed)
        return by_constant
    sx, sy = _range_sign(x), _range_sign(y)
    return np.where(monotone, combine(x.dir * sx, y.dir * sy) * sx * sy, by_constant)


def div_dir(x: Val, y: Val) -> np.ndarray:
    """Direction of x / y: by a constant, x's times its sign; by a monotone y of one strict sign
    on the range, |x| / |y| is monotone when |x| and 1 / |y| agree (SiLU's x / (1 + exp(-x)))."""
    if _unknown_times_any(x.dir, y.dir):
        return UNKNOWN
    by_constant = _by_constant(x, y, False)
    monotone = (y.dir != 0) & ~np.isnan(x.dir) & ~np.isnan(y.dir)
    if not np.any(monotone):
        return by_constant
    sx, sy = _range_sign(x), _range_sign(y, strict=True)
    return np.where(monotone, combine(x.dir * sx, -y.dir * sy) * sx * sy, by_constant)


def _unknown_times_any(d1, d2) -> bool:
    """Whether a product (quotient) of values of directions d1, d2 has an unknown direction
    everywhere: one of them unknown (NaN) and both one direction for all rows (a value
    evaluation, which tracks no directions, takes this path)."""
    return np.ndim(d1) == 0 and np.ndim(d2) == 0 and (d1 != d1 or d2 != d2)


def _by_constant(x: Val, y: Val, either: bool) -> np.ndarray:
    """Direction of a product by a constant factor: y's (or x's when `either`, a product), NaN
    elsewhere; a factor's sign is read only where it is constant (a large value's is not)."""
    out = np.where(y.dir == 0, x.dir * sign(y.v), np.nan) if np.any(y.dir == 0) else x.dir * np.nan
    if either and np.any(x.dir == 0):
        out = np.where(x.dir == 0, y.dir * sign(x.v), out)
    return out


def equal_ends_constant(x: Val) -> np.ndarray:
    """x's direction with rows monotone and equal at the range's ends made 0: one constant
    on the whole range."""
    if np.ndim(x.dir) == 0 and (x.dir == 0 or x.dir != x.dir):  # constant, or unknown: nothing to make 0
        return x.dir
    v = np.asarray(x.v)
    if not v.ndim or not np.any((x.dir != 0) & ~np.isnan(x.dir)):
        return x.dir
    equal = np.all(v == v[..., :1], -1)
    return np.where((x.dir != 0) & ~np.isnan(x.dir) & equal, 0.0, x.dir)


# --- enclosures ----------------------------------------------------------------------------

def bounds(x: Val) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (least, greatest) value of `x` over the range (NaN: unknown)."""
    v = np.asarray(x.v, np.float64)
    nan = _rows(np.isnan(v), np.any)
    lo = np.where(nan, np.nan, _rows(v, np.min))
    hi = np.where(nan, np.nan, _rows(v, np.max))
    if x.lo is None:
        return np.where(np.isnan(x.dir), np.nan, lo), np.where(np.isnan(x.dir), np.nan, hi)
    return np.where(np.isnan(x.dir), x.lo, lo), np.where(np.isnan(x.dir), x.hi, hi)


def _hull(values: list) -> tuple[np.ndarray, np.ndarray]:
    v = np.stack(np.broadcast_arrays(*(np.asarray(a, np.float64) for a in values)))
    nan = np.isnan(v).any(0)
    return np.where(nan, np.nan, v.min(0)), np.where(nan, np.nan, v.max(0))


def _corners(f, bx, by):
    return _hull([f(np.float32(p), np.float32(q)) for p in bx for q in by])


def _unary(fn, b, ulps: int):
    ends = np.asarray(fn(np.stack(np.broadcast_arrays(*b)).astype(np.float64)), np.float64)
    lo, hi = ends.min(0), ends.max(0)
    for _ in range(ulps):  # llvm-cpu's approximations, a few ulps off
        lo = np.nextafter(np.float32(lo), np.float32(-np.inf)).astype(np.float64)
        hi = np.nextafter(np.float32(hi), np.float32(np.inf)).astype(np.float64)
    nan = np.isnan(lo) | np.isnan(hi)
    return np.where(nan, np.nan, lo), np.where(nan, np.nan, hi)


def enclose(name: str, args: list[Val], fn=None, transcendental_ulps: int = 0
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row, bounds of op `name`'s f32 / integer result over the range from its operands'
    bounds (NaN: unknown), or None for an op without a rule; `fn` evaluates a unary op on an
    array (a rounding, a cast, a transcendental function, monotone in its argument with its
    sense given by the sign of `fn`'s slope, found from the two bounds' images)."""
    bs = [bounds(a) for a in args]
    f32 = np.float32
    with np.errstate(all="ignore"):
        if name in ("arith.mulf", "arith.muli"):
            return _corners(np.multiply, *bs)
        if name == "arith.divf":
            (y_lo, y_hi) = bs[1]
            lo, hi = _corners(np.divide, bs[0], bs[1])
            signed = (y_lo > 0) | (y_hi < 0)
            return np.where(signed, lo, np.nan), np.where(signed, hi, np.nan)
        if name == "arith.addf":
            return _hull([f32(bs[0][0]) + f32(bs[1][0]), f32(bs[0][1]) + f32(bs[1][1])])
        if name == "arith.addi":
            return bs[0][0] + bs[1][0], bs[0][1] + bs[1][1]
        if name == "arith.subf":
            return _hull([f32(bs[0][0]) - f32(bs[1][1]), f32(bs[0][1]) - f32(bs[1][0])])
        if name == "arith.subi":
            return bs[0][0] - bs[1][1], bs[0][1] - bs[1][0]
        if name == "arith.negf":
            return -bs[0][1], -bs[0][0]
        if name in ("arith.maxnumf", "arith.maximumf", "arith.maxsi"):
            return np.maximum(bs[0][0], bs[1][0]), np.maximum(bs[0][1], bs[1][1])
        if name in ("arith.minnumf", "arith.minimumf", "arith.minsi"):
            return np.minimum(bs[0][0], bs[1][0]), np.minimum(bs[0][1], bs[1][1])
        if name == "arith.select":  # either branch, whichever the condition picks
            return np.minimum(bs[0][0], bs[1][0]), np.maximum(bs[0][1], bs[1][1])
        if fn is not None and len(bs) == 1:
            return _unary(fn, bs[0], transcendental_ulps)
    return None


def enclose_fma(x: Val, y: Val, z: Val, fma) -> tuple[np.ndarray, np.ndarray]:
    """Per row, bounds of fma(x, y, z) (one rounding of x y + z, monotone in it) from the
    operands'."""
    bx, by, (z_lo, z_hi) = bounds(x), bounds(y), bounds(z)
    with np.errstate(all="ignore"):
        low = [fma(np.float32(p), np.float32(q), np.float32(z_lo)) for p in bx for q in by]
        high = [fma(np.float32(p), np.float32(q), np.float32(z_hi)) for p in bx for q in by]
    return _hull([_first_min(low), _first_max(high)])


def _first_min(values: list) -> np.ndarray:
    """Python's min over the list, per element: a NaN is kept only where it comes first."""
    m = np.asarray(values[0], np.float64)
    for v in values[1:]:
        m = np.where(np.asarray(v, np.float64) < m, v, m)
    return m


def _first_max(values: list) -> np.ndarray:
    m = np.asarray(values[0], np.float64)
    for v in values[1:]:
        m = np.where(np.asarray(v, np.float64) > m, v, m)
    return m
