"""Distribution of tile iterations over the Torq slices (used by torq-build-nss-program).

The tile loops of one tile body (the innermost loop body holding `torq_hl`
ops, see `tile_schedule`) run `n` iterations, numbered k = 0..n-1 in program
order (nested loops: row-major over the nest); `S` slices
(`TorqHw.slices`) share them. Strategies, as in the seed RFC on distributing
tiled loops to processors (`shared/seeds/003_*`):

- `cyclic` (default): iteration k on slice k mod S. Consecutive tiles go to
  different slices, so the in-order DMA queue feeds them alternately and one
  slice computes while the next tile's data arrives.
- `block`: S contiguous blocks of ceil(n / S) iterations: slice k // ceil(n/S).
- `block-cyclic:B`: blocks of B iterations dealt cyclically: slice (k // B) mod S
  (B = 2 unless given). It subsumes the other two (B = 1 is cyclic,
  B = ceil(n/S) is block).

Forms. The general form above holds for any n. When the tile count is known
to be at most the slice count, the simplified forms apply, whatever the
strategy: iteration k runs on slice k, alone ("exact" when n == S: every slice
runs exactly one iteration, no guard; "oversubscribed" when n < S: slices
k >= n are idle, the guard `k < n`). Tile counts are always known here (loop
bounds are static), so the form is decided per tile body at compile time and
recorded on the function as `torq.distribution`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STRATEGIES = ("cyclic", "block", "block-cyclic")
DEFAULT_STRATEGY = "cyclic"
DEFAULT_BLOCK = 2


class DistributionError(ValueError):
    """A bad --torq-slice-distribution value."""


@dataclass(frozen=True)
class Distribution:
    strategy: str = DEFAULT_STRATEGY
    block: int = 1  # block-cyclic block size (1 for the other strategies)

    @property
    def spec(self) -> str:
        return f"{self.strategy}:{self.block}" if self.strategy == "block-cyclic" else self.strategy


def parse_distribution(text: str | None) -> Distribution:
    """`cyclic`, `block`, `block-cyclic` or `block-cyclic:B` (B >= 1)."""
    text = (text or DEFAULT_STRATEGY).strip()
    name, colon, block = text.partition(":")
    if name not in STRATEGIES or (colon and name != "block-cyclic"):
        raise DistributionError(
            f"unknown --torq-slice-distribution '{text}' (cyclic, block, block-cyclic[:B])")
    if name != "block-cyclic":
        return Distribution(name, 1)
    if not colon:
        return Distribution(name, DEFAULT_BLOCK)
    if not block.isdigit() or int(block) < 1:
        raise DistributionError(f"--torq-slice-distribution: block size must be a positive integer, got '{block}'")
    return Distribution(name, int(block))


def form(n_tiles: int, slices: int) -> str:
    if n_tiles == slices:
        return "exact"
    if n_tiles < slices:
        return "oversubscribed"
    return "general"


def slice_of(k: int, n_tiles: int, slices: int, dist: Distribution) -> int:
    """The slice of iteration k (0 <= k < n_tiles) of a tile body."""
    if n_tiles <= slices:
        return k  # simplified forms: one iteration per slice
    if dist.strategy == "cyclic":
        return k % slices
    if dist.strategy == "block":
        return k // math.ceil(n_tiles / slices)
    return (k // dist.block) % slices
