"""A run-time zero point inside an integer contraction, taken out of it (onnxruntime's ConvInteger).

onnxruntime's quantize_dynamic quantizes a conv's input when the model runs
(DynamicQuantizeLinear) and IREE lowers the ConvInteger to a contraction whose body subtracts
that zero point z, a scalar operand of the dispatch, from every input element:
sum_k (x_k - z) w_k. The NPU's conv reads the int8 values themselves, and a run-time scalar
may only be read by a host tail (`SCALAR_ARGUMENTS`), so the dispatch stayed on the host.
In i32 arithmetic (wrapping, as llvm-cpu computes it)

    sum_k (x_k - z) w_k = sum_k x_k w_k - z * W,    W = sum_k w_k,

for every input, padding included (IREE pads with z, which both sides count). With constant
weights W is a constant per weight slice (an output channel). The contraction becomes the
plain one and its one consumer, the dequantize epilogue, reads `acc - z * W` instead of the
accumulator: the form IREE gives a MatMulInteger (`acc - z * colsum`), whose contraction runs
on the NPU and whose epilogue runs on the host (requant_tail). W is a new constant argument
(`CONSTANT_ARG`), which the call makes as it makes epilogue_scalars' constants
(`ExtractedDispatch.hoisted_constants`).

When the accumulator is the dispatch's result (IREE fuses one conv's dequantize into a
residual add, and the other conv's dispatch returns its i32 accumulator: ResNet's
downsampling blocks), a copy of it before the return becomes that consumer: it reads
acc - z * W, an integer epilogue reading a run-time scalar, which torq-lower-requantization
leaves to the host (`requant_tail.is_accumulator_correction`) as it leaves a dequantize.
dispatch_extraction attaches the weights' values to such a dispatch too (it has no
int-to-float conversion); weights IREE inlined into the dispatch as a constant are read
where they are.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith

from .box_reads import copy_generic
from .constant_args import ConstantArgs, append_constant_arguments
from .ir_utils import (
    block_ops,
    constant_of,
    generic_with_inputs,
    indexing_maps,
    iterator_types,
    map_dims,
    n_inputs,
    region_ops,
)


def reads_runtime_zero_point(func: ir.Operation, scalars: list[int]) -> bool:
    """Whether a contraction of `func` (a generic with a reduction loop) reads one of its
    `scalars` arguments as an input: then dispatch_extraction attaches the weights' values
    for `split_runtime_zero_points`."""
    block = func.regions[0].blocks[0]
    read = {block.arguments[k] for k in scalars}
    return bool(read) and any(op.name == "linalg.generic" and "reduction" in iterator_types(op)
                              and any(v in read for v in list(op.operands)[:n_inputs(op)])
                              for op in block_ops(block))


def split_runtime_zero_points(func: ir.Operation) -> list[ir.Attribute]:
    """Rewrites each contraction of `func` that subtracts a broadcast scalar argument from its
    int8 input, with constant int8 weights and one generic consuming it (or the function's
    return alone: then a copy consumes it), as the module docstring says. Returns the values
    of the arguments it appends (W, i32), in order."""
    block = func.regions[0].blocks[0]
    constants = ConstantArgs(func)
    values = []
    while True:  # (each rewrite replaces two generics: the ops are listed again after it)
        found = next(((con, f) for con in block_ops(block) if con.name == "linalg.generic"
                      and (f := _zero_point_contraction(con, constants)) is not None), None)
        if found is None:
            break
        con, (zp_input, sub, w_sums, positions) = found
        use = next(iter(con.results[0].uses))
        if use.owner.name == "func.return":  # the accumulator is the result: a copy takes the correction
            with ir.InsertionPoint(use.owner), use.owner.location:
                rank = len(ir.RankedTensorType(con.results[0].type).shape)
                use.owner.operands[use.operand_number] = copy_generic(
                    con.results[0], ir.AffineMap.get_identity(rank), con.results[0].type)
        values.append(ir.DenseElementsAttr.get(w_sums))
        w_arg, = append_constant_arguments(func, values[-1:])
        _correct_consumer(con, zp_input, w_arg, positions)
        _without_zero_point(con, zp_input, sub)
    return values


def _zero_point_contraction(con: ir.Operation, constants: ConstantArgs):
    """(the zero point's input index, the subtraction, W, W's dims among the result's) when
    `con` is sum (ext(x) - z) * ext(w) over its reduction loops, z a broadcast scalar argument,
    w a constant int8 argument (or an inlined constant) indexed by each reduction loop once,
    and the result is one input of one linalg.generic, or the function's result alone
    (another dispatch dequantizes it); else None."""
    if "reduction" not in iterator_types(con) or len(con.results) != 1 or n_inputs(con) != 3:
        return None
    uses = list(con.results[0].uses)
    returned = len(uses) == 1 and uses[0].owner.name == "func.return"
    if not returned and (len(uses) != 1 or uses[0].owner.name != "linalg.generic"
                         or uses[0].operand_number >= n_inputs(uses[0].owner)):
        return None
    args = list(con.regions[0].blocks[0].arguments)
    body = _body(region_ops(con), args)
    if body is None:
        return None
    zp_input, w_input, sub = body
    maps, zp, w_value = indexing_maps(con), con.operands[zp_input], con.operands[w_input]
    if maps[zp_input].results or not isinstance(zp.owner, ir.Block) \
            or str(args[zp_input].type) != "i32" or str(ir.RankedTensorType(w_value.type).element_type) != "i8":
        return None
    loops, dims, out_dims = iterator_types(con), map_dims(maps[w_input]), map_dims(maps[-1])
    reduction = [d for d, it in enumerate(loops) if it == "reduction"]
    if dims is None or out_dims is None or sorted(d for d in dims if loops[d] == "reduction") != reduction:
        return None  # (W sums each reduction loop once: a loop the weights do not index would count more)
    parallel = [d for d in dims if loops[d] == "parallel"]
    if not all(d in out_dims for d in parallel):
        return None
    # A constant argument, or a small constant IREE inlined into the dispatch.
    weights = constants.get(ir.BlockArgument(w_value).arg_number) if isinstance(w_value.owner, ir.Block) \
        else constant_of(w_value)
    if weights is None:
        return None
    reduced = tuple(i for i, d in enumerate(dims) if loops[d] == "reduction")
    w_sums = weights.astype(np.int64).sum(axis=reduced).astype(np.int32)  # (i32 wraps as llvm-cpu's sum does)
    return zp_input, sub, w_sums, [out_dims.index(d) for d in parallel]


def _body(ops: list[ir.Operation], args: list) -> tuple[int, int, ir.Operation] | None:
    """(the zero point's input index, the weights', the subtraction) of a body that is exactly
    out + (ext(x) - z) * ext(w), its block arguments `args` (x, w, z in any order, then out)."""
    if [o.name for o in ops] != ["arith.extsi", "arith.subi", "arith.extsi", "arith.muli", "arith.addi",
                                 "linalg.yield"]:
        return None
    ext_x, sub, ext_w, mul, add, yield_ = ops
    x, z, w = ext_x.operands[0], sub.operands[1], ext_w.operands[0]
    if not all(v in args[:3] for v in (x, z, w)) or len({args.index(v) for v in (x, z, w)}) != 3 \
            or sub.operands[0] != ext_x.results[0] or set(mul.operands) != {sub.results[0], ext_w.results[0]} \
            or set(add.operands) != {args[3], mul.results[0]} or yield_.operands[0] != add.results[0]:
        return None
    return args.index(z), args.index(w), sub


def _correct_consumer(con: ir.Operation, zp_input: int, w_arg: ir.Value, positions: list[int]) -> None:
    """The one generic reading `con`'s result reads `acc - z * W` in its place (z and W its new
    broadcast inputs)."""
    use = next(iter(con.results[0].uses))
    user, acc_input = use.owner, use.operand_number
    acc_map = indexing_maps(user)[acc_input]
    n_loops = len(iterator_types(user))
    w_map = ir.AffineMap.get(n_loops, 0, [acc_map.results[p] for p in positions])
    new = generic_with_inputs(user, [con.operands[zp_input], w_arg], [ir.AffineMap.get(n_loops, 0, []), w_map], [])
    args = list(new.regions[0].blocks[0].arguments)
    acc, z, w = args[acc_input], args[n_inputs(new) - 2], args[n_inputs(new) - 1]
    readers = list(acc.uses)
    first = region_ops(new)[0]
    with ir.InsertionPoint(first), first.location:
        corrected = arith.SubIOp(acc, arith.MulIOp(z, w).result).result
    for u in readers:
        u.owner.operands[u.operand_number] = corrected


def _without_zero_point(con: ir.Operation, zp_input: int, sub: ir.Operation) -> None:
    """`con` rebuilt without its zero-point input, its body reading ext(x) where it read
    ext(x) - z."""
    sub.results[0].replace_all_uses_with(sub.operands[0])
    sub.erase()
    generic_with_inputs(con, [], [], [], dropped=[zp_input])
