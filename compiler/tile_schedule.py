"""The command order and LRAM plan of one tile body, shared by LRAM assignment and NSS build.

A *tile body* is a block holding `torq_hl` ops: the function body (ops run
once) or the innermost body of a tile loop nest (ops run once per tile). Its
commands are, for each `torq_hl` op in order: a DMA-in for each operand not
produced in the same body (once per value), the compute, and a DMA-out when
the result is used outside the body's `torq_hl` ops. Every operand and result
value gets one LRAM buffer live from its first to its last command.

A *reduction loop* (`is_reduction_loop`: a tiled reduction dim, whose body
accumulates into its iter_arg with a `torq_hl` op in accumulate form) is no
tile body: its ops are part of the body around it, scheduled once in its
place (each step reloads its operand slices into the same buffers), and the
accumulator's names (the loop's init, its iter_arg, the value its body
yields, the loop result: `accumulator_aliases`) share one buffer, live from
the init to its last reader after the loop, never moved to DDR.

Buffers of a tile-loop body come in two kinds (`plan_body`):
- *resident*: an operand defined outside the innermost loop (a weight, an
  input every tile reads whole, or in a 2-D nest the slice the outer loop
  takes). It is loaded by the first tile and kept in LRAM until a loop it
  varies with advances (`invariant_loops`), so spatial tiles do not re-read
  their weights and channel tiles do not re-read their input. Resident
  buffers sit at the bottom of LRAM, live for the whole body. A body that
  also holds a tile loop (a peeled inner loop's last tile) has none.
- *per-tile*: everything else (slices of the tiled tensors, results). They are
  placed once for one tile, above the resident ones; that placement is a
  *buffer set*. When LRAM has room, a body gets several sets at a fixed stride
  and tile k uses set k mod sets, so the next tile's DMA-in need not wait for
  the previous tile's compute and DMA-out (double buffering), and tiles on
  different slices do not share bytes. The number of sets is the largest of
  2 x slices, slices, 2, 1 that fits the budget and does not exceed the trip
  count.

The fit of a tiling (super tiling, the address pass's error) is the footprint
with one set: resident bytes + one set's extent. Extra sets only use room
that is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iree.compiler import ir

from torq.contract.ops import ACCUMULATE

from .ir_utils import region_ops, tensor_nbytes
from .lram_allocator import BufferRequest, align, allocate


@dataclass
class Event:
    kind: str  # "dma_in" | "compute" | "dma_out"
    op: ir.Operation | None  # the torq_hl op (compute / dma_out)
    value: ir.Value  # the value moved (dma) or produced (compute)


def is_torq_hl(op) -> bool:
    return not isinstance(op, ir.Block) and op.name.startswith("torq_hl.")




def is_reduction_loop(op) -> bool:
    """An scf.for whose body accumulates into its one iter_arg with a torq_hl op in
    accumulate form, or with a nested reduction loop (several tiled reduction dims).
    It is no tile body of its own but part of the body around it (its steps run in
    that body's tile, on its buffers)."""
    if isinstance(op, ir.Block) or op.name != "scf.for" or len(op.results) != 1:
        return False
    yielded = region_ops(op)[-1].operands[0].owner
    if isinstance(yielded, ir.Block):
        return False
    return (is_torq_hl(yielded) and ACCUMULATE in yielded.attributes) or is_reduction_loop(yielded)


def body_ops(block: ir.Block) -> list[ir.Operation]:
    """The torq_hl ops of a tile body in order, a reduction loop's ops in its place (once)."""
    out = []
    for o in block.operations:
        o = o.operation
        if is_torq_hl(o):
            out.append(o)
        elif is_reduction_loop(o):
            out += body_ops(o.regions[0].blocks[0])
    return out


def accumulator_aliases(block: ir.Block, alias: dict | None = None) -> dict:
    """Each value naming the accumulator of a reduction loop of `block` (its iter_arg,
    the value its body yields, the loop result; nested loops too) -> the outer loop's
    init: one LRAM buffer, resident from the init to the last reader after the loop."""
    alias = {} if alias is None else alias
    for o in block.operations:
        o = o.operation
        if is_reduction_loop(o):
            body = o.regions[0].blocks[0]
            init = alias.get(o.operands[3], o.operands[3])
            alias[body.arguments[1]] = init
            alias[[x.operation for x in body.operations][-1].operands[0]] = init
            alias[o.results[0]] = init
            accumulator_aliases(body, alias)
    return alias


def stays_in_body(user, op: ir.Operation) -> bool:
    """Whether a use of `op`'s result keeps it in LRAM: a torq_hl op of the same block,
    or a reduction loop taking it as its accumulator (init or yielded value)."""
    if isinstance(user, ir.Block):
        return False
    if is_torq_hl(user):
        return user.parent == op.parent
    if user.name == "scf.for":
        return is_reduction_loop(user)
    return user.name == "scf.yield" and is_reduction_loop(user.parent)


def tile_bodies(func: ir.Operation) -> list[ir.Block]:
    bodies = []

    def visit(block: ir.Block):
        ops = [o.operation for o in block.operations]
        if any(is_torq_hl(o) or is_reduction_loop(o) for o in ops):
            bodies.append(block)
        for o in ops:
            if is_reduction_loop(o):
                continue  # part of this body
            for region in o.regions:
                for b in region.blocks:
                    visit(b)

    visit(func.regions[0].blocks[0])
    return bodies


def body_events(block: ir.Block) -> list[Event]:
    """Events of one execution of `block`; a reduction loop's step appears once (its
    operand slices are reloaded each step into the same buffers) and accumulator
    values appear as their loop's init (`accumulator_aliases`)."""
    ops = body_ops(block)
    alias = accumulator_aliases(block)
    local = {alias.get(op.results[0], op.results[0]) for op in ops}
    loaded = set()
    events: list[Event] = []
    for op in ops:
        for v in op.operands:
            v = alias.get(v, v)
            if v not in local and v not in loaded:
                loaded.add(v)
                events.append(Event("dma_in", None, v))
        result = alias.get(op.results[0], op.results[0])
        events.append(Event("compute", op, result))
        if any(not stays_in_body(u.owner, op) for u in op.results[0].uses):
            events.append(Event("dma_out", op, result))
    return events


def buffer_requests(events: list[Event], nbytes=None, alias: dict | None = None) -> list[BufferRequest]:
    """One request per value; `nbytes(value)` sizes it (default: its dense tensor bytes;
    torq-assign-lram-addresses passes `vector_layout.padded_value_nbytes`)."""
    nbytes = nbytes or (lambda v: tensor_nbytes(v.type))
    first: dict = {}
    last: dict = {}
    for i, e in enumerate(events):
        first.setdefault(e.value, i)
        last[e.value] = i
        if e.kind == "compute":
            for v in e.op.operands:
                last[(alias or {}).get(v, v)] = i
    return [BufferRequest(v, nbytes(v), first[v], last[v]) for v in first]


# -- loops around a body ---------------------------------------------------------

def enclosing_loops(block: ir.Block) -> list[ir.Operation]:
    """The scf.for ops around `block`, innermost first."""
    loops = []
    p = block.owner.operation if block.owner is not None else None
    while p is not None and p.name != "func.func":
        if p.name == "scf.for":
            loops.append(p)
        p = p.parent.operation if p.parent is not None else None
    return loops


def _defined_inside(v: ir.Value, op: ir.Operation) -> bool:
    owner = v.owner
    p = owner.owner.operation if isinstance(owner, ir.Block) else owner.operation
    while p is not None and p.name != "func.func":
        if p == op:
            return True
        p = p.parent.operation if p.parent is not None else None
    return False


def invariant_loops(v: ir.Value, block: ir.Block) -> int:
    """How many of the innermost loops around `block` an operand is defined outside
    of (0: it changes every tile). A weight used by a whole nest is invariant to
    all its loops; a weight slice taken in the outer loop of a 2-D nest (hoisted
    there by loop-invariant code motion) to the inner one."""
    k = 0
    for loop in enclosing_loops(block):
        if _defined_inside(v, loop):
            break
        k += 1
    return k


def _constant_index(v: ir.Value) -> int | None:
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


def trip_count(block: ir.Block) -> int | None:
    """Iterations of `block` (product over its loop nest), None when not static."""
    n = 1
    for loop in enclosing_loops(block):
        lb, ub, step = (_constant_index(x) for x in loop.operands[:3])
        if None in (lb, ub, step) or step <= 0:
            return None
        n *= max(0, -(-(ub - lb) // step))
    return n


# -- the LRAM plan of a body -----------------------------------------------------

@dataclass
class BodyPlan:
    offsets: dict  # value -> LRAM offset in set 0
    # value -> innermost loops it is invariant to (loaded again only when an outer one advances)
    resident: dict = field(default_factory=dict)
    sets: int = 1
    set_stride: int = 0  # bytes between buffer sets
    footprint: int = 0  # highest byte with one set: what must fit
    end: int = 0  # highest byte with all sets
    peak: int = 0  # highest sum of live bytes (resident + one tile's live buffers)
    events: list = field(default_factory=list)


def set_choices(slices: int) -> list[int]:
    """Buffer-set counts tried, most first: each slice double-buffered, one set per
    slice, double buffering, single."""
    return sorted({2 * slices, slices, 2, 1}, reverse=True)


def plan_body(block: ir.Block, alignment: int, budget: int, slices: int, nbytes=None) -> BodyPlan:
    events = body_events(block)
    alias = accumulator_aliases(block)
    requests = buffer_requests(events, nbytes, alias)
    # A body that also holds a tile loop (the last tile of a peeled inner loop runs after
    # it, in the outer loop's body) keeps nothing resident: the inner loop's plan places
    # its buffers from the same base, so only buffers live between its own commands fit.
    holds_loop = any(op.operation.name == "scf.for" and not is_reduction_loop(op.operation)
                     for op in block.operations)
    resident = {} if holds_loop else {r.key: k for r in requests if (k := invariant_loops(r.key, block))}
    last = len(events) - 1
    res_alloc = allocate([BufferRequest(r.key, r.size, 0, last) for r in requests if r.key in resident],
                         alignment)
    base = align(res_alloc.end, alignment)
    tile_alloc = allocate([r for r in requests if r.key not in resident], alignment)
    offsets = {k: o for k, o in res_alloc.offsets.items()}
    offsets.update({k: base + o for k, o in tile_alloc.offsets.items()})
    for a, v in alias.items():  # an accumulator's names share its buffer
        if v in offsets:
            offsets[a] = offsets[v]
    footprint = base + tile_alloc.end if tile_alloc.offsets else res_alloc.end
    stride = align(tile_alloc.end, alignment)
    trips = trip_count(block) if enclosing_loops(block) else 1
    sets = 1
    for k in set_choices(slices):
        if k <= (trips or 1) and footprint + (k - 1) * stride <= budget:
            sets = k
            break
    return BodyPlan(offsets, resident, sets, stride, footprint, footprint + (sets - 1) * stride,
                    res_alloc.peak + tile_alloc.peak, events)
