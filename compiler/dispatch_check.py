"""--torq-check-dispatches: each NPU dispatch checked against IREE llvm-cpu on the same inputs.

The per-layer comparison DESIGN §7 and the int8 issue ask for ("every NPU
int8 result within one output step of the float chain llvm-cpu computes on
the same MLIR"). Comparing two whole-model runs cannot show it: one value
rounded differently early in a network moves many values downstream, so a
later layer's difference says nothing about that layer. Here every NPU
dispatch keeps a host copy, the original flow dispatch (IREE compiles it
with llvm-cpu, as any host dispatch), reading the very tensors the NPU
dispatch reads; the NPU result goes on through the model, and both meet in
a call of `torq.check` (contract/module_abi.py), which records how far apart
they are (runtime/dispatch_check.py) and passes the NPU result on.

A result the NPU writes in place, or into a box of an operand, is not
checked (its host copy would be the whole updated operand); the report says
which results were.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from torq.contract.module_abi import CHECK_EXPORT, MODULE_NAME

CALLEE = f"{MODULE_NAME}.{CHECK_EXPORT}"


def declare_check(module_op: ir.Operation, declared: set) -> None:
    """The import of `torq.check(executable, which, npu, host) -> npu`, once per module."""
    if CALLEE in declared:
        return
    bv = "!hal.buffer_view"
    decl = ir.Operation.parse(f"util.func private @{CALLEE}(!util.buffer, !util.buffer, {bv}, {bv}) -> {bv}")
    ir.InsertionPoint.at_block_begin(module_op.regions[0].blocks[0]).insert(decl)
    declared.add(CALLEE)


def host_copy(dispatch: ir.Operation) -> ir.Operation:
    """The original dispatch, cloned before it at the insertion point (it stays a host dispatch)."""
    return dispatch.clone()


def checked(exe: ir.Value, result_index: int, npu: ir.Value, host: ir.Value) -> ir.Value:
    """`npu` (a tensor) passed through `torq.check` with `host`, the host copy's same result."""
    bv = ir.Type.parse("!hal.buffer_view")
    which = ir.Operation.create(
        "util.buffer.constant", results=[ir.Type.parse("!util.buffer")],
        attributes={"value": ir.DenseElementsAttr.get(np.array([result_index], np.int32)),
                    "alignment": ir.IntegerAttr.get(ir.IndexType.get(), 16)}).result
    views = [ir.Operation.create("hal.tensor.export", results=[bv], operands=[v],
                                 attributes={"source_encoding": ir.TypeAttr.get(v.type)}).result
             for v in (npu, host)]
    call = ir.Operation.create("util.call", results=[bv], operands=[exe, which] + views,
                               attributes={"callee": ir.FlatSymbolRefAttr.get(CALLEE)})
    return ir.Operation.create(
        "hal.tensor.import", results=[npu.type], operands=[call.result],
        attributes={"target_encoding": ir.TypeAttr.get(npu.type),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).result
