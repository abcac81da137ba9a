"""What one float requantization became on the NPU, for remarks, reports and --torq-dump-quant.

`RequantSummary` records, per fitted rescale, the accumulator values on which
the integer form differs from the f32 chain (compiler/rescale_fit.py measures
them exactly) and what followed stage 1 (a residual add, a table, per-channel
rescales, a pooled sum); `line()` is the remark, `as_dict()` the dump entry.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .passes import RequantMode
from .rescale_fit import NotExact


@dataclass
class Composition:
    """How a nearest rescale's level, one off its chain's, carries to the result through what
    follows it (compiler/requant_compose.py)."""
    held: int = 0  # channels refitted to hold the transitions where one level is several steps
    off: int = 0  # accumulator values (input pairs) on which the result is still more than one step off
    steps: int = 0  # the most output steps there

    @classmethod
    def of_fits(cls, fits: list) -> "Composition":
        """Of rescale_fit.ChannelFit`s."""
        return cls(sum(f.steep_held > 0 for f in fits), sum(f.composed_off for f in fits),
                   max((f.composed_steps for f in fits), default=0))

    def __add__(self, other: "Composition") -> "Composition":
        return Composition(self.held + other.held, self.off + other.off, max(self.steps, other.steps))

    def text(self) -> str:
        """The remark's clause, "" when nothing was composed."""
        out = []
        if self.held:
            out.append(f"{self.held} channel{'s' if self.held > 1 else ''} refitted so that no level one off "
                       f"becomes more than one output step at the result")
        if self.off:
            out.append(f"more than one output step off at the result (up to {self.steps}) on {self.off} accumulator "
                       f"values or input pairs: a level one off where what follows spans several output steps per "
                       f"level and no rescale holds those transitions (llvm-cpu's f32 rounding picks that level "
                       f"there)")
        return "; ".join(out)


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
    # An activation after the rescale (`requant_split.build_table`): its tables' entries, and
    # those on which llvm-cpu's ways of contracting the float chain disagree.
    table_entries: int | None = None
    table_ambiguous: int | None = None
    # The residual's own rescale to int8 before the add (an i32 residual, or an int8 one scaled
    # per channel), per channel as `differing` / `step_span`.
    residual_differing: list[int] | None = None
    residual_step_span: list[int] | None = None
    residual_type: str | None = None
    # The residual added to the accumulator before it is quantized (requant_acc_residual):
    # `differing` and `step_span` then count (accumulator, residual level) pairs over this many
    # residual levels.
    residual_levels: int | None = None
    # What the two-input rescale computes: "sum" (a residual add) or "product" (a gate).
    pair_kind: str = "sum"
    # A pooled f32 sum made integer (compiler/requant_elementwise.py): the sums within
    # llvm-cpu's f32 summation error of a step (of all reachable sums, over channels).
    pooled_ambiguous: int | None = None
    pooled_sums: int | None = None
    # The pooled terms were an f32 function of an int8 value: summed as a table of i16 values
    # in units of this power of two (requant_pooling._term_table).
    pooled_table_scale: float | None = None
    # An f32 contraction of dequantized int8 values made integer
    # (compiler/requant_float_contraction.py): the accumulator values within llvm-cpu's f32
    # rounding of a step (of all reachable ones, over channels).
    contraction_ambiguous: int | None = None
    contraction_accumulators: int | None = None
    # What follows stage 1 when it reads per-channel values (a bias added after the quantized
    # matmul, then maybe an activation): its steps, summarized as `of_stages` does.
    rest: "RequantSummary | None" = None
    # Int8 in and out, f32 between in a form no integer rescale reproduces (a softmax, a
    # normalization): computed in bf16 on the NPU, not within one output step by construction.
    bf16_island: bool = False
    # Nearest rescales whose level goes on through further steps (this summary's, `rest`'s
    # included only in its own).
    composition: Composition = field(default_factory=Composition)
    # An activation before the only quantize (requant_fused_activation): its table segments over
    # a grid level of the dequantized accumulator; `differing` then counts the whole form.
    activation_segments: int | None = None

    @classmethod
    def float_island(cls, kind: str) -> "RequantSummary":
        return cls(kind, [], [], bf16_island=True)

    @classmethod
    def of_stages(cls, kind: str, stages: list) -> "RequantSummary":
        """The summary of requant_elementwise `Stage`s: their per-channel rescales, tables and
        rescales of two int8 values."""
        rescales = [s for s in stages if s.kind == "rescale"]
        tables = [s for s in stages if s.kind == "table"]
        pairs = [s for s in stages if s.kind in ("sum", "product")]
        return cls(kind, [d for s in rescales for d in s.differing], [d for s in rescales for d in s.step_span],
                   sum(s.pair.differing for s in pairs) if pairs else None,
                   sum(s.pair.pairs for s in pairs) if pairs else None,
                   sum(len(s.table.entries) for s in tables) if tables else None,
                   sum(s.table.ambiguous for s in tables) if tables else None,
                   pair_kind="+".join(s.kind for s in pairs) or "sum",
                   composition=sum((s.composition for s in stages), Composition()))

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
        if self.bf16_island:
            return (f"{self.kind}: computed in bf16 (float compute next to int8 tensors that no integer "
                    f"rescale reproduces, as a softmax or a layer norm): its int8 results may differ from "
                    f"the f32 chain by more than one output step")
        head = f"{self.kind}: f32 requantization -> " + \
            (f"integer rescale, {_channels_text(self.differing, self.step_span)}" if self.differing
             else "integer arithmetic")
        if self.residual_levels:
            head += (f", of the accumulator plus the int8 residual in its units (rescaled per channel), measured on "
                     f"every (accumulator, residual) pair of the {self.residual_levels} residual levels")
        if self.residual_differing is not None:
            head += f"; the {self.residual_type} residual's own rescale to int8, " + \
                _channels_text(self.residual_differing, self.residual_step_span)
        if self.rest is not None:
            if self.rest.differing:
                head += "; then a per-channel rescale of the int8 value, " + \
                    _channels_text(self.rest.differing, self.rest.step_span)
            head += self.rest._following()
        composed = self.all_composition.text()
        return head + self._following() + (f"; {composed}" if composed else "")

    @property
    def all_composition(self) -> Composition:
        return self.composition + (self.rest.composition if self.rest is not None else Composition())

    def _following(self) -> str:
        """The remark's text for what follows the rescales: a sum or product of two int8
        values, a pooled sum, activation tables."""
        text = ""
        if self.sum_pairs:
            what = "a residual add as an integer rescale of the sum" if self.pair_kind == "sum" else \
                f"a {self.pair_kind} of two int8 values as an integer rescale"
            text += f"; then {what}, one output step off on {self.sum_differing} of {self.sum_pairs} int8 input pairs"
        if self.pooled_sums and self.pooled_table_scale:
            text += (f"; the f32 terms are a 256-entry table of i16 values in units of "
                     f"2^{round(math.log2(self.pooled_table_scale))}, summed in i32: {self.pooled_ambiguous} of "
                     f"{self.pooled_sums} sums lie within the table's rounding and llvm-cpu's f32 summation error "
                     f"of a step (one output step)")
        elif self.pooled_sums:
            text += (f"; the f32 sum is an exact i32 sum: {self.pooled_ambiguous} of {self.pooled_sums} sums lie "
                     f"within llvm-cpu's f32 summation error of a step (one output step)")
        if self.contraction_accumulators:
            text += (f"; the f32 {self.kind} is an exact i32 one: {self.contraction_ambiguous} of "
                     f"{self.contraction_accumulators} accumulator values lie within llvm-cpu's f32 rounding of "
                     f"a step (one output step)")
        if self.activation_segments:
            text += (f"; the activation before the only quantize through {self.activation_segments} table segments "
                     f"of a grid level of the dequantized accumulator (counted above)")
        elif self.table_entries:
            tables = f"a {self.table_entries}-entry table" if self.table_entries <= 256 else \
                f"tables of {self.table_entries} entries in all"
            text += f"; then an activation through {tables}"
            if self.table_ambiguous:
                text += (f" ({self.table_ambiguous} entries depend on how llvm-cpu evaluates the float chain, "
                         f"its FMA contraction or the last ulps of its exp / tanh / erf: one output step)")
        return text

    @property
    def approximate(self) -> bool:
        return self.bf16_island or self.exact_channels < self.channels or bool(self.sum_differing) or bool(self.table_ambiguous) \
            or any(self.residual_differing or ()) or bool(self.pooled_ambiguous) or bool(self.contraction_ambiguous) \
            or bool(self.composition.off) or (self.rest is not None and self.rest.approximate)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "channels": self.channels, "exact_channels": self.exact_channels,
                "differing_share": self.differing_share, "differing": self.differing,
                "step_span": self.step_span, "sum_differing": self.sum_differing, "sum_pairs": self.sum_pairs,
                "table_entries": self.table_entries, "table_ambiguous": self.table_ambiguous,
                "activation_segments": self.activation_segments,
                "residual_differing": self.residual_differing, "residual_step_span": self.residual_step_span,
                "residual_type": self.residual_type, "residual_levels": self.residual_levels,
                "pair_kind": self.pair_kind, "pooled_ambiguous": self.pooled_ambiguous,
                "pooled_sums": self.pooled_sums, "pooled_table_scale": self.pooled_table_scale,
                "contraction_ambiguous": self.contraction_ambiguous,
                "contraction_accumulators": self.contraction_accumulators,
                "bf16_island": self.bf16_island, "rest": self.rest.as_dict() if self.rest else None,
                "composition": dataclasses.asdict(self.composition)}


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


def plan_summary(kind: str, fits: list, sum_fit, table, res_fits: list | None, res_type: str | None, stages,
                 sum_error: float, channels: list, mode: RequantMode) -> RequantSummary:
    """A contraction requantization's summary (compiler/requant.py) from its fits (ChannelFit,
    the residual's own too), the residual add's (`sum_fit`), its activation table and later
    stages: what the fits' levels one off become at the result, the f32 rounding counted."""
    summary = RequantSummary(kind, [x.differing for x in fits], [x.step_span for x in fits],
                             sum_differing=sum_fit.differing if sum_fit else None,
                             sum_pairs=sum_fit.pairs if sum_fit else None,
                             table_entries=len(table.entries) if table else None,
                             table_ambiguous=table.ambiguous if table else None,
                             residual_differing=[x.differing for x in res_fits] if res_fits else None,
                             residual_step_span=[x.step_span for x in res_fits] if res_fits else None)
    if res_fits:
        summary.residual_type = res_type
    summary.composition = Composition.of_fits(fits + (res_fits or []))
    if sum_error:
        _count_f32_rounding(summary, fits, channels, mode)
    if stages:
        summary.rest = RequantSummary.of_stages("rest", stages)
    return summary


def _count_f32_rounding(summary: RequantSummary, fits: list, channels: list, mode: RequantMode) -> None:
    """Records in `summary` the accumulators llvm-cpu's f32 contraction may put a step off;
    with --torq-requant=exact, any refuses."""
    ambiguous = sum(f.ambiguous for f in fits)
    if ambiguous and mode is RequantMode.EXACT:
        raise NotExact(f"{ambiguous} accumulator values lie within llvm-cpu's f32 rounding of the {summary.kind} "
                       f"of a step (its result there depends on the order it adds in)")
    summary.contraction_ambiguous = ambiguous
    summary.contraction_accumulators = sum(hi - lo + 1 for _, lo, hi in channels)
