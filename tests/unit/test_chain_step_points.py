"""rescale_fit.channel_step_points evaluates the chain at the line's prediction g and at g - 1
for every (channel, level) pair, and searches on only from the pairs off it (`_off_line`, on
`Chain.channel_rows` of those channels). The step points T_k = min{a : f(a) >= k} are unique,
so the reference is f evaluated on every accumulator (`brute_force_step_points`): on noisy
synthetic channels and on an f32 QDQ chain of both directions (requant_channels.batched_step_points)."""

import numpy as np
import pytest
from iree.compiler import ir
from test_chain_directions import _chain_and_args

from torq.compiler import requant_channels
from torq.compiler.rescale_fit import (
    brute_force_step_points,
    channel_step_points,
)


def brute_force(f, lo, hi):
    """`brute_force_step_points` of each channel of `f` (a function of a (channels, points) array)."""
    return [brute_force_step_points(lambda a, c=c: f(np.broadcast_to(a, (len(lo), len(a))))[c], int(lo[c]), int(hi[c]))
            for c in range(len(lo))]


def noisy_channels(seed: int):
    """Channels of f32-rounded lines (q = round(a * scale + bias) in f32, some clamped to int8),
    a few with a bump (a step point a few units off the line), one curved, one constant."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 12))
    scale = rng.uniform(1e-3, 0.3, count).astype(np.float32)
    bias = rng.uniform(-40, 40, count).astype(np.float32)
    bump = rng.integers(0, 6, count) * (rng.random(count) < 0.4)
    lo = -rng.integers(0, 3000, count)
    hi = rng.integers(1, 3000, count)
    scale[0] = 0  # a constant channel

    def row(c, a):
        q = np.rint(a.astype(np.float32) * scale[c] + bias[c]).astype(np.int64)
        if c == 1:
            q = np.floor(np.sqrt(np.maximum(a - lo[c], 0) * 3.0)).astype(np.int64)
        q = np.clip(q, -128, 127) if c % 3 == 2 else q
        return np.where(a >= (lo[c] + hi[c]) // 2, np.maximum(q, row_at(c, (lo[c] + hi[c]) // 2 + bump[c])), q) \
            if bump[c] else q

    def row_at(c, a):
        return int(np.rint(np.float32(a) * scale[c] + bias[c]))

    def rows_f(rows):
        return lambda a: np.stack([row(int(c), a[i]) for i, c in enumerate(rows)])
    return rows_f(np.arange(count)), lo, hi, rows_f, lambda c: (lambda a: row(c, a))


@pytest.mark.parametrize("seed", range(30))
def test_channel_step_points_equal_brute_force(seed):
    f, lo, hi, rows_f, one = noisy_channels(seed)
    for c, g in enumerate(channel_step_points(f, lo, hi, rows_f)):
        brute = brute_force_step_points(one(c), int(lo[c]), int(hi[c]))
        assert g[:2] == brute[:2] and np.array_equal(g[2], brute[2]), (seed, c)


def test_batched_step_points_of_a_chain_equal_brute_force():
    """An f32 QDQ chain (an FMA) over channels of both directions and a constant one, the
    chain of a subset of channels taken by `Chain.channel_rows`."""
    scales = [0.003, -0.002, 0.0, 0.004, -0.001, 0.002, 0.0007, -0.003]
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module, chain, args = _chain_and_args(ctx)
        channels = [({args[1]: np.float32(s), args[2]: np.float32(0.25 * i - 1)}, -60_000 + 999 * i, 50_000 - 77 * i)
                    for i, s in enumerate(scales)]
        got = requant_channels.batched_step_points(chain, channels, "test")
        for d in (1, -1, 0):
            idx = [c for c, (dc, _) in enumerate(got) if dc == d]

            def rows_f(rows, idx=idx, d=d):  # the chain for_channels gathers again per channel
                batch = chain.for_channels([channels[idx[r]][0] for r in rows])
                return batch if d >= 0 else (lambda b: batch(-b))
            lo = np.array([channels[c][1] for c in idx], np.int64)
            hi = np.array([channels[c][2] for c in idx], np.int64)
            ends = (lo, hi) if d >= 0 else (-hi, -lo)
            want = brute_force(rows_f(range(len(idx))), *ends)
            for c, w in zip(idx, want):
                assert got[c][1][:2] == w[:2] and np.array_equal(got[c][1][2], w[2]), c
        batch = chain.for_channels([v for v, _, _ in channels])
        rows = np.array([3, 1, 1, 6, 0])
        a = np.arange(-40_000, 40_000, 997)[None, :].repeat(len(rows), 0)
        assert np.array_equal(batch.channel_rows(rows)(a), chain.for_channels([channels[r][0] for r in rows])(a))
    assert sorted({d for d, _ in got}) == [-1, 0, 1]
