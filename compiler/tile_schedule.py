"""The command order of one tile body, shared by LRAM assignment and NSS build.

A *tile body* is a block holding `torq_hl` ops: the function body (ops run
once) or the innermost body of a tile loop (ops run once per tile). Its
commands are, for each `torq_hl` op in order: a DMA-in for each operand not
produced in the same body (once per value), the compute, and a DMA-out when
the result is used outside the body's `torq_hl` ops. Every operand and result
value gets one LRAM buffer live from its first to its last command.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from .ir_utils import tensor_nbytes
from .lram_allocator import BufferRequest


@dataclass
class Event:
    kind: str  # "dma_in" | "compute" | "dma_out"
    op: ir.Operation | None  # the torq_hl op (compute / dma_out)
    value: ir.Value  # the value moved (dma) or produced (compute)


def is_torq_hl(op) -> bool:
    return not isinstance(op, ir.Block) and op.name.startswith("torq_hl.")


def tile_bodies(func: ir.Operation) -> list[ir.Block]:
    bodies = []

    def visit(block: ir.Block):
        ops = [o.operation for o in block.operations]
        if any(is_torq_hl(o) for o in ops):
            bodies.append(block)
        for o in ops:
            for region in o.regions:
                for b in region.blocks:
                    visit(b)

    visit(func.regions[0].blocks[0])
    return bodies


def _key(v: ir.Value):
    return v  # ir.Value is hashable by identity of the underlying value


def schedule(block: ir.Block) -> list[Event]:
    ops = [o.operation for o in block.operations if is_torq_hl(o.operation)]
    local = {op.results[0] for op in ops}
    loaded = set()
    events: list[Event] = []
    for op in ops:
        for v in op.operands:
            if v not in local and v not in loaded:
                loaded.add(v)
                events.append(Event("dma_in", None, v))
        events.append(Event("compute", op, op.results[0]))
        if any(not is_torq_hl(u.owner) or u.owner.parent != op.parent for u in op.results[0].uses):
            events.append(Event("dma_out", op, op.results[0]))
    return events


def buffer_requests(events: list[Event]) -> list[BufferRequest]:
    first: dict = {}
    last: dict = {}
    for i, e in enumerate(events):
        first.setdefault(e.value, i)
        last[e.value] = i
        if e.kind == "compute":
            for v in e.op.operands:
                last[v] = i
    return [BufferRequest(v, tensor_nbytes(v.type), first[v], last[v]) for v in first]
