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

A result the NPU writes in place, or into a box of an operand (a conv's
output into the zero-point border of the next one's padded input), is
checked as the whole updated operand: the host copy updates the same operand
value, and the elements outside the box are equal on both sides.
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


def export_view(value: ir.Value) -> ir.Value:
    """`value` (a tensor) as a `!hal.buffer_view` for a call of the `torq` module."""
    return ir.Operation.create("hal.tensor.export", results=[ir.Type.parse("!hal.buffer_view")], operands=[value],
                               attributes={"source_encoding": ir.TypeAttr.get(value.type)}).result


def import_view(view: ir.Value, tensor_type: ir.Type) -> ir.Value:
    """A `!hal.buffer_view` a `torq` call returned, as a tensor of `tensor_type`."""
    return ir.Operation.create(
        "hal.tensor.import", results=[tensor_type], operands=[view],
        attributes={"target_encoding": ir.TypeAttr.get(tensor_type),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).result


def checked(exe: ir.Value, result_index: int, npu: ir.Value, host: ir.Value) -> ir.Value:
    """`npu` (a tensor) passed through `torq.check` with `host`, the host copy's same result
    (at the insertion point; the caller clones the original dispatch for `host`)."""
    which = ir.Operation.create(
        "util.buffer.constant", results=[ir.Type.parse("!util.buffer")],
        attributes={"value": ir.DenseElementsAttr.get(np.array([result_index], np.int32)),
                    "alignment": ir.IntegerAttr.get(ir.IndexType.get(), 16)}).result
    call = ir.Operation.create("util.call", results=[ir.Type.parse("!hal.buffer_view")],
                               operands=[exe, which, export_view(npu), export_view(host)],
                               attributes={"callee": ir.FlatSymbolRefAttr.get(CALLEE)})
    return import_view(call.result, npu.type)
