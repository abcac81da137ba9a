"""What one float requantization became on the NPU, for remarks, reports and --torq-dump-quant.

`RequantSummary` records, per fitted rescale, the accumulator values on which
the integer form differs from the f32 chain (compiler/rescale_fit.py measures
them exactly) and what followed stage 1 (a residual add, a table, per-channel
rescales, a pooled sum); `line()` is the remark, `as_dict()` the dump entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequantSummary:
    """How one float requantization was compiled: per channel, the accumulator values on
    which the integer rescale's level differs from the f32 chain's (0: exact) and the
    span of accumulator values over which the chain's level changes."""
    kind: str  # the contraction it follows: conv2d, depthwise_conv2d, matmul, ...
    differing: list[int]
    step_span: list[int]
    # A residual add after the rescale (`requant_sum`): input pairs on which its integer
    # form differs from the f32 chain, of all int8 pairs.
    sum_differing: int | None = None
    sum_pairs: int | None = None
    # An activation after the rescale (`requant_split.split_activation_table`): its table's
    # entries, and those on which llvm-cpu's ways of contracting the float chain disagree.
    table_entries: int | None = None
    table_ambiguous: int | None = None
    # An i32 residual's own rescale to int8, per channel as `differing` / `step_span`.
    residual_differing: list[int] | None = None
    residual_step_span: list[int] | None = None
    # Per-channel rescales of stage 1's int8 value after it (a bias added after the quantized
    # matmul), per channel as `differing` / `step_span`.
    rest_differing: list[int] | None = None
    rest_step_span: list[int] | None = None
    # What the two-input rescale computes: "sum" (a residual add) or "product" (a gate).
    pair_kind: str = "sum"
    # A pooled f32 sum made integer (compiler/requant_elementwise.py): the sums within
    # llvm-cpu's f32 summation error of a step (of all reachable sums, over channels).
    pooled_ambiguous: int | None = None
    pooled_sums: int | None = None
    # After the per-channel rescales: activation tables, and sums / products of two int8 values.
    rest_tables: int | None = None
    rest_table_ambiguous: int | None = None  # their entries that depend on llvm-cpu's evaluation, in all
    rest_pairs: int | None = None
    rest_pair_differing: int | None = None  # int8 pairs those rescales get one step off, in all
    rest_pair_count: int | None = None  # int8 pairs they were fitted on, in all

    @property
    def channels(self) -> int:
        return len(self.differing)

    @property
    def exact_channels(self) -> int:
        return sum(d == 0 for d in self.differing)

    @property
    def differing_share(self) -> float:
        """Differing accumulator values / accumulator values where the level changes."""
        span = sum(self.step_span)
        return sum(self.differing) / span if span else 0.0

    def line(self) -> str:
        head = f"{self.kind}: f32 requantization -> " + \
            (f"integer rescale, {_channels_text(self.differing, self.step_span)}" if self.differing
             else "integer arithmetic")
        if self.residual_differing is not None:
            head += "; the i32 residual's own rescale to int8, " + \
                _channels_text(self.residual_differing, self.residual_step_span)
        if self.rest_differing:
            head += "; then a per-channel rescale of the int8 value, " + \
                _channels_text(self.rest_differing, self.rest_step_span)
        if self.rest_tables or self.rest_pairs:
            parts = [f"{self.rest_tables} activation table{'s' * (self.rest_tables != 1)} ({self.rest_table_ambiguous} "
                     f"entries depend on how llvm-cpu evaluates the float chain)"] * bool(self.rest_tables) + \
                [f"{self.rest_pairs} integer rescale{'s' * (self.rest_pairs != 1)} of two int8 values (one output step "
                 f"off on {self.rest_pair_differing} of {self.rest_pair_count} pairs)"] * bool(self.rest_pairs)
            head += "; then " + " and ".join(parts)
        if self.sum_pairs:
            what = "a residual add as an integer rescale of the sum" if self.pair_kind == "sum" else \
                f"a {self.pair_kind} of two int8 values as an integer rescale"
            head += f"; then {what}, one output step off on {self.sum_differing} of {self.sum_pairs} int8 input pairs"
        if self.pooled_sums:
            head += (f"; the f32 sum is an exact i32 sum: {self.pooled_ambiguous} of {self.pooled_sums} sums lie "
                     f"within llvm-cpu's f32 summation error of a step (one output step)")
        if self.table_entries:
            head += f"; then an activation through a {self.table_entries}-entry table"
            if self.table_ambiguous:
                head += (f" ({self.table_ambiguous} entries depend on how llvm-cpu evaluates the float chain, "
                         f"its FMA contraction or the last ulps of its exp / tanh / erf: one output step)")
        return head

    @property
    def approximate(self) -> bool:
        return self.exact_channels < self.channels or bool(self.sum_differing) or bool(self.table_ambiguous) \
            or any(self.residual_differing or ()) or bool(self.pooled_ambiguous) or any(self.rest_differing or ()) \
            or bool(self.rest_pair_differing) or bool(self.rest_table_ambiguous)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "channels": self.channels, "exact_channels": self.exact_channels,
                "differing_share": self.differing_share, "differing": self.differing,
                "step_span": self.step_span, "sum_differing": self.sum_differing, "sum_pairs": self.sum_pairs,
                "table_entries": self.table_entries, "table_ambiguous": self.table_ambiguous,
                "residual_differing": self.residual_differing, "residual_step_span": self.residual_step_span,
                "pair_kind": self.pair_kind, "pooled_ambiguous": self.pooled_ambiguous,
                "rest_differing": self.rest_differing, "rest_step_span": self.rest_step_span,
                "pooled_sums": self.pooled_sums, "rest_tables": self.rest_tables, "rest_pairs": self.rest_pairs,
                "rest_table_ambiguous": self.rest_table_ambiguous,
                "rest_pair_differing": self.rest_pair_differing,
                "rest_pair_count": self.rest_pair_count}


def _channels_text(differing: list[int], step_span: list[int]) -> str:
    """"k of n channels exact[, the others nearest (...)]" for one fitted rescale."""
    n, exact = len(differing), sum(d == 0 for d in differing)
    text = f"{exact} of {n} channel{'s' if n > 1 else ''} exact"
    if exact < n:
        span = sum(step_span)
        worst = max(d / s for d, s in zip(differing, step_span) if s)
        text += (f", the others nearest (one output step off on {sum(differing)} of {span} accumulator values "
                 f"where the level changes, {100 * sum(differing) / span:.3g}%; worst channel {100 * worst:.3g}%)")
    return text
