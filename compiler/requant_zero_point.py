"""Zero-point corrections of a contraction of two int8 activations, kept as integer arithmetic.

IREE makes a contraction of two dequantized tensors integer math as

    sum_k (A[k] - zA) (B[k] - zB) = D - (zB * RA + zA * RB - N * zA * zB)

with D the i8 x i8 -> i32 contraction and RA, RB the sums of A and B over
the reduction (computed by other dispatches, reductions the NPU runs). With
a constant B the correction is a constant per channel and the float chain
absorbs it; with two activations (attention's q.k^T and p.v) RA and RB are
i32 tensors the requantization reads, broadcast along the rows and columns
of the result. `zero_point_correction` finds that prologue: the
accumulator's only use is `acc - c`, with c computed by integer add / sub /
mul from such i32 tensors and constants. The corrected accumulator a' is
then the chain's accumulator (compiler/requant.py fits its rescale as for
any contraction) and the prologue is emitted as it is, i32 epilogue steps
on the NPU (`prologue_lines`): exact integer arithmetic, equal to
llvm-cpu's, which computes the same ops in i32.

The range a' is fitted on: |A - zA|, |B - zB| <= 255 for int8 values and
zero points, so |a'| <= 255^2 * N (a superset of what is reachable). That
bound takes the i32 tensors to be the operands' sums, which this dispatch
cannot see: the prologue's form (integer add / sub / mul of i32 tensors and
scalars, subtracted from the accumulator) is what IREE's
ConvertQDQToIntegerMath emits, and nothing else in the pipeline writes it.

When IREE leaves the requantization out of the matmul's dispatch (p.v transposed
back to tokens x heads), the accumulator is one more i32 input
(`separate_correction`) and N is out of sight: a' is fitted on |a'| <= 2^30, as
an i32 residual is, which covers 255^2 * N for N <= 16,513 (attention's p.v sums
over the tokens: 16K tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir

from .ir_utils import constant_of, iterator_types, loop_ranges, n_inputs, region_ops
from .requant_split import slice_until

_INT_OPS = {"arith.muli": "muli", "arith.addi": "addi", "arith.subi": "subi"}


@dataclass
class ZeroPointCorrection:
    """The integer prologue `acc - c` of a requantization body (module docstring)."""
    operands: list[int]  # indices of the i32 tensors c reads (RA, RB)
    ops: list[ir.Operation]  # the body ops computing c, then `acc - c`
    constants: dict  # the scalar constants they read: value -> int
    corrected: ir.Value  # a' = acc - c, the chain's accumulator
    bound: int  # |a'| <= bound


def zero_point_correction(op: ir.Operation, acc_index: int, con: ir.Operation, known) -> ZeroPointCorrection | None:
    """The correction prologue of requantization `op` (after contraction `con`), or None when
    the accumulator is not corrected by tensors (constants are the float chain's business)."""
    n = math.prod(r for r, it in zip(loop_ranges(con), iterator_types(con)) if it == "reduction")
    return _correction(op, acc_index, known, 255 * 255 * n)


def separate_correction(op: ir.Operation, known, bound: int) -> tuple[int, ZeroPointCorrection] | None:
    """(the accumulator's operand index, the correction) of an elementwise requantization `op`
    that reads the accumulator another dispatch wrote (IREE leaves p.v's requantization out of
    the matmul's dispatch when it transposes the result), or None. The contraction is out of
    sight: a' is fitted on |a'| <= `bound`, as an i32 residual is."""
    for i in range(n_inputs(op)):
        if not known.is_constant(op.operands[i]) and str(ir.RankedTensorType(op.operands[i].type).element_type) == "i32":
            corr = _correction(op, i, known, bound)
            if corr is not None:
                return i, corr
    return None


def _correction(op: ir.Operation, acc_index: int, known, bound: int) -> ZeroPointCorrection | None:
    block = op.regions[0].blocks[0]
    acc = block.arguments[acc_index]
    users = [u.owner for u in acc.uses]
    if len(users) != 1 or users[0].name != "arith.subi" or users[0].operands[0] != acc:
        return None
    sub = users[0]
    args = list(block.arguments)
    prologue = slice_until(region_ops(op), sub.operands[1], set(args))
    if not prologue or any(o.name not in _INT_OPS or str(o.results[0].type) != "i32" for o in prologue):
        return None
    inside = {r for o in prologue for r in o.results}
    tensors, constants = set(), {}
    for v in (v for o in prologue for v in o.operands if v not in inside):
        i = args.index(v) if v in args else None
        c = known(op.operands[i]) if i is not None else constant_of(v)
        if i is not None and (i >= n_inputs(op) or i == acc_index):
            return None
        if c is not None and c.size == 1:
            constants[v] = int(c.reshape(-1)[0])
        elif c is None and i is not None and str(ir.RankedTensorType(op.operands[i].type).element_type) == "i32":
            tensors.add(i)
        else:
            return None
    if not tensors:
        return None
    return ZeroPointCorrection(sorted(tensors), prologue + [sub], constants, sub.results[0], bound)


def prologue_lines(corr: ZeroPointCorrection, op: ir.Operation, acc_name: str, operand_names: dict,
                   lines: list[str]) -> str:
    """Body lines recomputing a' from `acc_name` and the correction tensors' block arguments
    (`operand_names`: operand index -> name); returns a's name."""
    args = list(op.regions[0].blocks[0].arguments)
    names: dict = {corr.ops[-1].operands[0]: acc_name}
    names.update({args[i]: n for i, n in operand_names.items()})
    for k, (v, c) in enumerate(corr.constants.items()):
        names[v] = f"%zp_c{k}"
        lines.append(f"%zp_c{k} = arith.constant {c} : i32")
    for j, o in enumerate(corr.ops):
        names[o.results[0]] = f"%zp{j}"
        lines.append(f"%zp{j} = arith.{_INT_OPS[o.name]} {names[o.operands[0]]}, {names[o.operands[1]]} : i32")
    return names[corr.corrected]


def fold_zero_products(op: ir.Operation, known) -> int:
    """Replaces, in requantization `op`'s body, each integer product by a block argument whose
    known value is all zeros (read through trunci / extsi) with a zero, erasing what only it
    read; returns how many. PT2E's per-channel weights carry int64 zero points, all 0: IREE's
    correction of a 1x1 conv after a padded buffer multiplies them by the input's sums per
    position (an i32 tensor another dispatch computes: ResNet-50's and MobileNetV2's last
    convs), which then looks like a second tensor the requantization reads. 0 * x is 0 in
    wrapping i32 arithmetic, so the body computes what it did."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)

    def zeros(v: ir.Value) -> bool:
        while not isinstance(v.owner, ir.Block) and v.owner.name in ("arith.trunci", "arith.extsi"):
            v = v.owner.operands[0]
        if v not in args or args.index(v) >= n_inputs(op):
            return False
        return known.all_zeros(op.operands[args.index(v)])

    folded = 0
    for o in [o for o in region_ops(op) if o.name == "arith.muli" and any(zeros(x) for x in o.operands)]:
        with ir.InsertionPoint(o), o.location:
            zero = ir.Operation.create("arith.constant", results=[o.results[0].type],
                                       attributes={"value": ir.IntegerAttr.get(o.results[0].type, 0)})
        o.results[0].replace_all_uses_with(zero.results[0])
        dead = [o]
        while dead:
            d = dead.pop()
            feeders = [x.owner for x in d.operands if not isinstance(x.owner, ir.Block)]
            d.erase()
            dead += [f for f in feeders if f.name in ("arith.trunci", "arith.extsi") and not list(f.results[0].uses)]
        folded += 1
    return folded
