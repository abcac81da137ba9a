"""A run-time quantized dispatch's epilogue scalars as constant arguments, for the dispatch cache.

IREE clones a small constant into each dispatch that reads it. onnxruntime's quantize_dynamic
(per-tensor weights, its default) multiplies each MatMulInteger's run-time input scale by the
weight's scale, an f32 `arith.constant` in the dequantize epilogue: another value in every
layer. The epilogue runs on the host (requant_tail's accumulator tail), so the NPU compile does
not normally read it, but it makes each layer's function another text, and the dispatch cache
(compiler/dispatch_cache.py) compiled every layer: BERT-base 78 compiles for 219 dispatches.
As an argument carrying its value (`CONSTANT_ARG`, which the cache's text key leaves out and
the requantization reads only through constant_args.ConstantArgs) the layers are one text; the
host tail reads it as an operand, as it reads a per-channel scale, and the target passes a
flow-level constant of the value (`ExtractedDispatch.hoisted_constants`).

Only a dispatch that reads a run-time quantization's scalar (`SCALAR_ARGUMENTS`: only a host
tail may read one) is changed, and only constants that its dequantize epilogues multiply by: a
product is the same IEEE multiply with the value loaded as with it literal, where a clamp bound
or an exponent (`powf(x, 3.0)`, which LLVM rewrites as products) may not be.
"""

from __future__ import annotations

from iree.compiler import ir

from .constant_args import append_constant_arguments
from .ir_utils import block_ops, generic_with_inputs, iterator_types, region_ops


def hoist_epilogue_scalars(func: ir.Operation) -> list[ir.Attribute]:
    """Each f32 scalar `arith.constant` that only dequantize epilogues multiply by (the
    bodies of generics with one f32 result that convert an integer to float and nothing back)
    becomes a new `tensor<f32>` argument of `func` (appended, with its value as
    `CONSTANT_ARG`), read as those generics' broadcast input. A constant with any other
    reader (a clamp bound, an exponent: rewrites that need a literal) stays. Returns the values
    (tensor<f32> dense attributes), in argument order."""
    block = func.regions[0].blocks[0]
    epilogues = [op for op in block_ops(block) if _is_dequantize_epilogue(op)]
    reads: dict = {}  # constant -> the epilogues reading it (all its uses a mulf in one of them)
    for g in epilogues:
        inside = {r for o in region_ops(g) for r in o.results}
        for o in region_ops(g):
            for v in o.operands:
                if v not in inside and not isinstance(v.owner, ir.Block) and v.owner.name == "arith.constant" \
                        and str(v.type) == "f32" and g not in reads.setdefault(v, []):
                    reads[v].append(g)
    hoisted = [v for v in reads if all(_multiplied_in(u.owner, epilogues) for u in v.uses)]
    if not hoisted:
        return []
    scalar = ir.RankedTensorType.get([], ir.F32Type.get())
    values = [ir.DenseElementsAttr.get_splat(scalar, v.owner.attributes["value"]) for v in hoisted]
    args = dict(zip(hoisted, append_constant_arguments(func, values)))
    # Every generic's roots first: a rebuild erases the generic it replaces.
    plans = [(g, [v for v in hoisted if g in reads[v]]) for g in epilogues]
    for g, roots in plans:
        if roots:
            n_loops = len(iterator_types(g))
            generic_with_inputs(g, [args[v] for v in roots], [ir.AffineMap.get(n_loops, 0, []) for _ in roots], roots)
    for v in hoisted:
        if not list(v.uses):
            v.owner.erase()
    return values


def _is_dequantize_epilogue(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) != 1 or \
            str(ir.RankedTensorType(op.results[0].type).element_type) != "f32":
        return False
    names = {o.name for o in region_ops(op)}
    return "arith.sitofp" in names and "arith.fptosi" not in names


def _multiplied_in(user: ir.Operation, epilogues: list[ir.Operation]) -> bool:
    """Whether `user` is an `arith.mulf` directly in the body of one of `epilogues`."""
    return user.name == "arith.mulf" and user.parent is not None and user.parent in epilogues
