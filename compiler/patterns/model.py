"""What a pattern match is: the group attrs, `Unsupported`, the principal op's
structure (`Contraction`, `Gather`), the `Match`, and the epilogue's JSON form
(the `epilogue` attr of a TorqHL op)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from iree.compiler import ir

from torq.contract.ops import OPS
from torq.contract.program import Epilogue, EpilogueStep, Ref

FUSE_GROUP = "torq-fuse-group"
FUSE_GROUP_ID = "torq-fuse-group-id"


class Unsupported(Exception):
    """The op cannot run on the NPU; the message says why."""


@dataclass
class Contraction:
    """The principal op of a group: its TorqHL kind, attrs and MAC count.

    `n_inputs` principal operands come first among the generic's ins (the
    pooling window operand, a shape-only tensor, is not one); `identity`
    is the accumulator init the op needs ("zero" or "lowest"); `mean_count`
    is the divisor an epilogue division may be folded into (average pooling,
    mean), 0 if none; `prologue` marks a reduction whose body first computes,
    elementwise from its ins, the value it accumulates.
    """
    kind: str  # "conv2d" | "matmul" | "depthwise_conv2d" | "maxpool2d" | "avg_pool2d" | "reduce"
    attrs: dict
    macs: int
    n_inputs: int = 2
    identity: str = "zero"
    mean_count: int = 0
    prologue: bool = False  # reduce: the body computes what it accumulates from its ins
    gather: "Gather | None" = None  # reduce: the body reads its input with tensor.extract

    @property
    def steps(self) -> bool:
        """Whether its reduction loops may run in steps (super tiling's reduction tiling):
        its op has an accumulate form with these attrs (contract/ops.py), and it is neither
        a grouped conv (its reduction is per group) nor a gathering reduction."""
        return steps_reduction(self.kind, self.attrs, self.gather)


def steps_reduction(kind: str, attrs: dict, gather) -> bool:
    """`Contraction.steps` of a principal's kind, attrs and gather (a `Match` has them too)."""
    return OPS[kind].accumulates_with(attrs) and gather is None and "G" not in attrs.get("input_dims", "")


@dataclass
class Gather:
    """A reduction whose body reads a box of `source` with tensor.extract.

    The reduced input is `source[offsets : offsets + sizes]`; `consts` are the
    other results of the op, each a scalar constant it yields (result index ->
    value), like the pool size torch-mlir's adaptive average pooling returns.
    """
    source: ir.Value
    offsets: list[int]
    sizes: list[int]
    consts: dict[int, float] = field(default_factory=dict)


@dataclass
class Match:
    kind: str  # a Contraction kind or "elementwise"
    principal: ir.Operation
    ops: list[ir.Operation]  # all ops of the group, principal first
    bottom: ir.Operation  # the op whose result leaves the group
    inputs: list[ir.Value]  # TorqHL operands, in order
    attrs: dict
    epilogue: Epilogue
    macs: int = 0
    # A TorqHL elementwise op computed before the principal, whose result is
    # the principal's first operand (inputs[0] is None then): its operands,
    # steps and result type.
    prologue: tuple[list[ir.Value], Epilogue, ir.Type] | None = None
    # The box the principal reads (inputs[0] is None then): see Gather.
    gather: Gather | None = None


def epilogue_to_json(e: Epilogue) -> str:
    return json.dumps({"steps": [{"op": s.op, "to": s.to, "args": [
        {"kind": a.kind, "index": a.index, "axes": list(a.axes), "const": a.const} for a in s.args]}
        for s in e.steps], "result": e.result})


def epilogue_from_json(s: str) -> Epilogue:
    d = json.loads(s)
    return Epilogue([EpilogueStep(st["op"], [Ref(a["kind"], a["index"], tuple(a["axes"]), a["const"])
                                             for a in st["args"]], st["to"]) for st in d["steps"]],
                    d["result"])
