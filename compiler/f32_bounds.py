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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Val:
    v: np.ndarray
    dir: int | None  # +1 / -1: monotone in a; 0: constant; None: not monotone
    t: str  # "f32" or an integer type name
    # Bounds of the value over the range when it is not monotone (None: unknown).
    lo: float | None = None
    hi: float | None = None


def combine(d1, d2):
    if d1 is None or d2 is None:
        return None
    if d1 == 0 or d2 == 0 or d1 == d2:
        return d1 or d2
    return None


def sign(x) -> int:
    x = float(np.asarray(x).reshape(-1)[0])
    return (x > 0) - (x < 0)


def neg(d: int | None) -> int | None:
    return None if d is None else -d


def _range_sign(x: Val, strict: bool = False) -> int | None:
    """+1 / -1 when monotone `x` is >= 0 / <= 0 (> 0 / < 0 when `strict`) on the whole range
    evaluated: a monotone value's extremes are at the range's ends, which are among the points
    (`Chain.direction` evaluates exactly those); None when its sign changes."""
    v = np.asarray(x.v, np.float64)
    if x.dir is None or np.isnan(v).any():
        return None
    lo, hi = float(v.min()), float(v.max())
    if lo > 0 or (lo == 0 and not strict):
        return 1
    if hi < 0 or (hi == 0 and not strict):
        return -1
    return None


def mul_dir(x: Val, y: Val) -> int | None:
    """Direction of x * y. With one factor constant, the other's times its sign. With both
    monotone and each of one sign on the range, |x| |y| is a product of non-negative monotone
    values, monotone when their directions agree (f32 rounding is monotone), and x y is it
    times the two signs (hardswish's x * relu6(x + 3) / 6 on x >= 0)."""
    if x.dir is None or y.dir is None:
        return None
    if not (x.dir and y.dir):
        return x.dir * sign(y.v) if y.dir == 0 else y.dir * sign(x.v)
    sx, sy = _range_sign(x), _range_sign(y)
    if sx is None or sy is None:
        return None
    d = combine(x.dir * sx, y.dir * sy)
    return None if d is None else d * sx * sy


def div_dir(x: Val, y: Val) -> int | None:
    """Direction of x / y: by a constant, x's times its sign; by a monotone y of one strict sign
    on the range, |x| / |y| is monotone when |x| and 1 / |y| agree (SiLU's x / (1 + exp(-x)))."""
    if x.dir is None or y.dir is None:
        return None
    if y.dir == 0:
        return x.dir * sign(y.v)
    sx, sy = _range_sign(x), _range_sign(y, strict=True)
    if sx is None or sy is None:
        return None
    d = combine(x.dir * sx, -y.dir * sy)
    return None if d is None else d * sx * sy


# --- enclosures ----------------------------------------------------------------------------

def bounds(x: Val) -> tuple[float, float] | None:
    """(least, greatest) value of `x` over the range, or None when unknown."""
    if x.dir is not None:
        v = np.asarray(x.v, np.float64)
        return None if np.isnan(v).any() else (float(v.min()), float(v.max()))
    return None if x.lo is None else (x.lo, x.hi)


def _hull(values) -> tuple[float, float] | None:
    v = np.asarray(values, np.float64)
    return None if np.isnan(v).any() else (float(v.min()), float(v.max()))


def _corners(f, bx, by):
    return _hull([f(np.float32(p), np.float32(q)) for p in bx for q in by])


def enclose(name: str, args: list[Val], fn=None, transcendental_ulps: int = 0) -> tuple[float, float] | None:
    """Bounds of op `name`'s f32 / integer result over the range from its operands' bounds, or
    None; `fn` evaluates a unary op on an array (a rounding, a cast, a transcendental
    function, monotone in its argument with its sense given by the sign of `fn`'s slope,
    found from the two bounds' images)."""
    bs = [bounds(a) for a in args]
    if any(b is None for b in bs):
        return None
    with np.errstate(all="ignore"):
        if name in ("arith.mulf", "arith.muli"):
            return _corners(np.multiply, *bs)
        if name == "arith.divf":
            (x_lo, x_hi), (y_lo, y_hi) = bs
            return _corners(np.divide, bs[0], bs[1]) if y_lo > 0 or y_hi < 0 else None
        if name in ("arith.addf", "arith.addi"):
            return _hull([np.float32(bs[0][0]) + np.float32(bs[1][0]), np.float32(bs[0][1]) + np.float32(bs[1][1])]) \
                if name == "arith.addf" else (bs[0][0] + bs[1][0], bs[0][1] + bs[1][1])
        if name in ("arith.subf", "arith.subi"):
            return _hull([np.float32(bs[0][0]) - np.float32(bs[1][1]), np.float32(bs[0][1]) - np.float32(bs[1][0])]) \
                if name == "arith.subf" else (bs[0][0] - bs[1][1], bs[0][1] - bs[1][0])
        if name == "arith.negf":
            return -bs[0][1], -bs[0][0]
        if name in ("arith.maxnumf", "arith.maximumf", "arith.maxsi"):
            return max(bs[0][0], bs[1][0]), max(bs[0][1], bs[1][1])
        if name in ("arith.minnumf", "arith.minimumf", "arith.minsi"):
            return min(bs[0][0], bs[1][0]), min(bs[0][1], bs[1][1])
        if name == "arith.select":  # either branch, whichever the condition picks
            return min(bs[0][0], bs[1][0]), max(bs[0][1], bs[1][1])
        if fn is not None and len(bs) == 1:
            ends = np.asarray(fn(np.array(bs[0], np.float64)), np.float64)
            lo, hi = float(ends.min()), float(ends.max())
            for _ in range(transcendental_ulps):  # llvm-cpu's approximations, a few ulps off
                lo, hi = float(np.nextafter(np.float32(lo), np.float32(-np.inf))), \
                    float(np.nextafter(np.float32(hi), np.float32(np.inf)))
            return None if np.isnan([lo, hi]).any() else (lo, hi)
    return None


def enclose_fma(x: Val, y: Val, z: Val, fma) -> tuple[float, float] | None:
    """Bounds of fma(x, y, z) (one rounding of x y + z, monotone in it) from the operands'."""
    bx, by, bz = bounds(x), bounds(y), bounds(z)
    if bx is None or by is None or bz is None:
        return None
    f32 = lambda v: np.array([v], np.float32)  # noqa: E731
    with np.errstate(all="ignore"):
        low = [fma(f32(p), f32(q), f32(bz[0]))[0] for p in bx for q in by]
        high = [fma(f32(p), f32(q), f32(bz[1]))[0] for p in bx for q in by]
    return _hull([min(low), max(high)])
