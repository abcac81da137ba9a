"""A run-time quantized dispatch's epilogue scalars as constant arguments, for the dispatch cache.

IREE clones a small constant into each dispatch that reads it. onnxruntime's quantize_dynamic
(per-tensor weights, its default) multiplies each MatMulInteger's run-time input scale by the
weight's scale, an f32 `arith.constant` in the dequantize epilogue: another value in every
layer. The epilogue runs on the host (requant_tail's accumulator tail), so the NPU compile never
reads it, but it makes each layer's function another text, and the dispatch cache
(compiler/dispatch_cache.py) compiled every layer: BERT-base 78 compiles for 219 dispatches.
As an argument carrying its value (`CONSTANT_ARG`, which the cache's text key leaves out and
the requantization reads only through constant_args.ConstantArgs) the layers are one text; the
host tail reads it as an operand, as it reads a per-channel scale, and the target passes a
flow-level constant of the value (`ExtractedDispatch.hoisted_constants`).

Only a dispatch that reads a run-time quantization's scalar (`SCALAR_ARGUMENTS`: only a host
tail may read one) is changed: its float epilogue is the host's, whatever the NPU does.
"""

from __future__ import annotations

from iree.compiler import ir

from .constant_args import CONSTANT_ARG
from .ir_utils import block_ops, region_ops, sync_function_type
from .passes.fold_index_constants import rebuild_with_inputs


def hoist_epilogue_scalars(func: ir.Operation) -> list[ir.Attribute]:
    """Each f32 scalar `arith.constant` that the body of a generic converting an integer to
    float reads becomes a new `tensor<f32>` argument of `func` (appended, with its value as
    `CONSTANT_ARG`), read as that generic's broadcast input. Returns the values (tensor<f32>
    dense attributes), in argument order."""
    block = func.regions[0].blocks[0]
    generics = [op for op in block_ops(block) if op.name == "linalg.generic" and len(op.results) == 1
                and any(o.name == "arith.sitofp" for o in region_ops(op))]
    reads: dict = {}  # constant op result -> the generics reading it
    for g in generics:
        inside = {r for o in region_ops(g) for r in o.results}
        for o in region_ops(g):
            for v in o.operands:
                owner = v.owner
                if v in inside or isinstance(owner, ir.Block) or owner.name != "arith.constant" \
                        or str(v.type) != "f32":
                    continue
                reads.setdefault(v, [])
                if g not in reads[v]:
                    reads[v].append(g)
    if not reads:
        return []
    f32 = ir.F32Type.get()
    scalar = ir.RankedTensorType.get([], f32)
    values, args = [], {}
    for v in reads:
        values.append(ir.DenseElementsAttr.get_splat(scalar, v.owner.attributes["value"]))
        args[v] = block.add_argument(scalar, func.location)
    for g in generics:
        roots = [v for v in reads if g in reads[v]]
        if roots:
            n_loops = len(ir.ArrayAttr(g.attributes["iterator_types"]))
            rebuild_with_inputs(g, len(g.operands) - len(g.results), [args[v] for v in roots],
                                [ir.AffineMap.get(n_loops, 0, []) for _ in roots], roots)
    for v in reads:
        if not list(v.uses):
            v.owner.erase()
    n_before = len(block.arguments) - len(values)
    old = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in func.attributes else \
        [ir.DictAttr.get({})] * n_before
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(old + [ir.DictAttr.get({CONSTANT_ARG: a}) for a in values])
    sync_function_type(func)
    return values
