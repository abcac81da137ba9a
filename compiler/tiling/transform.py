"""Tiling on the IR: transform.structured.fuse / tile_using_for on the tagged
root (and its principal's reduction loops), and scratch copies of a function."""

from __future__ import annotations

from iree.compiler import ir, passmanager
from iree.compiler.dialects.transform import interpreter

from ..ir_utils import region_ops, walk_ops
from .roots import ORDER, TILE_REDUCTION, TILE_ROOT

# --- tiling on the IR ------------------------------------------------------------

def tile_and_fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None = None,
                  reduction: list[int] | None = None) -> None:
    """Tile the op tagged TILE_ROOT in `module_op` by `loop_sizes` (one per loop,
    0 = untiled), fusing its producers; `interchange` orders the loops (outermost
    first). Loop-invariant code motion then hoists a slice that depends only on
    an outer loop (a weight slice in a 2-D nest) out of the inner one, so it is
    loaded once per outer iteration (tile_schedule.invariant_loops).
    `reduction` (one size per loop of the op tagged TILE_REDUCTION, the group's
    principal) then tiles its reduction loops inside the tile loop
    (`tile_reduction`)."""
    if any(loop_sizes):
        _fuse(module_op, loop_sizes, interchange)
    if reduction and any(reduction):
        tile_reduction(module_op, reduction)


def tile_reduction(module_op: ir.Operation, sizes: list[int]) -> None:
    """Tile the reduction loops of the op tagged TILE_REDUCTION by `sizes` (one per loop
    of the op, nonzero only on reduction loops) with transform.structured.tile_using_for:
    an scf.for per tiled loop, innermost, whose iter_arg is the accumulator, initialised
    from the op's init (the group's fill, outside the loop); the group's epilogue ops
    stay after the loop, so they run once on the full sum."""
    _apply_tiling(module_op, TILE_REDUCTION, "tile_using_for", sizes, "", "canonicalize,cse")


def _fuse(module_op: ir.Operation, loop_sizes: list[int], interchange: list[int] | None) -> None:
    _apply_tiling(module_op, TILE_ROOT, "fuse", loop_sizes, f" interchange {interchange}" if interchange else "",
                  "canonicalize,cse,loop-invariant-code-motion")


def _apply_tiling(module_op: ir.Operation, tag: str, transform: str, sizes: list[int], options: str,
                  cleanup: str) -> None:
    """Runs transform.structured.`transform` (fuse / tile_using_for) with `sizes` on the op
    tagged `tag` in `module_op` (one loop per nonzero size), then the `cleanup` passes."""
    n_loops = sum(1 for s in sizes if s)
    loops = "".join([", !transform.any_op"] * n_loops)
    seq = ir.Module.parse(f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %op = transform.structured.match attributes {{{tag}}} in %root : (!transform.any_op) -> !transform.any_op
    %tiled{f', %loops:{n_loops}' if n_loops else ''} = transform.structured.{transform} %op tile_sizes {sizes}{options}
        : (!transform.any_op) -> (!transform.any_op{loops})
    transform.yield
  }}
}}""")
    interpreter.apply_named_sequence(module_op, seq.body.operations[0], seq)
    passmanager.PassManager.parse(f"builtin.module({cleanup})").run(module_op)


def root_loop(func: ir.Operation) -> ir.Operation | None:
    """The outermost tile loop holding the TILE_ROOT op (after tiling it)."""
    for op in region_ops(func):
        if op.name == "scf.for" and any(TILE_ROOT in o.attributes for o in walk_ops(op)):
            return op
    return None


def orders_in(loop: ir.Operation) -> set[int]:
    return {ir.IntegerAttr(o.attributes[ORDER]).value for o in walk_ops(loop) if ORDER in o.attributes}


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
    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(scratch.operation)
    return scratch
