"""torq-convert-dtypes: demote f32 dispatch functions to bf16.

Contract: takes `func.func` ops over tensors (a Torq dispatch function).
Every f32 scalar and tensor value in the function (arguments, results, op
results, block arguments of nested bodies) becomes bf16; f32 constants are
rounded to nearest even. The original host types of arguments and results are
recorded as `torq.host_arg_types` / `torq.host_result_types` so the call site
keeps passing f32 buffers: the runtime converts at the DDR boundary.
Functions without f32 are left unchanged. `--torq-keep-f32` skips the pass,
which leaves f32 dispatches to the host (the slices have no f32 compute).
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import bf16_dense_attr, constant_value, functions, walk_ops
from . import PassOptions

NAME = "torq-convert-dtypes"
_FLOAT_CASTS = ("arith.extf", "arith.truncf")


def _demote(t: ir.Type) -> ir.Type:
    if isinstance(t, ir.F32Type):
        return ir.BF16Type.get()
    if isinstance(t, ir.RankedTensorType) and isinstance(t.element_type, ir.F32Type):
        return ir.RankedTensorType.get(list(t.shape), ir.BF16Type.get(), t.encoding)
    return t


def convert_function(func: ir.Operation) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    ins, outs = list(ftype.inputs), list(ftype.results)
    if not any(_demote(t) != t for t in ins + outs) and not any(
            _demote(r.type) != r.type for op in walk_ops(func) for r in op.results):
        return
    func.attributes["torq.host_arg_types"] = ir.ArrayAttr.get([ir.TypeAttr.get(t) for t in ins])
    func.attributes["torq.host_result_types"] = ir.ArrayAttr.get([ir.TypeAttr.get(t) for t in outs])
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([_demote(t) for t in ins], [_demote(t) for t in outs]))
    casts = []
    for op in walk_ops(func):
        if op is func:
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.arguments:
                        arg.set_type(_demote(arg.type))
            continue
        if op.name == "arith.constant":
            attr = op.attributes["value"]
            t = op.results[0].type
            if _demote(t) != t:
                if isinstance(t, ir.F32Type):
                    op.attributes["value"] = ir.FloatAttr.get(ir.BF16Type.get(), ir.FloatAttr(attr).value)
                else:
                    op.attributes["value"] = bf16_dense_attr(constant_value(attr), tuple(t.shape))
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    arg.set_type(_demote(arg.type))
        for r in op.results:
            r.set_type(_demote(r.type))
        if op.name in _FLOAT_CASTS:
            casts.append(op)
    # A bf16 <-> f32 cast (e.g. bf16 operands extended to an f32 accumulator)
    # is now bf16 -> bf16, which arith.extf/truncf do not allow: drop it.
    for op in casts:
        if op.operands[0].type == op.results[0].type:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()


def run(module: ir.Module, options: PassOptions) -> None:
    if options.keep_f32:
        return
    for func in functions(module):
        convert_function(func)
