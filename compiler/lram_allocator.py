"""The LRAM allocator shared by super tiling (fit check) and address assignment.

Buffers have a size and a live range [start, end] in command order; two
buffers whose ranges intersect never overlap in memory. Placement is first
fit in order of start, each buffer aligned to `TorqHw.lram_alignment`.
Sizes are what the caller requests: the tile schedule asks for each value's
padded LRAM layout (`vector_layout.padded_value_nbytes`), so placements, the
footprint (super tiling's fit) and the peak count padding bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BufferRequest:
    key: object
    size: int
    start: int
    end: int


@dataclass
class Allocation:
    offsets: dict  # key -> offset
    end: int  # highest byte used (the footprint that must fit)
    peak: int  # highest sum of live buffer bytes


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def allocate(requests: list[BufferRequest], alignment: int) -> Allocation:
    placed: list[tuple[int, int, BufferRequest]] = []  # (offset, size, req)
    offsets = {}
    end = 0
    for req in sorted(requests, key=lambda r: (r.start, -r.size)):
        live = sorted((o, s) for o, s, r in placed if not (r.end < req.start or req.end < r.start))
        offset = 0
        for o, s in live:
            if offset + req.size <= o:
                break
            offset = max(offset, align(o + s, alignment))
        placed.append((offset, req.size, req))
        offsets[req.key] = offset
        end = max(end, offset + req.size)
    points = sorted({r.start for r in requests})
    peak = max((sum(r.size for r in requests if r.start <= t <= r.end) for t in points), default=0)
    return Allocation(offsets, end, peak)
