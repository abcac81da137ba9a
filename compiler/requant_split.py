"""What follows the first integer rescale in a float requantization body.

compiler/requant.py fits an integer rescale to the part of a QDQ body that
turns the contraction's accumulator into its first int8 value (stage 1, the
contraction's own output quantization). What the body computes from that
value afterwards is split off here:

- a residual add (`split_residual_add`): the stage-1 level and an int8
  tensor r, both dequantized, added and quantized again (ONNX Runtime's
  form of ResNet's relu(conv(x) + r)); it becomes an integer rescale of the
  sum of the two int8 values, fitted on all 65,536 pairs
  (`rescale_pairs.fit_sum`). When r is requantized on its own before the
  add, that rescale is split off too and fitted like stage 1: an i32 r (a
  downsample block: IREE fuses the requantization of the main path's conv
  into the projection conv's dispatch and leaves that accumulator
  unrequantized), or an int8 r scaled per channel (MetaFormer's
  `x * res_scale + mixer(x)`, quantized at the Mul);
- an activation (`split_first_int`, then `build_table`): the stage-1 level dequantized,
  put through any float function (hardswish, hardsigmoid, sigmoid, ...) and
  quantized again, a function of one int8 value; it becomes a 256-entry
  table (the "lut" epilogue step), evaluated here on all 256 inputs as
  llvm-cpu evaluates the chain, so it is exact wherever llvm-cpu's result
  does not depend on how it contracts products into FMAs or on the last
  ulps of its exp / tanh / erf approximations (the entries where it may are
  counted and reported).

Both return the ops of stage 1 and its int8 value, which requant.py then
fits as it fits a plain requantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from torq.contract.program import MAX_LUT_ENTRIES

from .f32_chain import INT_RANGE, Chain, type_name
from .passes import RequantMode
from .rescale_fit import NotExact
from .rescale_pairs import PairFit, fit_sum


def slice_until(ops: list[ir.Operation], v: ir.Value, stops: set) -> list[ir.Operation]:
    """The ops of `ops` that `v` depends on, in order, without going past the values in `stops`."""
    need, out = {v}, []
    for op in reversed(ops):
        if any(r in need for r in op.results):
            out.append(op)
            need.update(x for x in op.operands if x not in stops)
    return out[::-1]


def backward_slice(ops: list[ir.Operation], v: ir.Value) -> list[ir.Operation]:
    """The ops of `ops` that `v` depends on, in order."""
    return slice_until(ops, v, set())


def dependents(ops: list[ir.Operation], v: ir.Value) -> set:
    """`v` and the values of `ops` computed from it."""
    out = {v}
    for o in ops:
        if any(x in out for x in o.operands):
            out.update(o.results)
    return out


def reads(ops: list[ir.Operation], v: ir.Value) -> bool:
    """Whether one of `ops` reads `v`."""
    return any(x == v for op in ops for x in op.operands)


def _rest(final: list, stage1: list, acc, what: str) -> list:
    """The ops of `final` after `stage1` (the ops of the first int value), which must read the
    accumulator only through that value."""
    rest = [o for o in final if o not in stage1]
    if reads(rest, acc):
        raise NotExact(f"the {what} reads the accumulator besides its int8 value")
    return rest


@dataclass
class ResidualSplit:
    """A residual add after stage 1, split off (`split_residual_add`)."""
    stage1: list  # the ops of the accumulator's stage-1 rescale
    q1: ir.Value  # its int8 value
    fit: PairFit  # the integer rescale of the sum (stage-1 level, residual level)
    # A residual requantized on its own first (an i32 one: another conv's accumulator, left
    # unrequantized by IREE; an int8 one scaled per channel): the ops and int8 value of that
    # rescale; None when the add reads the residual itself.
    res_stage: list | None = None
    q_res: ir.Value | None = None
    # llvm-cpu's add on every (stage-1 level, residual level) pair, u-major, every way it may
    # evaluate it.
    variants: list | None = None
    res_type: str = "i8"  # the residual's element type


def _reads_arguments(ops: list[ir.Operation], but: set) -> bool:
    """Whether one of `ops` reads a block argument (a tensor the body is given) not in `but`."""
    return any(isinstance(x, ir.BlockArgument) and x not in but for op in ops for x in op.operands)


def first_ints(ops, final, result) -> list[tuple[ir.Value, list]]:
    """(int8 value, its backward slice) for each float-to-int conversion before `result`."""
    return [(o.results[0], backward_slice(ops, o.results[0])) for o in final
            if o.name == "arith.fptosi" and o.results[0] != result]


def split_residual_add(ops, result, acc, res, host, q_type, mode: RequantMode) -> ResidualSplit:
    """A body that requantizes the accumulator to int8 (stage 1), dequantizes it and the
    residual `res` (an int8 tensor, or an i32 or int8 one it first requantizes to int8 on its own),
    adds them and requantizes the sum. The add is evaluated on every pair of int8 values
    (every way llvm-cpu may contract it) and fitted by `fit_sum`."""
    final = backward_slice(ops, result)
    firsts = first_ints(ops, final, result)
    # The int values computed from the accumulator alone (with their ops): one, or a chain of
    # them (a bias added after the matmul's own quantization), whose last is added.
    stages = [(q, s) for q, s in firsts if not reads(s, res)]
    if not stages or not all(reads(s, acc) for _, s in stages) or \
            any(q.owner not in stages[-1][1] for q, _ in stages[:-1]):
        raise NotExact("the requantization mixes the accumulator and another tensor before its int8 value")
    q1, stage1 = stages[-1]
    res_stage = q_res = None
    own = [(q, s) for q, s in firsts if reads(s, res) and not reads(s, acc)]
    res_t = type_name(res.type)
    # An int8 residual's own rescale is split off only when it reads per-channel values (block
    # arguments): with constants alone the pair fit takes it whole, one rounding instead of two.
    if res_t == "i32" or any(_reads_arguments(s, {res}) for _, s in own):
        if len(own) != 1 or type_name(own[0][0].type) != "i8":
            raise NotExact(f"the {res_t} residual is not requantized to int8 on its own before the add")
        (q_res, res_stage), = own
    rest = _rest(final, stage1 + (res_stage or []), acc, "residual add")
    if res_stage is not None and reads(rest, res):
        raise NotExact(f"the residual add reads the {res_t} residual besides its int8 value")
    u, v = (g.ravel() for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
    qs = Chain(rest, result, q1, host, extra=(q_res or res,)).contraction_variants(u, extra=(v,))
    lo, hi = INT_RANGE[q_type]
    fit = fit_sum(u, v, [np.asarray(q, np.int64) for q in qs], lo, hi)
    if fit.differing and mode is RequantMode.EXACT:
        raise NotExact(f"the residual add's integer rescale differs on {fit.differing} of {fit.pairs} input pairs")
    return ResidualSplit(stage1, q1, fit, res_stage, q_res, qs, res_t)


# How far (f32 ulps) llvm-cpu's polynomial exp / tanh / erf / log may be from the correctly
# rounded value: table entries that move when the function's result moves this far are
# counted as ambiguous (possibly one output step from llvm-cpu's).
TRANSCENDENTAL_ULPS = 4


@dataclass
class ActivationTable:
    """Output level per stage-1 level: `entries[i]` for level `first + i`."""
    first: int
    entries: np.ndarray
    # Entries on which the ways llvm-cpu may evaluate the float chain disagree: how it
    # contracts products into FMAs, and its transcendental functions' last ulps (the table
    # holds LLVM's default contraction, single-use products fused and shared ones not, and
    # correctly rounded functions).
    ambiguous: int

    def is_identity(self) -> bool:
        """Nothing to look up: every entry is its own level, whatever llvm-cpu's evaluation."""
        return not self.ambiguous and \
            bool(np.array_equal(self.entries, np.arange(self.first, self.first + len(self.entries))))


def split_first_int(ops, result, acc) -> tuple[list, ir.Value, list] | None:
    """(the ops and value of stage 1, the ops after it) for a body that computes its result
    from a first int value of the accumulator through further float arithmetic, or None when
    the result is that first value."""
    final = backward_slice(ops, result)
    firsts = [o.results[0] for o in final if o.name == "arith.fptosi" and o.results[0] != result]
    if not firsts:
        return None
    q1 = firsts[0]
    stage1 = backward_slice(ops, q1)
    return stage1, q1, _rest(final, stage1, acc, "activation after the int8 value")


def llvm_variants(chain: Chain, levels: np.ndarray, extra: tuple = ()) -> list[np.ndarray]:
    """`chain` on every level (and `extra` input) as llvm-cpu may evaluate it: every FMA
    contraction it may choose, and transcendental results moved by `TRANSCENDENTAL_ULPS`
    either way; LLVM's default contraction with correctly rounded functions first."""
    ulps = (0, -TRANSCENDENTAL_ULPS, TRANSCENDENTAL_ULPS) if chain.transcendental else (0,)
    return [q for u in ulps for q in chain.with_ulps(u).contraction_variants(levels, extra, check=True)]


def build_table(ops, result, level, host, q_type, mode: RequantMode, what="the activation",
                scalars: dict | None = None) -> ActivationTable:
    """The table of `result` as a function of the int8 value `level` that `ops` compute it
    from, evaluated on every level as llvm-cpu evaluates the float chain (every FMA
    contraction it may choose, transcendental results moved by `TRANSCENDENTAL_ULPS`);
    `scalars` gives the values of block arguments that are scalar constants."""
    lo, hi = INT_RANGE[type_name(level.type)]
    if hi - lo + 1 > MAX_LUT_ENTRIES:
        raise NotExact(f"{what}'s input is {level.type}: a table of {hi - lo + 1} entries "
                       f"(the slices hold {MAX_LUT_ENTRIES})")
    levels = np.arange(lo, hi + 1, dtype=np.int64)
    chain = Chain(ops, result, level, host)
    chain = chain.for_channel(scalars) if scalars else chain
    try:
        variants = [np.asarray(q, np.int64) for q in llvm_variants(chain, levels)]
    except NotExact as e:
        raise NotExact(f"{what} after the int8 value: {e}") from None
    table = variants[0]
    spread = max(int(np.max(np.abs(q - table))) for q in variants)
    ambiguous = int(np.sum(np.any([q != table for q in variants], axis=0)))
    if spread > 1 or (ambiguous and mode is RequantMode.EXACT):
        raise NotExact(f"{what}'s float chain gives {ambiguous} of {len(levels)} entries that depend "
                       f"on how llvm-cpu evaluates it, its FMA contraction or the last ulps of its "
                       f"transcendental functions (up to {spread} output steps)")
    qlo, qhi = INT_RANGE[q_type]
    if np.any(table < qlo) or np.any(table > qhi):
        raise NotExact(f"{what}'s table leaves the {q_type} range")
    return ActivationTable(lo, table, ambiguous)
