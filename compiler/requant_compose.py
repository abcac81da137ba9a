"""A nearest rescale whose level feeds further steps, priced at the result.

A nearest rescale (compiler/rescale_fit.py) is at most one level off its f32
chain: on the accumulators between the chain's step point T_k of level k and
the rescale's U_k. When that level goes on through further steps (an
activation table, a per-channel rescale, a residual add), one level can be
more than one output step: hardswish's table rises by 2 per level wherever
its output scale is finer than its input's, so a level one below there is
2 steps off at the result. At a transition k (from level k - 1 to k) the
result is off by

    |N(k - 1) - R(k)|  where the rescale's level is below the chain's (U_k > T_k),
    |N(k) - R(k - 1)|  where it is above (U_k < T_k),

with N the NPU's integer steps after the level and R llvm-cpu's float chain
from it (every way llvm-cpu may evaluate it), the worst over the levels of
the one other int8 input what follows may read (a residual add's).

`Downstream` computes both per transition (`deviations`; a transition where
one is more than one step is "steep"). `rescale_batch.fit_many` measures its
nearest rescale's mismatches against them and refits a channel that has one
at a steep transition with those transitions held (U_k <= T_k where below is
steep, U_k >= T_k where above is: `rescale_nearest._multiplier_costs` with
`sides`). Where no rescale near the step points holds them all (the
intermediate level's step points lie off every line, and every transition is
steep: a per-channel bias rescale or an activation whose output scale is finer
than the level's by 2x or more), the nearest rescale stays and the
accumulator values on which the result is more than one step off, and by how
many, are counted exactly and reported (`ChannelFit.composed_off`). There the
chain's value lies within f32 rounding of the intermediate level's rounding
boundary, and which level llvm-cpu's f32 arithmetic picks decides the result
by two steps: no integer arithmetic reproduces that noise, and refusing it
would send every such layer to the host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable

import numpy as np

from .f32_chain import INT_RANGE, Chain, type_name
from .requant_split import llvm_variants
from .rescale_fit import NotExact, Rescale, _clamp

# Elements of the largest evaluation array (channels x levels x other levels).
_BLOCK_ELEMENTS = 1 << 22

# The NPU's integer steps after a value: (channels (C, 1, 1), its levels (C, L, 1), the other
# input's levels (1, 1, O)) -> the result levels (C, L, O).
IntegerSteps = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass
class Downstream:
    """What the levels of an int value become in the requantization's result: the NPU's
    integer steps after it (`npu`) against llvm-cpu's float chain from it (`chain`, its
    `acc` the value and its one `extra` the other input when `other`), per channel."""
    what: str  # for messages: "what follows the rescale", "the residual add"
    levels: tuple[int, int]  # the value's range (its integer type)
    npu: IntegerSteps
    chain: Chain | None  # None: `npu` is the identity (the value is the tail's input)
    channel_values: list[dict]  # per channel: the chain's block-argument scalars
    per_channel: bool  # whether `npu` or `chain` differ between channels
    other: bool = False  # the steps read a second int8 value besides this one (no `tail`)
    unpriced: str = ""  # why what follows cannot be evaluated on every level ("": it can)
    # A last step of the int8 value `npu` and `chain` compute and one other int8 input,
    # priced once for all channels.
    tail: "PairTail | None" = None

    @classmethod
    def unpriced_because(cls, reason: str) -> "Downstream":
        """What follows a value that cannot be enumerated: an exact rescale needs no price, a
        nearest one is refused (`sides` raises)."""
        return cls("what follows", (0, 0), None, None, [], False, unpriced=reason)

    def of_channels(self, index: list[int]) -> "Downstream":
        """This downstream on the channels `index` only: its channel i is channel index[i] here."""
        take, npu = np.asarray(index, np.int64), self.npu
        return replace(self, npu=None if npu is None else lambda chs, levels, others: npu(take[chs], levels, others),
                       channel_values=[self.channel_values[i] for i in index])

    def deviations(self, channels: list[int], transitions: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per channel: (below, above), for each of its `transitions` (the level k reached,
        from k - 1) the most output steps the result is off where the value's level is one
        below llvm-cpu's there (below) or one above (above)."""
        if self.unpriced:
            raise NotExact(f"{self.unpriced}: where its level is one off, how far the result is cannot be "
                           f"measured")
        if not self.per_channel:  # one evaluation on every level serves every channel
            first = self.levels[0] + 1
            below, above = self._deviations(np.zeros(1, np.int64), np.arange(first, self.levels[1] + 1)[None])
            return [(below[0, ks - first], above[0, ks - first]) for ks in transitions]
        out: list = []
        width = max((len(ks) for ks in transitions), default=0)
        size = max(1, _BLOCK_ELEMENTS // (2 * max(width, 1) * (256 if self.other else 1)))
        for i in range(0, len(channels), size):
            ks = transitions[i:i + size]
            padded = np.array([np.pad(k, (0, width - len(k)), mode="edge") if len(k) else
                               np.full(width, self.levels[0] + 1) for k in ks], np.int64)
            below, above = self._deviations(np.asarray(channels[i:i + size], np.int64), padded)
            out += [(below[r, :len(k)], above[r, :len(k)]) for r, k in enumerate(ks)]
        return out

    def _deviations(self, channels: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`deviations` of the transitions `ks` (channels x transitions, one row for all
        channels when not per channel), evaluated on levels k - 1 and k side by side."""
        ls = np.stack([ks - 1, ks], -1).reshape(len(ks), -1)
        others = np.arange(-128, 128, dtype=np.int64) if self.other else np.zeros(1, np.int64)
        npu = self.npu(channels[:, None, None], ls[:, :, None], others[None, None, :])
        shape = (len(channels), ls.shape[1], len(others))
        refs = self._references(channels, ls, others, shape)
        # Column 2i holds level k_i - 1, column 2i + 1 level k_i.
        if self.tail is not None:
            below = np.max([self.tail.apart(npu[:, 0::2, 0], r[:, 1::2, 0]) for r in refs], 0)
            above = np.max([self.tail.apart(npu[:, 1::2, 0], r[:, 0::2, 0]) for r in refs], 0)
            return below, above
        lo, hi = np.min(refs, 0), np.max(refs, 0)
        below = np.maximum(np.abs(npu[:, 0::2] - lo[:, 1::2]), np.abs(npu[:, 0::2] - hi[:, 1::2])).max(-1)
        above = np.maximum(np.abs(npu[:, 1::2] - lo[:, 0::2]), np.abs(npu[:, 1::2] - hi[:, 0::2])).max(-1)
        return below, above

    def _references(self, channels: np.ndarray, ls: np.ndarray, others: np.ndarray, shape: tuple) -> list:
        """llvm-cpu's values of `chain` on levels `ls` (and `others`), every way it may evaluate it."""
        if self.chain is None:
            return [np.broadcast_to(ls[:, :, None], shape)]
        a = np.broadcast_to(ls[:, :, None], shape).reshape(len(channels), -1)
        extra = (np.broadcast_to(others[None, None, :], shape).reshape(len(channels), -1),) if self.other else ()
        chain = self.chain.for_channels([self.channel_values[c] for c in channels])
        try:
            return [np.broadcast_to(np.asarray(r, np.int64).reshape(-1, *shape[1:]), shape)
                    for r in llvm_variants(chain, a, extra)]
        except NotExact as e:
            raise NotExact(f"{self.what} after the int8 value: {e}") from None


@dataclass
class PairTail:
    """A last step that rescales an int8 value and one other int8 input with scalar
    parameters (a residual add, a gate's product), from the `rescale` of (u, v) and
    llvm-cpu's `variants` on the u-major grid of all pairs; the value priced is u when
    `first`, else v."""
    rescale: Callable[[np.ndarray, np.ndarray], np.ndarray]
    variants: list[np.ndarray]
    first: bool

    @cached_property
    def steps(self) -> np.ndarray:
        """`steps[x + 128, y + 128]`: the most output steps between the NPU's result from level
        x and llvm-cpu's from level y, over every level of the other input (built only when a
        nearest rescale before the step is priced)."""
        u, v = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
        npu = np.asarray(self.rescale(u, v), np.int16)
        refs = [np.asarray(r, np.int16).reshape(256, 256) for r in self.variants]
        if not self.first:
            npu, refs = npu.T, [r.T for r in refs]
        steps = np.zeros((256, 256), np.int16)
        for r in refs:
            for x in range(0, 256, 32):  # [x, y, other] in blocks of 2M elements
                block = np.abs(npu[x:x + 32, None, :] - r[None, :, :]).max(-1)
                steps[x:x + 32] = np.maximum(steps[x:x + 32], block)
        return steps

    def apart(self, npu: np.ndarray, ref: np.ndarray) -> np.ndarray:
        return self.steps[np.asarray(npu, np.int64) + 128, np.asarray(ref, np.int64) + 128]


def stage_steps(stages: list, leaf) -> IntegerSteps:
    """The integer arithmetic of requant_stages `Stage`s from `leaf` (and, for a pair, the one
    other value they read) as `IntegerSteps`: what requant_emit.stage_lines emits."""
    def run(chs, levels, others):
        env = {leaf: levels}
        for st in stages:
            xs = [env.get(v, others) for v in st.leaves]
            env[st.value] = _stage_value(st, chs, xs)
        return np.broadcast_to(env[stages[-1].value], np.broadcast_shapes(chs.shape, levels.shape, others.shape))
    return run


def _stage_value(st, chs: np.ndarray, xs: list) -> np.ndarray:
    if st.kind == "identity":
        return xs[0]
    if st.kind == "rescale":
        return channel_rescales(st.rescales, chs, xs[0])
    if st.kind == "table":
        return table_lookup(st.table, xs[0])
    return st.pair.rescale(xs[0], xs[1])


def table_lookup(table, x: np.ndarray) -> np.ndarray:
    return np.asarray(table.entries, np.int64)[np.asarray(x, np.int64) - table.first]


def channel_rescales(rescales: list[Rescale], chs: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each channel's `Rescale` (one for all when there is one) of `x`, in i64."""
    rows = chs if len(rescales) > 1 else np.zeros_like(chs)
    p = {f: np.array([getattr(r, f) for r in rescales], np.int64)[rows]
         for f in ("offset", "multiplier", "rounding", "shift", "qmin", "qmax")}
    v = ((np.asarray(x, np.int64) + p["offset"]) * p["multiplier"] + p["rounding"]) >> p["shift"]
    return _clamp(v, p["qmin"], p["qmax"])


def value_levels(v) -> tuple[int, int]:
    return INT_RANGE[type_name(v.type)]


def following(what: str, value, host, channel_values: list[dict], ops: list, result, stages: list | None = None,
              table=None, tail: PairTail | None = None, other=None) -> Downstream | None:
    """The `Downstream` of int `value`: on the NPU through requant_stages `stages` (per
    channel) and an activation `table` to `result`, which `ops` compute from `value` in f32;
    then, with a `tail`, its rescale with another int8 input; or, without one, `other` is
    the int8 input `ops` read besides `value`. None when nothing follows it."""
    if not stages and table is None and tail is None:
        return None

    def npu(chs, levels, others):
        x = stage_steps(stages, value)(chs, levels, others) if stages else levels
        if table is not None:
            x = table_lookup(table, x)
        return np.broadcast_to(x, np.broadcast_shapes(chs.shape, levels.shape, others.shape))

    chain = None if result == value else Chain(ops, result, value, host, extra=(other,) if other is not None else ())
    return Downstream(what, value_levels(value), npu, chain, channel_values, bool(stages), other is not None,
                      tail=tail)


def pair_composed(npu: np.ndarray, variants: list[np.ndarray], downstream: Downstream) -> tuple[int, int]:
    """(input pairs on which a rescale of two int8 values (its levels `npu`, llvm-cpu's
    `variants`, one entry per pair) is one level off where `downstream` makes that more than
    one output step in some channel, the most steps there)."""
    ks = np.arange(downstream.levels[0] + 1, downstream.levels[1] + 1)
    channels = list(range(len(downstream.channel_values)))
    devs = downstream.deviations(channels, [ks] * len(channels))
    below, above = np.max([b for b, _ in devs], 0), np.max([a for _, a in devs], 0)
    first = downstream.levels[0]
    worst = np.zeros(len(npu), np.int64)
    for r in variants:
        r = np.asarray(r, np.int64)
        lower, higher = npu < r, npu > r
        worst[lower] = np.maximum(worst[lower], below[r[lower] - first - 1])
        worst[higher] = np.maximum(worst[higher], above[r[higher] - first])  # the transition to level r + 1
    off = worst > 1
    return int(off.sum()), int(worst.max(initial=0)) if off.any() else 0
