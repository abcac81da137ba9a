"""A requantization that adds an int8 residual to the accumulator before quantizing.

PT2E's X86InductorQuantizer quantizes ResNet's conv + add (+ relu) as one
pattern: the conv's accumulator is dequantized (a * sx * sw_c + bias_c), the
int8 residual r too ((r - zr) * sr), they are added and only the sum is
quantized. ONNX Runtime quantizes the conv's output first, which
requant_split.split_residual_add takes apart; here there is no int8 value
of the accumulator alone, so the chain is a function q_c(a, r) of both.

For a fixed r, q_c(., r) is a monotone step function of a, and r shifts it:
its step points move by kappa_c (r - r0) accumulator units, kappa_c the
residual's step in the accumulator's scale (sr / (sx sw_c)). The NPU computes,
per output channel c, in 64-bit integers:

    h = ((r - r0) * Mh_c + Rh) >> Sh        kappa_c (r - r0), rounded
    q = G_c(a + h)                          G_c: the rescale of q_c(., r0)

The fit (`fit_accumulator_residual`): kappa_c is the least-squares shift of
the step points of five residual levels; G_c the rescale of the row r0 = 0,
fitted by requant_channels.fit_channels on the accumulator range widened by
h's reach (exact where one exists, else the nearest). The measure: every
channel on all 256 residual levels, the step points of q_c(., r)
(rescale_fit.channel_step_points) against G_c(. + h): the (accumulator,
residual) pairs on which they differ, counted exactly (two monotone step
functions with the same levels differ, by one step, on the union of the
intervals between their k-th step points when those are disjoint; an
overlap is a value two steps off, which refuses).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
from iree.compiler import ir

from .f32_chain import Chain, from_order_key, order_key, type_name
from .passes import RequantMode
from .requant_channels import RESIDUAL_I32_BOUND, batched_step_points, channel_directions, fit_channels
from .requant_split import backward_slice, dependents, first_ints, reads
from .requant_summary import RequantSummary
from .rescale_fit import NotExact, Rescale, _bisect, channel_step_points, first_reaching_near, rescale_step_points

# Residual levels whose step points give each channel's kappa.
_KAPPA_LEVELS = (-128, -64, 0, 64, 127)
# The residual level G_c is fitted at (h = 0 there).
_R0 = 0
# Rows (channel, residual level) whose step points kappa's fit searches at once.
_ROWS_PER_BATCH = 4096
# Residual levels and output levels past the least (the columns of step-point arrays).
_LEVELS, _KS = np.arange(-128, 128), np.arange(-127, 128)


@dataclass
class AccumulatorResidualFit:
    """Per channel: the rescale G_c of a + h, the residual's h_c, and how far they are from the
    chain, over every (accumulator, residual level) pair."""
    rescales: list[Rescale]
    residual_rescales: list[Rescale]
    differing: list[int]  # (accumulator, residual level) pairs where the level differs
    step_span: list[int]  # summed over residual levels: accumulators from first to last step point
    residual_fits: list | None = None  # an i32 residual's own rescale to int8 (ChannelFit per channel)

    def summary(self, kind: str) -> RequantSummary:
        res = self.residual_fits or []
        return RequantSummary(kind, self.differing, self.step_span,
                              residual_differing=[f.differing for f in res] or None,
                              residual_step_span=[f.step_span for f in res] or None,
                              residual_type="i32" if res else None, residual_levels=256)

    def stage_rescales(self) -> list[Rescale] | None:
        """The i32 residual's own rescales to int8, or None."""
        return [f.rescale for f in self.residual_fits] if self.residual_fits else None


def has_accumulator_value(ops: list[ir.Operation], acc: ir.Value, res: ir.Value) -> bool:
    """Whether the chain converts a value of the accumulator alone to an integer (then it is
    stage 1 of an ONNX Runtime form, not this one)."""
    return any(o.name == "arith.fptosi" and reads(s := backward_slice(ops, o.results[0]), acc) and not reads(s, res)
               for o in ops)


def fit_accumulator_residual(ops: list[ir.Operation], result: ir.Value, acc: ir.Value, res: ir.Value, host,
                             channels: list, chan, kind: str, mode: RequantMode) -> AccumulatorResidualFit:
    """The rescales of a chain computing `result` from the accumulator `acc` and an int8 residual
    `res` added before any int value (module docstring); `channels` as fit_channels'.
    Raises NotExact when the result is not int8, the chain decreases in the accumulator, or
    anything is more than one output step off (with `mode` EXACT: any difference)."""
    if type_name(result.type) != "i8":
        raise NotExact("the sum of the accumulator and the residual is not quantized to int8")
    ops, res, res_fits = _residual_stage(ops, result, acc, res, host, channels, chan, kind, mode)
    chain = Chain(ops, result, acc, host)
    split = _split_at_join(ops, result, acc, res, host, channels)
    rows = _rows_steps(chain, channels, res, _KAPPA_LEVELS, kind) if split is None else \
        _threshold_rows_steps(channels, _KAPPA_LEVELS, kind, **split)
    kappas = [_kappa(*s) for s in rows]
    hs = [_residual_rescale(k) for k in kappas]
    wide = [({**vals, res: _R0}, lo + h.qmin, hi + h.qmax) for (vals, lo, hi), h in zip(channels, hs)]
    if any(max(abs(lo), abs(hi)) >= 1 << 31 for _, lo, hi in wide):
        raise NotExact(f"the {kind} accumulator plus the residual in its units can wrap (i32 overflow)")
    fits = fit_channels(chain, wide, chan, f"{kind} with the residual added", mode)
    gs = [f.rescale for f in fits]
    if any(g.multiplier < 0 for g in gs):
        raise NotExact(f"the {kind} requantization decreases in the accumulator")
    step_points = partial(_chain_step_points, chain=chain) if split is None else \
        partial(_threshold_step_points, **split)
    differing, span = _measure(step_points, channels, res, gs, hs, kind)
    if mode is RequantMode.EXACT and sum(differing):
        raise NotExact(f"the {kind} requantization with the residual added differs on {sum(differing)} "
                       f"(accumulator, residual) pairs")
    return AccumulatorResidualFit(gs, hs, differing, span, res_fits)


def _residual_stage(ops: list[ir.Operation], result: ir.Value, acc: ir.Value, res: ir.Value, host, channels: list,
                    chan, kind: str, mode: RequantMode) -> tuple[list, ir.Value, list | None]:
    """(the chain's ops after the residual's own requantization, the residual's int8 value, that
    requantization's fits): an i32 residual (another conv's accumulator: IREE fuses ResNet's
    downsample conv into this dispatch) is requantized to int8 on its own first, fitted on
    |r| <= 2^30 as requant.py fits one; an int8 residual is its own value."""
    if type_name(res.type) == "i8":
        return ops, res, None
    final = backward_slice(ops, result)
    own = [(q, s) for q, s in first_ints(ops, final, result) if reads(s, res) and not reads(s, acc)]
    if type_name(res.type) != "i32" or len(own) != 1 or type_name(own[0][0].type) != "i8":
        raise NotExact(f"the {type_name(res.type)} residual added to the accumulator is not requantized to int8 "
                       f"on its own first")
    (q_res, stage), = own
    rest = [o for o in ops if o not in stage]
    if reads(rest, res):
        raise NotExact("the requantization reads the i32 residual besides its int8 value")
    fits = fit_channels(Chain(stage, q_res, res, host), [(v, -RESIDUAL_I32_BOUND, RESIDUAL_I32_BOUND)
                                                        for v, _, _ in channels], chan, f"{kind} residual (i32)", mode)
    if mode is RequantMode.ONE_STEP and any(f.differing for f in fits):
        # A residual level one off moves the sum by the residual's step, which may be more than
        # one output step: not priced here (requant_compose does it for ONNX Runtime's form).
        raise NotExact("the i32 residual's own rescale is not exact, and its level one off is not priced at the result")
    return rest, q_res, fits


def _rows_steps(chain: Chain, channels: list, res: ir.Value, levels, kind: str):
    """Per channel: (steps, genuine), (len(levels), 255) arrays: the step points of q_c(., r) for
    each residual level r of `levels`, level k (-127..127) at column k + 127 (lo where the level
    is reached at the start of the range, hi + 1 where never), and where they are step points
    inside the range."""
    per = max(1, _ROWS_PER_BATCH // len(levels))
    for first in range(0, len(channels), per):
        batch = channels[first:first + per]
        rows = [({**vals, res: r}, lo, hi) for vals, lo, hi in batch for r in levels]
        steps = np.empty((len(rows), 255), np.int64)
        genuine = np.zeros((len(rows), 255), bool)
        for i, ((direction, (qlo, qhi, ts)), (_, lo, hi)) in enumerate(zip(batched_step_points(chain, rows, kind),
                                                                           rows)):
            if direction < 0:
                raise NotExact(f"the {kind} requantization decreases in the accumulator")
            steps[i], genuine[i] = _level_row(qlo, qhi, ts, lo, hi)
        shape = (len(batch), len(levels), 255)
        yield from zip(steps.reshape(shape), genuine.reshape(shape))


def _threshold_rows_steps(channels: list, levels, kind: str, b_chain: Chain, theta: np.ndarray):
    """`_rows_steps` from the thresholds (`_split_at_join`): q_c(a, r) is the number of levels k
    with B_c(a) >= theta[r, k], less 128, so the step points are those of that function, which
    evaluates B alone (a few ops, once per channel) where `_rows_steps` evaluates the whole
    chain per residual level: the same step points, a third of the time."""
    if min(channel_directions(b_chain, channels, kind), default=0) < 0:
        raise NotExact(f"the {kind} requantization decreases in the accumulator")
    per = max(1, _ROWS_PER_BATCH // len(levels))
    for first in range(0, len(channels), per):
        batch = channels[first:first + per]
        b = b_chain.for_channels([vals for vals, _, _ in batch])
        lo, hi = (np.array([c[i] for c in batch], np.int64) for i in (1, 2))
        steps = np.empty((len(batch), len(levels), 255), np.int64)
        genuine = np.zeros(steps.shape, bool)
        for j, r in enumerate(levels):
            def level(rows, row=theta[r + 128]):
                sub = b.channel_rows(rows)
                return lambda a: np.searchsorted(row, sub(a), "right") - 128

            for i, (qlo, qhi, ts) in enumerate(channel_step_points(level(np.arange(len(batch))), lo, hi, level)):
                steps[i, j], genuine[i, j] = _level_row(qlo, qhi, ts, lo[i], hi[i])
        yield from zip(steps, genuine)


def _level_row(qlo: int, qhi: int, ts: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, genuine) of one residual level, columns k = -127..127: the step points `ts` of
    levels qlo + 1 .. qhi, lo for a level reached at the range's start, hi + 1 for one never
    reached; and where they are step points inside the range."""
    steps = np.where(_KS <= qlo, lo, hi + 1)
    steps[qlo + 128:qhi + 128] = ts
    genuine = np.zeros(255, bool)
    genuine[qlo + 128:qhi + 128] = True
    return steps, genuine


def _kappa(steps: np.ndarray, genuine: np.ndarray) -> float:
    """The step points' shift per residual level (T_k(r) ~ tau_k - kappa r), least squares over
    the levels at least two of the residual levels reach inside the range."""
    n = genuine.sum(0)
    use = n >= 2
    if not use.any():
        return 0.0
    r = np.asarray(_KAPPA_LEVELS, np.float64)[:, None]
    t, w = steps[:, use].astype(np.float64), genuine[:, use]
    r_dev = r - (r * w).sum(0) / n[use]
    t_dev = t - (t * w).sum(0) / n[use]
    den = (w * r_dev ** 2).sum()
    return float(-(w * r_dev * t_dev).sum() / den) if den else 0.0


def _residual_rescale(kappa: float) -> Rescale:
    """h(r) = round(kappa (r - r0)) as a rescale of r, its clamp the values it takes."""
    shift = int(np.clip(30 - int(np.ceil(np.log2(abs(kappa) + 1))), 0, 40))
    m = int(round(kappa * (1 << shift)))
    h = Rescale(-_R0, m, (1 << shift) >> 1, shift, -(1 << 62), 1 << 62)
    vals = h(np.arange(-128, 128))
    return Rescale(h.offset, m, h.rounding, shift, int(vals.min()), int(vals.max()))


def _measure(step_points, channels: list, res: ir.Value, gs: list[Rescale], hs: list[Rescale],
             kind: str) -> tuple[list[int], list[int]]:
    """Per channel: the (accumulator, residual level) pairs on which G_c(a + h_c(r)) differs from
    the chain, and the summed step spans; NotExact where a pair is more than one step off.
    One channel at a time: its 65,280 pairs' arrays stay in the core's cache, and its own
    values are scalars to the chain (measured: a third faster than 16 channels at once)."""
    differing, spans = [], []
    for c, (channel, g, h) in enumerate(zip(channels, gs, hs)):
        u = _ours(channel, g, h)
        t, genuine = step_points(channel, res, u)
        first_pt, last_pt = np.minimum(t, u), np.maximum(t, u)
        overlap = np.any(last_pt[:, :-1] > first_pt[:, 1:], 1)
        if overlap.any():
            raise NotExact(f"{kind} with the residual added, channel {c}, residual level "
                           f"{int(np.argmax(overlap)) - 128}: the nearest integer rescale is more than one "
                           f"output step off")
        differing.append(int((last_pt - first_pt).sum()))
        _, lo, hi = channel
        top = np.where(genuine, t, lo - 1).max(1)
        bottom = np.where(genuine, t, hi + 1).min(1)
        spans.append(int(np.where(genuine.any(1), top - bottom + 1, 0).sum()))
    return differing, spans


def _ours(channel: tuple, g: Rescale, h: Rescale) -> np.ndarray:
    """(256, 255): the step points of G_c(. + h_c(r)) on the channel's range, per residual level r."""
    _, lo, hi = channel
    return np.clip(rescale_step_points(g, _KS, lo + h.qmin, hi + h.qmax)[None, :] - h(_LEVELS)[:, None], lo, hi + 1)


def _chain_step_points(channel: tuple, res: ir.Value, ours: np.ndarray, chain: Chain):
    """(steps, genuine), (256, 255) arrays as `_rows_steps`' for every residual level of one
    channel, its step points searched from `ours` (G_c(. + h_c(r))'s): T_k = U_k where
    f(U_k - 1) < k <= f(U_k) (f non-decreasing), which holds at most pairs; the others are
    bisected."""
    vals, lo, hi = channel
    f = chain.for_channels([{**vals, res: r} for r in _LEVELS])
    ends = f(np.tile(np.array([[lo, hi]], np.int64), (256, 1))).astype(np.int64)
    at = f(np.concatenate([np.maximum(ours - 1, lo), np.minimum(ours, hi)], 1)).astype(np.int64)
    k = _KS[None, :]
    ks_flat = np.broadcast_to(k, ours.shape).reshape(-1)

    def reach(pairs, a):
        return f.channel_rows(pairs // 255)(a[:, None])[:, 0] >= ks_flat[pairs]

    steps = first_reaching_near(reach, ours.reshape(-1), lo, hi, (at[:, :255] >= k).reshape(-1),
                                (at[:, 255:] >= k).reshape(-1))
    return steps.reshape(ours.shape), (k > ends[:, :1]) & (k <= ends[:, 1:])


def _split_at_join(ops: list[ir.Operation], result: ir.Value, acc: ir.Value, res: ir.Value, host,
                   channels: list) -> dict | None:
    """The chain as Q_r(B_c(a)): B_c the f32 value of the accumulator alone that the first op
    reading both the accumulator and the residual adds, Q_r what follows, reading no per-channel
    value and non-decreasing in B (checked per residual level). Then q(a, r) >= k iff
    B_c(a) >= theta[r, k], a threshold no channel changes (`_thresholds`), and step points
    need B alone: {"b_chain": B's chain, "theta": the thresholds}; None when the chain is not
    of that form (B a product llvm-cpu may fuse into the add's FMA either way, say)."""
    acc_dep, res_dep = dependents(ops, acc), dependents(ops, res)
    join = next((o for o in ops if any(v in acc_dep for v in o.operands) and any(v in res_dep for v in o.operands)),
                None)
    if join is None:
        return None
    b = next(v for v in join.operands if v in acc_dep)
    if b in res_dep or type_name(b.type) != "f32" or b.owner.name == "arith.mulf":
        return None
    b_ops = backward_slice(ops, b)
    q_ops = [o for o in ops if o not in b_ops]
    inside = {r for o in q_ops for r in o.results}
    reads = [v for o in q_ops for v in o.operands if v not in inside]
    if any(v in acc_dep and v != b for v in reads) or \
            any(v in vals for v in reads for vals, _, _ in channels[:1]):  # per-channel values
        return None
    b_chain = Chain(b_ops, b, acc, host)
    ends = b_chain.for_channels([vals for vals, _, _ in channels])(np.array([[lo, hi] for _, lo, hi in channels]))
    theta = _thresholds(Chain(q_ops, result, b, host), res, np.float32(ends.min()), np.float32(ends.max()))
    return None if theta is None else {"b_chain": b_chain, "theta": theta}


def _thresholds(q_chain: Chain, res: ir.Value, vlo: np.float32, vhi: np.float32) -> np.ndarray | None:
    """(256, 255): per residual level r and output level k (-127..127), the least f32 value v
    in [vlo, vhi] with Q_r(v) >= k (+inf where none), bisected on the f32 order; None unless
    every Q_r is non-decreasing on [vlo, vhi] (the chain's direction analysis)."""
    q = q_chain.for_channels([{res: r} for r in _LEVELS])
    if not np.isin(q.directions(np.tile(np.array([[vlo, vhi]], np.float32), (256, 1))), (0, 1)).all():
        return None
    ks = np.broadcast_to(np.arange(-127, 128), (256, 255))
    first, last = int(order_key(vlo)), int(order_key(vhi))
    t = _bisect(lambda k: q(from_order_key(k)), ks, np.full(ks.shape, first - 1), np.full(ks.shape, last + 1),
                np.full(ks.shape, first))
    return np.where(t > last, np.float32(np.inf), from_order_key(np.minimum(t, last)))


def _threshold_step_points(channel: tuple, res: ir.Value, ours: np.ndarray, b_chain: Chain, theta: np.ndarray):
    """`_chain_step_points` from the thresholds: T_k = min{a : B_c(a) >= theta[r, k]}, searched
    from ours as there, with B alone evaluated (once per channel, not per residual level)."""
    vals, lo, hi = channel
    b = b_chain.for_channel(vals)
    th, u = theta.reshape(-1), ours.reshape(-1)
    n = len(u)
    points = np.empty(2 * n + 2, np.int64)  # one evaluation of B: at max(U - 1, lo), min(U, hi), lo, hi
    np.maximum(np.subtract(u, 1, out=points[:n]), lo, out=points[:n])
    np.minimum(u, hi, out=points[n:2 * n])
    points[2 * n:] = lo, hi
    values = b(points)
    ends = values[2 * n:]

    def reach(pairs, a):
        return b(a) >= th[pairs]

    steps = first_reaching_near(reach, u, lo, hi, values[:n] >= th, values[n:2 * n] >= th)
    return steps.reshape(ours.shape), (ends[0] < theta) & (theta <= ends[1])
