"""torq-assign-lram-addresses: place every LRAM buffer of every tile body.

Contract: takes a function whose compute is `torq_hl` ops (after
torq-lower-to-torq-hl). For each tile body (see `tile_schedule`) it allocates
one buffer per operand/result value with the shared first-fit allocator and
records the offsets on each `torq_hl` op: `torq.lram_operands` (one offset per
operand) and `torq.lram_result`. The function gets `torq.lram_peak` (highest
sum of live bytes) and `torq.lram_end` (highest byte used). A body that does
not fit `TorqHw.available_lram_bytes` is a compile error naming its first op.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import CompileError, location_str, set_int_array
from ..lram_allocator import allocate
from ..tile_schedule import buffer_requests, schedule, tile_bodies
from . import PassOptions

NAME = "torq-assign-lram-addresses"


def plan_function(func: ir.Operation, options: PassOptions, annotate: bool = True) -> tuple[int, int]:
    """Allocate every body; returns (highest end, highest peak) over bodies."""
    end = peak = 0
    i64 = ir.IntegerType.get_signless(64)
    for block in tile_bodies(func):
        events = schedule(block)
        alloc = allocate(buffer_requests(events), options.hw.lram_alignment)
        end, peak = max(end, alloc.end), max(peak, alloc.peak)
        if not annotate:
            continue
        first_op = next(e.op for e in events if e.kind == "compute")
        if alloc.end > options.hw.available_lram_bytes:
            raise CompileError(
                f"{location_str(first_op)}: error: {first_op.name}: tile needs {alloc.end} bytes of LRAM, "
                f"budget is {options.hw.available_lram_bytes}")
        for e in events:
            if e.kind == "compute":
                set_int_array(e.op, "torq.lram_operands", [alloc.offsets[v] for v in e.op.operands])
                e.op.attributes["torq.lram_result"] = ir.IntegerAttr.get(i64, alloc.offsets[e.value])
    if annotate:
        func.attributes["torq.lram_peak"] = ir.IntegerAttr.get(i64, peak)
        func.attributes["torq.lram_end"] = ir.IntegerAttr.get(i64, end)
    return end, peak


def run(module: ir.Module, options: PassOptions) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            plan_function(op.operation, options)
