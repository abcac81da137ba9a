"""A limit on the bytes a program's DMAs move, checked while torq-build-nss-program builds
it: super tiling compares candidate tilings by DDR traffic and needs a candidate's
program only as far as it can still beat the best so far (tiling/search.py
`_least_traffic_first`)."""

from __future__ import annotations

from torq.contract.measures import dma_bytes
from torq.contract.program import DmaIn, DmaOut, TensorDesc


class DmaLimitExceeded(Exception):
    """`build_program` stopped: the program's DMAs move more than its `dma_limit` bytes."""


class DmaTally(list):
    """A program's command list that counts the bytes its DMAs move as they are appended (as
    contract.measures.program_traffic counts them; the builder's later passes over the
    commands move boxes, never resize or drop them) and raises DmaLimitExceeded past `limit`."""

    def __init__(self, tensors: list[TensorDesc], limit: int):
        super().__init__()
        self.tensors, self.limit, self.moved = tensors, limit, 0

    def append(self, command) -> None:
        super().append(command)
        if isinstance(command, (DmaIn, DmaOut)):
            self.moved += dma_bytes(command, self.tensors[command.tensor].dtype)
            if self.moved > self.limit:
                raise DmaLimitExceeded(f"DMAs move more than the limit ({self.moved} bytes so far)")
