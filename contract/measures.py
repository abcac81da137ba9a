"""DDR traffic and LRAM peak of an NSS program, as DESIGN §7 defines them.

The compiler uses them to compare tilings (super tiling's default strategy),
to check the allocator's peak and to report predicted traffic
(`--torq-dump-tiling`); the simulator reports the same figures for the
program it runs, from these functions.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from .program import DTYPE_BYTES, DmaIn, DmaOut, LramBuffer, Program


@dataclass(frozen=True)
class Traffic:
    dma_bytes_in: int
    dma_bytes_out: int
    compulsory_bytes: int  # `compulsory_bytes`: what the dispatch must move, once

    @property
    def dma_bytes(self) -> int:
        return self.dma_bytes_in + self.dma_bytes_out

    @property
    def ratio(self) -> float:
        return self.dma_bytes / self.compulsory_bytes if self.compulsory_bytes else 1.0


def dma_bytes(c: DmaIn | DmaOut, dtype: str) -> int:
    """DDR bytes DMA command `c` moves, its box of a tensor of `dtype` (a gather's or scatter's
    rows too). A box strided along the tensor's last (contiguous) dim counts the span of each
    row: DDR bursts read the elements between the ones kept."""
    sizes = c.sizes
    if isinstance(c, DmaIn) and c.strided and c.strides[-1] != 1:
        sizes = (*sizes[:-1], c.read_box()[1][-1])
    return math.prod(sizes) * DTYPE_BYTES[dtype]


def program_traffic(p: Program) -> Traffic:
    dtype = {t.index: t.dtype for t in p.tensors}
    moved = {DmaIn: 0, DmaOut: 0}
    for c in p.commands:
        if isinstance(c, (DmaIn, DmaOut)):
            moved[type(c)] += dma_bytes(c, dtype[c.tensor])
    return Traffic(moved[DmaIn], moved[DmaOut], compulsory_bytes(p))


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


def box_union(p: Program, tensor: int, command_type: type, maybe: bool = True) -> np.ndarray:
    """Boolean mask over tensor `tensor`: the elements some `command_type` (DmaIn or
    DmaOut) command of `p` reads or writes (a gather: every row it may read; a scatter:
    every position it may write). `maybe=False`: only the elements known before the run
    (no gather's or scatter's)."""
    t = next(t for t in p.tensors if t.index == tensor)
    mask = np.zeros(t.shape, dtype=bool)
    for c in p.commands:
        if isinstance(c, command_type) and c.tensor == tensor:
            if not maybe and (c.gathers if isinstance(c, DmaIn) else c.scatters):
                continue
            if isinstance(c, DmaIn) and not c.gathers:
                mask[c.read_index()] = True  # a plain or strided box
                continue
            offsets, sizes = c.read_box() if isinstance(c, DmaIn) else c.write_box()
            mask[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))] = True
    return mask


def compulsory_bytes(p: Program) -> int:
    """DESIGN §7's compulsory DDR bytes, counting what the dispatch needs: each
    output tensor once (of an in-place output, the bytes its DMA-outs write), and
    of each input and constant the bytes its DMA-ins read, each byte once (the
    union of their boxes). A strided conv that never reads some rows of its input
    does not need them, so traffic ratio >= 1 and efficiency <= 100% always hold.
    Scratch tensors do not count. A gather's rows are known only when it runs: each
    counts as needed (what it moves), as if no two of its indices were equal. A
    scatter's positions are too: into an in-place output (which counts the bytes its
    DMA-outs write, the rest being the input left in place) each element of its box
    counts as written (what it moves), as if no two of its indices were equal and none
    fell in another DMA-out's box; an output not in place counts whole anyway, and a
    scatter into scratch not at all. A strided DMA-in needs only the elements it reads:
    its tensor is counted by `box_union`'s mask (strided reads are rare, and two can
    interleave, which no union of boxes expresses). So compulsory bytes stay <= the bytes
    moved."""
    boxes: dict[tuple[int, type], list] = {}
    strided = {c.tensor for c in p.commands if isinstance(c, DmaIn) and c.strided}
    dtype = {t.index: t.dtype for t in p.tensors}
    in_place = {t.index for t in p.tensors if t.kind == "output" and t.aliases >= 0}
    total = 0
    for c in p.commands:
        if isinstance(c, DmaIn) and c.gathers:
            total += math.prod(c.sizes) * DTYPE_BYTES[dtype[c.tensor]]
        elif isinstance(c, DmaOut) and c.scatters:
            if c.tensor in in_place:
                total += math.prod(c.sizes) * DTYPE_BYTES[dtype[c.tensor]]
        elif isinstance(c, (DmaIn, DmaOut)):
            boxes.setdefault((c.tensor, type(c)), []).append((c.offsets, c.sizes))
    for t in p.tensors:
        if t.kind == "output" and t.aliases < 0:
            total += t.nbytes
        elif t.kind == "output":
            total += union_volume(t.shape, boxes.get((t.index, DmaOut), [])) * DTYPE_BYTES[t.dtype]
        elif t.kind in ("input", "constant") and t.index in strided:
            total += int(box_union(p, t.index, DmaIn, maybe=False).sum()) * DTYPE_BYTES[t.dtype]
        elif t.kind in ("input", "constant") and (t.index, DmaIn) in boxes:
            total += union_volume(t.shape, boxes[(t.index, DmaIn)]) * DTYPE_BYTES[t.dtype]
    return total


def union_volume(shape: tuple[int, ...], boxes: list[tuple[tuple, tuple]]) -> int:
    """Elements of a tensor of `shape` inside the union of `boxes` (offsets, sizes): what
    `box_union`'s mask counts, without a mask of the whole tensor (super tiling prices
    every candidate with it). Each dim is cut at every box edge; the grid cells some box
    covers are marked and their volumes summed."""
    if not boxes:
        return 0
    clipped = [(tuple(max(0, o) for o, n in zip(off, shape)),
                tuple(min(o + s, n) for o, s, n in zip(off, sizes, shape))) for off, sizes in boxes]
    cuts = [sorted({lo[d] for lo, _ in clipped} | {hi[d] for _, hi in clipped}) for d in range(len(shape))]
    grid = np.zeros([len(c) - 1 for c in cuts], dtype=bool)
    for lo, hi in clipped:
        if all(a < b for a, b in zip(lo, hi)):
            grid[tuple(slice(bisect.bisect_left(c, a), bisect.bisect_left(c, b))
                       for c, a, b in zip(cuts, lo, hi))] = True
    volume = grid.astype(np.int64)
    for c in reversed(cuts):  # contract the last dim with its cells' widths
        volume = volume @ np.diff(np.asarray(c, dtype=np.int64))
    return int(volume)
