"""DDR traffic of an NSS program, as DESIGN §7 defines it.

The compiler uses it to compare tilings (super tiling's default strategy) and
to report predicted traffic (`--torq-dump-tiling`); the simulator counts the
same bytes when it runs the program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torq.runtime.program import DTYPE_BYTES, DmaIn, DmaOut, Program, compulsory_bytes


@dataclass(frozen=True)
class Traffic:
    dma_bytes_in: int
    dma_bytes_out: int
    compulsory_bytes: int  # runtime.program.compulsory_bytes: what the dispatch must move, once

    @property
    def dma_bytes(self) -> int:
        return self.dma_bytes_in + self.dma_bytes_out

    @property
    def ratio(self) -> float:
        return self.dma_bytes / self.compulsory_bytes if self.compulsory_bytes else 1.0


def program_traffic(p: Program) -> Traffic:
    dtype = {t.index: t.dtype for t in p.tensors}
    moved = {DmaIn: 0, DmaOut: 0}
    for c in p.commands:
        if isinstance(c, (DmaIn, DmaOut)):
            moved[type(c)] += math.prod(c.sizes) * DTYPE_BYTES[dtype[c.tensor]]
    return Traffic(moved[DmaIn], moved[DmaOut], compulsory_bytes(p))
