"""f32_chain.fma_f32 computes TwoSum's error only where f32 rounding of the f64 sum can be
wrong (a halfway sum, or one outside f32's normal range); the reference here is the code it
replaced, which computed it everywhere. The same f32 results, bit for bit."""

import numpy as np
import pytest

from torq.compiler.f32_chain import _F32_MAX, _F32_NORMAL, fma_f32


def reference(x, y, z):
    x, y, z = (np.asarray(v, np.float64) for v in (x, y, z))
    p = x * y
    s = p + z
    bb = s - p
    e = (p - (s - bb)) + (z - bb)
    r = s.astype(np.float32)
    normal = (np.abs(s) >= _F32_NORMAL) & (np.abs(s) < _F32_MAX)
    dropped = np.ascontiguousarray(s).view(np.uint64) & np.uint64((1 << 29) - 1)
    check = (e != 0) & (~normal | (dropped == np.uint64(1 << 28)))
    if not np.any(check):
        return r
    r, s_c, e_c = np.array(r, np.float32, ndmin=1), np.broadcast_to(s, r.shape), np.broadcast_to(e, r.shape)
    idx = np.nonzero(np.broadcast_to(check, r.shape))
    rc, sc, ec = r[idx], s_c[idx], e_c[idx]
    other = np.where(rc.astype(np.float64) < sc, np.nextafter(rc, np.float32(np.inf)),
                     np.nextafter(rc, np.float32(-np.inf)))
    tie = np.abs(rc.astype(np.float64) - sc) == np.abs(other.astype(np.float64) - sc)
    r[idx] = np.where(tie, np.where(ec > 0, np.maximum(rc, other), np.minimum(rc, other)), rc)
    return r.reshape(np.shape(s))


def operands(seed: int):
    """Accumulators (sitofp) times a per-channel column scale plus a bias, sums made halfway
    between two f32 on purpose (exactly, and with an error either way), subnormal and
    overflowing results, and 0-d operands."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-(1 << 24), 1 << 24, (7, 300)).astype(np.float32)
    scale = rng.uniform(-1e-3, 1e-3, (7, 1)).astype(np.float32)
    bias = rng.uniform(-50, 50, (7, 1)).astype(np.float32)
    yield a, scale, bias
    x = rng.integers(1, 1 << 12, 2000).astype(np.float32)
    y = rng.integers(1, 1 << 12, 2000).astype(np.float32)
    base = rng.integers(1 << 23, 1 << 24, 2000).astype(np.float64) * 2.0 ** rng.integers(-10, 10, 2000)
    halfway = (base + 0.5 * 2.0 ** np.floor(np.log2(base) - 23)).astype(np.float32)  # rounds to f32
    yield x, y, halfway.astype(np.float64).astype(np.float32) - (x * y)
    # s = z +- half an ulp of z (1 - 2^-36): the f64 sum lands halfway, its error decides.
    z = (rng.uniform(1, 2, 2000) * 2.0 ** rng.integers(-20, 20, 2000)).astype(np.float32)
    half = np.spacing(z).astype(np.float64) / 2
    x = (half * (1 + 2.0 ** -18) * rng.choice([-1, 1], 2000)).astype(np.float32)
    yield x, np.full(2000, 1 - 2.0 ** -18, np.float32), z
    tiny = np.float32(_F32_NORMAL)
    yield rng.uniform(-4, 4, 500).astype(np.float32) * tiny, rng.uniform(-2, 2, 500).astype(np.float32), \
        rng.uniform(-3, 3, 500).astype(np.float32) * tiny
    big = np.float32(_F32_MAX)
    yield np.full(50, big, np.float32), rng.uniform(0.5, 2, 50).astype(np.float32), rng.uniform(-1, 1, 50).astype(
        np.float32) * big
    yield np.float32(3.0), np.float32(0.1), np.float32(-0.3)


@pytest.mark.parametrize("seed", range(8))
def test_fma_equals_the_reference(seed):
    with np.errstate(all="ignore"):
        for x, y, z in operands(seed):
            got, want = fma_f32(x, y, z), reference(x, y, z)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), seed
