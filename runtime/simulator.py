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
  outputs and scratch zeroed). DmaIn copies a box of a row-major DDR tensor
  into its buffer (contiguous row-major), Compute reads its operands from LRAM
  at their buffer offsets, runs `kernels` and writes its result into LRAM,
  DmaOut copies a buffer into a DDR box.
- Timing: `timing.schedule` (DMA-in, DMA-out and each slice are separate
  in-order engines over one XRAM link; commands wait for their LRAM byte-range
  and DDR box dependencies; every number from `TorqHw`). `DispatchStats.cycles`
  is the makespan; `engine_busy_cycles` the busy cycles per engine. Before
  any command runs, a compute on a slice the device lacks, or a buffer that
  two slices write while live (`timing.check_slice_sharing`), is a
  SimulatorError. With `record_timeline=True` the stats also carry each
  command's start/end cycle and the LRAM occupancy over time (`timeline`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from torq.hw import TorqHw

from .executable import ExecutableError, validate_program
from .kernels import COMPUTE_OPS, NP_DTYPES, KernelError, eval_epilogue, run_principal, store
from .program import DTYPE_BYTES, Compute, DmaIn, DmaOut, LramBuffer, Program, TensorDesc, compulsory_bytes
from .timing import (TimingError, Timeline, check_slice_sharing, dma_bytes, lram_occupancy, roofline_cycles,
                     schedule)

_FLOATS = {"bf16", "f16", "f32"}


class SimulatorError(RuntimeError):
    """A program or call the simulator refuses; the message says why in one line."""


@dataclass
class DispatchStats:
    """Counters of one simulated dispatch (definitions: DESIGN.md section 7)."""

    name: str
    tiles: int = 0
    dma_bytes_in: int = 0
    dma_bytes_out: int = 0
    compulsory_bytes: int = 0  # program.compulsory_bytes: outputs once, the input bytes read once
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
        d = dataclasses.asdict(self)
        if d["timeline"] is None:
            del d["timeline"]
        d["ddr_traffic_ratio"] = self.ddr_traffic_ratio
        d["efficiency"] = self.efficiency
        return d


def measure_lram_peak(buffers: list[LramBuffer], n_commands: int) -> int:
    """Highest sum of buffer sizes live at one command (live ranges are inclusive)."""
    delta = [0] * (n_commands + 1)
    for b in buffers:
        delta[b.live_start] += b.size
        delta[b.live_end + 1] -= b.size
    peak = live = 0
    for d in delta[:-1]:
        live += d
        peak = max(peak, live)
    return peak


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * DTYPE_BYTES[dtype]


class Simulator:
    """Runs NSS programs on one simulated Torq device described by `hw`."""

    def __init__(self, hw: TorqHw) -> None:
        self.hw = hw

    # ---- public

    def run(self, program: Program, inputs: list[np.ndarray],
            record_timeline: bool = False) -> tuple[list[np.ndarray], DispatchStats]:
        try:
            validate_program(program, self.hw)
        except ExecutableError as e:
            raise SimulatorError(str(e)) from None
        self._check_dtypes(program)
        try:
            timeline = schedule(program, self.hw)
            check_slice_sharing(program, timeline)
        except TimingError as e:
            raise SimulatorError(f"program '{program.name}': {e}") from None
        ddr = self._load_ddr(program, inputs)
        lram = np.zeros(self.hw.lram_bytes, dtype=np.uint8)
        tensors = {t.index: t for t in program.tensors}
        buffers = {b.id: b for b in program.buffers}
        stats = DispatchStats(
            name=program.name,
            tiles=program.tiles,
            commands=len(program.commands),
            compulsory_bytes=compulsory_bytes(program),
            lram_peak_bytes=measure_lram_peak(program.buffers, len(program.commands)),
        )
        for i, c in enumerate(program.commands):
            if isinstance(c, DmaIn):
                t, buf = tensors[c.tensor], buffers[c.buffer]
                box = self._tensor(ddr, t)[self._box(c.offsets, c.sizes)]
                data = np.ascontiguousarray(box).reshape(-1).view(np.uint8)
                lram[buf.offset : buf.offset + data.size] = data
                stats.dma_bytes_in += data.size
            elif isinstance(c, DmaOut):
                t, buf = tensors[c.tensor], buffers[c.buffer]
                src = self._lram(lram, buf, tuple(c.sizes), t.dtype)
                self._tensor(ddr, t)[self._box(c.offsets, c.sizes)] = src
                stats.dma_bytes_out += src.nbytes
            else:
                try:
                    with np.errstate(all="ignore"):  # inf/nan propagate as in IEEE f32
                        self._compute(i, c, lram, buffers)
                except KernelError as e:
                    raise SimulatorError(f"program '{program.name}': command {i} ({c.op}): {e}") from None
                stats.macs += c.macs
        self._add_timing(program, timeline, stats, record_timeline)
        outputs = []
        for t in program.outputs():
            value = self._tensor(ddr, t)
            outputs.append(value.astype(NP_DTYPES[t.host_dtype]) if t.host_dtype != t.dtype else value.copy())
        return outputs, stats

    # ---- checks and memory

    def _check_dtypes(self, p: Program) -> None:
        for t in p.tensors:
            if t.kind in ("input", "output") and t.dtype != t.host_dtype:
                if not {t.dtype, t.host_dtype} <= _FLOATS:
                    raise SimulatorError(
                        f"program '{p.name}': {t.kind} {t.arg_index} converts host {t.host_dtype} "
                        f"to {t.dtype}, only float to float conversions exist"
                    )
        for i, c in enumerate(p.commands):
            if isinstance(c, Compute) and c.op not in COMPUTE_OPS:
                raise SimulatorError(f"program '{p.name}': command {i}: unknown compute op {c.op!r}")

    def _load_ddr(self, p: Program, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
        declared = p.inputs()
        if len(inputs) != len(declared):
            raise SimulatorError(f"program '{p.name}': expected {len(declared)} inputs, got {len(inputs)}")
        ddr: dict[int, np.ndarray] = {}
        for t, x in zip(declared, inputs):
            x = np.asarray(x)
            host = NP_DTYPES[t.host_dtype]
            if tuple(x.shape) != tuple(t.shape) or x.dtype != host:
                raise SimulatorError(
                    f"program '{p.name}': input {t.arg_index}: expected shape {tuple(t.shape)} {t.host_dtype}, "
                    f"got {tuple(x.shape)} {x.dtype}"
                )
            ddr[t.index] = np.ascontiguousarray(x.astype(NP_DTYPES[t.dtype])).reshape(-1).view(np.uint8).copy()
        for t in p.tensors:
            if t.kind == "constant":
                ddr[t.index] = np.frombuffer(bytes(t.data), dtype=np.uint8).copy()
            elif t.kind in ("output", "scratch"):
                try:
                    ddr[t.index] = np.zeros(t.nbytes, dtype=np.uint8)
                except (MemoryError, ValueError):
                    raise SimulatorError(
                        f"program '{p.name}': cannot allocate {t.kind} tensor {t.index} of {t.nbytes} bytes"
                    ) from None
        return ddr

    @staticmethod
    def _tensor(ddr: dict[int, np.ndarray], t: TensorDesc) -> np.ndarray:
        return ddr[t.index].view(NP_DTYPES[t.dtype]).reshape(t.shape)

    @staticmethod
    def _box(offsets: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(slice(o, o + s) for o, s in zip(offsets, sizes))

    def _lram(self, lram: np.ndarray, buf: LramBuffer, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        n = _nbytes(shape, dtype)
        if n > buf.size or buf.offset < 0 or buf.offset + n > lram.size:  # validated; defensive
            raise SimulatorError(f"LRAM access of {n} bytes outside buffer {buf.id} [{buf.offset}, +{buf.size})")
        return lram[buf.offset : buf.offset + n].view(NP_DTYPES[dtype]).reshape(shape)

    # ---- commands

    def _add_timing(self, program: Program, timeline: Timeline, stats: DispatchStats, record: bool) -> None:
        hw = self.hw
        stats.cycles = timeline.makespan
        stats.latency_us = timeline.makespan / hw.clock_mhz
        stats.roofline_cycles = roofline_cycles(program, hw, stats.compulsory_bytes)
        stats.slices_used = len({c.slice for c in program.commands if isinstance(c, Compute)})
        stats.engine_busy_cycles = dict(timeline.engine_busy)
        occupancy = lram_occupancy(program, timeline)
        stats.lram_occupancy_peak_bytes = max(b for _, b in occupancy)
        if not record:
            return
        events = []
        for t in timeline.commands:
            c = program.commands[t.index]
            e = {"cmd": t.index, "engine": t.engine, "start": t.start, "end": t.end, "waited_for": t.waited_for}
            if isinstance(c, (DmaIn, DmaOut)):
                e.update(kind="dma_in" if isinstance(c, DmaIn) else "dma_out", tensor=c.tensor, buffer=c.buffer,
                         bytes=dma_bytes(c, program), transfer_start=t.transfer_start,
                         box=[[o, o + s] for o, s in zip(c.offsets, c.sizes)])
            else:
                e.update(kind=c.op, tile=c.tile, slice=c.slice, macs=c.macs, buffer=c.result.buffer)
            events.append(e)
        stats.timeline = {"events": events, "lram_occupancy": [list(x) for x in occupancy]}

    def _compute(self, i: int, c: Compute, lram: np.ndarray, buffers: dict[int, LramBuffer]) -> None:
        """Runs one Compute on LRAM."""
        ops = [self._lram(lram, buffers[o.buffer], tuple(o.shape), o.dtype) for o in c.operands]
        shape = tuple(c.result.shape)
        principal, macs = run_principal(c.op, ops, c.attrs)
        if principal is not None:
            if principal.shape != shape:
                raise KernelError(f"computes shape {principal.shape}, result operand has shape {shape}")
        if macs != c.macs:
            raise KernelError(f"macs field is {c.macs}, shapes give {macs}")
        out = store(eval_epilogue(c.epilogue, principal, ops, shape), c.result.dtype)
        res = buffers[c.result.buffer]
        lram[res.offset : res.offset + out.nbytes] = np.ascontiguousarray(out).reshape(-1).view(np.uint8)
