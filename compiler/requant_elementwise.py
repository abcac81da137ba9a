"""Float requantization in dispatches without a contraction: int8 arithmetic in QDQ form.

ONNX Runtime's QDQ form leaves f32 arithmetic between int8 tensors wherever
no integer contraction absorbs it: squeeze-excite (the gate's i32
accumulator rescaled, put through hardsigmoid, multiplied into the int8
feature map), global average pooling (int8 values dequantized, summed in
f32, divided, quantized). After IREE's dispatch creation and linalg's
elementwise fusion (run here), such a dispatch is

  E. one elementwise generic from integer tensors (and constants) to int8, or
  R. a sum reduction whose body computes c * w per element (c a constant, w
     an integer computed from integer tensors), then an elementwise generic
     that quantizes the f32 sum.

A body's float-to-int conversions split it into stages, each a function of
at most two integer values (its leaves: the dispatch's integer inputs or
earlier stages), compiled as after a contraction (compiler/requant.py):

- one i32 leaf (an accumulator another dispatch wrote): a per-channel
  rescale fitted on |a| <= 2^30 (`requant_channels.fit_channels`);
- one int8 leaf: a 256-entry table (`requant_split.build_table`); with
  per-channel parameters, a per-channel rescale fitted on [-128, 127];
- two int8 leaves: a rescale of their sum (`rescale_fit.fit_sum`) or of their
  product (`rescale_fit.fit_product`), fitted on all 65,536 pairs.

In R the sum is integer, S = sum w in i32 (exact), and the stage after it a
rescale of S fitted to the chain evaluated on fl32(S * c). llvm-cpu adds the
f32 terms in an order of its choosing, off the exact sum by at most
gamma_{n+1} * n * max|w| units of w (every order, every FMA): the sums that
close to a step are counted as ambiguous (one output step from llvm-cpu at
most) and reported; a step narrower than that bound is refused.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from .f32_chain import INT_RANGE, Chain, type_name
from .ir_utils import constant_of, inline_function_text, iterator_types, loop_ranges, n_inputs, region_ops, static_shape
from .pass_managers import run_pipeline
from .requant_channels import RESIDUAL_I32_BOUND, fit_channels, per_channel_constants
from .requant_emit import elementwise_function, pooling_function
from .requant_split import ActivationTable, build_table, reads, slice_until
from .requant_summary import RequantSummary
from .rescale_fit import NotExact, PairFit, Rescale, fit_product, fit_sum

_F32_UNIT = 2.0 ** -24


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


@dataclass
class Channels:
    """The constant inputs of a generic, per channel: `dim` is the result dim they vary along
    (None: all scalars), `values[ch]` the {block arg: scalar} of channel ch."""
    dim: int | None
    values: list[dict]
    per_channel: set = field(default_factory=set)  # block args that vary

    @classmethod
    def of(cls, op: ir.Operation, known, variable: set[int]) -> "Channels":
        dims, per = per_channel_constants(op, known, variable)
        if len(dims) > 1:
            raise NotExact("the requantization parameters vary along more than one dim")
        dim = dims.pop() if dims else None
        n = static_shape(op.results[0].type)[dim] if dim is not None else 1
        values = [{a: (v if d is None else v[ch]) for a, (d, v) in per.items()} for ch in range(n)]
        return cls(dim, values, {a for a, (d, _) in per.items() if d is not None})


class StageSplitter:
    """Splits a body into `Stage`s (see the module docstring)."""

    def __init__(self, ops: list[ir.Operation], channels: Channels, host, nearest: bool,
                 ranges: dict, scaled: tuple[ir.Value, float] | None = None):
        self.ops, self.channels, self.host, self.nearest = ops, channels, host, nearest
        self.ranges = dict(ranges)  # leaf value -> (lo, hi)
        self.scaled = scaled  # (the f32 leaf holding S * c, c) in R's quantize
        self.stages: list[Stage] = []

    def split(self, result: ir.Value) -> list[Stage]:
        """The stages up to `result`, which must be the last one's value."""
        for op in slice_until(self.ops, result, set()):
            if op.name == "arith.fptosi":
                self.stages.append(self._stage(op.results[0]))
        if not self.stages or self.stages[-1].value != result:
            raise NotExact("the result is not the int value of a requantization")
        return self.stages

    def _stage(self, q: ir.Value) -> Stage:
        stops = set(self.ranges)
        ops = slice_until(self.ops, q, stops)
        leaves = [v for v in self.ranges if reads(ops, v)]
        per_channel = any(reads(ops, a) for a in self.channels.per_channel)
        q_type = type_name(q.type)
        if len(leaves) == 1:
            stage = self._one_leaf(ops, q, leaves[0], per_channel, q_type)
        elif len(leaves) == 2 and not per_channel and all(self.ranges[v] == INT_RANGE["i8"] for v in leaves):
            stage = self._two_leaves(ops, q, leaves, q_type)
        else:
            raise NotExact(f"a requantization step reads {len(leaves)} integer values"
                           f"{' and per-channel parameters' if per_channel else ''} "
                           f"(one, or two int8 values with scalar parameters, are supported)")
        self.ranges[q] = INT_RANGE[q_type]
        return stage

    def _one_leaf(self, ops, q, leaf, per_channel: bool, q_type: str) -> Stage:
        lo, hi = self.ranges[leaf]
        if self.scaled is None and hi - lo < 256 and not per_channel:
            scalars = {a: v for a, v in self.channels.values[0].items() if a not in self.channels.per_channel} \
                if self.channels.values else None
            table = build_table(ops, q, leaf, self.host, q_type, self.nearest, scalars=scalars)
            return Stage(q, "identity" if table.is_identity() else "table", [leaf], table=table)
        chain = Chain(ops, q, leaf, self.host)
        if self.scaled is not None and leaf == self.scaled[0]:
            chain = chain.of_scaled_sum(self.scaled[1])
        channels = [(vals, lo, hi) for vals in self.channels.values]
        fits = fit_channels(chain, channels, self.channels.dim, f"rescale of a {type_name(leaf.type)} value",
                            self.nearest)
        return Stage(q, "rescale", [leaf], [f.rescale for f in fits], [f.differing for f in fits],
                     [f.step_span for f in fits], chain=chain)

    def _two_leaves(self, ops, q, leaves, q_type: str) -> Stage:
        u, v = (g.ravel() for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
        qs = [np.asarray(x, np.int64) for x in
              Chain(ops, q, leaves[0], self.host, extra=(leaves[1],)).contraction_variants(u, extra=(v,))]
        lo, hi = INT_RANGE[q_type]
        try:
            fit, kind = fit_sum(u, v, qs, lo, hi), "sum"
        except NotExact:
            fit, kind = fit_product(u, v, qs, lo, hi), "product"
        if fit.differing and not self.nearest:
            raise NotExact(f"the {kind} of two int8 values as an integer rescale differs on {fit.differing} "
                           f"of {fit.pairs} input pairs")
        return Stage(q, kind, list(leaves), pair=fit)


@dataclass
class PooledSum:
    """R's reduction: S = sum over the reduced dims of `level` + `offset` (w = level + offset, from
    the int8 `level`), standing for the f32 sum of `scale` * w."""
    level: ir.Value
    offset: int
    scale: float
    count: int  # elements summed per result
    stages: list[Stage]  # the ones computing `level`


def pooled_sum(red: ir.Operation, channels: Channels, known_ranges: dict, host, nearest) -> PooledSum:
    """The integer form of the f32 sum reduction `red` (R in the module docstring)."""
    body = region_ops(red)
    acc = red.regions[0].blocks[0].arguments[n_inputs(red)]
    comb = body[-2]
    term = next(v for v in comb.operands if v != acc)
    mul = term.owner
    if isinstance(mul, ir.Block) or mul.name != "arith.mulf":
        raise NotExact("the pooled f32 term is not an integer times a constant")
    consts = [constant_of(x) for x in mul.operands]
    k = 0 if consts[1] is not None else 1
    conv = mul.operands[k].owner
    if consts[1 - k] is None or consts[1 - k].size != 1 or isinstance(conv, ir.Block) or conv.name != "arith.sitofp":
        raise NotExact("the pooled f32 term is not an integer times a constant")
    scale = float(consts[1 - k].reshape(-1)[0])
    w = conv.operands[0]
    prologue = body[:-2]
    splitter = StageSplitter(prologue, channels, host, nearest, known_ranges)
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
    count = math.prod(d for d, it in zip(loop_ranges(red), iterator_types(red)) if it == "reduction")
    return PooledSum(level, int(ws[0] + 128), scale, count, stages)


def summation_error(count: int, max_term: int) -> float:
    """Bound on |llvm-cpu's f32 sum of `count` terms c*w - c*S| in units of c (any order, each
    product rounded or fused): gamma_{n+1} * n * max|w| (Higham, Accuracy and Stability, 4.3)."""
    nu = (count + 1) * _F32_UNIT
    return nu / (1 - nu) * count * max_term


def ambiguous_sums(chain: Chain, channels: Channels, lo: int, hi: int, err: float) -> tuple[int, int]:
    """(sums S in [lo, hi] whose level may move within +-err, sums): over every channel; raises
    NotExact when two steps lie within 2 err + 2 of each other (one step would not hold)."""
    s = np.arange(lo, hi + 1, dtype=np.int64)
    e = int(math.ceil(err))
    ambiguous = 0
    for vals in channels.values:
        c = chain.for_channel(vals)
        f = c(s)
        steps = np.flatnonzero(np.diff(f)) + 1
        if len(steps) > 1 and np.diff(s[steps]).min() <= 2 * e + 2:
            raise NotExact(f"the f32 sum's rounding (up to {err:.3g} units) spans an output step")
        if e:
            ambiguous += int((c(s - e) != c(s + e)).sum())
    return ambiguous, len(s) * len(channels.values)


# --- the rewrite ---------------------------------------------------------------------------

def is_int8_arithmetic(func: ir.Operation, known) -> bool:
    """Whether `func` computes integer results from integer tensors (and constants) through f32
    generics, with no integer contraction (those are compiler/requant.py's)."""
    from .patterns import classify_contraction
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    if not ftype.results or any(type_name(ir.RankedTensorType(t).element_type) not in ("i8", "i16")
                                for t in ftype.results if isinstance(t, ir.RankedTensorType)):
        return False
    for a in func.regions[0].blocks[0].arguments:
        if isinstance(a.type, ir.RankedTensorType) and known(a) is None and \
                type_name(ir.RankedTensorType(a.type).element_type) not in ("i8", "i16", "i32"):
            return False
    generics = [o for o in region_ops(func) if o.name == "linalg.generic"]
    return any(o.name == "arith.sitofp" for g in generics for o in region_ops(g)) and \
        not any(classify_contraction(g) is not None for g in generics)


def _leaf_range(v: ir.Value) -> tuple[int, int]:
    t = type_name(ir.RankedTensorType(v.type).element_type)
    if t == "i32":
        return -RESIDUAL_I32_BOUND, RESIDUAL_I32_BOUND
    if t not in ("i8", "i16"):
        raise NotExact(f"an input of the requantization is {t}")
    return INT_RANGE[t]


def _variables(op: ir.Operation, known) -> tuple[list[int], dict]:
    """(operand indices of the non-constant inputs of `op`, {their block args: range})."""
    variables = [i for i in range(n_inputs(op)) if known(op.operands[i]) is None]
    args = op.regions[0].blocks[0].arguments
    return variables, {args[i]: _leaf_range(op.operands[i]) for i in variables}


def _erase_dead(func: ir.Operation) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in func.regions[0].blocks[0].operations]):
            if op.name in ("linalg.generic", "linalg.fill", "tensor.empty", "arith.constant") and \
                    not any(list(r.uses) for r in op.results):
                op.erase()
                changed = True


def _forms(func: ir.Operation) -> tuple[list, list]:
    """The generics of `func` that read something (one without inputs is a fill, generalized:
    a reduction's init) and their iterator types."""
    generics = [o for o in region_ops(func) if o.name == "linalg.generic" and n_inputs(o)]
    return generics, [iterator_types(g) for g in generics]


def _raise_if_float_island(func: ir.Operation) -> None:
    """FloatIsland if `func`, fused elementwise, has neither integer form; decided on a copy,
    so an island keeps the ops the bf16 path matches."""
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    run_pipeline("builtin.module(func.func(linalg-fuse-elementwise-ops))", scratch.operation)
    _, its = _forms(scratch.body.operations[0].operation)
    if (len(its) == 1 and "reduction" not in its[0]) or \
            (len(its) == 2 and "reduction" in its[0] and "reduction" not in its[1]):
        return
    forms = ", ".join("reduction" if "reduction" in i else "elementwise" for i in its)
    raise FloatIsland(f"int8 arithmetic in f32 as {len(its)} linalg ops ({forms}) is neither one "
                      f"elementwise op nor a sum reduction and its quantize", forms)


class FloatIsland(NotExact):
    """Int8 in, int8 out, and f32 between in a form no integer rescale reproduces (a softmax,
    a normalization): with --torq-requant=nearest it runs in bf16 (`forms`: its linalg ops)."""

    def __init__(self, message: str, forms: str):
        super().__init__(message)
        self.forms = forms


def lower_int8_arithmetic(func: ir.Operation, known, host, nearest: bool) -> list:
    """Rewrites `func` (`is_int8_arithmetic`) into integer generics (E or R in the module
    docstring); returns its RequantSummary. Raises NotExact when it has neither form or a
    stage cannot be reproduced within one output step; `func` may then have been fused
    elementwise (same semantics)."""
    host = host() if callable(host) else host
    if host is None:
        raise NotExact("the host target's float semantics (FMA contraction) are unknown")
    _raise_if_float_island(func)
    run_pipeline("func.func(linalg-fuse-elementwise-ops)", func)
    generics, its = _forms(func)
    if len(generics) == 1 and "reduction" not in its[0]:
        op = generics[0]
        variables, ranges = _variables(op, known)
        channels = Channels.of(op, known, set(variables))
        body = region_ops(op)
        stages = StageSplitter(body[:-1], channels, host, nearest, ranges).split(body[-1].operands[0])
        new = inline_function_text(elementwise_function(op, variables, stages, channels.dim), op,
                      [op.operands[i] for i in variables])
        summary = RequantSummary.of_stages("int8 elementwise", stages)
    elif len(generics) == 2 and "reduction" in its[0] and "reduction" not in its[1]:
        op = generics[1]
        new, summary = _lower_pooling(generics[0], op, known, host, nearest)
    else:  # _raise_if_float_island saw one of the two
        raise AssertionError("linalg-fuse-elementwise-ops fused differently on a copy")
    op.results[0].replace_all_uses_with(new)
    op.erase()
    _erase_dead(func)
    return [summary]


def _lower_pooling(red, quant, known, host, nearest):
    """(the new quantized value, its summary) for R: sum reduction `red` quantized by `quant`."""
    uses = list(red.results[0].uses)
    reads = [i for i in range(n_inputs(quant)) if quant.operands[i] == red.results[0]]
    if len(uses) != 1 or len(reads) != 1 or type_name(ir.RankedTensorType(red.results[0].type).element_type) != "f32":
        raise NotExact("the f32 sum has users besides its quantize")
    sum_index = reads[0]
    variables, ranges = _variables(red, known)
    red_channels = Channels.of(red, known, set(variables))
    pooled = pooled_sum(red, red_channels, ranges, host, nearest)
    n, b = pooled.count, pooled.offset
    lo, hi = n * (-128 + b), n * (127 + b)
    ch_q = Channels.of(quant, known, {sum_index})
    sum_arg = quant.regions[0].blocks[0].arguments[sum_index]
    body = region_ops(quant)
    stages = StageSplitter(body[:-1], ch_q, host, nearest, {sum_arg: (lo, hi)},
                           (sum_arg, pooled.scale)).split(body[-1].operands[0])
    first = stages[0]
    if first.kind != "rescale" or first.leaves != [sum_arg]:
        raise NotExact("the pooled sum is not requantized first")
    ambiguous, sums = ambiguous_sums(first.chain, ch_q, lo, hi, summation_error(n, max(abs(b - 128), abs(b + 127))))
    if ambiguous and not nearest:
        raise NotExact(f"{ambiguous} of {sums} pooled sums lie within llvm-cpu's f32 summation error of a step "
                       f"(its result there depends on the order it adds in)")
    first.rescales = [dataclasses.replace(r, offset=r.offset + n * b) for r in first.rescales]
    text = pooling_function(red, variables, pooled, red_channels.dim, quant, sum_index, stages, ch_q.dim)
    new = inline_function_text(text, quant, [red.operands[i] for i in variables])
    summary = RequantSummary.of_stages("int8 sum pooling", pooled.stages + stages)
    summary.pooled_ambiguous, summary.pooled_sums = ambiguous, sums
    return new, summary
