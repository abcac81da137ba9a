"""Timing model of one Torq dispatch: when each NSS command runs, and why.

Contract (every number comes from `TorqHw`; nothing here is a literal):

- Engines. A `DmaIn` runs on the "dma_in" engine, a `DmaOut` on "dma_out",
  a `Compute` on "slice{Compute.slice}". Each engine runs its own commands in
  program order, one at a time (an in-order command queue). A program whose
  compute names a slice the device does not have is refused (`TimingError`).
  A split compute (`Compute.split` = k > 1) runs on the k engines "slice{s}"
  .. "slice{s + k - 1}" (s = `Compute.slice`) at once: it starts when all k
  are free (and its dependencies are met) and occupies each of them until it
  ends. Model: each slice computes its share of the result (the result cut
  into k equal parts along one dim, the operands shared in LRAM: read sharing
  needs no copy), at the same per-slice rate as an unsplit compute, after
  the same fixed overhead; so it takes compute_overhead_cycles +
  ceil(work / k), `work` as below. Its `CommandTime.engine` is its first slice.
- Per-command cycles (`command_cycles`):
    DMA      = dma_setup_cycles (on its engine; a gather: one per row, each row
               its own descriptor; a scatter: one per position along its index
               dim, each position a box of its own, as a plain DMA's box is one
               descriptor)
               + ceil(bytes / dma_effective_bytes_per_cycle) (on the XRAM link)
    an op with CycleRule.MAC_ARRAY (conv2d, matmul; contract/ops.py) and macs > 0
             = compute_overhead_cycles + ceil(padded macs / min(macs_per_cycle(dtype)
               of the two principal operands))
    CycleRule.ELEMENTS (elementwise) and MAC_ARRAY ops without MACs
             = compute_overhead_cycles + ceil(padded elements(result) * max(1, steps)
               / min(lanes(dtype) over operands and result))
  A split compute's part after the overhead is ceil(that / split) (see Engines).
  "Padded" is `Compute.padded_work` when the compiler recorded it (the work
  with each vector dim padded to whole vectors, narrow dims to the next power
  of two: compiler/vector_layout.py; a conv with 3 input channels costs the
  MACs of 4), else the unpadded `macs` / result elements. The roofline and
  efficiency use the useful (unpadded) `macs`.
  An op with CycleRule.WINDOW_ON_LANES (depthwise conv, pooling, reduce)
  runs its window reads on the elementwise lanes, ceil(padded macs /
  lanes(input dtype)) (`window_on_lanes_cycles`); its MACs do not count in
  the roofline's MAC-array work.
- The XRAM link. DMA-in and DMA-out are separate engines but move their bytes
  over one XRAM <-> LRAM link of dma_effective_bytes_per_cycle (the DESIGN §5
  DMA figure). A transfer takes link cycles at or after the end of its setup;
  it fills the link's free gaps in order and may be split across them (burst
  arbitration, earlier commands in program order first). Hence the simulated
  cycles are never below bytes moved / effective bandwidth, which keeps the
  roofline of DESIGN §7 a true lower bound.
- Dependencies (a command starts when its engine is free and all hold):
  LRAM, by byte ranges (a buffer's whole range [offset, offset + size)):
    RAW: a command reading bytes waits for the end of the last command that
         wrote any of them;
    WAR: a command writing bytes waits for the end of every command that read
         them since their last write;
    WAW: a command writing bytes waits for the end of their last writer.
  DmaIn writes its buffer (a gather also reads its index buffer); DmaOut reads
  its buffer (a scatter also its index buffer); Compute reads its operand
  buffers and writes its result buffer.
  DDR, by boxes (a gather's: every row it may read; a scatter's: every
  position it may write along its index dim): a DmaIn reading a box of
  a tensor that some DmaOut writes waits for earlier DmaOuts to overlapping
  boxes (RAW); a DmaOut waits for earlier DmaIns of overlapping boxes (WAR;
  WAW between DmaOuts holds by the in-order DMA-out engine). A DMA's setup
  starts once its dependencies are met.
  So a program that reuses the same LRAM bytes for every tile serializes,
  and one that gives the next tile other bytes (double buffering, or a
  second slice with its own buffers) overlaps DMA and compute.
- Results (`Timeline`): start/end cycle of every command, the makespan (the
  dispatch's cycles), busy cycles per engine (sum of end - start), each LRAM
  buffer's time span [first use start, last use end), and `waited_for`: the
  command whose end gated each start (-1 when the engine order or nothing did).
- Slices and LRAM (`check_slice_sharing`): an LRAM buffer written by computes
  of two different slices, or two buffers sharing bytes, live at overlapping
  times and written by computes of different slices, is a `TimingError`. A
  split compute writes from its set of slices (one command writing disjoint
  parts of its result, so its own slices never race); writers whose slice
  sets share a slice are ordered by that slice's queue, so only writers on
  disjoint slice sets count as different.
- Measures (DESIGN §7): `roofline_cycles` = max(sum over computes of
  macs / macs_per_cycle(dtype) / slices, compulsory bytes /
  dma_effective_bytes_per_cycle), rounded up; `lram_occupancy` is the sum of
  sizes of buffers within their time span, as steps over time (a padded
  buffer's `size` counts its padded bytes).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from . import measures
from .hw import TorqHw
from .ops import OPS, CycleRule
from .program import Compute, DmaIn, DmaOut, Program

DMA_IN = "dma_in"
DMA_OUT = "dma_out"


class TimingError(ValueError):
    """A program the timing model cannot schedule as written (one line)."""


def slice_engine(index: int) -> str:
    return f"slice{index}"


def engine_of(c) -> str:
    """The engine of a command (a split compute's first slice)."""
    if isinstance(c, DmaIn):
        return DMA_IN
    if isinstance(c, DmaOut):
        return DMA_OUT
    return slice_engine(c.slice)


def slices_of(c: Compute) -> range:
    """The slices a compute runs on: `slice` .. `slice + split - 1`."""
    return range(c.slice, c.slice + max(1, c.split))


def engines_of(c) -> list[str]:
    """Every engine a command occupies (all the slices of a split compute)."""
    if isinstance(c, Compute):
        return [slice_engine(s) for s in slices_of(c)]
    return [engine_of(c)]


@functools.lru_cache(maxsize=256)
def _rate_ratio(rate: float) -> tuple[int, int]:
    """(numerator, denominator) of the decimal value of `rate`."""
    f = Fraction(rate).limit_denominator(1 << 20)
    return f.numerator, f.denominator


def ceil_div(n: int, rate: float) -> int:
    """ceil(n / rate) exactly on the decimal value of `rate` (5.2, not 5.2000000000000002)."""
    p, q = _rate_ratio(rate)
    if isinstance(n, int):
        return -((-n * q) // p)  # ceil(n * q / p) in integers
    return math.ceil(Fraction(n) * q / p)


# --------------------------------------------------------------------------
# Per-command cycles

def window_on_lanes_cycles(c: Compute, hw: TorqHw) -> int:
    """`CycleRule.WINDOW_ON_LANES` (depthwise convolution, pooling, reduce): no channel
    reduction fills the MAC array's rows, so each window element read (the op's `macs`,
    padded: `padded_macs`) takes one vector lane for one cycle: ceil(padded macs / lanes(input
    dtype))."""
    return ceil_div(padded_macs(c), hw.lanes(c.operands[0].dtype))


def padded_macs(c: Compute) -> int:
    """The MACs (window reads) a compute's vectors cover: `padded_work` when the compiler
    recorded it (vector dims padded, compiler/vector_layout.py), else `macs`."""
    return c.padded_work if c.padded_work > 0 else c.macs


def dma_bytes(c: DmaIn | DmaOut, program: Program) -> int:
    """Bytes a DMA moves: its box in the dtype of its DDR tensor."""
    ts = program.tensors
    t = ts[c.tensor] if c.tensor < len(ts) and ts[c.tensor].index == c.tensor else \
        next(x for x in ts if x.index == c.tensor)
    return measures.dma_bytes(c, t.dtype)


def compute_work_cycles(c: Compute, hw: TorqHw) -> int:
    """Cycles of a compute after its fixed overhead (see module docstring)."""
    rule = OPS[c.op].cycles
    if rule is CycleRule.WINDOW_ON_LANES:
        return window_on_lanes_cycles(c, hw)
    if rule is CycleRule.MAC_ARRAY and c.macs > 0:
        rate = min(hw.macs_per_cycle(o.dtype) for o in c.operands[:2])
        return ceil_div(padded_macs(c), rate)
    lanes = min(hw.lanes(o.dtype) for o in [*c.operands, c.result])
    elements = c.padded_work if c.padded_work > 0 else math.prod(c.result.shape)
    return ceil_div(elements * max(1, len(c.epilogue.steps)), lanes)


def command_cycles(c, program: Program, hw: TorqHw) -> tuple[int, int]:
    """(fixed cycles, work cycles): DMA setup and link transfer, or compute overhead and work
    (a split compute: each slice's share, ceil(work / split))."""
    if isinstance(c, (DmaIn, DmaOut)):
        descriptors = (c.sizes[0] if isinstance(c, DmaIn) and c.gathers else
                       c.sizes[c.index_dim] if isinstance(c, DmaOut) and c.scatters else 1)
        return hw.dma_setup_cycles * descriptors, ceil_div(dma_bytes(c, program), hw.dma_effective_bytes_per_cycle)
    return hw.compute_overhead_cycles, -(-compute_work_cycles(c, hw) // max(1, c.split))


# --------------------------------------------------------------------------
# Results


@dataclass
class CommandTime:
    index: int
    engine: str
    start: int
    end: int
    transfer_start: int = -1  # DMA: first cycle on the XRAM link
    waited_for: int = -1  # command whose end gated the start (-1: none or the engine)


@dataclass
class Timeline:
    commands: list[CommandTime]
    makespan: int
    engine_busy: dict[str, int]
    buffer_spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # buffer id -> [start, end)


# --------------------------------------------------------------------------
# The XRAM link


class _Link:
    """Busy intervals [s, e) of the XRAM link, sorted and disjoint."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def reserve(self, t: int, work: int) -> tuple[int, int]:
        """Takes `work` free cycles at or after `t` (possibly in pieces); returns (first, end)."""
        if work <= 0:
            return t, t
        pieces: list[tuple[int, int]] = []
        # First interval that ends after t.
        k = bisect.bisect_right(self.ends, t)
        cur = t
        left = work
        while left > 0:
            if k < len(self.starts) and self.starts[k] <= cur:
                cur = max(cur, self.ends[k])
                k += 1
                continue
            limit = self.starts[k] if k < len(self.starts) else cur + left
            take = min(left, limit - cur)
            pieces.append((cur, cur + take))
            left -= take
            cur += take
        for s, e in pieces:
            self._insert(s, e)
        return pieces[0][0], pieces[-1][1]

    def _insert(self, s: int, e: int) -> None:
        k = bisect.bisect_left(self.starts, s)
        # Merge with the neighbours it touches.
        if k > 0 and self.ends[k - 1] == s:
            k -= 1
            s = self.starts[k]
            del self.starts[k], self.ends[k]
        if k < len(self.starts) and self.starts[k] == e:
            e = self.ends[k]
            del self.starts[k], self.ends[k]
        self.starts.insert(k, s)
        self.ends.insert(k, e)


# --------------------------------------------------------------------------
# LRAM byte-range and DDR box dependency tracking


class _LramState:
    """Per LRAM segment (coordinate-compressed over buffer boundaries): last write and reads since."""

    def __init__(self, program: Program) -> None:
        cuts = sorted({b.offset for b in program.buffers} | {b.offset + b.size for b in program.buffers})
        self.cuts = cuts
        n = max(0, len(cuts) - 1)
        # Plain lists: a buffer spans a few segments, where Python beats numpy's per-call cost.
        self.w_end = [0] * n
        self.w_cmd = [-1] * n
        self.r_end = [0] * n
        self.r_cmd = [-1] * n
        self.range = {b.id: (bisect.bisect_left(cuts, b.offset), bisect.bisect_left(cuts, b.offset + b.size))
                      for b in program.buffers}

    def ready(self, buffer: int, write: bool) -> tuple[int, int]:
        """(end of the latest conflicting access, its command): the first segment holding the maximum."""
        lo, hi = self.range[buffer]
        if lo >= hi:
            return 0, -1
        w_end = self.w_end
        t = max(w_end[lo:hi])
        who = self.w_cmd[w_end.index(t, lo, hi)]
        if write:
            r_end = self.r_end
            rt = max(r_end[lo:hi])
            if rt > t:
                t, who = rt, self.r_cmd[r_end.index(rt, lo, hi)]
        return t, who

    def read(self, buffer: int, end: int, cmd: int) -> None:
        lo, hi = self.range[buffer]
        r_end, r_cmd = self.r_end, self.r_cmd
        for k in range(lo, hi):
            if r_end[k] < end:
                r_end[k] = end
                r_cmd[k] = cmd

    def write(self, buffer: int, end: int, cmd: int) -> None:
        lo, hi = self.range[buffer]
        n = hi - lo
        if n > 0:
            self.w_end[lo:hi] = [end] * n
            self.w_cmd[lo:hi] = [cmd] * n
            self.r_end[lo:hi] = [end] * n
            self.r_cmd[lo:hi] = [cmd] * n


class _Accesses:
    """The DMA boxes of one DDR tensor recorded so far, with the cycle each access ends and
    its command: arrays (grown by doubling) so a new access's conflicts are found in one
    vectorised pass over them, not a Python loop (a tiled attention re-reads its scores in
    hundreds of boxes: a loop made scheduling quadratic in Python)."""

    def __init__(self, rank: int) -> None:
        self.n = 0
        self.lo = np.empty((8, rank), dtype=np.int64)
        self.hi = np.empty((8, rank), dtype=np.int64)
        self.end = np.empty(8, dtype=np.int64)
        self.cmd = np.empty(8, dtype=np.int64)

    def add(self, offsets, sizes, end: int, cmd: int) -> None:
        if self.n == len(self.end):
            self.lo, self.hi, self.end, self.cmd = (np.concatenate([a, np.empty_like(a)])
                                                    for a in (self.lo, self.hi, self.end, self.cmd))
        self.lo[self.n] = offsets
        self.hi[self.n] = [o + s for o, s in zip(offsets, sizes)]
        self.end[self.n], self.cmd[self.n] = end, cmd
        self.n += 1

    def latest_overlapping(self, offsets, sizes) -> tuple[int, int]:
        """(end, command) of the access that ends last among those whose box overlaps the
        box (`offsets`, `sizes`), the first recorded on a tie; (0, -1) when none does."""
        if self.n == 0:
            return 0, -1
        lo = np.asarray(offsets, dtype=np.int64)
        hi = lo + np.asarray(sizes, dtype=np.int64)
        overlap = np.all((lo < self.hi[:self.n]) & (self.lo[:self.n] < hi), axis=1)
        ends = np.where(overlap, self.end[:self.n], 0)
        k = int(np.argmax(ends))
        return (int(ends[k]), int(self.cmd[k])) if ends[k] > 0 else (0, -1)


class _DdrState:
    """Accesses to DDR tensors that some DmaOut writes (others are read-only: no hazards)."""

    def __init__(self, program: Program) -> None:
        self.written = {c.tensor for c in program.commands if isinstance(c, DmaOut)}
        self.reads: dict[int, _Accesses] = {}
        self.writes: dict[int, _Accesses] = {}

    def ready(self, c: DmaIn | DmaOut) -> tuple[int, int]:
        if c.tensor not in self.written:
            return 0, -1
        # WAW between DmaOuts needs no check: they all run in order on the one DMA-out engine.
        acc = (self.writes if isinstance(c, DmaIn) else self.reads).get(c.tensor)
        return acc.latest_overlapping(*_ddr_box(c)) if acc is not None else (0, -1)

    def record(self, c: DmaIn | DmaOut, end: int, cmd: int) -> None:
        if c.tensor in self.written:
            acc = self.reads if isinstance(c, DmaIn) else self.writes
            if c.tensor not in acc:
                acc[c.tensor] = _Accesses(len(c.offsets))
            acc[c.tensor].add(*_ddr_box(c), end, cmd)


def _ddr_box(c: DmaIn | DmaOut) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The DDR box a DMA may access (a gather, a scatter: any position its indices may name)."""
    return c.read_box() if isinstance(c, DmaIn) else c.write_box()


# --------------------------------------------------------------------------
# Scheduling


def _accesses(c) -> tuple[list[int], list[int]]:
    """(LRAM buffers read, LRAM buffers written) by a command."""
    if isinstance(c, DmaIn):
        return ([c.index_buffer] if c.gathers else []), [c.buffer]
    if isinstance(c, DmaOut):
        return ([c.buffer, c.index_buffer] if c.scatters else [c.buffer]), []
    return [o.buffer for o in c.operands], [c.result.buffer]


def schedule(program: Program, hw: TorqHw) -> Timeline:
    """Start and end cycle of every command of `program` on `hw` (see module docstring)."""
    for i, c in enumerate(program.commands):
        if isinstance(c, Compute) and not (0 <= c.slice and c.slice + max(1, c.split) <= hw.slices):
            where = (f"slice {c.slice}" if c.split <= 1 else
                     f"slices {c.slice}..{c.slice + c.split - 1} (split over {c.split})")
            raise TimingError(
                f"command {i} ({c.op}) runs on {where} but the device ({hw.spec}) has "
                f"{hw.slices} slice{'' if hw.slices == 1 else 's'}; recompile for this device"
            )
    lram = _LramState(program)
    ddr = _DdrState(program)
    link = _Link()
    engine_free: dict[str, int] = {}
    busy: dict[str, int] = {DMA_IN: 0, DMA_OUT: 0, **{slice_engine(s): 0 for s in range(hw.slices)}}
    times: list[CommandTime] = []
    spans: dict[int, tuple[int, int]] = {}
    for i, c in enumerate(program.commands):
        engine = engine_of(c)
        engines = engines_of(c)
        reads, writes = _accesses(c)
        ready, who = max(engine_free.get(e, 0) for e in engines), -1
        deps = [lram.ready(b, False) for b in reads] + [lram.ready(b, True) for b in writes]
        if isinstance(c, (DmaIn, DmaOut)):
            deps.append(ddr.ready(c))
        for t, cmd in deps:
            if t > ready:
                ready, who = t, cmd
        fixed, work = command_cycles(c, program, hw)
        start = ready
        if isinstance(c, (DmaIn, DmaOut)):
            first, end = link.reserve(start + fixed, work)
            if work <= 0:
                first, end = start + fixed, start + fixed
        else:
            first, end = -1, start + fixed + work
        for b in reads:
            lram.read(b, end, i)
        for b in writes:
            lram.write(b, end, i)
        if isinstance(c, (DmaIn, DmaOut)):
            ddr.record(c, end, i)
        for e in engines:
            engine_free[e] = end
            busy[e] = busy.get(e, 0) + end - start
        times.append(CommandTime(i, engine, start, end, first, who))
        for b in {*reads, *writes}:
            s0, e0 = spans.get(b, (start, end))
            spans[b] = (min(s0, start), max(e0, end))
    makespan = max((t.end for t in times), default=0)
    return Timeline(times, makespan, busy, spans)


# --------------------------------------------------------------------------
# Checks and measures


def check_slice_sharing(program: Program, timeline: Timeline) -> None:
    """Raises TimingError if two slices write one live buffer, or byte-sharing buffers at overlapping times.

    A writer is the slice set of a compute (one slice, or all the slices of a split
    compute); two writers differ when their slice sets are disjoint (no slice queue
    orders them)."""
    writers: dict[int, list[range]] = {}
    first: dict[tuple[int, range], int] = {}
    for i, c in enumerate(program.commands):
        if isinstance(c, Compute):
            group = slices_of(c)
            if group not in writers.setdefault(c.result.buffer, []):
                writers[c.result.buffer].append(group)
            first.setdefault((c.result.buffer, group), i)
    for b, groups in writers.items():
        for g, h in itertools.combinations(groups, 2):
            if _disjoint(g, h):
                raise TimingError(
                    f"LRAM buffer {b} is written by slices {_name(g)} and {_name(h)} while live "
                    f"(commands {first[(b, g)]}, {first[(b, h)]}); each slice needs its own buffers"
                )
    bufs = {b.id: b for b in program.buffers}
    written = sorted((timeline.buffer_spans[b] + (b,) for b in writers if b in timeline.buffer_spans))
    active: list[tuple[int, int, int]] = []
    for start, end, b in written:
        active = [a for a in active if a[1] > start]
        for _, a_end, a in active:
            x, y = bufs[a], bufs[b]
            pair = next(((g, h) for g in writers[a] for h in writers[b] if _disjoint(g, h)), None)
            if pair and x.offset < y.offset + y.size and y.offset < x.offset + x.size:
                sa, sb = map(_name, pair)
                raise TimingError(
                    f"LRAM buffers {a} (slice {sa}) and {b} (slice {sb}) share bytes "
                    f"[{max(x.offset, y.offset)}, {min(x.offset + x.size, y.offset + y.size)}) and are both "
                    f"live during cycles [{start}, {min(a_end, end)})"
                )
        active.append((start, end, b))


def _disjoint(g: range, h: range) -> bool:
    return g.stop <= h.start or h.stop <= g.start


def _name(g: range) -> str:
    """A slice set as in messages: "1", or "0-1" for a split compute."""
    return str(g.start) if len(g) == 1 else f"{g.start}-{g.stop - 1}"


def roofline_cycles(program: Program, hw: TorqHw, compulsory_bytes: int) -> int:
    """DESIGN §7: max(MACs / (MAC rate x slices), compulsory bytes / effective DMA rate), rounded up."""
    compute = Fraction(0)
    for c in program.commands:
        if isinstance(c, Compute) and c.macs > 0 and OPS[c.op].cycles is not CycleRule.WINDOW_ON_LANES:
            rate = min(hw.macs_per_cycle(o.dtype) for o in c.operands[:2])
            compute += Fraction(c.macs, rate)
    compute /= hw.slices
    dma = Fraction(compulsory_bytes) / Fraction(hw.dma_effective_bytes_per_cycle).limit_denominator(1 << 20)
    return math.ceil(max(compute, dma))


def lram_occupancy(program: Program, timeline: Timeline) -> list[tuple[int, int]]:
    """[(cycle, live bytes from that cycle on)], buffers live over their time span; starts at (0, 0)."""
    sizes = {b.id: b.size for b in program.buffers}
    delta: dict[int, int] = {}
    for b, (s, e) in timeline.buffer_spans.items():
        if e > s:
            delta[s] = delta.get(s, 0) + sizes[b]
            delta[e] = delta.get(e, 0) - sizes[b]
    steps = [(0, 0)]
    live = 0
    for t in sorted(delta):
        live += delta[t]
        if steps[-1][0] == t:
            steps[-1] = (t, live)
        else:
            steps.append((t, live))
    return steps
