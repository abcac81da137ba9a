"""The cost oracle of super tiling: what a tiling of a root costs, measured on a
lowered copy with the pipeline's own passes: its LRAM footprint (the
allocator) and its DDR traffic and cycles (contract/timing.py, the
simulator's model). The target asks it too (an untiled gather's footprint)."""

from __future__ import annotations

from iree.compiler import ir

from torq.contract.measures import Traffic, program_traffic
from torq.contract.program import Program
from torq.contract.timing import schedule

from ..ir_utils import walk_ops
from ..passes import PassOptions
from ..passes.assign_lram_addresses import assign_function, lram_footprint
from ..passes.build_nss_program import build_program
from ..passes.lower_to_torq_hl import lower_function
from .roots import UNREPRESENTABLE
from .transform import clone_function, tile_and_fuse


def _has_dynamic_tensors(func: ir.Operation) -> bool:
    return any(isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape
               for op in walk_ops(func) for r in op.results)


def lowered_tiling(source: ir.Module | ir.Operation, loop_sizes: list[int] | None,
                    interchange: list[int] | None = None,
                    reduction: list[int] | None = None) -> tuple[ir.Module, ir.Operation | None]:
    """A copy of the function (`source`, or the one in module `source`) with its
    TILE_ROOT op tiled by `loop_sizes` (and its TILE_REDUCTION op's reduction loops
    by `reduction`) and lowered to TorqHL; the function is None when some tile has
    no static shape. Keep the module alive while using the function."""
    func = source.body.operations[0].operation if isinstance(source, ir.Module) else source
    scratch, clone = clone_function(func)
    if (loop_sizes and any(loop_sizes)) or (reduction and any(reduction)):
        tile_and_fuse(scratch.operation, loop_sizes or [], interchange, reduction)
        clone = scratch.body.operations[0].operation
    if _has_dynamic_tensors(clone):
        return scratch, None  # e.g. a fused reshape whose slice sizes depend on the loop
    lower_function(clone)
    return scratch, clone


def lowered_footprint(func: ir.Operation | None, options: PassOptions) -> int:
    """LRAM bytes (allocator end, one buffer set) a lowered tiling (`lowered_tiling`'s
    function) needs; UNREPRESENTABLE for none. Reads the function, changes nothing."""
    return UNREPRESENTABLE if func is None else lram_footprint(func, options)


def lowered_program(func: ir.Operation, options: PassOptions, dma_limit: int | None = None) -> Program:
    """The NSS program a lowered tiling becomes (assigns its LRAM addresses); with `dma_limit`,
    raises build_nss_program.DmaLimitExceeded once its DMAs move more bytes than that."""
    assign_function(func, options)
    return build_program(func, options, dma_limit)[0]


def program_cost(program: Program, options: PassOptions) -> tuple[Traffic, int]:
    """DDR traffic and cycles (contract/timing.py's schedule, the simulator's own model)."""
    return program_traffic(program), schedule(program, options.hw).makespan


def footprint(source: ir.Module | ir.Operation, loop_sizes: list[int] | None, options: PassOptions,
              interchange: list[int] | None = None, reduction: list[int] | None = None) -> int:
    """LRAM bytes (allocator end, one buffer set) the function (`source`, or the one
    in module `source`) needs with its TILE_ROOT op tiled by `loop_sizes`."""
    scratch, clone = lowered_tiling(source, loop_sizes, interchange, reduction)
    return lowered_footprint(clone, options)
