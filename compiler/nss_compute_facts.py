"""What torq-build-nss-program reads from a torq_hl op's attributes and types for each
compute it emits, decoded once per op: the builder prices every super tiling candidate,
so it runs thousands of tiles per dispatch, and reading the IR through the bindings on
each of them was most of its time."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from torq.contract.ops import ACCUMULATE

from .ir_utils import CompileError, element_type, int_array, mlir_dtype, static_shape
from .patterns import epilogue_value
from .tile_schedule import stays_in_body


@dataclass(frozen=True, eq=False)
class ComputeFacts:
    """What `NssBuilder.compute` reads from a torq_hl op's attributes and types, decoded
    once per op rather than on each of its tiles (the builder prices every super tiling
    candidate, so it runs thousands of tiles per dispatch)."""
    kind: str
    operands: list[ir.Value]
    result: ir.Value
    out_users: list[ir.Operation]  # users of the result it leaves LRAM for (`_dma_out`)
    offsets: tuple[int, ...]  # torq.lram_operands
    resident: tuple[int, ...]  # torq.lram_resident (0 per operand when absent)
    step_offsets: tuple[int, ...] | None  # torq.lram_step_operands
    sets: int
    set_stride: int  # 0 with one buffer set
    result_offset: int | None  # torq.lram_result; None for the accumulate form
    operand_shapes: tuple
    operand_dtypes: tuple[str, ...]
    result_shape: tuple[int, ...]
    result_dtype: str
    attrs: dict  # the op's own attributes (not epilogue, macs, torq.*)
    epilogue: object
    macs: int

    @staticmethod
    def of(op: ir.Operation) -> ComputeFacts:
        a = op.attributes
        offsets = tuple(int_array(a["torq.lram_operands"]))
        sets = ir.IntegerAttr(a["torq.lram_sets"]).value if "torq.lram_sets" in a else 1
        attrs = {}
        for name in [x if isinstance(x, str) else x.name for x in a]:
            if name in ("epilogue", "macs") or name.startswith("torq."):
                continue
            attr = a[name]
            attrs[name] = attr.value if isinstance(attr, (ir.StringAttr, ir.IntegerAttr)) else int_array(attr)
        res = op.results[0]
        try:
            epilogue = epilogue_value(a["epilogue"])
        except CompileError as e:
            raise CompileError(f"{op.name}: {e}") from None
        return ComputeFacts(
            kind=op.name.split(".", 1)[1], operands=list(op.operands), result=res,
            out_users=[use.owner for use in res.uses if not stays_in_body(use.owner, op)], offsets=offsets,
            resident=tuple(int_array(a["torq.lram_resident"])) if "torq.lram_resident" in a else (0,) * len(offsets),
            step_offsets=tuple(int_array(a["torq.lram_step_operands"])) if "torq.lram_step_operands" in a else None,
            sets=sets, set_stride=ir.IntegerAttr(a["torq.lram_set_stride"]).value if sets > 1 else 0,
            result_offset=None if ACCUMULATE in a else ir.IntegerAttr(a["torq.lram_result"]).value,
            operand_shapes=tuple(static_shape(v.type) for v in op.operands),
            operand_dtypes=tuple(mlir_dtype(element_type(v.type)) for v in op.operands),
            result_shape=static_shape(res.type), result_dtype=mlir_dtype(element_type(res.type)),
            attrs=attrs, epilogue=epilogue,
            macs=ir.IntegerAttr(a["macs"]).value)
