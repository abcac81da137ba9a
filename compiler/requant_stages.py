"""Integer stages of a float requantization body: one float-to-int conversion each.

A body's float-to-int conversions (`arith.fptosi`) split it into stages, each
a function of at most two integer values (its leaves: the dispatch's integer
inputs or earlier stages), compiled as after a contraction
(compiler/requant.py):

- one i32 leaf (an accumulator another dispatch wrote): a per-channel
  rescale fitted on |a| <= 2^30 (`requant_channels.fit_channels`);
- one int8 leaf: a 256-entry table (`requant_split.build_table`); with
  per-channel parameters, a per-channel rescale fitted on [-128, 127];
- two int8 leaves: a rescale of their sum (`rescale_pairs.fit_sum`) or of their
  product (`rescale_pairs.fit_product`), fitted on all 65,536 pairs.

`StageSplitter` finds them; compiler/requant_emit.py writes their integer
arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from .f32_chain import INT_RANGE, Chain, type_name
from .ir_utils import n_inputs, static_shape
from .passes import RequantMode
from .requant_channels import RESIDUAL_I32_BOUND, channel_dicts, fit_channels, per_channel_constants
from .requant_compose import Downstream, PairTail, following, pair_composed
from .requant_split import ActivationTable, build_table, reads, slice_until
from .requant_summary import Composition
from .rescale_fit import NotExact, Rescale
from .rescale_pairs import PairFit, fit_product, fit_sum


@dataclass
class Stage:
    """One float-to-int conversion of a body as integer arithmetic on its leaves."""
    value: ir.Value  # the int value it computes
    kind: str  # "rescale" | "table" | "sum" | "product" | "identity"
    leaves: list[ir.Value]
    rescales: list[Rescale] | None = None  # "rescale": per channel
    differing: list[int] | None = None  # "rescale": per channel, as RequantSummary.differing
    step_span: list[int] | None = None
    table: ActivationTable | None = None
    pair: PairFit | None = None
    chain: Chain | None = None  # "rescale": the chain it replaces
    table_type: str | None = None  # "table": its entries' type when not `value`'s (a fixed-point f32 term)
    # A nearest rescale's level one off, carried to the result (compiler/requant_compose.py).
    composition: Composition = field(default_factory=Composition)


@dataclass
class Channels:
    """The constant inputs of a generic, per channel: the channels are the points of the
    result dims `dims` (sorted) they vary along (none: all scalars; several: a bias over
    heads x features), numbered in row-major order; `values[ch]` the {block arg: scalar} of
    channel ch."""
    dims: tuple[int, ...]
    values: list[dict]
    per_channel: set = field(default_factory=set)  # block args that vary

    @classmethod
    def of(cls, op: ir.Operation, known, variable: set[int]) -> "Channels":
        chan_dims, per = per_channel_constants(op, known, variable)
        dims = tuple(sorted(chan_dims))
        values = channel_dicts(per, dims, static_shape(op.results[0].type))
        return cls(dims, values, {a for a, (d, _) in per.items() if d is not None})


@dataclass
class _StageSpec:
    """A float-to-int conversion before it is fitted: its ops from the values before it."""
    q: ir.Value
    ops: list
    leaves: list
    per_channel: bool
    stops: frozenset  # the leaves and earlier stages' values


class StageSplitter:
    """Splits a body into `Stage`s (see the module docstring)."""

    def __init__(self, ops: list[ir.Operation], channels: Channels, host, mode: RequantMode,
                 ranges: dict, scaled: tuple[ir.Value, float] | None = None):
        self.ops, self.channels, self.host, self.mode = ops, channels, host, mode
        self.ranges = dict(ranges)  # leaf value -> (lo, hi)
        self.scaled = scaled  # (the f32 leaf holding S * c, c) in R's quantize
        self.stages: list[Stage] = []
        self._pair_variants: dict = {}  # a pair stage's value -> llvm-cpu's values on all pairs

    def split(self, result: ir.Value) -> list[Stage]:
        """The stages up to `result`, which must be the last one's value. They are fitted last
        first: a nearest rescale is priced at `result` through the stages after it
        (compiler/requant_compose.py)."""
        specs = [self._spec(op.results[0]) for op in slice_until(self.ops, result, set()) if op.name == "arith.fptosi"]
        if not specs or specs[-1].q != result:
            raise NotExact("the result is not the int value of a requantization")
        built: dict[ir.Value, Stage] = {}
        for spec in reversed(specs):
            built[spec.q] = self._stage(spec, self._downstream(spec, built, result))
        self.stages = [built[spec.q] for spec in specs]
        return self.stages

    def _spec(self, q: ir.Value) -> _StageSpec:
        stops = frozenset(self.ranges)
        ops = slice_until(self.ops, q, stops)
        leaves = [v for v in self.ranges if reads(ops, v)]
        per_channel = any(reads(ops, a) for a in self.channels.per_channel)
        if not (len(leaves) == 1 or (len(leaves) == 2 and not per_channel and
                                     all(self.ranges[v] == INT_RANGE["i8"] for v in leaves))):
            raise NotExact(f"a requantization step reads {len(leaves)} integer values"
                           f"{' and per-channel parameters' if per_channel else ''} "
                           f"(one, or two int8 values with scalar parameters, are supported)")
        self.ranges[q] = INT_RANGE[type_name(q.type)]
        return _StageSpec(q, ops, leaves, per_channel, stops)

    def _downstream(self, spec: _StageSpec, built: dict, result: ir.Value) -> Downstream | None:
        """What `spec`'s value becomes at `result` through the stages after it (`built`): a last
        step of an int8 value and one other int8 input priced once (`PairTail`)."""
        if spec.q == result:
            return None
        stops = spec.stops | {spec.q}
        after = slice_until(self.ops, result, stops)
        free = [v for v in spec.stops if reads(after, v)]
        pos = {r: i for i, op in enumerate(after) for r in op.results}
        later = sorted((st for st in built.values() if st.value in pos), key=lambda st: pos[st.value])
        values = self.channels.values or [{}]
        if len(free) > 1 or (free and self.ranges[free[0]] != INT_RANGE["i8"]):
            return Downstream.unpriced_because(f"what follows reads {len(free)} other integer values")
        last = later[-1]
        if free and last.kind in ("sum", "product") and free[0] in last.leaves:
            mid = next(v for v in last.leaves if v != free[0])
            if mid == spec.q or mid in pos:
                tail = PairTail(last.pair.rescale, self._pair_variants[last.value], first=last.leaves[0] == mid)
                return following("what follows", spec.q, self.host, values, slice_until(self.ops, mid, stops), mid,
                                 later[:-1] or None, tail=tail)
        return following("what follows", spec.q, self.host, values, after, result, later or None,
                         other=free[0] if free else None)

    def _stage(self, spec: _StageSpec, downstream: Downstream | None) -> Stage:
        q, ops, leaves = spec.q, spec.ops, spec.leaves
        q_type = type_name(q.type)
        if len(leaves) == 1:
            return self._one_leaf(ops, q, leaves[0], spec.per_channel, q_type, downstream)
        return self._two_leaves(ops, q, leaves, q_type, downstream)

    def _one_leaf(self, ops, q, leaf, per_channel: bool, q_type: str, downstream) -> Stage:
        lo, hi = self.ranges[leaf]
        if self.scaled is None and hi - lo < 256 and not per_channel:
            scalars = {a: v for a, v in self.channels.values[0].items() if a not in self.channels.per_channel} \
                if self.channels.values else None
            table = build_table(ops, q, leaf, self.host, q_type, self.mode, scalars=scalars)
            return Stage(q, "identity" if table.is_identity() else "table", [leaf], table=table)
        chain = Chain(ops, q, leaf, self.host)
        if self.scaled is not None and leaf == self.scaled[0]:
            chain = chain.of_scaled_sum(self.scaled[1])
        channels = [(vals, lo, hi) for vals in self.channels.values]
        fits = fit_channels(chain, channels, self.channels.dims, f"rescale of a {type_name(leaf.type)} value",
                            self.mode, downstream=downstream)
        return Stage(q, "rescale", [leaf], [f.rescale for f in fits], [f.differing for f in fits],
                     [f.step_span for f in fits], chain=chain, composition=Composition.of_fits(fits))

    def _two_leaves(self, ops, q, leaves, q_type: str, downstream) -> Stage:
        u, v = (g.ravel() for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
        qs = [np.asarray(x, np.int64) for x in
              Chain(ops, q, leaves[0], self.host, extra=(leaves[1],)).contraction_variants(u, extra=(v,))]
        lo, hi = INT_RANGE[q_type]
        try:
            fit, kind = fit_sum(u, v, qs, lo, hi), "sum"
        except NotExact:
            fit, kind = fit_product(u, v, qs, lo, hi), "product"
        if fit.differing and self.mode is RequantMode.EXACT:
            raise NotExact(f"the {kind} of two int8 values as an integer rescale differs on {fit.differing} "
                           f"of {fit.pairs} input pairs")
        self._pair_variants[q] = qs
        composed = Composition()
        if fit.differing and downstream is not None:
            composed = Composition(0, *pair_composed(fit.rescale(u, v), qs, downstream))
        return Stage(q, kind, list(leaves), pair=fit, composition=composed)


def leaf_range(v: ir.Value) -> tuple[int, int]:
    t = type_name(ir.RankedTensorType(v.type).element_type)
    if t == "i32":
        return -RESIDUAL_I32_BOUND, RESIDUAL_I32_BOUND
    if t not in ("i8", "i16"):
        raise NotExact(f"an input of the requantization is {t}")
    return INT_RANGE[t]


def variable_inputs(op: ir.Operation, known) -> tuple[list[int], dict]:
    """(operand indices of the non-constant inputs of `op`, {their block args: range})."""
    variables = [i for i in range(n_inputs(op)) if not known.is_constant(op.operands[i])]
    args = op.regions[0].blocks[0].arguments
    return variables, {args[i]: leaf_range(op.operands[i]) for i in variables}
