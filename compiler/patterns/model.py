"""What a pattern match is: the group attrs, `Unsupported`, the principal op's
structure (`Contraction`, `Gather`), the `Match`, and the epilogue's typed form
(the `epilogue` attr of a TorqHL op)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from iree.compiler import ir

from torq.contract.ops import OPS
from torq.contract.program import Epilogue, EpilogueStep, Ref

from ..ir_utils import CompileError, record_attr
from ..pass_managers import reused

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


def epilogue_attr(e: Epilogue) -> ir.DictAttr:
    """`e` as the typed `epilogue` attr of a TorqHL op (and of a torq_nss.compute's spec):
    {result, steps}, a step {args, op, to (when set)}, an arg a number (a constant),
    {value = i} or {operand = i, axes = [...]}; a field holding its default is left out.
    `epilogue_value` reads it back, exactly."""
    return record_attr({"steps": [_step_record(s) for s in e.steps], "result": e.result})


def _step_record(s: EpilogueStep) -> dict:
    d = {"op": s.op, "args": [_ref_record(r) for r in s.args]}
    if s.to:
        d["to"] = s.to
    return d


def _ref_record(r: Ref):
    if r.kind == "const" and not r.index and not r.axes:  # most refs to constants: a bare number
        return r.const
    if r.kind in ("value", "operand"):
        d = {r.kind: r.index}
        if not _positive_zero(r.const):
            d["const"] = r.const
    elif r.kind == "const":
        d = {"const": r.const, "index": r.index}
    else:
        raise ValueError(f"epilogue argument of kind {r.kind!r}: not value, operand or const")
    if r.axes:
        d["axes"] = r.axes
    return d


def _positive_zero(x) -> bool:
    """Whether `x` is `Ref.const`'s default, 0.0 itself (not 0, nor -0.0)."""
    return type(x) is float and x == 0.0 and math.copysign(1.0, x) > 0


def epilogue_value(attr: ir.Attribute) -> Epilogue:
    """The `Epilogue` an `epilogue_attr` attribute holds, shared by its uses within a
    dispatch's pipeline (`pass_managers.reused`; never mutate it): super tiling lowers the
    same epilogues for every candidate, and a lookup table's 4,000 entries took 4 ms to
    decode through the bindings each time."""
    if not isinstance(attr, ir.DictAttr):
        raise CompileError(f"an epilogue is a dictionary {{result, steps}}, not {str(attr)[:80]}")
    return reused(("epilogue", attr), lambda: _decoded_epilogue(attr))


def _decoded_epilogue(attr: ir.DictAttr) -> Epilogue:
    """`epilogue_value`, decoded. Fields are looked up by name: iterating the dictionaries
    costs 2-4x as much through the bindings."""
    return Epilogue([EpilogueStep(s["op"].value, [_ref_value(a) for a in s["args"]], s["to"].value if "to" in s else "")
                     for s in attr["steps"]], attr["result"].value)


def _ref_value(a: ir.Attribute) -> Ref:
    if not isinstance(a, ir.DictAttr):
        return Ref("const", const=a.value)
    axes = tuple(x.value for x in a["axes"]) if "axes" in a else ()
    const = a["const"].value if "const" in a else 0.0
    for kind in ("value", "operand"):
        if kind in a:
            return Ref(kind, a[kind].value, axes, const)
    return Ref("const", a["index"].value if "index" in a else 0, axes, const)
