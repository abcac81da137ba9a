"""torq-mark-patterns-for-super-tiling: tag the ops of each Torq pattern.

Contract: runs every Torq pattern matcher (`patterns.match_group`) in mark
mode on each function. The principal op of a match gets a fresh UID in
`torq-fuse-group-id` (i64); every op of the group, from its output back to its
inputs, gets that UID appended to its `torq-fuse-group` (array of i64), so an
op may belong to several groups. Nothing else changes. Ops no pattern covers
are left untagged (the target has already sent such dispatches to the host).
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import walk_ops
from ..patterns import FUSE_GROUP, FUSE_GROUP_ID, Match, Unsupported, match_group
from . import PassOptions

NAME = "torq-mark-patterns-for-super-tiling"


def mark_fuse_group_backward(match: Match, uid: int) -> None:
    i64 = ir.IntegerType.get_signless(64)
    match.principal.attributes[FUSE_GROUP_ID] = ir.IntegerAttr.get(i64, uid)
    for op in [match.bottom] + [o for o in reversed(match.ops) if o is not match.bottom]:
        old = list(ir.ArrayAttr(op.attributes[FUSE_GROUP])) if FUSE_GROUP in op.attributes else []
        op.attributes[FUSE_GROUP] = ir.ArrayAttr.get(old + [ir.IntegerAttr.get(i64, uid)])


def run(module: ir.Module, options: PassOptions) -> None:
    uid = 0
    for op in walk_ops(module.operation):
        try:
            match = match_group(op)
        except Unsupported:
            continue
        if match is not None:
            mark_fuse_group_backward(match, uid)
            uid += 1
