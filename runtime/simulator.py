"""Functional simulator of one Torq dispatch (an NSS `Program`) on a real LRAM.

Contract:
- `Simulator(hw).run(program, inputs)` returns the program's outputs (in each
  output's `host_dtype`, ordered by `arg_index`) and its `DispatchStats`.
- Before any command runs, the program is checked against the device
  (`executable.validate_program` with this simulator's `hw`: buffers inside
  [0, hw.lram_bytes), no two live buffers sharing bytes, buffers used only in
  their live range, operands and DMA boxes within their buffer) and the inputs
  against the program's input tensors (count, shape, host dtype). Any failure
  raises `SimulatorError` (a RuntimeError) with one line naming the command,
  buffer or input; no output is produced.
- Execution is functional on bytes: LRAM is a uint8 array of exactly
  hw.lram_bytes; DDR holds one byte array per tensor (inputs converted from
  `host_dtype` to `dtype` with round-to-nearest-even, constants from `data`,
  outputs and scratch zeroed; an in-place output (`TensorDesc.aliases`) a
  copy of its input, which on the device is the same buffer: no DMA, not
  counted). DmaIn copies a box of a row-major DDR tensor
  into its buffer (contiguous row-major); a gather DmaIn the rows its LRAM
  indices name (an index outside its bound is a SimulatorError), Compute reads its operands from LRAM
  at their buffer offsets, runs `kernels` and writes its result into LRAM,
  DmaOut copies a buffer into a DDR box; a scatter DmaOut into the positions
  along its index dim that its LRAM indices name (in order: of two equal
  indices the later position stays; an index outside its bound is a
  SimulatorError). An in-place output is returned as
  its host input with the elements the DmaOuts wrote replaced: the rest is
  the input exactly, also when its DDR dtype is narrower (bf16 for f32; of a
  scatter, the positions its indices named in this run count as written).
- Padded buffers (`LramBuffer.padded_shape`, compiler/vector_layout.py):
  the buffer's bytes are an array of its padded shape; DMAs and computes
  access the data part of it (a strided view), so a DMA-in writes the
  unpadded box into the padded layout and a DMA-out reads the unpadded part
  back; a DMA-in or compute zeroes the padding lanes first. Kernels compute
  on the unpadded view (padding lanes, zero, contribute nothing); the padded
  storage is in the LRAM occupancy and peaks (buffer sizes), the padded work
  in the cycles (`timing`).
- Timing: `timing.schedule` (DMA-in, DMA-out and each slice are separate
  in-order engines over one XRAM link; commands wait for their LRAM byte-range
  and DDR box dependencies; every number from `TorqHw`). `DispatchStats.cycles`
  is the makespan; `engine_busy_cycles` the busy cycles per engine. Before
  any command runs, a compute on a slice the device lacks, or a buffer that
  two slices write while live (`timing.check_slice_sharing`), is a
  SimulatorError. A split compute (`Compute.split`) runs its kernel once on
  the whole result, as an unsplit one: the split changes its timing only. With `record_timeline=True` the stats also carry each
  command's start/end cycle and the LRAM occupancy over time (`timeline`).
- Everything that does not depend on the inputs (the checks, the schedule,
  the stats) is `prepare(program)`'s `Plan`; `run(..., plan=plan)` reuses it
  (the `torq` module prepares each executable once). Results and stats are
  the same with or without a plan.
- Speed without changing results: DDR tensors are typed arrays (constants
  are read-only views of `data`, inputs already in their DDR dtype are not
  copied); a convolution's window matrix is kept while its input's LRAM
  bytes are unchanged (`kernels.OperandCache`, dropped on every write to
  them); a simulator reuses one LRAM array (zeroed before each run) and a
  plan keeps its views of it; of an input converted to its DDR dtype only
  the bounding box of its DMA-in boxes is converted (`Plan.windows`); numpy's BLAS runs on one thread during a run
  (`TORQ_SIMULATOR_BLAS_THREADS`, 0 = leave it as configured), then its
  setting is restored.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import threading
from dataclasses import dataclass

import numpy as np

from torq.contract.hw import TorqHw
from torq.contract.measures import box_union, measure_lram_peak, program_traffic
from torq.contract.ops import OPS, CycleRule
from torq.contract.program import Compute, DmaIn, DmaOut, LramBuffer, Program, TensorDesc, nbytes
from torq.contract.program_validator import ExecutableError, validate_program
from torq.contract.timing import (
    Timeline,
    TimingError,
    check_slice_sharing,
    dma_bytes,
    lram_occupancy,
    roofline_cycles,
    schedule,
    slices_of,
)

from .epilogue import eval_epilogue
from .kernels import NP_DTYPES, KernelError, OperandCache, run_principal, store

_FLOATS = {"bf16", "f16", "f32"}


def peak_macs_per_cycle(program: Program, hw: TorqHw) -> int:
    """MACs per cycle of all slices at the dtype of the program's MAC computes (as the roofline
    rates them: a compute runs at its slower operand's rate); 0 when it has none."""
    rates = [min(hw.macs_per_cycle(o.dtype) for o in c.operands[:2]) for c in program.commands
             if isinstance(c, Compute) and c.macs > 0 and OPS[c.op].cycles is not CycleRule.WINDOW_ON_LANES]
    return min(rates) * hw.slices if rates else 0


class SimulatorError(RuntimeError):
    """A program or call the simulator refuses; the message says why in one line."""


@dataclass
class DispatchStats:
    """Counters of one simulated dispatch (definitions: DESIGN.md section 7)."""

    name: str
    tiles: int = 0
    dma_bytes_in: int = 0
    dma_bytes_out: int = 0
    compulsory_bytes: int = 0  # measures.compulsory_bytes: outputs once, the input bytes read once
    lram_peak_bytes: int = 0  # highest sum of sizes of buffers live at one command (program order)
    # Highest sum of sizes of buffers live at one simulated cycle (a buffer is live from the
    # start of its first command to the end of its last): >= lram_peak_bytes when engines overlap.
    lram_occupancy_peak_bytes: int = 0
    macs: int = 0
    commands: int = 0
    cycles: int = 0  # makespan of the timing model
    latency_us: float = 0.0  # cycles at the device clock
    roofline_cycles: int = 0  # DESIGN section 7
    slices_used: int = 0  # distinct slices that run a compute
    engine_busy_cycles: dict = dataclasses.field(default_factory=dict)  # engine -> busy cycles
    # The device's MACs per cycle (all slices) at the dtype of the dispatch's MAC computes (the
    # slowest if several; 0 without any): MAC utilisation = model MACs / (cycles x this).
    peak_macs_per_cycle: int = 0
    source: str = ""  # Program.source: where the dispatch came from in the model
    # Only with record_timeline: {"events": [...], "lram_occupancy": [[cycle, bytes], ...]}.
    timeline: dict | None = None

    @property
    def ddr_traffic_ratio(self) -> float:
        total = self.dma_bytes_in + self.dma_bytes_out
        return total / self.compulsory_bytes if self.compulsory_bytes else 0.0

    @property
    def efficiency(self) -> float:
        """Roofline cycles / simulated cycles (DESIGN section 7)."""
        return self.roofline_cycles / self.cycles if self.cycles else 0.0

    def to_dict(self) -> dict:
        """The fields (without `timeline` unless recorded) plus ddr_traffic_ratio and efficiency."""
        if self.timeline is None:  # flat fields: dataclasses.asdict's deep copy is slow per call
            d = {f.name: getattr(self, f.name) for f in _STATS_FIELDS if f.name != "timeline"}
            d["engine_busy_cycles"] = dict(self.engine_busy_cycles)
        else:
            d = dataclasses.asdict(self)
        d["ddr_traffic_ratio"] = self.ddr_traffic_ratio
        d["efficiency"] = self.efficiency
        return d


_STATS_FIELDS = dataclasses.fields(DispatchStats)


@dataclass(eq=False)
class Plan:
    """What running `program` on a device needs that does not depend on the inputs.

    `Simulator.prepare` builds it: the program checked against the device, its
    schedule, the complete `DispatchStats` (every counter is a function of the
    program and the device) and the commands resolved to LRAM byte ranges and
    numpy dtypes. A caller that runs one program many times (the `torq` VM
    module, per executable) prepares it once; the program must not change
    afterwards.
    """

    program: Program
    hw: TorqHw
    timeline: Timeline
    stats: DispatchStats  # without `timeline`
    constants: dict[int, np.ndarray]  # tensor index -> read-only view of its data
    steps: list[tuple]  # one per command, see `Simulator._steps`
    # In-place outputs whose DDR dtype is not their host dtype: tensor index -> mask of the
    # elements no DmaOut writes (returned from the host input unconverted); a scatter's
    # positions are known only when it runs: the run takes them out of the mask.
    untouched: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    # Inputs converted to another DDR dtype of which the DMA-ins read only a part: tensor
    # index -> the bounding box of their boxes, the only elements converted (see `_load_ddr`).
    windows: dict[int, tuple[slice, ...]] = dataclasses.field(default_factory=dict)
    # (LRAM array, each step's views of it): kept for the simulator's reused LRAM.
    views: tuple | None = None
    extent: tuple[int, int] = (0, 0)  # [lo, hi) of LRAM that holds the program's buffers
    # The program's inputs and outputs (by arg_index) and its output and scratch tensors.
    inputs: list[TensorDesc] = dataclasses.field(default_factory=list)
    outputs: list[TensorDesc] = dataclasses.field(default_factory=list)
    fresh: list[TensorDesc] = dataclasses.field(default_factory=list)


class Simulator:
    """Runs NSS programs on one simulated Torq device described by `hw`."""

    def __init__(self, hw: TorqHw) -> None:
        self.hw = hw
        # One LRAM reused by the runs (zeroed before each), so that a plan keeps its views
        # of it; a run while another one holds it (another thread) gets a new one.
        self._lram = np.zeros(hw.lram_bytes, dtype=np.uint8)
        self._lram_lock = threading.Lock()

    # ---- public

    def prepare(self, program: Program) -> Plan:
        """Checks `program` against the device and schedules it (SimulatorError when refused)."""
        try:
            validate_program(program, self.hw)
        except ExecutableError as e:
            raise SimulatorError(str(e)) from None
        self._check_dtypes(program)
        try:
            timeline = schedule(program, self.hw)
            check_slice_sharing(program, timeline)
        except TimingError as e:
            raise SimulatorError(f"{_who(program)}{e}") from None
        traffic = program_traffic(program)
        stats = DispatchStats(
            name=program.name,
            tiles=program.tiles,
            commands=len(program.commands),
            dma_bytes_in=traffic.dma_bytes_in,
            dma_bytes_out=traffic.dma_bytes_out,
            compulsory_bytes=traffic.compulsory_bytes,
            lram_peak_bytes=measure_lram_peak(program.buffers, len(program.commands)),
            macs=sum(c.macs for c in program.commands if isinstance(c, Compute)),
            peak_macs_per_cycle=peak_macs_per_cycle(program, self.hw),
            source=program.source,
        )
        self._add_timing(program, timeline, stats)
        constants = {}
        for t in program.tensors:
            if t.kind == "constant":
                dtype = NP_DTYPES[t.dtype]
                a = np.frombuffer(t.data, dtype=dtype).reshape(t.shape) if t.data else np.zeros(t.shape, dtype)
                a.flags.writeable = False  # DDR constants are only read (DmaIn)
                constants[t.index] = a
        untouched = {t.index: ~box_union(program, t.index, DmaOut, maybe=False) for t in program.outputs()
                     if t.aliases >= 0 and t.dtype != t.host_dtype}
        extent = (min((b.offset for b in program.buffers), default=0),
                  max((b.offset + b.size for b in program.buffers), default=0))
        return Plan(program, self.hw, timeline, stats, constants, self._steps(program, {t.index: t for t in program.tensors}),
                    untouched, _read_windows(program), extent=extent, inputs=program.inputs(),
                    outputs=program.outputs(), fresh=[t for t in program.tensors if t.kind in ("output", "scratch")])

    def run(self, program: Program, inputs: list[np.ndarray], record_timeline: bool = False,
            plan: Plan | None = None) -> tuple[list[np.ndarray], DispatchStats]:
        """Runs `program` on `inputs`; `plan` (from `prepare(program)`) skips the checks and the schedule."""
        if plan is None:
            plan = self.prepare(program)
        elif plan.program is not program or plan.hw != self.hw:
            raise SimulatorError(f"{_who(program)}the plan was prepared for another program or device")
        ddr = self._load_ddr(plan, inputs)
        by_arg = {t.arg_index: x for t, x in zip(plan.inputs, inputs)}
        with _blas_threads(), self._memory(plan) as lram:
            scattered = self._execute(plan, ddr, lram)
        stats = copy.copy(plan.stats)  # (dataclasses.replace is slower per call)
        stats.engine_busy_cycles = dict(plan.stats.engine_busy_cycles)
        if record_timeline:
            stats.timeline = self._timeline_record(program, plan.timeline)
        outputs = []
        for t in plan.outputs:
            value = ddr[t.index]  # allocated for this call: no copy needed
            value = value.astype(NP_DTYPES[t.host_dtype]) if t.host_dtype != t.dtype else value
            if t.index in plan.untouched:  # the input's host values where nothing was written
                mask = plan.untouched[t.index]
                if t.index in scattered:  # and where no scatter of this run wrote
                    mask = mask.copy()
                    for where in scattered[t.index]:
                        mask[where] = False
                value[mask] = np.asarray(by_arg[t.aliases])[mask]
            outputs.append(value)
        return outputs, stats

    # ---- checks and memory

    def _check_dtypes(self, p: Program) -> None:
        for t in p.tensors:
            if t.kind in ("input", "output") and t.dtype != t.host_dtype:
                if not {t.dtype, t.host_dtype} <= _FLOATS:
                    raise SimulatorError(
                        f"{_who(p)}{t.kind} {t.arg_index} converts host {t.host_dtype} "
                        f"to {t.dtype}, only float to float conversions exist"
                    )

    def _load_ddr(self, plan: Plan, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
        """Tensor index -> the tensor in DDR for this call (typed, row-major, shaped)."""
        p = plan.program
        declared = plan.inputs
        if len(inputs) != len(declared):
            raise SimulatorError(f"{_who(p)}expected {len(declared)} inputs, got {len(inputs)}")
        ddr: dict[int, np.ndarray] = dict(plan.constants)
        for t, x in zip(declared, inputs):
            x = np.asarray(x)
            host = NP_DTYPES[t.host_dtype]
            if tuple(x.shape) != tuple(t.shape) or x.dtype != host:
                raise SimulatorError(
                    f"{_who(p)}input {t.arg_index}: expected shape {tuple(t.shape)} {t.host_dtype}, "
                    f"got {tuple(x.shape)} {x.dtype}"
                )
            # Round to nearest even into the DDR dtype. Inputs are only read (DmaIn), so an
            # array already in that dtype and layout is used as it is, and of one the DMA-ins
            # read in part (a layer's slice of a KV cache) only that part is converted: the
            # rest is never read.
            window = plan.windows.get(t.index)
            if window is None:
                ddr[t.index] = np.asarray(x, dtype=NP_DTYPES[t.dtype], order="C")
            else:
                ddr[t.index] = np.empty(x.shape, dtype=NP_DTYPES[t.dtype])
                ddr[t.index][window] = x[window]
        by_arg = {t.arg_index: t for t in declared}
        for t in plan.fresh:
            if t.kind == "output" and t.aliases >= 0:  # the input's buffer, updated in place
                ddr[t.index] = np.array(ddr[by_arg[t.aliases].index], order="C", copy=True)
            elif t.kind in ("output", "scratch"):
                try:
                    ddr[t.index] = np.zeros(t.shape, dtype=NP_DTYPES[t.dtype])
                except (MemoryError, ValueError):
                    raise SimulatorError(
                        f"{_who(p)}cannot allocate {t.kind} tensor {t.index} of {t.nbytes} bytes"
                    ) from None
        return ddr

    @staticmethod
    def _box(offsets: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(slice(o, o + s) for o, s in zip(offsets, sizes))

    def _lram_range(self, buf: LramBuffer, shape: tuple[int, ...], dtype: str) -> tuple:
        """(offset, bytes, numpy dtype, shape, padded layout or None) of an LRAM access of
        `shape` x `dtype` at `buf`; a padded buffer's access covers its padded bytes."""
        layout = None
        if buf.padded_shape:
            layout = (tuple(buf.padded_shape), tuple(slice(0, d) for d in buf.shape))
            n = nbytes(tuple(buf.padded_shape), dtype)
        else:
            n = nbytes(shape, dtype)
        if n > buf.size or buf.offset < 0 or buf.offset + n > self.hw.lram_bytes:  # validated; defensive
            raise SimulatorError(f"LRAM access of {n} bytes outside buffer {buf.id} [{buf.offset}, +{buf.size})")
        return buf.offset, n, NP_DTYPES[dtype], shape, layout

    @staticmethod
    def _lram_view(lram: np.ndarray, where: tuple) -> np.ndarray:
        """The accessed array: contiguous, or for a padded buffer the data part of its padded
        array (a strided view; the access differs from the data shape only by unit dims)."""
        off, n, dtype, shape, layout = where
        if layout is None:
            return lram[off : off + n].view(dtype).reshape(shape)
        padded_shape, data = layout
        v = lram[off : off + n].view(dtype).reshape(padded_shape)[data]
        return v.reshape(shape)  # unit dims only (validated): stays a view

    @staticmethod
    def _zero_padding(lram: np.ndarray, where: tuple) -> None:
        """A write to a padded buffer leaves its padding lanes zero."""
        if where[4] is not None:
            lram[where[0] : where[0] + where[1]] = 0

    # ---- commands

    def _steps(self, p: Program, tensors: dict[int, TensorDesc]) -> list[tuple]:
        """Each command with its LRAM accesses resolved: ("in", tensor, box, lram range),
        ("out", tensor, box, lram range), ("gather", index, command, lram range, index range),
        ("scatter", index, command, lram range, index range, box) or ("compute", index,
        command, operand ranges, result range)."""
        buffers = {b.id: b for b in p.buffers}
        steps: list[tuple] = []
        for i, c in enumerate(p.commands):
            if isinstance(c, DmaIn) and c.gathers:
                where = self._lram_range(buffers[c.buffer], tuple(c.sizes), tensors[c.tensor].dtype)
                index = self._lram_range(buffers[c.index_buffer], (c.sizes[0],), c.index_dtype)
                steps.append(("gather", i, c, where, index))
            elif isinstance(c, DmaOut) and c.scatters:
                where = self._lram_range(buffers[c.buffer], tuple(c.sizes), tensors[c.tensor].dtype)
                index = self._lram_range(buffers[c.index_buffer], (c.sizes[c.index_dim],), c.index_dtype)
                steps.append(("scatter", i, c, where, index, self._box(c.offsets, c.sizes)))
            elif isinstance(c, (DmaIn, DmaOut)):
                where = self._lram_range(buffers[c.buffer], tuple(c.sizes), tensors[c.tensor].dtype)
                box = c.read_index() if isinstance(c, DmaIn) else self._box(c.offsets, c.sizes)
                steps.append(("in" if isinstance(c, DmaIn) else "out", c.tensor, box, where))
            else:
                ops = [self._lram_range(buffers[o.buffer], tuple(o.shape), o.dtype) for o in c.operands]
                res = self._lram_range(buffers[c.result.buffer], tuple(c.result.shape), c.result.dtype)
                steps.append(("compute", i, c, ops, res))
        return steps

    @contextlib.contextmanager
    def _memory(self, plan: Plan):
        """A zeroed LRAM for one run of `plan`: the reused one unless a run holds it. Of that
        one only the plan's extent is zeroed: no command accesses bytes outside its buffers."""
        if not self._lram_lock.acquire(blocking=False):
            yield np.zeros(self.hw.lram_bytes, dtype=np.uint8)
            return
        try:
            self._lram[plan.extent[0] : plan.extent[1]] = 0
            yield self._lram
        finally:
            self._lram_lock.release()

    def _views(self, plan: Plan, lram: np.ndarray) -> list:
        """Each step's LRAM arrays: the DMA's view, or (operand views, result view)."""
        if plan.views is not None and plan.views[0] is lram:
            return plan.views[1]
        view = self._lram_view
        views = [([view(lram, o) for o in s[3]], view(lram, s[4])) if s[0] == "compute" else
                 (view(lram, s[3]), view(lram, s[4])) if s[0] in ("gather", "scatter") else view(lram, s[3])
                 for s in plan.steps]
        if lram is self._lram:
            plan.views = (lram, views)
        return views

    def _execute(self, plan: Plan, ddr: dict[int, np.ndarray], lram: np.ndarray) -> dict[int, list[tuple]]:
        """Runs the commands in program order on `ddr` and `lram`; returns, of each tensor of
        `plan.untouched`, the elements the scatters wrote (numpy index tuples)."""
        cache = OperandCache()  # window matrices of inputs that several computes read
        scattered: dict[int, list[tuple]] = {}
        with np.errstate(all="ignore"):  # inf/nan propagate as in IEEE f32 (DMAs only copy bytes)
            self._run_steps(plan, ddr, lram, cache, scattered)
        return scattered

    def _run_steps(self, plan: Plan, ddr: dict[int, np.ndarray], lram: np.ndarray, cache: OperandCache,
                   scattered: dict[int, list[tuple]]) -> None:
        base = lram.__array_interface__["data"][0]
        for step, view in zip(plan.steps, self._views(plan, lram)):
            kind = step[0]
            if kind == "in":
                _, t, box, where = step
                self._zero_padding(lram, where)
                np.copyto(view, ddr[t][box].reshape(where[3]))
                cache.written(base + where[0], base + where[0] + where[1])
            elif kind == "out":
                _, t, box, where = step
                ddr[t][box] = view.reshape(ddr[t][box].shape)
            elif kind == "gather":
                _, i, c, where, _ = step
                self._zero_padding(lram, where)
                np.copyto(view[0], _gathered_rows(plan.program, i, c, ddr[c.tensor], view[1]))
                cache.written(base + where[0], base + where[0] + where[1])
            elif kind == "scatter":
                _, i, c, _, _, box = step
                at = _scatter_into(plan.program, i, c, ddr[c.tensor], box, view[0], view[1])
                if c.tensor in plan.untouched:
                    scattered.setdefault(c.tensor, []).append(at)
            else:
                _, i, c, ops, res = step
                if all(o[0] != res[0] for o in ops):  # never clear an operand read in place
                    self._zero_padding(lram, res)
                try:
                    self._compute(c, view[0], view[1], cache)
                except KernelError as e:
                    raise SimulatorError(f"{_who(plan.program)}command {i} ({c.op}): {e}") from None
                cache.written(base + res[0], base + res[0] + res[1])

    def _add_timing(self, program: Program, timeline: Timeline, stats: DispatchStats) -> None:
        hw = self.hw
        stats.cycles = timeline.makespan
        stats.latency_us = timeline.makespan / hw.clock_mhz
        stats.roofline_cycles = roofline_cycles(program, hw, stats.compulsory_bytes)
        stats.slices_used = len({k for c in program.commands if isinstance(c, Compute) for k in slices_of(c)})
        stats.engine_busy_cycles = dict(timeline.engine_busy)
        occupancy = lram_occupancy(program, timeline)
        stats.lram_occupancy_peak_bytes = max(b for _, b in occupancy)

    @staticmethod
    def _timeline_record(program: Program, timeline: Timeline) -> dict:
        """`DispatchStats.timeline`: each command's engine, start and end, and the LRAM occupancy."""
        events = []
        for t in timeline.commands:
            c = program.commands[t.index]
            e = {"cmd": t.index, "engine": t.engine, "start": t.start, "end": t.end, "waited_for": t.waited_for}
            if isinstance(c, (DmaIn, DmaOut)):
                e.update(kind="dma_in" if isinstance(c, DmaIn) else "dma_out", tensor=c.tensor, buffer=c.buffer,
                         bytes=dma_bytes(c, program), transfer_start=t.transfer_start,
                         box=[[o, o + s] for o, s in zip(c.offsets, c.sizes)])
                if isinstance(c, DmaIn) and c.strided:
                    e["strides"] = list(c.strides)
            else:
                e.update(kind=c.op, tile=c.tile, slice=c.slice, macs=c.macs, buffer=c.result.buffer)
                if c.split > 1:
                    e["split"] = c.split
            events.append(e)
        return {"events": events, "lram_occupancy": [list(x) for x in lram_occupancy(program, timeline)]}

    @staticmethod
    def _compute(c: Compute, ops: list[np.ndarray], result: np.ndarray, cache: OperandCache) -> None:
        """Runs one Compute on its LRAM operands and writes `result` (a view of its LRAM bytes)."""
        shape = tuple(c.result.shape)
        principal, macs = run_principal(c.op, ops, c.attrs, cache)
        if principal is not None:
            if principal.shape != shape:
                raise KernelError(f"computes shape {principal.shape}, result operand has shape {shape}")
        if macs != c.macs:
            raise KernelError(f"macs field is {c.macs}, shapes give {macs}")
        np.copyto(result, store(eval_epilogue(c.epilogue, principal, ops, shape), c.result.dtype))


def _who(p: Program) -> str:
    """The prefix naming `p` in an error: compiled executables leave their name empty (the
    runtime names the call)."""
    return f"program '{p.name}': " if p.name else ""


def _checked_indices(p: Program, i: int, kind: str, c: DmaIn | DmaOut, indices: np.ndarray) -> np.ndarray:
    """The indices of gather / scatter `c` (command `i`) as int64; the run fails on one
    outside [0, c.index_bound)."""
    idx = indices.astype(np.int64)
    bad = (idx < 0) | (idx >= c.index_bound)
    if bad.any():
        j = int(np.argmax(bad))
        raise SimulatorError(f"{_who(p)}command {i} ({kind}): index {int(idx[j])} at position {j} is "
                             f"outside [0, {c.index_bound}) of tensor {c.tensor}")
    return idx


def _gathered_rows(p: Program, i: int, c: DmaIn, tensor: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The box gather DmaIn `c` (command `i`) reads: rows offsets[0] + indices of `tensor`."""
    idx = _checked_indices(p, i, "DmaIn gather", c, indices)
    rest = tuple(slice(o, o + s) for o, s in zip(c.offsets[1:], c.sizes[1:]))
    return tensor[(idx + c.offsets[0], *rest)].reshape(c.sizes)


def _scatter_into(p: Program, i: int, c: DmaOut, tensor: np.ndarray, box: tuple[slice, ...], data: np.ndarray,
                  indices: np.ndarray) -> tuple:
    """Runs scatter DmaOut `c` (command `i`): box position j along `c.index_dim` of `data` into
    `tensor` at offsets[index_dim] + indices[j], in order (of equal indices the later position
    stays). Returns the elements written (a numpy index tuple)."""
    idx = _checked_indices(p, i, "DmaOut scatter", c, indices)
    d = c.index_dim
    if len(np.unique(idx)) < len(idx):  # the last position of each index
        _, last = np.unique(idx[::-1], return_index=True)
        keep = np.sort(len(idx) - 1 - last)
        idx, data = idx[keep], np.take(data, keep, axis=d)
    at = (*box[:d], idx + c.offsets[d], *box[d + 1:])
    tensor[at] = data  # one advanced index: its axis stays at index_dim
    return at


def _read_windows(p: Program) -> dict[int, tuple[slice, ...]]:
    """`Plan.windows`: of each input converted to its DDR dtype, that no in-place output
    copies and no DmaOut writes, the bounding box of its DMA-in boxes when smaller than it."""
    aliased = {t.aliases for t in p.outputs() if t.aliases >= 0}
    written = {c.tensor for c in p.commands if isinstance(c, DmaOut)}
    windows = {}
    for t in p.inputs():
        if t.dtype == t.host_dtype or t.arg_index in aliased or t.index in written:
            continue
        boxes = [c for c in p.commands if isinstance(c, DmaIn) and c.tensor == t.index]
        if not boxes:
            continue
        boxes = [c.read_box() for c in boxes]
        lo = [min(off[d] for off, _ in boxes) for d in range(len(t.shape))]
        hi = [max(off[d] + sizes[d] for off, sizes in boxes) for d in range(len(t.shape))]
        if [0] * len(lo) != lo or list(t.shape) != hi:
            windows[t.index] = tuple(slice(a, b) for a, b in zip(lo, hi))
    return windows


# --------------------------------------------------------------------------
# BLAS threads


def _blas_set_threads_fn():
    """numpy's OpenBLAS `openblas_set_num_threads_local` (ctypes), or None if unavailable."""
    try:
        import ctypes

        with open("/proc/self/maps") as f:  # the BLAS numpy loaded (Linux wheels bundle OpenBLAS)
            paths = {line.split()[-1] for line in f if "openblas" in line.rsplit("/", 1)[-1]}
        for path in sorted(paths, key=lambda p: "numpy" not in p):
            fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
                return fn
    except (OSError, ValueError, IndexError):
        pass
    return None


_BLAS_SET_THREADS: list = []  # [fn or None], looked up on first use


@contextlib.contextmanager
def _blas_threads():
    """numpy's BLAS on one thread while a program runs (`TORQ_SIMULATOR_BLAS_THREADS`, 0 = as is).

    The simulator's matrix products are many and small, and it runs inside the IREE
    host's call: extra BLAS threads oversubscribe the cores (measured 2.4x to 8x
    slower per model on a loaded 2-core machine). The result is the same either
    way (threads split the output, not the reductions); the setting is restored.
    """
    try:
        threads = int(os.environ.get("TORQ_SIMULATOR_BLAS_THREADS", "1"))
    except ValueError:
        threads = 1
    if not _BLAS_SET_THREADS:
        _BLAS_SET_THREADS.append(_blas_set_threads_fn())
    fn = _BLAS_SET_THREADS[0]
    if fn is None or threads <= 0:
        yield
        return
    previous = fn(threads)
    try:
        yield
    finally:
        fn(previous)
