"""The per-channel constants of a float requantization and their rescale fits,
shared by the contraction requantization (requant.py) and int8 arithmetic
without a contraction (requant_elementwise.py)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from .constant_args import is_all_zeros
from .f32_chain import Chain
from .ir_utils import constant_of, function_argument, indexing_maps, iterator_types, loop_ranges, map_dims, n_inputs
from .passes import RequantMode
from .rescale_batch import fit_many
from .rescale_fit import ChannelFit, NotExact, NotMonotone, channel_step_points

# The accumulator range an i32 residual (from another dispatch) is fitted on.
RESIDUAL_I32_BOUND = 1 << 30


class Known:
    """Constant values of a function's tensors: arith.constant or a resolved argument."""

    def __init__(self, arg_constants):
        self.args = arg_constants

    def __call__(self, v: ir.Value) -> np.ndarray | None:
        k = function_argument(v)
        if k is not None:
            return self.args.get(k)
        return constant_of(v)

    def is_constant(self, v: ir.Value) -> bool:
        """Whether `v` is a constant, without reading its value (a compile that only asks
        this may share its executable with a layer of other weights: constant_args.py)."""
        k = function_argument(v)
        if k is not None:
            return self.args.has(k)
        return constant_of(v) is not None

    def all_zeros(self, v: ir.Value) -> bool:
        """Whether `v` is a constant of zeros (and not empty), reading that fact alone."""
        k = function_argument(v)
        if k is not None:
            return self.args.all_zeros(k)
        return is_all_zeros(constant_of(v))


def per_channel_constants(op: ir.Operation, known, skip=()) -> tuple[set[int], dict]:
    """(result dims the constants vary along, {block arg: (dims, value(s))}) for every input of
    `op` but those in `skip`: a scalar (dims None) or one value per channel, an array over the
    result dims `dims` it varies along (sorted; a grouped convolution's parameters vary along
    groups x channels); raises NotExact when an input is not a constant or varies along a
    loop that is not a result dim."""
    maps = indexing_maps(op)
    out = map_dims(maps[-1])
    args = op.regions[0].blocks[0].arguments
    per: dict = {}
    chan_dims = set()
    for i in range(n_inputs(op)):
        if i in skip:
            continue
        c = known(op.operands[i])
        d = map_dims(maps[i])
        if c is None or d is None:
            raise NotExact(f"operand {i} of the requantization is not a constant")
        if c.size == 1:
            per[args[i]] = (None, c.reshape(-1)[0])
            continue
        loops = [dd for dd, n in zip(d, c.shape) if n != 1]
        if any(loop not in out for loop in loops) or len(set(loops)) != len(loops):
            raise NotExact(f"operand {i} of the requantization varies along a loop that is not a result dim")
        pos = [out.index(loop) for loop in loops]
        values = c.reshape([n for n in c.shape if n != 1]).transpose(np.argsort(pos))
        chan_dims.update(pos)
        per[args[i]] = (tuple(sorted(pos)), values)
    return chan_dims, per


def check_scales(ops: list[ir.Operation], channels: list[dict]) -> None:
    """NotExact naming the op's source and the value when a requantization constant is not a
    scale a QDQ model can mean: a factor or divisor (mulf / divf) that is not a positive,
    finite, normal f32, or an added constant (a bias, a zero point) that is not finite. The
    chain would still be reproduced (that is what llvm-cpu computes), but such a model is
    malformed (a zero, negative, infinite, NaN or vanishing scale): it stays on host, named."""
    from .source_locations import join_frames, location_frames

    for o in ops:
        scaling = o.name in ("arith.mulf", "arith.divf")
        if not scaling and o.name not in ("arith.addf", "arith.subf"):
            continue
        for k, v in enumerate(o.operands):
            c = constant_of(v)
            values = np.asarray(c if c is not None else [ch[v] for ch in channels if v in ch], np.float64).ravel()
            if (o.name == "arith.divf" and k == 0) or not values.size:
                continue  # the value scaled, or a variable
            bad = ~np.isfinite(values)
            if scaling:
                bad |= ~(np.abs(values) >= np.finfo(np.float32).tiny) | (values <= 0)
            if bad.any():
                where = join_frames(location_frames(str(o.location))) or o.name
                what = "scale" if scaling else "offset"
                raise NotExact(f"the requantization {what} {float(values[bad][0]):.9g} ({o.name} of {where}) is not a "
                               f"{'positive, finite, normal' if scaling else 'finite'} f32: a malformed quantized "
                               f"model, left on host as written")


def on_channel_grid(values: np.ndarray, dims: tuple[int, ...], chan: tuple[int, ...], shape) -> np.ndarray:
    """`values` over result dims `dims` (a subset of `chan`, both sorted) broadcast to the
    channels over `chan` of a result of `shape`, flattened in row-major order."""
    grid = [shape[d] for d in chan]
    return np.broadcast_to(np.reshape(values, [shape[d] if d in dims else 1 for d in chan]), grid).reshape(-1)


def channel_dicts(per: dict, chan: tuple[int, ...], shape) -> list[dict]:
    """Per channel (the points of result dims `chan` of a result of `shape`, row-major): the
    {block arg: scalar} of `per_channel_constants`' values."""
    grid = {a: v if dims is None else on_channel_grid(v, dims, chan, shape) for a, (dims, v) in per.items()}
    return [{a: v if per[a][0] is None else v[ch] for a, v in grid.items()}
            for ch in range(math.prod(shape[d] for d in chan))]


@dataclass
class WeightRows:
    """A contraction's constant operand as rows over its output channels."""
    rows: np.ndarray  # (channel grid..., elements): the weight's parallel axes first, in result-dim order
    axes: list[int]  # those axes of the weight
    chan: list[int]  # the result dims they are
    multiplicity: int  # how often each element enters one output (the reduction loops it does not use)


def weight_rows(con: ir.Operation, k: int, w: np.ndarray) -> WeightRows:
    """`w`, the value of contraction `con`'s operand k, as `WeightRows`; NotExact when one of
    its parallel dims is not a result dim."""
    maps, its, ranges = indexing_maps(con), iterator_types(con), loop_ranges(con)
    w_dims, out = map_dims(maps[k]), map_dims(maps[-1])
    axes = [j for j, d in enumerate(w_dims) if its[d] == "parallel" and w.shape[j] != 1]  # (a batch of 1 varies not)
    if any(w_dims[j] not in out for j in axes) or len(set(w_dims)) != len(w_dims):
        raise NotExact("the weight's parallel dims are not result dims")
    axes.sort(key=lambda j: out.index(w_dims[j]))
    rows = w.transpose(axes + [j for j in range(w.ndim) if j not in axes]).reshape([w.shape[j] for j in axes] + [-1])
    mult = math.prod(ranges[d] for d, it in enumerate(its) if it == "reduction" and d not in w_dims)
    return WeightRows(rows, axes, [out.index(w_dims[j]) for j in axes], mult)


def fit_channels(chain: Chain, channels: list, chan, kind: str, mode: RequantMode,
                 sum_error: float = 0.0, downstream=None) -> list[ChannelFit]:
    """The rescale of each channel of `chain` (exact; else, unless `mode` is EXACT, the nearest). With a
    `sum_error` (the chain stands for an f32 contraction llvm-cpu rounds, up to that many
    accumulator units off: requant_float_contraction), each fit counts the accumulators that
    close to a step point (`ambiguous_accumulators`). With a `downstream`
    (requant_compose.Downstream: what the rescaled level becomes at the result), a nearest
    rescale keeps the result, not only its level, within one step. Channels of equal constants
    and range are fitted once (`distinct_channels`): a fit is a function of those alone."""
    firsts, which = distinct_channels(channels)
    if len(firsts) == len(channels):
        return _fit_distinct(chain, channels, list(range(len(channels))), chan, kind, mode, sum_error, downstream)
    fits = _fit_distinct(chain, [channels[c] for c in firsts], firsts, chan, kind, mode, sum_error,
                         downstream.of_channels(firsts) if downstream is not None else None)
    # A copy per channel: a fit is a record its reader may annotate.
    return [fits[k] if firsts[k] == c else dataclasses.replace(fits[k]) for c, k in enumerate(which)]


def distinct_channels(channels: list) -> tuple[list[int], list[int]]:
    """(the first channel of each distinct (constants, lo, hi), in order; per channel, which of
    those it equals). LeViT's attention adds a bias per (head, query, key): 153,664 "channels"
    in its first stage, a few hundred distinct ones (one with random weights, all zero)."""
    index: dict[tuple, int] = {}
    firsts, which = [], []
    names = list(channels[0][0]) if channels else []
    if any(list(vals) != names for vals, _, _ in channels):  # not one set of constants: none is merged
        return list(range(len(channels))), list(range(len(channels)))
    for c, (vals, lo, hi) in enumerate(channels):
        key = (int(lo), int(hi), *((np.asarray(v).dtype.str, np.asarray(v).tobytes()) for v in vals.values()))
        k = index.setdefault(key, len(firsts))
        if k == len(firsts):
            firsts.append(c)
        which.append(k)
    return firsts, which


def _fit_distinct(chain: Chain, channels: list, numbers: list[int], chan, kind: str, mode: RequantMode,
                  sum_error: float, downstream) -> list[ChannelFit]:
    """`fit_channels` of distinct channels, `numbers` their channel numbers (for messages)."""
    steps = batched_step_points(chain, channels, kind)
    ends = [(lo, hi) if direction >= 0 else (-hi, -lo) for (_, lo, hi), (direction, _) in zip(channels, steps)]
    fits = fit_many([st for _, st in steps], [g[0] for g in ends], [g[1] for g in ends],
                    [direction < 0 for direction, _ in steps], mode is not RequantMode.EXACT, downstream)
    for ch, ((_, lo, hi), fit) in enumerate(zip(channels, fits)):
        where = f"channel {numbers[ch]}" if chan else "the tensor"
        if isinstance(fit, NotExact):
            raise NotExact(f"{kind} float requantization, {where} (accumulator range [{lo}, {hi}]): {fit}")
        if sum_error:
            try:
                fits[ch] = dataclasses.replace(fit, ambiguous=ambiguous_accumulators(steps[ch][1][2], *ends[ch],
                                                                                     sum_error))
            except NotExact as e:
                raise NotExact(f"{kind} float requantization, {where}: {e}") from None
    return fits


def ambiguous_accumulators(step_points: np.ndarray, lo: int, hi: int, error: float) -> int:
    """The accumulators a in [lo, hi] whose level may differ at a +- `error` (a step point T
    in (a - E, a + E], E = ceil(error) + 1: the margin covers the rounding of the chain
    itself at a +- E), counted from the step points; raises NotExact when two step points lie
    within 2 E + 2 (a value that far off could be two steps off)."""
    e = math.ceil(error) + 1
    ts = np.asarray(step_points, np.int64)
    if len(ts) > 1 and int(np.diff(ts).min()) <= 2 * e + 2:
        raise NotExact(f"llvm-cpu's f32 rounding of the contraction (up to {error:.3g} accumulator units) "
                       f"spans an output step")
    return int(np.maximum(0, np.minimum(ts + e - 1, hi) - np.maximum(ts - e, lo) + 1).sum())


def batched_step_points(chain: Chain, channels: list, kind: str) -> list:
    """Per channel: (direction, step points of the chain made non-decreasing: of a -> f(-a) on
    [-hi, -lo] when it decreases), all channels of one direction bisected together
    (`channel_step_points`)."""
    dirs = channel_directions(chain, channels, kind)
    out: list = [None] * len(channels)
    for d in (1, -1, 0):
        idx = [c for c in range(len(channels)) if dirs[c] == d]
        if not idx:
            continue
        batch = chain.for_channels([channels[c][0] for c in idx])

        def levels(rows, batch=batch, d=d):  # the chain of channels idx[rows], made non-decreasing
            sub = batch.channel_rows(rows)
            return sub if d >= 0 else (lambda b: sub(-b))

        lo = np.array([channels[c][1] for c in idx], np.int64)
        hi = np.array([channels[c][2] for c in idx], np.int64)
        f = levels(np.arange(len(idx)))
        steps = channel_step_points(f, lo, hi, levels) if d >= 0 else channel_step_points(f, -hi, -lo, levels)
        for c, s in zip(idx, steps):
            out[c] = (d, s)
    return out


def channel_directions(chain: Chain, channels: list, kind: str) -> list[int]:
    """Per channel: the direction of its chain on its accumulator range (`Chain.direction`),
    asked once per group of channels whose constants have the same signs."""
    keys: list = [None] * len(channels)
    if len(channels) > 1:
        try:
            ends = np.array([[lo, hi] for _, lo, hi in channels], np.int64)
            keys = chain.for_channels([vals for vals, _, _ in channels]).sign_signatures(ends)
        except NotExact:
            pass  # one channel's range fails: asked one by one below, which names it
    known: dict = {}
    dirs = []
    for ch, ((vals, lo, hi), key) in enumerate(zip(channels, keys)):
        if key is None or key not in known:
            try:
                d = chain.for_channel(vals).direction(lo, hi)
            except NotExact as e:  # kept apart: a chain that is not monotone may have another form
                kept = NotMonotone if isinstance(e, NotMonotone) else NotExact
                raise kept(f"{kind} float requantization, channel {ch} (accumulator range [{lo}, {hi}]): {e}") from None
            if key is not None:
                known[key] = d
        dirs.append(known[key] if key is not None else d)
    return dirs
