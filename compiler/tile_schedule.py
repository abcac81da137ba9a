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

Step operands (`step_operands`: the operand slices a reduction loop loads
each step) get a second placement when LRAM has room (`BodyPlan.step_offsets`,
allocated with the per-tile buffers, live like the first): step k loads into
the first placement when k is even, the second when odd, so the next step's
DMA-in need not wait for this step's compute (double-buffered steps). The
body then tries its set counts with both placements before trying them with
one.

The fit of a tiling (super tiling, the address pass's error) is the footprint
with one set and one placement of the step operands: resident bytes + one
set's extent. Extra sets and step placements only use room that is left.

A tile loop between the commands of another body (`host_body`: the function
body, or an outer loop's body holding a peeled inner loop's last tile) is
planned on its own, from the same base, except that it goes above the buffers
that body computes before the loop and reads after it (`kept_across`: they
have no DDR copy to load again from, and stay live while the loop runs); its
footprint counts the bytes below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from iree.compiler import ir

from torq.contract.ops import ACCUMULATE

from .ir_utils import region_ops, tensor_nbytes
from .lram_allocator import Allocation, BufferRequest, align, allocate


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
    # step operand -> its second placement in set 0 (odd reduction steps), when planned
    step_offsets: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)  # one BufferRequest per value (event spans)


def set_choices(slices: int) -> list[int]:
    """Buffer-set counts tried, most first: each slice double-buffered, one set per
    slice, double buffering, single."""
    return sorted({2 * slices, slices, 2, 1}, reverse=True)


def step_operands(events: list[Event], block: ir.Block) -> set:
    """Values a reduction loop of `block` loads again each step (its operand slices)."""
    loops = [o.operation for o in block.operations if is_reduction_loop(o.operation)]
    return {e.value for e in events
            if e.kind == "dma_in" and any(_defined_inside(e.value, loop) for loop in loops)}


@dataclass
class _Placement:
    offsets: dict
    step_offsets: dict
    extent: int  # bytes of one set
    peak: int  # highest sum of live bytes


def _place_per_tile(requests: list[BufferRequest], steps: set, base: int, alignment: int,
                    double: bool) -> _Placement:
    """The per-tile buffers above `base`; with `double`, each step operand twice."""
    shadows = [BufferRequest(("step", r.key), r.size, r.start, r.end) for r in requests if r.key in steps]
    alloc = allocate(requests + (shadows if double else []), alignment)
    offsets = {k: base + o for k, o in alloc.offsets.items() if not (isinstance(k, tuple) and k[0] == "step")}
    step_offsets = {r.key[1]: base + alloc.offsets[r.key] for r in shadows} if double else {}
    return _Placement(offsets, step_offsets, alloc.end, alloc.peak)


def _resident_below(requests: list[BufferRequest], resident, last: int,
                    alignment: int) -> tuple[Allocation, int, list[BufferRequest]]:
    """The resident buffers' allocation (live over the whole body, events 0..last), the
    aligned base of the per-tile buffers above them, and the per-tile requests."""
    res_alloc = allocate([BufferRequest(r.key, r.size, 0, last) for r in requests if r.key in resident],
                         alignment)
    return res_alloc, align(res_alloc.end, alignment), [r for r in requests if r.key not in resident]


def one_set_footprint(requests: list[BufferRequest], resident, last: int, alignment: int) -> int:
    """The fit of a body (`BodyPlan.footprint`) from its buffer requests alone: super
    tiling's footprint model (tiling/footprint_model.py) sizes them from predicted shapes."""
    res_alloc, base, per_tile = _resident_below(requests, resident, last, alignment)
    return base + allocate(per_tile, alignment).end if per_tile else res_alloc.end


def plan_body(block: ir.Block, alignment: int, budget: int, slices: int, nbytes=None) -> BodyPlan:
    events = body_events(block)
    alias = accumulator_aliases(block)
    requests = buffer_requests(events, nbytes, alias)
    # A body that also holds a tile loop (the last tile of a peeled inner loop runs after
    # it, in the outer loop's body) keeps nothing resident: the inner loop's plan places
    # its buffers from the same base (above only what it computes and keeps across the
    # loop, `kept_across`), so only buffers live between its own commands fit.
    holds_loop = any(op.operation.name == "scf.for" and not is_reduction_loop(op.operation)
                     for op in block.operations)
    resident = {} if holds_loop else {r.key: k for r in requests if (k := invariant_loops(r.key, block))}
    last = len(events) - 1
    res_alloc, base, per_tile = _resident_below(requests, resident, last, alignment)
    steps = step_operands(events, block)
    single = _place_per_tile(per_tile, steps, base, alignment, double=False)

    def top(placement: _Placement) -> int:  # highest byte with one set (one_set_footprint for `single`)
        return base + placement.extent if placement.offsets else res_alloc.end

    footprint = top(single)
    trips = trip_count(block) if enclosing_loops(block) else 1
    placements = ([_place_per_tile(per_tile, steps, base, alignment, double=True)] if steps else []) + [single]
    chosen, sets = single, 1
    for placement in placements:  # double-buffered steps first
        stride = align(placement.extent, alignment)
        fits = [k for k in set_choices(slices)
                if k <= (trips or 1) and top(placement) + (k - 1) * stride <= budget]
        if fits:
            chosen, sets = placement, fits[0]
            break
    offsets = dict(res_alloc.offsets)
    offsets.update(chosen.offsets)
    for a, v in alias.items():  # an accumulator's names share its buffer
        if v in offsets:
            offsets[a] = offsets[v]
    stride = align(chosen.extent, alignment)
    end = top(chosen) + (sets - 1) * stride
    # The peak counts live bytes in program order, where a step's two placements never
    # hold the same operand at once: the single placement's.
    return BodyPlan(offsets, resident, sets, stride, footprint, end,
                    res_alloc.peak + single.peak, events, chosen.step_offsets, requests)


# -- bodies nested in a body -----------------------------------------------------

def host_body(block: ir.Block, bodies) -> tuple[ir.Block, ir.Operation] | None:
    """The nearest tile body (in `bodies`) around tile body `block`, and its op the
    loop nest of `block` is in (a tile loop, run between that body's commands)."""
    op = block.owner.operation if block.owner is not None else None
    while op is not None and op.name != "func.func":
        if op.block in bodies:
            return op.block, op
        op = op.block.owner.operation if op.block.owner is not None else None
    return None


def kept_across(plan: BodyPlan, block: ir.Block, loop: ir.Operation) -> list[BufferRequest]:
    """The buffers of body `block` that its computes write before its op `loop` (a tile
    loop nest) and that are read after it: they stay in LRAM while the loop runs, as
    there is no DDR copy to load them again from (a DDR value is loaded again,
    build_nss_program._reload_overwritten)."""
    def top(op: ir.Operation) -> ir.Operation:  # the op of `block` holding `op`
        while op.block != block:
            op = op.block.owner.operation
        return op

    after, nxt = [], None
    for e in reversed(plan.events):  # a DMA-in is at its compute's place
        nxt = e.op if e.op is not None else nxt
        after.append(not top(nxt).is_before_in_block(loop))
    split = after[::-1].index(True) if True in after else len(after)
    return [r for r in plan.requests
            if r.start < split <= r.end and plan.events[r.start].kind == "compute"]


def raised(plan: BodyPlan, floor: int, kept_bytes: int) -> BodyPlan:
    """`plan` (made with the budget less `floor`) moved up by `floor` bytes, above the
    buffers of the bodies around it that stay live while it runs (`kept_bytes` of them)."""
    if not floor and not kept_bytes:
        return plan
    return replace(plan, offsets={v: o + floor for v, o in plan.offsets.items()},
                   step_offsets={v: o + floor for v, o in plan.step_offsets.items()},
                   footprint=plan.footprint + floor, end=plan.end + floor, peak=plan.peak + kept_bytes)
