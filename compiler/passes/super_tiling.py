"""torq-super-tiling: tile and fuse each group so that every tile fits LRAM.

Contract: takes a marked function (torq-mark-patterns-for-super-tiling) and
leaves it with some roots tiled: a root is the bottom op of a fuse group (no
user shares one of its groups); tiling it with tile-consumer-and-fuse-producers
(`transform.structured.fuse`) pulls its whole group, and every producer, into
the tile loop. Roots are visited in the seed's order: a DFS along def-use
edges from each op in block order, an op listed once all its users are
(post-order, so consumers come before their producers). Tile sizes are chosen
per dimension of the root's result and handed to the transform as sizes of
the loops those dimensions index (read from the root's result indexing map:
a permuted result tiles the permuted loop). Reduction loops are tiled only
when nothing else fits or every parallel tiling re-reads an operand
(`traffic` and `default`, see *Reduction tiling*).
Tile sizes need not divide the tiled dimension (`search.tile_sizes`): a
size that does not is peeled (`tiling/transform.py`: transform.loop.peel), a
loop of full tiles and one last, smaller tile, so every tile has a static
shape. Every op a tiling pulls into its loops (the remainder's are copies)
loses its order (`transform.Tiled`): none is then taken for an untiled root.

Strategies (`--torq-super-tiling-strategy`):

- `default`: `traffic`'s tiling, then refined for cycles (`_parallel_sizes` in compiler/tiling/search.py):
  DMA overlaps compute only across tiles with distinct buffer sets, so along
  the chosen dim (every tileable dim for a root left untiled) tilings with 2
  and 4 tiles per slice, and 2x and 4x the chosen count, are tried; one
  replaces the `traffic` choice when it fits, its program is predicted by
  contract/timing.py to take fewer cycles, and it moves at most
  `--torq-tiling-traffic-slack` (default 0) more DDR bytes, each extra 1% of
  bytes buying at least 1% fewer cycles. 2-D tilings are kept as they are.
  The predictions see torq-build-nss-program's slice use: a body with one
  buffer set splits each compute over all slices, so both slices already
  work where one tile's buffers fill LRAM, without the halo re-reads of
  smaller tiles; hence no slack by default (the sample CNN at 224x224 runs
  at 65% of the roofline with it, and MobileNetV2's stem conv moves no more
  bytes than the seed's tiling).
- `traffic` (exact fit, least DDR traffic): a root's *slice* is the root plus the untiled ops that
  feed it (a scratch copy of the function returning only the root's result).
  A tiling fits when `lram_allocator` (what torq-assign-lram-addresses runs)
  places every buffer of the slice, tiled and lowered to TorqHL, within
  `TorqHw.available_lram_bytes`. A root whose untiled slice fits stays
  untiled. Otherwise, for each tileable result dimension alone, the largest
  fitting tile size (binary search: footprint grows with the tile; once two
  tilings of a shape are lowered, tiling/footprint_model.py predicts the
  others' footprints from their buffers and the allocator confirms the size
  chosen), or on the
  result's vector dim (compiler/vector_layout.py) the largest smaller one of
  whole vectors when that moves no more bytes and takes no more cycles (a
  tile padded in LRAM wastes lanes); of those,
  the one whose NSS program moves the fewest DMA bytes (`traffic`: halos,
  weight and input re-reads), ties to the fewest tiles, then the seed order
  (dim 1, dim 0, dims 2...). When no dimension fits alone, the seed order's
  multi-dimension search: the first dimension with a fitting size, earlier
  ones kept at 1. A producer fused into one consumer's loop that still feeds
  another consumer stays in the function for it and is a root of its own
  later (the seed's multi-consumer TODO): the consumer's slice includes it,
  so that consumer is tiled with the producer recomputed in its loop when
  the two do not fit together. Last, the untiled rest of the function is
  allocated as a whole; while it does not fit, its root with the largest
  untiled slice is tiled. When no parallel tiling fits, or the best one
  moves more than `search.REREAD_LIMIT` (1.25) x the compulsory bytes, the
  reduction dims are tiled too (*Reduction tiling*). Nothing fitting even with size-1
  tiles (parallel and reduction) is a compile error naming the op, its
  location, the smallest footprint reached (all tileable dims at 1) and
  the budget.

*Reduction tiling* (`traffic` and `default`, not `seed`): when even one
output row / channel does not fit (a fully connected layer whose weights
are many times the LRAM, a conv over many input channels), or when every
parallel tiling re-reads an operand (ViT's FFN down projection, 197 x 3072
by 3072 x 768: rows and weights do not fit together, so row tiles re-read
the weights and column tiles the rows; 2.4 to 3x the compulsory bytes),
the reduction loops of the group's principal op are tiled as well, if its op has an
accumulate form (contract/ops.py: conv2d, not grouped, and matmul): matmul
K; conv input channels, then kernel rows, then kernel columns
(`Root.reduction_loops`; the first whose largest fitting divisor exists,
earlier ones at 1). Parallel tilings tried with it: none and each tileable
dim alone (its largest sizes for which some reduction size fits), or when
none of those fits, all tileable dims at 1; the least predicted DDR traffic
wins, then the fewest tiles x steps (and a re-reading parallel tiling is
kept when it moves no more). The steps' operand slices get a second LRAM
placement when it fits (tile_schedule.plan_body: odd steps load there, so
a step's DMA-in overlaps the previous step's compute); the largest fitting
step leaves no room for it, so `default` also tries steps of about 1/2 and
1/4 of it (`_step_sizes`: the same bytes, fewer predicted cycles wins). On
the IR, the root is tiled and fused as usual, then the
principal (tagged TILE_REDUCTION) is tiled along its reduction loops with
`transform.structured.tile_using_for`: an scf.for innermost in the tile
loop whose iter_arg is the accumulator, initialised from the group's fill;
the group's epilogue ops stay after it, so they run once on the full sum.
torq-lower-to-torq-hl makes the loop body an accumulate-form op on an f32 /
i32 accumulator that stays in LRAM across the steps (no partial-sum DMA;
its operand slices are streamed), so the fit counts the accumulator once
plus one step's slices.
- `seed` (the seed RFC's estimate, no allocator): an op is a candidate when
  no earlier tiling fused it. Its footprint is, for a group's bottom op, the
  bytes of the group's input tensors plus its output (0 for the group's
  other ops), and for an op outside any group the bytes of its tensor
  operands; the memory available is `available_lram_bytes` for group ops and
  10 KiB for others. A footprint over the available memory gives factor =
  ceil(footprint / available) and tiles result dim 1 (dim 0 of a rank-1
  result) to ceil(extent / factor), rounded down to a divisor of the extent
  (tiles must have static shapes). While the largest original footprint of
  the ops fused into the loop, divided by the factor, exceeds the available
  memory, the factor becomes ceil(that footprint / available) and the root
  is retiled. Ops fused into a loop are never revisited. This estimate can
  overflow (whole weights, halos, fused intermediates); the allocator in
  torq-assign-lram-addresses then stops the compile with a one-line error.

With `PassOptions.record_tiling` (`--torq-dump-tiling`), `run` returns one
record per root visited (its shape, tiled dims, sizes, tile count, LRAM
footprint of its slice, fused groups; tiled reduction loops of the principal
op, their extents and sizes, and the accumulation steps per tile; the seed's
footprint, factor and estimate); otherwise None.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import region_ops, walk_ops
from ..tiling.cost import footprint
from ..tiling.roots import (
    ORDER,
    TILE_REDUCTION,
    TILE_ROOT,
    fuse_groups,
    group_principal,
    is_group_bottom,
    post_order,
    root_facts,
)
from ..tiling.search import TileChoice, choose_tile_sizes
from ..tiling.seed import seed_footprints, seed_tile_sizes
from ..tiling.transform import clone_function, root_slice, tile_and_fuse
from . import PassOptions
from .assign_lram_addresses import lram_footprint
from .lower_to_torq_hl import lower_function

NAME = "torq-super-tiling"
# --torq-super-tiling-strategy values (see the module docstring).
STRATEGIES = ("default", "traffic", "seed")


# --- the pass -----------------------------------------------------------------------

def _outside_op(func: ir.Operation, order: int) -> ir.Operation | None:
    """The op with ORDER `order` in the function body (not in a tile loop), if any."""
    for op in region_ops(func):
        if ORDER in op.attributes and ir.IntegerAttr(op.attributes[ORDER]).value == order:
            return op
    return None


class _Tiler:
    def __init__(self, func: ir.Operation, options: PassOptions):
        self.func, self.options = func, options
        self.seed = options.super_tiling_strategy == "seed"
        self.fused: set[int] = set()  # orders of ops fused into some tile loop
        self.table: list[tuple[int, int]] = []
        self.records: list[dict] = []  # one per root visited, with options.record_tiling

    def run(self) -> None:
        i64 = ir.IntegerType.get_signless(64)
        ops = post_order(self.func)
        for i, op in enumerate(ops):
            op.attributes[ORDER] = ir.IntegerAttr.get(i64, i)
        if self.seed:
            self.table = seed_footprints(self.func, ops, self.options)
        roots = [i for i, op in enumerate(ops) if is_group_bottom(op) or (self.seed and not fuse_groups(op))]
        del ops  # handles die with the first tiling
        try:
            for k in roots:
                if self.seed and k in self.fused:
                    continue  # the seed never revisits a fused op
                self.visit(k)
            if not self.seed:
                self.fit_function_body(roots)
        finally:
            for op in walk_ops(self.func):
                for name in (ORDER, TILE_ROOT, TILE_REDUCTION):
                    if name in op.attributes:
                        del op.attributes[name]

    def visit(self, order: int, force: bool = False) -> bool:
        """Tile the root with this order if it needs it; False if it is no longer outside a loop."""
        op = _outside_op(self.func, order)
        root = root_facts(op, order) if op is not None else None
        if root is None:
            return False  # fused into loops only (the original is gone), or no static shape
        op.attributes[TILE_ROOT] = ir.UnitAttr.get()
        if not self.seed and root.reduction_loops:
            group_principal(op).attributes[TILE_REDUCTION] = ir.UnitAttr.get()
        del op
        record: dict | None = {} if self.options.record_tiling else None
        if self.seed:
            choice = TileChoice(seed_tile_sizes(self.func, root, self.table, self.options, record))
        else:
            choice = choose_tile_sizes(self.func, root, self.options, record, force)
        sizes = choice.sizes
        if choice.reduction is not None and not any(sizes):
            # Only the reduction is tiled: its loop is the "tile loop" of the root.
            tile_and_fuse(_enclosing_module(self.func), [], None, root.reduction_sizes(choice.reduction))
            if record is not None:
                record["fused_groups"] = sorted(root.groups)
        elif sizes is not None:
            tiled = tile_and_fuse(_enclosing_module(self.func), root.loop_sizes(sizes),
                                  root.interchange(choice.outer), root.reduction_sizes(choice.reduction))
            self.fused |= tiled.orders
            if record is not None:
                record["fused_groups"] = sorted(tiled.groups)
        elif record is not None:
            record["fused_groups"] = []
        for o in walk_ops(self.func):
            for name in (TILE_ROOT, TILE_REDUCTION):
                if name in o.attributes:
                    del o.attributes[name]
        if record is not None:
            self.records.append(record)
        return True

    def fit_function_body(self, roots: list[int]) -> None:
        """Tile untiled roots, largest slice first, until what runs outside tile loops
        fits as a whole (their values stay in LRAM between them)."""
        budget = self.options.hw.available_lram_bytes
        while True:
            scratch, clone = clone_function(self.func)
            lower_function(clone)
            end = lram_footprint(clone, self.options)
            del clone, scratch
            if end <= budget:
                return
            sizes = []
            for k in roots:
                op = _outside_op(self.func, k)
                if op is None or root_facts(op, k) is None:
                    continue
                op.attributes[TILE_ROOT] = ir.UnitAttr.get()
                del op
                sizes.append((footprint(root_slice(self.func), None, self.options), k))
                for o in walk_ops(self.func):
                    if TILE_ROOT in o.attributes:
                        del o.attributes[TILE_ROOT]
            if not sizes:
                return  # nothing left to tile: torq-assign-lram-addresses reports the overflow
            self.visit(max(sizes)[1], force=True)


def tile_function(func: ir.Operation, options: PassOptions) -> list[dict]:
    """Tiles `func`; the records of the roots it visited (empty unless options.record_tiling)."""
    tiler = _Tiler(func, options)
    tiler.run()
    return tiler.records


def _enclosing_module(op: ir.Operation) -> ir.Operation:
    p = op.parent
    while p.name != "builtin.module":
        p = p.parent
    return p


def run(module: ir.Module, options: PassOptions) -> list[dict] | None:
    records = []
    for op in list(module.body.operations):
        if op.operation.name == "func.func":
            records += tile_function(op.operation, options)
    return records if options.record_tiling else None
