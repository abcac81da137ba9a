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

from torq.contract.program import Compute

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


def split_dim(shape: tuple[int, ...], slices: int) -> int | None:
    """The dim a compute's result is split along over `slices` slices: the outermost
    whose extent is a multiple of `slices` (equal parts), None when there is none."""
    return next((d for d, n in enumerate(shape) if n >= slices and n % slices == 0), None)


def distribute(commands: list, tile_bodies: list[int], split_bodies: list[bool], slices: int,
               dist: Distribution) -> dict:
    """Sets the slice (and split) of every compute of `commands`: from its tile's iteration
    index in its body (`tile_bodies[tile]`), or split over all slices in a body of
    `split_bodies` (torq-build-nss-program's docstring); returns the summary it records."""
    slice_of_tile: dict[int, int] = {}
    computes: dict[int, list[Compute]] = {}
    for c in commands:
        if isinstance(c, Compute):
            computes.setdefault(tile_bodies[c.tile], []).append(c)
    summary = []
    for body in range(len(split_bodies)):
        tiles = [t for t, b in enumerate(tile_bodies) if b == body]
        n = len(tiles)
        if split_bodies[body]:
            split = 0
            for c in computes.get(body, []):
                c.slice = 0
                if split_dim(c.result.shape, slices) is not None:
                    c.split = slices
                    split += 1
            summary.append({"tiles": n, "form": "split", "slices_used": slices if split else 1,
                            "split_computes": split})
            continue
        for k, t in enumerate(tiles):
            slice_of_tile[t] = slice_of(k, n, slices, dist)
        summary.append({"tiles": n, "form": form(n, slices), "slices_used": len({slice_of_tile[t] for t in tiles})})
        for c in computes.get(body, []):
            c.slice = slice_of_tile.get(c.tile, 0)
    return {"strategy": dist.spec, "slices": slices, "bodies": summary}
