"""Tiling on the IR: transform.structured.fuse / tile_using_for on the tagged
root (and its principal's reduction loops), and scratch copies of a function."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects.transform import interpreter

from ..ir_utils import region_ops, walk_ops
from ..pass_managers import parse_script, run_pipeline
from .roots import ORDER, TILE_REDUCTION, TILE_ROOT, fuse_groups


@dataclass(frozen=True)
class Tiled:
    """What one tiling pulled into its tile loops (read before cleanup, which may inline
    a loop of one iteration): the ORDERs and fuse groups of the ops in them."""
    orders: frozenset[int] = frozenset()
    groups: frozenset[int] = frozenset()


# --- tiling on the IR ------------------------------------------------------------

def tile_and_fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None = None,
                  reduction: list[int] | None = None) -> Tiled:
    """Tile the op tagged TILE_ROOT in `module_op` by `loop_sizes` (one per loop,
    0 = untiled), fusing its producers; `interchange` orders the loops (outermost
    first). A loop whose size does not divide its extent is peeled (`_peel`).
    Loop-invariant code motion then hoists a slice that depends only on
    an outer loop (a weight slice in a 2-D nest) out of the inner one, so it is
    loaded once per outer iteration (tile_schedule.invariant_loops).
    `reduction` (one size per loop of the op tagged TILE_REDUCTION, the group's
    principal) then tiles its reduction loops inside the tile loop
    (`tile_reduction`). The ops now in tile loops lose their ORDER (`_take_tiled`)."""
    tiled = _fuse(module_op, loop_sizes, interchange) if any(loop_sizes) else Tiled()
    if reduction and any(reduction):
        tile_reduction(module_op, reduction)
    return tiled


def tile_reduction(module_op: ir.Operation, sizes: list[int]) -> None:
    """Tile the reduction loops of the op tagged TILE_REDUCTION by `sizes` (one per loop
    of the op, nonzero only on reduction loops) with transform.structured.tile_using_for:
    an scf.for per tiled loop, innermost, whose iter_arg is the accumulator, initialised
    from the op's init (the group's fill, outside the loop); the group's epilogue ops
    stay after the loop, so they run once on the full sum."""
    _apply_tiling(module_op, TILE_REDUCTION, "tile_using_for", sizes, "", "canonicalize,cse")


def _fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None) -> Tiled:
    return _apply_tiling(module_op, TILE_ROOT, "fuse", loop_sizes, f" interchange {interchange}" if interchange else "",
                         "canonicalize,cse,loop-invariant-code-motion", peel=True)


def _peel(n_loops: int) -> str:
    """Transform IR peeling the last, partial iteration off each tile loop whose size does
    not divide its extent (innermost first, so an outer remainder clones the peeled inner
    nest): the main loop's tiles and the remainder's then all have static shapes. A loop
    whose size divides its extent makes transform.loop.peel fail silenceably: suppressed."""
    return "".join(f"""
    %for{i} = transform.cast %loops#{i} : !transform.any_op to !transform.op<"scf.for">
    transform.sequence %for{i} : !transform.op<"scf.for"> failures(suppress) {{
    ^bb0(%loop{i}: !transform.op<"scf.for">):
      %main{i}, %rest{i} = transform.loop.peel %loop{i} : (!transform.op<"scf.for">) -> (!transform.any_op, !transform.any_op)
      transform.yield
    }}""" for i in reversed(range(n_loops)))


def _take_tiled(module_op: ir.Operation) -> Tiled:
    """The orders and groups of the ops in the tile loops of the TILE_ROOT op (a peeled
    one's main loop and remainder), which lose their ORDER: after cleanup inlines a loop
    of one iteration (two tiles, peeled), they are in the function body, and super
    tiling must not take one for an untiled root."""
    orders, groups = set(), set()
    for func in module_op.regions[0].blocks[0].operations:
        for loop in region_ops(func.operation):
            if loop.name != "scf.for" or not any(TILE_ROOT in o.attributes for o in walk_ops(loop)):
                continue
            for op in walk_ops(loop):
                groups |= fuse_groups(op)
                if ORDER in op.attributes:
                    orders.add(ir.IntegerAttr(op.attributes[ORDER]).value)
                    del op.attributes[ORDER]
    return Tiled(frozenset(orders), frozenset(groups))


def _apply_tiling(module_op: ir.Operation, tag: str, transform: str, sizes: list[int], options: str,
                  cleanup: str, peel: bool = False) -> Tiled:
    """Runs transform.structured.`transform` (fuse / tile_using_for) with `sizes` on the op
    tagged `tag` in `module_op` (one loop per nonzero size; `peel`: each loop whose size does
    not divide its extent peeled, and what the loops hold taken, `_take_tiled`), then the
    `cleanup` passes."""
    n_loops = sum(1 for s in sizes if s)
    loops = "".join([", !transform.any_op"] * n_loops)
    seq = parse_script(f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %op = transform.structured.match attributes {{{tag}}} in %root : (!transform.any_op) -> !transform.any_op
    %tiled{f', %loops:{n_loops}' if n_loops else ''} = transform.structured.{transform} %op tile_sizes {sizes}{options}
        : (!transform.any_op) -> (!transform.any_op{loops}){_peel(n_loops) if peel else ''}
    transform.yield
  }}
}}""")
    interpreter.apply_named_sequence(module_op, seq.body.operations[0], seq)
    tiled = _take_tiled(module_op) if peel else Tiled()
    run_pipeline(f"builtin.module({cleanup})", module_op)
    return tiled


def clone_function(func: ir.Operation) -> tuple[ir.Module, ir.Operation]:
    scratch = ir.Module.create()
    func.clone(ip=ir.InsertionPoint(scratch.body))
    return scratch, scratch.body.operations[0].operation


def root_slice(func: ir.Operation) -> ir.Module:
    """A scratch module with a copy of `func` that returns only the TILE_ROOT op's
    result: the root and what feeds it (canonicalize drops every other op)."""
    scratch, clone = clone_function(func)
    root = next(op for op in walk_ops(clone) if TILE_ROOT in op.attributes)
    value = root.results[0]
    ret = region_ops(clone)[-1]
    with ir.InsertionPoint(ret), ret.location:
        ir.Operation.create("func.return", operands=[value])
    inputs = list(ir.FunctionType(ir.TypeAttr(clone.attributes["function_type"]).value).inputs)
    clone.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [value.type]))
    del root, value
    ret.erase()
    run_pipeline("builtin.module(canonicalize,cse)", scratch.operation)
    return scratch
