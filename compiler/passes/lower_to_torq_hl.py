"""torq-lower-to-torq-hl: replace each fused group with one TorqHL op.

Contract: runs the same matchers as marking (`patterns.match_group`), in
rewrite mode, on every linalg op of the function, inside tile loops or not.
Each group becomes one unregistered `torq_hl.<kind>` op (`conv2d`, `matmul`,
`depthwise_conv2d`, `maxpool2d`, `avg_pool2d`, `reduce`, `elementwise`)
whose operands are the group's inputs (principal inputs first, then epilogue
operands), whose result replaces the group's bottom op, and whose attributes
carry the layout attributes, the folded epilogue (JSON in `epilogue`) and
`macs`. A reduction with an elementwise prologue is preceded by a
`torq_hl.elementwise` computing its input; a gathering reduction (adaptive
average pooling) reads a `tensor.extract_slice` of the gathered box, and its
constant extra results become operand-less `torq_hl.elementwise` ops. A box
read (`patterns.box_read`: a copy of part of an input) becomes the
`tensor.extract_slice` of that box, which the NSS program reads as a DMA box.
Padded views (`torq.pad`, torq-fold-padding) stay as they are: the NSS
program reads their boxes and hands the padding to the consuming op.
Afterwards no linalg op remains; a linalg op no pattern covers is a compile
error naming it.
"""

from __future__ import annotations

from iree.compiler import ir

from torq.runtime.program import Epilogue, EpilogueStep, Ref
from ..ir_utils import CompileError, location_str, static_shape, walk_ops
from ..patterns import (PAD_VIEW, Gather, Match, Unsupported, box_read, epilogue_to_json, is_zero_fill,
                        match_group)
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
    operands = list(match.inputs)
    with ir.InsertionPoint(match.bottom), match.bottom.location:
        if match.prologue is not None:  # an elementwise op first; its result is operand 0
            p_inputs, p_epilogue, p_type = match.prologue
            pro = ir.Operation.create("torq_hl.elementwise", results=[p_type], operands=list(p_inputs),
                                      attributes={"epilogue": ir.StringAttr.get(epilogue_to_json(p_epilogue)),
                                                  "macs": _attr(0)})
            operands[0] = pro.results[0]
        if match.gather is not None:  # the box the principal reads, as a slice (a DMA box)
            operands[0] = _box(match.gather)
        new = ir.Operation.create(f"torq_hl.{match.kind}", results=[match.bottom.results[0].type],
                                  operands=operands, attributes=attrs)
        if match.gather is not None:
            for i, c in match.gather.consts.items():  # further results: scalar constants
                r = match.principal.results[i]
                const = ir.Operation.create(
                    "torq_hl.elementwise", results=[r.type], operands=[],
                    attributes={"epilogue": ir.StringAttr.get(epilogue_to_json(Epilogue(
                        [EpilogueStep("add", [Ref("const", const=c), Ref("const", const=0.0)])], 0))),
                        "macs": _attr(0)})
                r.replace_all_uses_with(const.results[0])
    match.bottom.results[0].replace_all_uses_with(new.results[0])
    # Erase users before producers. An accumulator fill CSE made common to
    # several groups (two matmuls of one shape) stays until its last group.
    for op in [match.bottom] + [o for o in match.ops if o is not match.bottom and not is_zero_fill(o)] \
            + [o for o in match.ops if is_zero_fill(o)]:
        if all(not list(r.uses) for r in op.results):
            op.erase()
    return new


def _box(g: Gather) -> ir.Value:
    """`g.source` itself, or the slice of it the gathered box covers."""
    shape = static_shape(g.source.type)
    if all(o == 0 for o in g.offsets) and list(g.sizes) == list(shape):
        return g.source
    elt = ir.RankedTensorType(g.source.type).element_type
    return _slice(g.source, g.offsets, g.sizes, ir.RankedTensorType.get(list(g.sizes), elt))


def _slice(source: ir.Value, offsets: list[int], sizes: list[int], result: ir.Type) -> ir.Value:
    dense = ir.DenseI64ArrayAttr.get
    return ir.Operation.create(
        "tensor.extract_slice", results=[result], operands=[source],
        attributes={"static_offsets": dense(list(offsets)), "static_sizes": dense(list(sizes)),
                    "static_strides": dense([1] * len(offsets)),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).results[0]


def lower_box_reads(func: ir.Operation) -> None:
    """Replace every box read with the `tensor.extract_slice` of its box."""
    boxes = [(op, b) for op in walk_ops(func) if (b := box_read(op)) is not None]
    for op, b in boxes:
        with ir.InsertionPoint(op), op.location:
            view = _slice(op.operands[0], b.offsets, b.sizes, op.results[0].type)
        op.results[0].replace_all_uses_with(view)
        op.erase()


def lower_function(func: ir.Operation) -> None:
    lower_box_reads(func)
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
    """Drop side-effect-free ops (empty, slices, constants, padded views) left without
    users (tiling may leave a copy of a padded view in a loop)."""
    removable = {"tensor.empty", "tensor.extract_slice", "arith.constant", PAD_VIEW}
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
