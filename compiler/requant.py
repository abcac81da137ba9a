"""Float requantization after an int8 contraction, made integer arithmetic.

A QDQ int8 model (ONNX QuantizeLinear / DequantizeLinear, torch's
quantize_per_tensor / dequantize_per_tensor) reaches dispatch creation as an
i8 x i8 -> i32 contraction (conv, matmul) followed by an elementwise generic
that requantizes its accumulator in f32, e.g.

    a -> subi corr -> sitofp -> mulf sx -> mulf sw -> addf bias -> [relu]
      -> divf sy -> roundeven -> addf zy -> clamp [-128, 127] -> fptosi i8
      [-> extsi -> subi zy -> sitofp -> mulf sy: a dequantize to f32]

The NPU has no f32 epilogue. `lower_float_requantization` replaces that
generic with an integer rescale the Torq epilogue runs (the steps TOSA
rescale lowers to), per output channel c:

    q = clamp(((a + C_c) * M_c + R_c) >> S_c, lo_c, hi_c)

exactly equal to the f32 chain for *every* accumulator value the
contraction can produce where such a rescale exists, and otherwise (the
default, --torq-requant=nearest) the nearest one: at most one output step
off anywhere on the reachable range, with the number of accumulator values
on which it differs measured exactly per channel and reported
(`RequantSummary`; compiler/rescale_fit.py). A residual add in the same
body (ONNX Runtime's QDQ form of ResNet's `relu(conv(x) + r)`: the rescaled
int8 value and an int8 tensor r, both dequantized, added and quantized
again) becomes an integer rescale of the sum of the two int8 values,
clamp((u * Mu + r * Mr + R) >> S), fitted on all 65,536 pairs and at most
one step off any of them (`rescale_pairs.fit_sum`; the pairs it misses are
counted and reported). In a downsampling block the residual is the i32
accumulator of the main path's last conv (IREE fuses its requantization
into this dispatch): it gets its own per-channel rescale to int8 first,
fitted on |r| <= 2^30 since its producer is another dispatch. An activation in the same body (the int8 value
dequantized, put through hardswish, hardsigmoid, sigmoid, ... and quantized
again) becomes a lookup in a 256-entry table built from the float chain
(compiler/requant_split.py). A contraction of two int8 activations
(attention's q.k^T and p.v) reaches here with IREE's zero-point correction
by the operands' row and column sums (i32 tensors): it stays integer steps
before the rescale, which is fitted to the corrected accumulator
(compiler/requant_zero_point.py). A residual added before the only quantize
(PT2E's conv + add + relu) is added to the accumulator in its units first
(compiler/requant_acc_residual.py). An activation before the only quantize
(PT2E's conv + hardswish: the chain is not monotone in the accumulator) becomes
table segments of a grid level the NPU makes of the dequantized accumulator
(compiler/requant_fused_activation.py). The f32 chain itself is evaluated by
compiler/f32_chain.py. With --torq-requant=exact, or
when even the nearest rescale is more than one step off, the dispatch stays
on host with a remark naming the channel (`Unsupported`). A dequantize tail after the int8 value (f32 compute) is cut off and left to a
host dispatch (`HostTail`), so the NPU result is the int8 tensor. A nearest rescale whose
level goes on through a table, a bias rescale or a residual add is priced at the result
(compiler/requant_compose.py): refitted where a level one off there would be more than one
output step, or those values counted (`RequantSummary.composition`).

Exactness argument:
1. The chain is evaluated here exactly as IREE's llvm-cpu evaluates it:
   every f32 op correctly rounded (numpy float32, IEEE round to nearest
   even), `sitofp` rounding to nearest even, `divf` a true division (llvm
   does not turn it into a reciprocal multiply), and a `mulf` whose only user
   is an `addf`/`subf` fused into one FMA (one rounding) when the host target
   has FMA: llvm-cpu contracts those pairs (checked against llvm-cpu on
   accumulators next to step points, tests/e2e/test_qdq_int8.py).
   Chains whose evaluation order llvm could choose (a sum of two products,
   a product with several users feeding an add) are refused.
2. Every op of the chain is monotone in the accumulator a: IEEE rounding is
   monotone, so fl(x * s), fl(x / s) (s a per-channel constant), fl(x + b),
   fma, sitofp, roundeven / round / floor / ceil, max / min / relu (as
   cmpf + select of its own operands) and fptosi preserve (or, for s < 0,
   reverse) the order of their variable operand; integer add / sub / mul by
   constants are monotone as long as they do not wrap, which is checked at
   both ends of the range (a monotone value is extreme there). A product or
   quotient of two monotone values, each of one sign on the range, is
   monotone where the directions of their magnitudes agree (compiler/
   f32_bounds.py). The analysis tracks the direction of every value and
   refuses anything else. So per channel q = f(a) is a monotone step function of a.
3. The reachable range of a: with x in the input dtype's range (i8:
   [-128, 127], padding included) and the weights known constants (resolved
   from the dispatch's operands), a(p) = sum_r x * w lies in
   [sum min(w x_min, w x_max), sum max(w x_min, w x_max)] over the weights
   the output channel reads (times the multiplicity of reduction dims the
   weight does not use); without constant weights, the dtype bound. A range
   that can reach 2^31 (i32 wrap) is refused.
4. A monotone step function on [lo, hi] is determined by q(lo), q(hi) and its
   step points T_k = min{a in [lo, hi] : q(a) >= k} for q(lo) < k <= q(hi)
   (at most 255 for int8), found by bisection. The integer form
   g(a) = clamp(floor((a * M + R) / 2^S), q(lo), q(hi)) with M > 0 is also
   monotone, and equals q on [lo, hi] iff M T_k + R >= k 2^S and
   M (T_k - 1) + R < k 2^S for every k (`fit_rescale` solves exactly these
   inequalities: an interval of slopes from all pairs of steps, then integer
   M, S, R on it). After fitting, both functions are compared at lo, hi
   and every T_k - 1, T_k: two monotone functions that agree at both ends of
   each constant piece of q agree on the whole range.
When no (M, S, R) with |M| < 2^31, S <= 62 and no i64 overflow satisfies the
inequalities (the f32 rounding moved some step points off every line), no
exact rescale exists: --torq-requant=exact leaves the dispatch on host and
the remark says which channel and why, the default takes the nearest. That is
common when step points lie at large accumulators (f32 keeps 24 bits: near
|a| ~ 10^6 the rounding of a * sx * sw moves a step by a good part of one
accumulator unit) and when scales are round numbers (sx * sw / sy = 1/80
exactly puts every step point on a tie that f32 noise breaks either way).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from .f32_chain import INT_RANGE, Chain, type_name
from .ir_utils import (
    block_ops,
    box_term,
    indexing_maps,
    inline_function_text,
    iterator_types,
    loop_ranges,
    map_dims,
    n_inputs,
    region_ops,
    static_shape,
    sync_function_type,
)
from .passes import RequantMode
from .requant_acc_residual import fit_accumulator_residual, has_accumulator_value
from .requant_channels import (
    RESIDUAL_I32_BOUND,
    Known,
    channel_dicts,
    check_scales,
    fit_channels,
    on_channel_grid,
    per_channel_constants,
    weight_rows,
)
from .requant_compose import PairTail, following
from .requant_emit import permuted_copy, rescale_generic
from .requant_float_contraction import F32_SUM_ERROR
from .requant_fused_activation import fit_fused_activation
from .requant_split import (
    ActivationTable,
    backward_slice,
    build_table,
    first_ints,
    reads,
    split_first_int,
    split_residual_add,
)
from .requant_stages import Channels, StageSplitter
from .requant_summary import RequantSummary, plan_summary
from .requant_tail import (
    HostTail,
    accumulator_tail,
    derived_tails,
    is_accumulator_correction,
    runtime_tensors,
    split_tail,
    tail_text,
)
from .requant_zero_point import ZeroPointCorrection, fold_zero_products, zero_point_correction
from .rescale_fit import NotExact, NotMonotone, Rescale
from .rescale_pairs import SumRescale

# --- the IR rewrite ---------------------------------------------------------------------

@dataclass
class RequantLowering:
    """What `lower_float_requantization` did to one dispatch function."""
    rescaled: list["RequantSummary"] = field(default_factory=list)  # one per rewritten generic
    host_tails: dict[int, HostTail] = field(default_factory=dict)  # function result -> tail
    # The function results removed because the host computes them (HostTail.source), as
    # they were numbered before.
    derived: list[int] = field(default_factory=list)


def is_float_requant(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    names = {o.name for o in region_ops(op)}
    f32_result = str(ir.RankedTensorType(op.results[0].type).element_type) == "f32"
    return "arith.sitofp" in names and ("arith.fptosi" in names or f32_result)


def _accumulator_range(con: ir.Operation, known: Known) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(lo, hi, dims): bounds of the contraction's i32 result, as arrays over its
    result dims `dims` (the parallel dims its constant weight varies along; [] if uniform)."""
    maps = indexing_maps(con)
    its, ranges = iterator_types(con), loop_ranges(con)
    red = [d for d, it in enumerate(its) if it == "reduction"]
    bounds = []
    for i in range(2):
        t = str(ir.RankedTensorType(con.operands[i].type).element_type)
        if t not in ("i8", "i16"):
            raise NotExact(f"contraction operand {i} is {t}, not i8/i16")
        bounds.append(INT_RANGE[t])
    const_i = next((i for i in (1, 0) if known(con.operands[i]) is not None and map_dims(maps[i]) is not None), None)
    total = math.prod(ranges[d] for d in red)
    if const_i is None:
        m = max(abs(b) for b in bounds[0]) * max(abs(b) for b in bounds[1]) * total
        return np.array(-m), np.array(m), []
    w = weight_rows(con, const_i, known(con.operands[const_i]).astype(np.int64))
    xlo, xhi = bounds[1 - const_i]
    hi = np.maximum(w.rows * xlo, w.rows * xhi).sum(-1) * w.multiplicity
    lo = np.minimum(w.rows * xlo, w.rows * xhi).sum(-1) * w.multiplicity
    return lo, hi, w.chan


def _channel_values(op: ir.Operation, skip: set[int], known: Known, range_dims: list[int],
                    acc_lo: np.ndarray, acc_hi: np.ndarray, acc_map_dims: list[int], residual: int = -1):
    """(chan, per channel: ({block arg: scalar}, lo, hi)). The channels are the points of the
    result dims `chan` (sorted) that some per-channel value (operands, accumulator bounds)
    varies along: none, one (a conv's output channels), or several (a grouped conv's groups x
    channels), numbered in row-major order."""
    out = map_dims(indexing_maps(op)[-1])
    shape = static_shape(op.results[0].type)
    chan_dims, per = per_channel_constants(op, known, (*skip, residual))
    # Accumulator bounds vary along contraction result dims; map them to this op's result dims.
    range_pos = [out.index(acc_map_dims[rd]) for rd in range_dims]
    chan = tuple(sorted(chan_dims | set(range_pos)))
    n = math.prod(shape[d] for d in chan)
    bounds = []
    for b in (acc_lo, acc_hi):
        b = np.asarray(b)
        if b.size > 1:
            b = on_channel_grid(b.transpose(np.argsort(range_pos)), tuple(sorted(range_pos)), chan, shape)
        bounds.append(np.broadcast_to(b.reshape(-1), (n,)))
    return chan, [(vals, int(lo), int(hi)) for vals, lo, hi in zip(channel_dicts(per, chan, shape), *bounds)]


@dataclass
class _Plan:
    op: ir.Operation  # the float requantization generic
    acc_index: int
    chan: tuple[int, ...]  # result dims the parameters vary along (none: one channel)
    rescales: list[Rescale]
    q_type: str  # element type of the integer result
    tail: HostTail | None
    result_index: int  # function result it feeds (tail only), else -1
    summary: RequantSummary
    # A residual add after the rescale: the operand index of the int8 tensor added, and the
    # integer rescale of the sum (stage-1 level, residual) -> output level.
    residual_index: int = -1
    sum_rescale: SumRescale | None = None
    # An activation after the rescale: the table from the stage-1 level to the output level.
    table: ActivationTable | None = None
    # An i32 residual: its own per-channel rescale to int8 before the add.
    residual_rescales: list[Rescale] | None = None
    # No requantization: the accumulator is the NPU's result, `tail` all the host computes,
    # and `derived` what the host computes from its value: (the reader, its result, its tail).
    accumulator_only: bool = False
    derived: list = field(default_factory=list)
    # Steps after stage 1 that read per-channel values (requant_elementwise.Stage), from its
    # int8 value `rest_leaf`.
    rest_stages: list | None = None
    rest_leaf: ir.Value | None = None
    # Zero-point corrections by i32 tensors before the rescale (two int8 activations).
    correction: ZeroPointCorrection | None = None
    # The residual, when `rest_stages` read it (`_LaterStages.with_residual`): no separate sum.
    rest_other: ir.Value | None = None
    # The residual added to the accumulator before its rescale (requant_acc_residual): its
    # per-channel rescale to accumulator units; `rescales` then apply to that sum.
    accumulator_residual: list[Rescale] | None = None
    # An activation before the only quantize (requant_fused_activation): `rescales` make a
    # grid level u, and the result is the sum of these tables' entries at their segment of u.
    activation_tables: list[ActivationTable] | None = None
    # ... and above the grid, the result is these rescales of the accumulator (floored).
    activation_floor: list[Rescale] | None = None


def _plan(op: ir.Operation, known: Known, host, mode: RequantMode) -> _Plan | None:
    """The rewrite of float requantization `op`, or None when `op` does not follow an integer
    contraction (then it is not ours). Raises NotExact when it does but cannot be reproduced
    (exactly in EXACT `mode`, else within one output step per channel)."""
    found = _accumulator_of(op)
    if found is None:
        return None
    acc_index, con, kind = found
    host = host() if callable(host) else host
    if host is None:
        raise NotExact("the host target's float semantics (FMA contraction) are unknown")
    maps = indexing_maps(op)
    out, acc_dims = map_dims(maps[-1]), map_dims(maps[acc_index])
    if out is None or sorted(out) != list(range(len(out))) or acc_dims is None or sorted(acc_dims) != sorted(out):
        raise NotExact("the requantization reads the accumulator through a non-permutation map")
    body = region_ops(op)
    block = op.regions[0].blocks[0]
    corr = zero_point_correction(op, acc_index, con, known)
    acc_v = corr.corrected if corr else block.arguments[acc_index]
    skip = {acc_index, *(corr.operands if corr else ()), *(a.arg_number for a in block.arguments[:n_inputs(op)]
                                                             if not list(a.uses))}
    if not any(o.name == "arith.fptosi" for o in body):
        return _accumulator_tail_plan(op, acc_index, known, kind, skip)
    result, ops, tail, result_index = _quantized_result(op, body)
    if corr is not None:
        ops = [o for o in ops if o not in corr.ops]
    q_type = type_name(result.type)
    if q_type not in ("i8", "i16"):
        raise NotExact(f"the requantized value is {q_type}, not i8/i16")
    acc_lo, acc_hi, range_dims = _accumulator_range(con, known) if corr is None else \
        (np.array(-corr.bound), np.array(corr.bound), [])
    if max(abs(int(np.min(acc_lo))), abs(int(np.max(acc_hi)))) >= 1 << 31:
        raise NotExact(f"the {kind} accumulator can wrap (i32 overflow)")
    residual = _residual_operand(op, skip, known)
    if residual >= 0 and not has_accumulator_value(ops, acc_v, block.arguments[residual]):
        if _f32_sum_error(con):
            raise NotExact("an f32 contraction with the residual added before its int8 value")
        chan, channels = _channel_values(op, skip, known, range_dims, acc_lo, acc_hi, acc_dims, residual)
        check_scales(ops, [vals for vals, _, _ in channels])
        fit = fit_accumulator_residual(ops, result, acc_v, block.arguments[residual], host, channels, chan, kind, mode)
        return _Plan(op, acc_index, chan, fit.rescales, q_type, tail, result_index, fit.summary(kind), residual,
                     residual_rescales=fit.stage_rescales(), correction=corr, accumulator_residual=fit.residual_rescales)
    final_ops, final_result = ops, result
    res_split = sum_fit = later = None
    if residual >= 0:
        try:
            res_split = split_residual_add(ops, result, acc_v, block.arguments[residual], host, q_type, mode)
            ops, result, sum_fit = res_split.stage1, res_split.q1, res_split.fit
        except NotExact:
            later = _LaterStages.with_residual(op, known, skip, residual, ops, result, acc_v, host, mode)
            if later is None:
                raise
    if later is None:
        later = _LaterStages.of(op, known, skip | ({residual} if residual >= 0 else set()), ops, result, acc_v,
                                host, q_type, mode, residual >= 0)
    ops, result = later.ops, later.result
    chan, channels = _channel_values(op, skip, known, range_dims, acc_lo, acc_hi, acc_dims, residual)
    check_scales(ops, [vals for vals, _, _ in channels])
    if later.stages and later.channels.dims not in ((), chan):
        raise NotExact("the steps after stage 1 vary along another dim than stage 1")
    sum_error = _f32_sum_error(con)
    downstream = _downstream(result, host, [vals for vals, _, _ in channels], ops, final_ops, final_result, later,
                             res_split, sum_fit)
    try:
        fits = fit_channels(Chain(ops, result, acc_v, host), channels, chan, kind, mode, sum_error, downstream)
    except NotExact as e:  # PT2E's conv + hardswish: the activation before the only quantize
        if residual >= 0 or later.stages or later.table is not None or \
                (mode is RequantMode.EXACT and not isinstance(e, NotMonotone)):
            raise
        try:  # not monotone, or monotone on these accumulators but curved (no rescale within a step)
            fit = fit_fused_activation(ops, result, acc_v, host, channels, kind, mode)
        except NotExact:
            if isinstance(e, NotMonotone):
                raise
            raise e from None
        return _Plan(op, acc_index, chan, fit.level_rescales, q_type, tail, result_index, fit.summary(kind),
                     correction=corr, activation_tables=fit.tables, activation_floor=fit.linear_rescales)
    res_fits = _residual_fits(res_split, block.arguments[residual] if residual >= 0 else None, channels, chan,
                              kind, host, mode)
    summary = plan_summary(kind, fits, res_split.fit if res_split else None, later.table, res_fits,
                           res_split.res_type if res_fits else None, later.stages, sum_error, channels, mode)
    return _Plan(op, acc_index, chan, [x.rescale for x in fits], q_type, tail, result_index, summary,
                 residual, sum_fit.rescale if sum_fit else None, later.table,
                 [x.rescale for x in res_fits] if res_fits else None,
                 rest_stages=later.stages, rest_leaf=result if later.stages else None, correction=corr,
                 rest_other=later.other)


def _downstream(result: ir.Value, host, values: list, ops: list, final_ops: list, final_result: ir.Value,
                later: _LaterStages, res_split, sum_fit):
    """What the rescale's level becomes at the requantization's result (requant_compose):
    through the steps after stage 1 to the result, or, with a residual add, to the int8
    value added and then the add."""
    if res_split is None:
        return following("what follows the rescale", result, host, values, [o for o in final_ops if o not in ops],
                         final_result, later.stages, later.table, other=later.other)
    return following("what follows the rescale", result, host, values,
                     [o for o in res_split.stage1 if o not in ops], res_split.q1, later.stages,
                     tail=PairTail(sum_fit.rescale, res_split.variants, first=True))


def _f32_sum_error(con: ir.Operation) -> float:
    """The f32 rounding of the float contraction `con` replaces, in accumulator units (0: none,
    an integer contraction from the start); see compiler/requant_float_contraction.py."""
    return ir.FloatAttr(con.attributes[F32_SUM_ERROR]).value if F32_SUM_ERROR in con.attributes else 0.0


def integer_contraction_input(op: ir.Operation) -> tuple[int, ir.Operation, str] | None:
    """(operand index, contraction, its kind) of the first input of `op` that is the i32
    result of an integer contraction in the same function, or None."""
    from .patterns import classify_contraction

    for i in range(n_inputs(op)):
        v = op.operands[i]
        con = None if isinstance(v.owner, ir.Block) else v.owner
        if con is None or con.name != "linalg.generic" or str(ir.RankedTensorType(v.type).element_type) != "i32":
            continue
        c = classify_contraction(con)
        if c is not None:
            return i, con, c.kind
    return None


def _accumulator_of(op: ir.Operation) -> tuple[int, ir.Operation, str] | None:
    """(operand index, contraction, its kind) of the i32 integer contraction `op` requantizes,
    or None; raises NotExact when that accumulator has other users or a nonzero start."""
    from .patterns import is_zero_fill

    found = integer_contraction_input(op)
    if found is None:
        return None
    _, con, kind = found
    if len(list(con.results[0].uses)) != 1:
        raise NotExact(f"the {kind} accumulator has other users")
    init = con.operands[n_inputs(con)]
    if isinstance(init.owner, ir.Block) or not is_zero_fill(init.owner):
        raise NotExact(f"the {kind} accumulator does not start from zero")
    return found


def _quantized_result(op: ir.Operation, body: list[ir.Operation]) -> tuple[ir.Value, list, str | None, int]:
    """(the quantized value, the ops computing it, the f32 dequantize tail's text or None, the
    function result the tail's value is or -1)."""
    yield_v = body[-1].operands[0]
    if str(yield_v.type) != "f32":
        return yield_v, body[:-1], None, -1
    q, tail_ops = split_tail(op)
    users = [u.owner for u in op.results[0].uses]
    if not tail_ops or len(users) != 1 or users[0].name != "func.return":
        raise NotExact("the dequantized f32 result is not only the dispatch's result")
    result_index = next(u.operand_number for u in op.results[0].uses)
    return q.results[0], body[:body.index(q) + 1], tail_text(q.results[0], tail_ops), result_index


@dataclass
class _LaterStages:
    """What follows the first integer level of a requantization: integer stages (a bias added
    per channel after the matmul's own quantization; before a residual add, any requantization
    of that level), or an activation table, or nothing; `ops` and `result` are then stage 1's."""
    ops: list
    result: ir.Value
    stages: list | None = None
    channels: Channels | None = None
    table: ActivationTable | None = None
    other: ir.Value | None = None  # the residual, when `stages` read it (`with_residual`)

    @staticmethod
    def with_residual(op: ir.Operation, known: Known, skip: set[int], residual: int, ops: list, result: ir.Value,
                      acc_v: ir.Value, host, mode: RequantMode) -> "_LaterStages | None":
        """A residual the body reads in more than one step, which `split_residual_add` refused:
        RepVGG's conv + conv1x1(x) + x, a GELU after the add. Stage 1 is the accumulator's
        first int value; all that follows, the residual's own steps included, is integer
        stages of it and the residual. None when that fails too (no exception kept here: a
        traceback holding IR handles past the function's erasure crashes the collector)."""
        res = op.regions[0].blocks[0].arguments[residual]
        if type_name(res.type) != "i8":  # stage 1 is priced on every int8 residual level only
            return None
        final = backward_slice(ops, result)
        own = [(q, s) for q, s in first_ints(ops, final, result) if reads(s, acc_v) and not reads(s, res)]
        if not own:
            return None
        (q1, stage1), rest = own[0], [o for o in final if o not in own[0][1]]
        if reads(rest, acc_v):
            return None
        try:
            channels = Channels.of(op, known, skip | {residual})
            stages = StageSplitter(rest, channels, host, mode, {q1: INT_RANGE[type_name(q1.type)],
                                                                 res: INT_RANGE["i8"]}).split(result)
        except NotExact:
            return None
        return _LaterStages(stage1, q1, stages, channels, other=res)

    @staticmethod
    def of(op: ir.Operation, known: Known, skip: set[int], ops: list, result: ir.Value, acc_v: ir.Value, host,
           q_type: str, mode: RequantMode, residual: bool) -> "_LaterStages":
        split = split_first_int(ops, result, acc_v)
        if split is None:
            return _LaterStages(ops, result)
        channels = Channels.of(op, known, skip)
        if residual or any(x in channels.per_channel for o in split[2] for x in o.operands):
            # Its stages (a per-channel rescale of the int8 level, a table of it), before the
            # residual add when there is one (CoaT: the attention scaled after its requantization);
            # the pair fit of the add reads their level, not a table's.
            stages = StageSplitter(split[2], channels, host, mode,
                                   {split[1]: INT_RANGE[type_name(split[1].type)]}).split(result)
            return _LaterStages(split[0], split[1], stages, channels)
        scalars = channels.values[0] if channels.values else None  # scalars passed as tensors
        table = build_table(split[2], result, split[1], host, q_type, mode, scalars=scalars)
        return _LaterStages(split[0], split[1], channels=channels, table=None if table.is_identity() else table)


def _residual_fits(res_split, residual_arg: ir.Value | None, channels: list, chan: tuple[int, ...], kind: str, host,
                   mode: RequantMode) -> list | None:
    """The fits of the residual's own rescale stage, when the residual add has one; its
    level goes on through the add."""
    if res_split is None or res_split.res_stage is None:
        return None
    res_t = type_name(residual_arg.type)
    # An i32 residual's reachable range is another dispatch's business: fitted on all
    # |r| <= 2^30 (a contraction reaching it sums 65,536 full-scale int8 products).
    lo, hi = (-RESIDUAL_I32_BOUND, RESIDUAL_I32_BOUND) if res_t == "i32" else INT_RANGE[res_t]
    res_channels = [(vals, lo, hi) for vals, _, _ in channels]
    res_chain = Chain(res_split.res_stage, res_split.q_res, residual_arg, host)
    downstream = following("the residual add", res_split.q_res, host, [vals for vals, _, _ in channels], [],
                           res_split.q_res, tail=PairTail(res_split.fit.rescale, res_split.variants, first=False))
    return fit_channels(res_chain, res_channels, chan, f"{kind} residual ({res_t})", mode, downstream=downstream)


def _accumulator_tail_plan(op: ir.Operation, acc_index: int, known: Known, kind: str, skip: set[int]) -> _Plan:
    """A body that only dequantizes the accumulator to f32 (PT2E's float output after an int8
    contraction): the NPU writes the accumulator, the host computes the body from it."""
    uses = list(op.results[0].uses)
    returned = [u.operand_number for u in uses if u.owner.name == "func.return"]
    if len(returned) != 1:
        raise NotExact(f"the f32 dequantize of the {kind} accumulator is not a result of the dispatch")
    try:  # its other readers the host computes from it (f32 -> int8 for the SE's multiply)
        derived = derived_tails(op, [u.owner for u in uses if u.owner.name != "func.return"])
    except NotExact as e:
        raise NotExact(f"the f32 dequantize of the {kind} accumulator is not only the dispatch's result: {e}") \
            from None
    tensors = runtime_tensors(op, acc_index, known)  # an f32 residual the host adds, run-time scales
    args = list(op.regions[0].blocks[0].arguments)
    # `skip`: the accumulator, its corrections, inputs nothing reads (a folded zero-point product)
    _, per = per_channel_constants(op, known, (*skip, *(args.index(a) for a in tensors)))
    tail = accumulator_tail(op, acc_index, per, tensors)
    return _Plan(op, acc_index, (), [], "i32", tail, returned[0], RequantSummary(kind, [], []),
                 accumulator_only=True,
                 derived=[(g, k, dataclasses.replace(t, source=returned[0])) for g, k, t in derived])


def _residual_operand(op: ir.Operation, skip: set[int], known: Known) -> int:
    """The operand index of a tensor the requantization adds (read along the result's dims, in
    any order: a transposed residual is an epilogue operand with permuted axes), or -1: an
    int8 tensor, or an i32 one (another contraction's accumulator) it requantizes first; the
    operands in `skip` (the accumulator, its zero-point corrections) are not candidates."""
    maps = indexing_maps(op)
    tensors = [i for i in range(n_inputs(op)) if i not in skip and not known.is_constant(op.operands[i])]
    if not tensors:
        return -1
    i = tensors[0]
    elt = str(ir.RankedTensorType(op.operands[i].type).element_type)
    if len(tensors) > 1:
        raise NotExact(f"operands {tensors} of the requantization are tensors (one int8 residual is supported)")
    if elt not in ("i8", "i32"):
        raise NotExact(f"operand {i} of the requantization is an {elt} tensor, not an int8 or i32 residual")
    if not _reads_along_result_dims(maps[i], maps[-1]):
        raise NotExact(f"operand {i} of the requantization (a residual) is read through {maps[i]}, "
                       f"not along a permutation of the result's dims ({maps[-1]})")
    return i


def _reads_along_result_dims(read: ir.AffineMap, result: ir.AffineMap) -> bool:
    """Whether `read` reads each result dim once, in any order, maybe at a stride and offset
    (`ir_utils.box_term`: a strided residual, FastViT's 1x1 stride-2 branch, becomes a
    strided box read in torq-split-box-reads)."""
    terms = [box_term(e) for e in read.results]
    dims, out = [t[0] if t is not None else None for t in terms], map_dims(result)
    return out is not None and None not in dims and sorted(dims) == sorted(out)


def lower_float_requantization(func: ir.Operation, arg_constants, host,
                               mode: RequantMode = RequantMode.NEAREST) -> RequantLowering:
    """Rewrites every float requantization after an integer contraction in `func` (see the
    module docstring), and leaves a run-time zero point's integer correction of one to the
    host (`is_accumulator_correction`); raises NotExact, leaving `func` untouched, if one cannot be
    reproduced: exactly in EXACT `mode` (--torq-requant=exact), else within one output step.

    `arg_constants.get(k)` is the known value of function argument k, or None;
    `host` the host's `HostFloat` (or a callable giving it, asked only when a
    requantization is found). The
    function's type is updated when a dequantize tail is cut off (the result
    becomes the int8 tensor; `host_tails` says what the host computes from it).
    Arguments left without users are not removed here (see `unused_arguments`).
    """
    known = Known(arg_constants)
    block = func.regions[0].blocks[0]
    plans = []
    for op in [o.operation for o in block.operations]:
        if is_float_requant(op) or is_accumulator_correction(op, known):
            fold_zero_products(op, known)
            plan = _plan(op, known, host, mode)
            if plan is not None:
                plans.append(plan)
    # Everything is decided; only now is IR changed (no handles into erased IR survive).
    done = RequantLowering()
    for plan in plans:
        if plan.accumulator_only:  # the host tail reads the NPU's accumulator in the result's layout
            acc = plan.op.operands[plan.acc_index]
            maps = indexing_maps(plan.op)
            if maps[plan.acc_index] != maps[-1]:
                acc = inline_function_text(permuted_copy(acc.type, plan.op.results[0].type, maps[plan.acc_index],
                                                         maps[-1]), plan.op, [acc])
            _leave_tail_to_host(func, plan, acc, done)
            for reader, k, tail in plan.derived:
                done.host_tails[k] = tail
                done.derived.append(k)
            continue
        contraction = plan.op.operands[plan.acc_index].owner
        if F32_SUM_ERROR in contraction.attributes:  # consumed: the summary reports it
            del contraction.attributes[F32_SUM_ERROR]
        args = [plan.op.operands[plan.acc_index]] + \
            ([plan.op.operands[plan.residual_index]] if plan.residual_index >= 0 else []) + \
            [plan.op.operands[i] for i in (plan.correction.operands if plan.correction else ())]
        new = inline_function_text(rescale_generic(plan), plan.op, args)
        _leave_tail_to_host(func, plan, new, done)
        done.rescaled.append(plan.summary)
    if done.derived:
        _drop_results(func, [reader for plan in plans for reader, _, _ in plan.derived], done.derived)
    if plans:  # what only the float op read (f32 scalars, its f32 init) would look like f32 compute
        for op in [o.operation for o in block.operations]:
            if op.name in ("arith.constant", "tensor.empty") and not list(op.results[0].uses):
                op.erase()
    return done


def _leave_tail_to_host(func: ir.Operation, plan: _Plan, value: ir.Value, done: RequantLowering) -> None:
    """`value` replaces the float op of `plan`, which is erased; a host tail it had is recorded,
    the function's result type becoming `value`'s."""
    plan.op.results[0].replace_all_uses_with(value)
    if plan.tail is not None:
        sync_function_type(func)
        done.host_tails[plan.result_index] = plan.tail
    plan.op.erase()


def _drop_results(func: ir.Operation, readers: list[ir.Operation], results: list[int]) -> None:
    """The function no longer returns `results` (the host computes them), and `readers`, the
    generics that computed them, are erased."""
    ret = block_ops(func.regions[0].blocks[0])[-1]
    kept = [v for k, v in enumerate(ret.operands) if k not in set(results)]
    with ir.InsertionPoint(ret), ret.location:
        ir.Operation.create("func.return", operands=kept)
    ret.erase()
    for reader in readers:
        reader.erase()
    sync_function_type(func)


def unused_arguments(func: ir.Operation) -> list[int]:
    """Indices of `func`'s arguments nothing reads."""
    return [a.arg_number for a in func.regions[0].blocks[0].arguments if not list(a.uses)]
