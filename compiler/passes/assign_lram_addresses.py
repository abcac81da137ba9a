"""torq-assign-lram-addresses: place every LRAM buffer of every tile body.

Contract: takes a function whose compute is `torq_hl` ops (after
torq-lower-to-torq-hl). Each value's buffer holds its padded layout
(`vector_layout.padded_value_nbytes`: the vector dim of every torq_hl op
using it padded to whole vectors, narrow dims to the next power of two), so
offsets, the peak and the fit all count padded bytes. For each tile body it plans LRAM with
`tile_schedule.plan_body` (the shared first-fit allocator; resident
buffers of loop-invariant operands at the bottom, then one set of per-tile
buffers, repeated as many times as fits for double buffering) and records
on each `torq_hl` op:
- `torq.lram_operands` (one offset per operand) and `torq.lram_result`:
  offsets in buffer set 0;
- in a tile loop: `torq.lram_resident` (per operand: how many innermost
  loops it stays loaded across, `tile_schedule.invariant_loops`; 0 = per tile), `torq.lram_sets` and `torq.lram_set_stride` (tile k adds
  (k mod sets) x stride to its per-tile offsets);
- in a reduction loop whose steps are double-buffered: `torq.lram_step_operands`
  (per operand: the offset odd steps load it at, -1 for an operand loaded once).
A tile loop's body placed between the commands of another body goes above
the values that body computes before the loop and reads after it
(`tile_schedule.kept_across`). The function gets `torq.lram_peak` (highest
sum of live bytes, program order) and `torq.lram_end` (highest byte used,
all sets). A body whose footprint with one set (the bytes below it
included) does not fit `TorqHw.available_lram_bytes` is a compile error
naming its first op.
"""

from __future__ import annotations

import functools

from iree.compiler import ir

from ..ir_utils import CompileError, functions, location_str, set_int_array
from ..lram_allocator import align
from ..tile_schedule import BodyPlan, enclosing_loops, host_body, kept_across, plan_body, raised, tile_bodies
from ..vector_layout import padded_value_nbytes
from . import PassOptions

NAME = "torq-assign-lram-addresses"


def plan_bodies(func: ir.Operation, options: PassOptions, nbytes=None) -> list[tuple[ir.Block, BodyPlan]]:
    """Each tile body's plan; `nbytes(value)` sizes its buffers (default: padded_value_nbytes).
    A body nested in another (a tile loop between that body's commands) is placed above
    the buffers that body keeps across the loop (`tile_schedule.kept_across`), and above
    those the bodies around that one keep."""
    hw = options.hw
    nbytes = nbytes or functools.partial(padded_value_nbytes, hw=hw)
    plans: dict = {}
    below: dict = {}  # body -> (floor, bytes kept live under it)
    for b in tile_bodies(func):
        floor, kept_bytes = 0, 0
        if (host := host_body(b, plans)) is not None:
            hplan = plans[host[0]]
            kept = kept_across(hplan, *host)
            floor, kept_bytes = below[host[0]]
            if kept:  # a host with several sets keeps them in each set's bytes
                top = max(hplan.offsets[r.key] + r.size for r in kept) + (hplan.sets - 1) * hplan.set_stride
                floor = max(floor, align(top, hw.lram_alignment))
                kept_bytes += sum(r.size for r in kept)
        below[b] = (floor, kept_bytes)
        plans[b] = raised(plan_body(b, hw.lram_alignment, hw.available_lram_bytes - floor, hw.slices, nbytes),
                          floor, kept_bytes)
    return list(plans.items())


def lram_footprint(func: ir.Operation, options: PassOptions) -> int:
    """Bytes of LRAM the function needs with one buffer set per body (the fit)."""
    return max((p.footprint for _, p in plan_bodies(func, options)), default=0)


def _annotate(block: ir.Block, plan: BodyPlan) -> None:
    i64 = ir.IntegerType.get_signless(64)
    in_loop = bool(enclosing_loops(block))
    for e in plan.events:
        if e.kind != "compute":
            continue
        set_int_array(e.op, "torq.lram_operands", [plan.offsets[v] for v in e.op.operands])
        e.op.attributes["torq.lram_result"] = ir.IntegerAttr.get(i64, plan.offsets[e.value])
        if any(v in plan.step_offsets for v in e.op.operands):
            set_int_array(e.op, "torq.lram_step_operands", [plan.step_offsets.get(v, -1) for v in e.op.operands])
        if in_loop:
            set_int_array(e.op, "torq.lram_resident", [plan.resident.get(v, 0) for v in e.op.operands])
            e.op.attributes["torq.lram_sets"] = ir.IntegerAttr.get(i64, plan.sets)
            e.op.attributes["torq.lram_set_stride"] = ir.IntegerAttr.get(i64, plan.set_stride)


def assign_function(func: ir.Operation, options: PassOptions) -> None:
    budget = options.hw.available_lram_bytes
    plans = plan_bodies(func, options)
    for block, plan in plans:
        if plan.footprint > budget:
            first_op = next(e.op for e in plan.events if e.kind == "compute")
            raise CompileError(
                f"{location_str(first_op)}: error: {first_op.name}: tile needs {plan.footprint} bytes of LRAM, "
                f"budget is {budget}")
    i64 = ir.IntegerType.get_signless(64)
    for block, plan in plans:
        _annotate(block, plan)
    func.attributes["torq.lram_peak"] = ir.IntegerAttr.get(i64, max((p.peak for _, p in plans), default=0))
    func.attributes["torq.lram_end"] = ir.IntegerAttr.get(i64, max((p.end for _, p in plans), default=0))


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        assign_function(func, options)
