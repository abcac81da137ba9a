"""torq-fold-padding: make each foldable `tensor.pad` a view its consumers pad themselves.

Contract: takes `func.func` ops over tensors (a Torq dispatch function; run
before marking and tiling). Every `tensor.pad` that `patterns.padding_fold`
accepts (static amounts, constant value, all users conv / depthwise conv /
pooling principals reading it as their input, padding only on window dims,
or the function's return: a result the NSS program writes padded, its
border from a buffer filled with the pad value) becomes a `torq.pad` op (`patterns.PAD_VIEW`): same operand and result
type, attrs `low` and `high` (i64 arrays, per dim) and `value` (the pad
value). Any other `tensor.pad` is a compile error naming it and why (the
Torq target keeps such dispatches on the host).

Model (the hardware's, as the reference compiler describes its conv and
pooling units: an input box plus padding amounts): the padded tensor is
never written anywhere. `torq.pad` implements no TilingInterface, so tiling
stops there and a tile's input is a static-shaped box of the padded tensor
(its halo included). torq-build-nss-program DMAs only the part of that box
inside the source tensor and gives the op the rest as its `pad` attr
[top, bottom, left, right]: the slice reads rows and columns outside its
operand as the pad value. Padding costs no DDR traffic and no DMA bytes; the
LRAM buffer is sized for the whole box (the largest any tile reads).
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import CompileError, functions, location_str, replace_with_op, walk_ops
from ..patterns import PAD_VIEW, Unsupported, padding_fold
from . import PassOptions

NAME = "torq-fold-padding"


def fold_function(func: ir.Operation) -> None:
    pads = [op for op in walk_ops(func) if op.name == "tensor.pad"]
    planned = []
    for op in pads:  # decide everything before the IR changes
        try:
            planned.append((op, padding_fold(op)))
        except Unsupported as e:
            raise CompileError(f"{location_str(op)}: error: tensor.pad: {e}") from None
    for op, p in planned:
        elt = ir.RankedTensorType(op.results[0].type).element_type
        value = (ir.FloatAttr.get(elt, p.value) if not isinstance(elt, ir.IntegerType)
                 else ir.IntegerAttr.get(elt, int(p.value)))
        replace_with_op(op, PAD_VIEW, {"low": ir.DenseI64ArrayAttr.get(p.low), "high": ir.DenseI64ArrayAttr.get(p.high),
                                       "value": value}, [op.operands[0]])


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        fold_function(func)
