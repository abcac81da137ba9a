"""torq-mark-in-place-updates: results the NPU writes in place into a read-write operand.

Contract: takes Torq dispatch functions whose `RESULT_UPDATES` attribute
(from dispatch extraction) lists the results that update a box of a
read-write operand of the dispatch (IREE writes a producer into its
consumer's padded buffer, and each part of a concatenation into the result,
this way). Each such result is written in place by the NPU: it is recorded in
`IN_PLACE_RESULTS` (torq-build-nss-program makes that output an alias of the
operand, which the call passes after the inputs). A result the host finishes
(a dequantize tail, listed in `HOST_TAIL_RESULTS` by
torq-lower-requantization) is not: the host inserts its box after the tail.
`RESULT_UPDATES` and `HOST_TAIL_RESULTS` are consumed. Returns {function name: the in-place results in
call order}.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import CompileError, functions
from . import PassOptions

NAME = "torq-mark-in-place-updates"
# Function attribute (input): one dict per result that updates a box of a read-write
# operand, in result order, as in IN_PLACE_RESULTS.
RESULT_UPDATES = "torq.result_updates"
# Function attribute: the results written in place into a read-write operand, one
# dict per such result in call order: {"result": index, "shape": the operand's
# shape, "offsets" and "sizes": the box the result fills in it (per operand dim;
# the result may drop unit dims of the box, matched from the left as in `box_map`)}.
# A box at a runtime offset along one dim also has INDEX_DIM (that dim; its entry in
# "offsets" is 0, its size 1) and INDEX_INPUT (the function argument, a tensor<1xi32>,
# holding the offset).
IN_PLACE_RESULTS = "torq.in_place_results"
INDEX_DIM = "index_dim"
INDEX_INPUT = "index_input"
# Function attribute (input, from torq-lower-requantization): the results whose dequantize
# tail the host computes.
HOST_TAIL_RESULTS = "torq.host_tail_results"


def drop_result_updates(func: ir.Operation, kept: list[int]) -> None:
    """`RESULT_UPDATES` after the function's results were cut to `kept` (their former
    indices): a removed result's entry goes (the host writes its box), the others are
    renumbered."""
    if RESULT_UPDATES not in func.attributes:
        return
    i64 = ir.IntegerType.get_signless(64)
    entries = []
    for e in map(ir.DictAttr, ir.ArrayAttr(func.attributes[RESULT_UPDATES])):
        k = ir.IntegerAttr(e["result"]).value
        if k in kept:
            entries.append(ir.DictAttr.get({n.name: n.attr for n in e} | {"result": ir.IntegerAttr.get(i64, kept.index(k))}))
    del func.attributes[RESULT_UPDATES]
    if entries:
        func.attributes[RESULT_UPDATES] = ir.ArrayAttr.get(entries)


def mark_function(func: ir.Operation) -> list[int]:
    host = set()
    if HOST_TAIL_RESULTS in func.attributes:
        host = set(ir.DenseI64ArrayAttr(func.attributes[HOST_TAIL_RESULTS]))
        del func.attributes[HOST_TAIL_RESULTS]
    if RESULT_UPDATES not in func.attributes:
        return []
    entries = [ir.DictAttr(e) for e in ir.ArrayAttr(func.attributes[RESULT_UPDATES])]
    kept = [e for e in entries if ir.IntegerAttr(e["result"]).value not in host]
    if any(INDEX_DIM in e for e in entries if e not in kept):
        raise CompileError(f"{ir.StringAttr(func.attributes['sym_name']).value}: a result written at a runtime "
                           "offset has a host tail: the host cannot insert it")
    del func.attributes[RESULT_UPDATES]
    if kept:
        func.attributes[IN_PLACE_RESULTS] = ir.ArrayAttr.get(kept)
    return [ir.IntegerAttr(e["result"]).value for e in kept]


def run(module: ir.Module, options: PassOptions) -> dict[str, list[int]]:
    return {ir.StringAttr(func.attributes["sym_name"]).value: mark_function(func)
            for func in functions(module)}
