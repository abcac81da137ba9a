"""torq-lower-to-torq-hl: replace each fused group with one TorqHL op.

Contract: runs the same matchers as marking (`patterns.match_group`), in
rewrite mode, on every linalg op of the function, inside tile loops or not.
Each group becomes one unregistered `torq_hl.<kind>` op (`conv2d`, `matmul`,
`elementwise`) whose operands are the group's inputs (principal inputs first,
then epilogue operands), whose result replaces the group's bottom op, and
whose attributes carry the layout attributes, the folded epilogue (JSON in
`epilogue`) and `macs`. Afterwards no linalg op remains; a linalg op no
pattern covers is a compile error naming it.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import CompileError, location_str, walk_ops
from ..patterns import Match, Unsupported, epilogue_to_json, is_zero_fill, match_group
from . import PassOptions

NAME = "torq-lower-to-torq-hl"


def _attr(v) -> ir.Attribute:
    if isinstance(v, str):
        return ir.StringAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, list):
        return ir.ArrayAttr.get([_attr(x) for x in v])
    raise TypeError(v)


def rewrite_group(match: Match) -> ir.Operation:
    attrs = {k: _attr(v) for k, v in match.attrs.items()}
    attrs["epilogue"] = ir.StringAttr.get(epilogue_to_json(match.epilogue))
    attrs["macs"] = _attr(int(match.macs))
    with ir.InsertionPoint(match.bottom), match.bottom.location:
        new = ir.Operation.create(f"torq_hl.{match.kind}", results=[match.bottom.results[0].type],
                                  operands=list(match.inputs), attributes=attrs)
    match.bottom.results[0].replace_all_uses_with(new.results[0])
    # Erase users before producers.
    for op in [match.bottom] + [o for o in match.ops if o is not match.bottom and not is_zero_fill(o)] \
            + [o for o in match.ops if is_zero_fill(o)]:
        op.erase()
    return new


def lower_function(func: ir.Operation) -> None:
    changed = True
    while changed:
        changed = False
        for op in walk_ops(func):
            if not op.name.startswith("linalg."):
                continue
            try:
                match = match_group(op)
            except Unsupported as e:
                raise CompileError(f"{location_str(op)}: error: {op.name}: {e}") from None
            if match is not None:
                rewrite_group(match)
                changed = True
                break  # the walk list is stale after a rewrite
    leftovers = [op for op in walk_ops(func) if op.name.startswith("linalg.")]
    if leftovers:
        op = leftovers[0]
        raise CompileError(f"{location_str(op)}: error: {op.name} is not part of any Torq pattern")
    _erase_dead(func)


def _erase_dead(func: ir.Operation) -> None:
    """Drop side-effect-free ops (empty, slices, constants) left without users."""
    removable = {"tensor.empty", "tensor.extract_slice", "arith.constant"}
    changed = True
    while changed:
        changed = False
        for op in reversed(list(walk_ops(func))):
            if op.name in removable and all(not list(r.uses) for r in op.results):
                op.erase()
                changed = True


def run(module: ir.Module, options: PassOptions) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            lower_function(op.operation)
