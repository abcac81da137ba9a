"""A pooled f32 sum of int8 values and its quantize, as an i32 sum and an integer rescale.

ONNX Runtime's QDQ form leaves global average pooling in f32: int8 values
dequantized, summed in f32, divided, quantized. After linalg's elementwise
fusion such a dispatch is a sum reduction whose body computes a term per
element, then an elementwise generic that quantizes the f32 sum. Two forms
of term:

- c * w, c a constant and w an integer computed from one int8 value (its
  level plus a constant): the sum S = sum w is exact in i32;
- g(x), any f32 function of one int8 value x with scalar parameters (a
  hardswish that ONNX Runtime left in float before the pool): a 256-entry
  table of i16 values T(x) = round(g(x) / c), c a power of two, summed in
  i32. Each term is then off by at most `rounding` units of c (half a unit,
  at most), a known, bounded error added to the sum's.

The quantize after the sum becomes an integer rescale of S, fitted to the
chain evaluated on fl32(S * c). llvm-cpu adds the f32 terms in an order of
its choosing, off the exact sum by at most gamma_{n+1} * sum |w| units of c
(every order, every FMA), sum |w| bounded through S itself (`summation_error`):
the sums that close to a step (with a table, that plus n * rounding) are
counted as ambiguous (one output step from llvm-cpu at most) and reported; a
step narrower than that bound is refused.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from .f32_chain import INT_RANGE, Chain, type_name
from .ir_utils import constant_of, inline_function_text, iterator_types, loop_ranges, n_inputs, region_ops
from .passes import RequantMode
from .requant_emit import pooling_function
from .requant_split import ActivationTable, llvm_variants, reads, slice_until
from .requant_stages import Channels, Stage, StageSplitter, variable_inputs
from .requant_summary import RequantSummary
from .rescale_fit import NotExact

_F32_UNIT = 2.0 ** -24


# A pooled term g(x) of one int8 x becomes a table of this type: the slices' widest
# integer, so its rounding (half a unit of c) is smallest against an output step.
_TERM_TABLE_TYPE = "i16"
# The reachable sums the quantize's rescale is checked on are enumerated: c is coarsened
# until they number at most this many (per channel).
_MAX_ENUMERATED_SUMS = 1 << 24


@dataclass
class PooledSum:
    """R's reduction: S = sum over the reduced dims of the integer w, standing for the f32 sum
    of `scale` * w. w is the int8 `level` + `offset`, or (`stages` a fixed-point table of a
    term g) T(x) ~ g(x) / `scale`, off by at most `rounding` units of `scale`."""
    level: ir.Value
    offset: int
    scale: float
    count: int  # elements summed per result
    stages: list[Stage]  # the ones computing `level`
    term_range: tuple[int, int]  # of w
    rounding: float = 0.0
    fixed_point: bool = False  # `stages` is the table of g

    @property
    def sum_range(self) -> tuple[int, int]:
        return self.count * self.term_range[0], self.count * self.term_range[1]


def pooled_sum(red: ir.Operation, channels: Channels, known_ranges: dict, host, mode: RequantMode) -> PooledSum:
    """The integer form of the f32 sum reduction `red` (R in the module docstring)."""
    body = region_ops(red)
    acc = red.regions[0].blocks[0].arguments[n_inputs(red)]
    term = next(v for v in body[-2].operands if v != acc)
    count = math.prod(d for d, it in zip(loop_ranges(red), iterator_types(red)) if it == "reduction")
    scaled = _integer_times_constant(term)
    if scaled is None:
        return _term_table(body[:-2], term, channels, known_ranges, host, count)
    w, scale = scaled
    prologue = body[:-2]
    splitter = StageSplitter(prologue, channels, host, mode, known_ranges)
    last_fptosi = [o for o in slice_until(prologue, w, set()) if o.name == "arith.fptosi"]
    stages = splitter.split(last_fptosi[-1].results[0]) if last_fptosi else []
    glue = slice_until(prologue, w, set(splitter.ranges))
    levels = [v for v in splitter.ranges if reads(glue, v)] if glue else [w]
    if len(levels) != 1 or splitter.ranges.get(levels[0]) != INT_RANGE["i8"]:
        raise NotExact("the pooled integer is not computed from one int8 value")
    level = levels[0]
    lv = np.arange(-128, 128, dtype=np.int64)
    ws = Chain(glue, w, level, host)(lv) if glue else lv
    if np.any(np.diff(ws) != 1):
        raise NotExact("the pooled integer is not its int8 value plus a constant")
    b = int(ws[0] + 128)
    return PooledSum(level, b, scale, count, stages, (-128 + b, 127 + b))


def _integer_times_constant(term: ir.Value) -> tuple[ir.Value, float] | None:
    """(w, c) when the f32 `term` is sitofp(w) * c with a scalar constant c."""
    mul = term.owner
    if isinstance(mul, ir.Block) or mul.name != "arith.mulf":
        return None
    consts = [constant_of(x) for x in mul.operands]
    k = 0 if consts[1] is not None else 1
    conv = mul.operands[k].owner
    if consts[1 - k] is None or consts[1 - k].size != 1 or isinstance(conv, ir.Block) or conv.name != "arith.sitofp":
        return None
    return conv.operands[0], float(consts[1 - k].reshape(-1)[0])


def _term_table(prologue, term, channels: Channels, known_ranges: dict, host, count: int) -> PooledSum:
    """The pooled sum of an f32 term g(x) of one int8 value x: T(x) = round(g(x) / c) in an
    i16 table, c the finest power of two for which T fits and the sums can be enumerated."""
    ops = slice_until(prologue, term, set(known_ranges))
    leaves = [v for v in known_ranges if reads(ops, v)]
    if len(leaves) != 1 or known_ranges[leaves[0]] != INT_RANGE["i8"] or \
            any(reads(ops, a) for a in channels.per_channel):
        raise NotExact("the pooled f32 term is neither an integer times a constant nor a function of one int8 "
                       "value with scalar parameters")
    chain = Chain(ops, term, leaves[0], host)
    if channels.values:
        chain = chain.for_channel(channels.values[0])
    levels = np.arange(-128, 128, dtype=np.int64)
    try:
        variants = [np.asarray(g, np.float64) for g in llvm_variants(chain, levels)]
    except NotExact as e:
        raise NotExact(f"the pooled f32 term: {e}") from None
    g = variants[0]
    top = float(np.max(np.abs(g)))
    _, hi = INT_RANGE[_TERM_TABLE_TYPE]
    finest = max(top / hi, count * float(np.ptp(g)) / _MAX_ENUMERATED_SUMS, np.finfo(np.float32).tiny)
    scale = 2.0 ** math.ceil(math.log2(finest))
    entries = np.round(g / scale).astype(np.int64)
    # Each term's distance from llvm-cpu's, whichever way it evaluates g, in units of c.
    rounding = max(float(np.max(np.abs(entries * scale - v))) for v in variants) / scale
    stage = Stage(term, "table", [leaves[0]], table=ActivationTable(-128, entries, 0), table_type=_TERM_TABLE_TYPE)
    return PooledSum(term, 0, scale, count, [stage], (int(entries.min()), int(entries.max())), rounding, True)


def summation_error(pooled: PooledSum, sums: np.ndarray) -> np.ndarray:
    """Bound on |llvm-cpu's f32 sum of the terms - c*S| in units of c at each integer sum S in
    `sums` (any order, each product rounded or fused; a table's terms off by `rounding`
    each): gamma_{n+1} times the terms' absolute sum (Higham, Accuracy and Stability, 4.3),
    which S itself bounds: since |w| = w + 2 max(0, -w) = -w + 2 max(0, w),
    sum |w| <= min(n max|w|, S + 2 n max(0, -min w), -S + 2 n max(0, max w)). Terms of one
    sign (a pool of ReLU or SiLU outputs) so get an error that grows with S, not the worst
    term's n-fold."""
    n, (w_lo, w_hi) = pooled.count, pooled.term_range
    s = np.asarray(sums, np.float64)
    absolute = np.minimum(n * max(abs(w_lo), abs(w_hi)),
                          np.minimum(s + 2 * n * max(0, -w_lo), -s + 2 * n * max(0, w_hi)))
    nu = (n + 1) * _F32_UNIT
    return nu / (1 - nu) * (absolute + n * pooled.rounding) + n * pooled.rounding


def ambiguous_sums(chain: Chain, channels: Channels, lo: int, hi: int, error) -> tuple[int, int]:
    """(sums S in [lo, hi] whose level may move within +-error(S), sums): over every channel;
    raises NotExact when two steps lie within their errors + 2 of each other (one step would
    not hold)."""
    s = np.arange(lo, hi + 1, dtype=np.int64)
    e = np.ceil(error(s)).astype(np.int64)
    ambiguous = 0
    for vals in channels.values:
        c = chain.for_channel(vals)
        steps = np.flatnonzero(np.diff(c(s))) + 1
        if len(steps) > 1 and np.any(np.diff(s[steps]) <= e[steps[1:]] + e[steps[:-1]] + 2):
            raise NotExact(f"the f32 sum's rounding (up to {float(e[steps].max()):.3g} units near a step) spans "
                           f"an output step")
        ambiguous += int((c(s - e) != c(s + e)).sum())
    return ambiguous, len(s) * len(channels.values)


def lower_pooling(red, quant, known, host, mode: RequantMode):
    """(the new quantized value, its summary) for R: sum reduction `red` quantized by `quant`."""
    uses = list(red.results[0].uses)
    reads = [i for i in range(n_inputs(quant)) if quant.operands[i] == red.results[0]]
    if len(uses) != 1 or len(reads) != 1 or type_name(ir.RankedTensorType(red.results[0].type).element_type) != "f32":
        raise NotExact("the f32 sum has users besides its quantize")
    sum_index = reads[0]
    variables, ranges = variable_inputs(red, known)
    red_channels = Channels.of(red, known, set(variables))
    pooled = pooled_sum(red, red_channels, ranges, host, mode)
    n, b = pooled.count, pooled.offset
    lo, hi = pooled.sum_range
    ch_q = Channels.of(quant, known, {sum_index})
    sum_arg = quant.regions[0].blocks[0].arguments[sum_index]
    body = region_ops(quant)
    stages = StageSplitter(body[:-1], ch_q, host, mode, {sum_arg: (lo, hi)},
                           (sum_arg, pooled.scale)).split(body[-1].operands[0])
    first = stages[0]
    if first.kind != "rescale" or first.leaves != [sum_arg]:
        raise NotExact("the pooled sum is not requantized first")
    ambiguous, sums = ambiguous_sums(first.chain, ch_q, lo, hi, lambda s: summation_error(pooled, s))
    if ambiguous and mode is RequantMode.EXACT:
        raise NotExact(f"{ambiguous} of {sums} pooled sums lie within llvm-cpu's f32 summation error"
                       f"{' and the table rounding' if pooled.fixed_point else ''} of a step (its result there "
                       f"depends on the order it adds in)")
    first.rescales = [dataclasses.replace(r, offset=r.offset + n * b) for r in first.rescales]
    text = pooling_function(red, variables, pooled, red_channels.dims, quant, sum_index, stages, ch_q.dims)
    new = inline_function_text(text, quant, [red.operands[i] for i in variables])
    summary = RequantSummary.of_stages("int8 sum pooling", ([] if pooled.fixed_point else pooled.stages) + stages)
    summary.pooled_ambiguous, summary.pooled_sums = ambiguous, sums
    if pooled.fixed_point:
        summary.pooled_table_scale = pooled.scale
    return new, summary
