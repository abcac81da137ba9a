"""Turn a `flow.dispatch.workgroups` body into a standalone tensor function.

The Torq dispatch pipeline works on plain `func.func` ops over tensors: one
argument per dispatch input (full `dispatch.tensor.load`), one result per
dispatch output (full `dispatch.tensor.store`). A dispatch that writes a
box of a read-write operand (IREE writes a producer into its consumer's
padded buffer, and each part of a concatenation into the result, this way)
returns the box; `mark_in_place_updates` then records on the function
(`IN_PLACE_RESULTS`) that the NPU writes it in place into the read-write
operand, which the call passes as an extra input (torq-build-nss-program
makes the output an alias of it). A result whose box the host must still
insert (one with a host tail) keeps `result_updates` for the target's host
copy. A load of a static box of an input that is only stored becomes a
`tensor.extract_slice` (a DMA box: the dispatch is a copy). Any other load
of a static box of an input (IREE slices the query, key and value of an
attention out of one tensor this way) becomes a *box read* of the whole
argument: a copy `linalg.generic` whose input map reads the box at constant
offsets (`box_reads.box_read_generic`, lowered to a DMA box by
torq-lower-to-torq-hl).
A load of a static *strided* box (`x[:, :, ::2, ::2]`: IREE slices the input
of a 1x1 stride-2 convolution this way) is folded into the `linalg.generic`
ops that read it: each reads the whole argument through its indexing map
composed with the box map (`stride * d + offset`), so a 1x1 convolution
reading every 2nd pixel becomes a 1x1 convolution with stride 2
(`box_reads.fold_strided_box_read`). Dynamic boxes, strided boxes read by anything
but a generic's input, reads of a read-write operand and dynamic shapes are
`Unsupported`: host. An `iree_linalg_ext.attention` (torch's
scaled_dot_product_attention) is decomposed into linalg ops the Torq
patterns match (torq-decompose-attention); one it cannot decompose is
`Unsupported`.

Operands that are constants at the flow level (`arith.constant`, or
`util.global.load` of an immutable global with a constant initial value that
nothing stores) stay function arguments, but their values are known
(`FlowModuleFacts.constant`, read-only and on demand), so
`lower_requantization` can read weights, biases and per-channel scales: it
replaces a float requantization after an integer contraction with an exact
integer rescale (`requant.py`), drops the arguments this leaves unread, and
records a dequantize tail for the host (`host_dispatches.host_tail_dispatch`
builds it).

For a dispatch left on the host, `host_dispatches.hoist_input_pads` edits the flow-level
dispatch itself: a padding of a loaded input is built before the dispatch
(a splat and a host copy dispatch, `box_copy_dispatch`, as IREE does for a
padding it does not fuse) and the dispatch reads the padded tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from iree.compiler import ir

from .box_reads import (
    Box,
    binding_tensor,
    box_map,
    box_read_generic,
    check_strided_readers,
    fold_strided_box_read,
    generic_can_read,
    static_box,
)
from .f32_chain import host_float_semantics
from .ir_utils import block_ops, constant_value, static_shape, walk_ops
from .passes import decompose_attention
from .patterns import Unsupported
from .requant import lower_float_requantization, unused_arguments
from .requant_channels import Known
from .requant_elementwise import is_int8_arithmetic, lower_int8_arithmetic
from .requant_summary import RequantSummary
from .requant_tail import HostTail
from .rescale_fit import NotExact


def _is_full(op: ir.Operation, shape: tuple[int, ...]) -> bool:
    box = static_box(op)
    return box is not None and not any(box.offsets) and all(s == 1 for s in box.strides) \
        and tuple(box.sizes) == tuple(shape)


@dataclass
class ExtractedDispatch:
    func: ir.Operation
    input_operands: list[int]  # dispatch operand index of each function argument
    # For each dispatch result: (tied operand index, store offsets) when the
    # dispatch writes a box of a read-write operand, else (-1, None).
    result_updates: list[tuple[int, list[int] | None]]
    # Per function result: elementwise ops the host applies to the NPU result.
    host_tails: dict[int, HostTail] = field(default_factory=dict)
    # The flow-level value of each function argument (`FlowModuleFacts.constant` reads them).
    arg_values: list[ir.Value] = field(default_factory=list)
    # Per dispatch result: the type of the read-write operand it updates and the sizes
    # of the box it stores (per dim of that operand: unit dims the result drops too), else None.
    dest_types: list[ir.Type | None] = field(default_factory=list)
    update_sizes: list[list[int] | None] = field(default_factory=list)
    # Function results the NPU writes in place into their read-write operand
    # (`mark_in_place_updates`), in the order the call passes those operands.
    in_place: list[int] = field(default_factory=list)


def _tied_operands(dispatch: ir.Operation) -> list[int]:
    if "tied_operands" not in dispatch.attributes:
        return [-1] * len(dispatch.results)
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(dispatch.attributes["tied_operands"])]


def extract_dispatch_function(dispatch: ir.Operation, name: str, module: ir.Module) -> ExtractedDispatch:
    """Build `func.func @name` in `module` from a clone of `dispatch`'s body."""
    block = dispatch.regions[0].blocks[0]
    n_operands = len(dispatch.operands)
    tied = _tied_operands(dispatch)
    # Block argument of each dispatch result.
    result_args, k = [], n_operands
    for t in tied:
        if t >= 0:
            result_args.append(t)
        else:
            result_args.append(k)
            k += 1
    kinds = []
    for arg in block.arguments:
        if not str(arg.type).startswith("!iree_tensor_ext.dispatch.tensor"):
            raise Unsupported(f"dispatch takes a non-tensor operand ({arg.type})")
        access, t = binding_tensor(arg.type)
        if static_shape(t) is None:
            raise Unsupported("dispatch has dynamic shapes")
        kinds.append((access, t))
    input_args = [i for i in range(n_operands) if kinds[i][0] == "readonly"]
    out_types = []
    for r, a in zip(dispatch.results, result_args):
        if kinds[a][0] == "readwrite":
            uses = [u.owner for u in block.arguments[a].uses]
            if len(uses) != 1 or uses[0].name != "iree_tensor_ext.dispatch.tensor.store":
                raise Unsupported("dispatch reads a tensor it updates in place")
            out_types.append(uses[0].operands[0].type)
        else:
            out_types.append(kinds[a][1])
    in_pos = {a: n for n, a in enumerate(input_args)}
    out_pos = {a: n for n, a in enumerate(result_args)}
    updates, update_sizes = _check_loads_and_stores(block, kinds, in_pos, out_pos)
    for op in block_ops(block):
        if op.name == decompose_attention.ATTENTION:
            reason = decompose_attention.unsupported_reason(op)
            if reason:
                raise Unsupported(reason)
    # Everything that can refuse the dispatch has run on the original body.
    # Only now is a clone taken apart: erasing IR whose nested ops still have
    # Python handles (a half-moved clone on an error path) corrupts the heap.
    func_type = ir.FunctionType.get([kinds[i][1] for i in input_args], out_types)
    with ir.InsertionPoint(module.body):
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(name),
                        "function_type": ir.TypeAttr.get(func_type),
                        "torq.dispatch": ir.UnitAttr.get()},
            loc=dispatch.location)
    fblock = func.regions[0].blocks.append(*[kinds[i][1] for i in input_args])
    clone = dispatch.clone()
    results: list[ir.Value | None] = [None] * len(result_args)
    for op in block_ops(clone.regions[0].blocks[0]):
        if op.name == "iree_tensor_ext.dispatch.tensor.load":
            arg = fblock.arguments[in_pos[op.operands[0].arg_number]]
            box = static_box(op)
            if _is_full(op, static_shape(arg.type)):
                op.results[0].replace_all_uses_with(arg)
            elif box.strided:
                fold_strided_box_read(op.results[0], arg, box_map(arg.type, box, op.results[0].type))
            else:
                _replace_box_load(op, arg, box, fblock)
            op.erase()
        elif op.name == "iree_tensor_ext.dispatch.tensor.store":
            results[out_pos[op.operands[1].arg_number]] = op.operands[0]
            op.erase()
        elif op.name == "flow.return":
            op.erase()
        else:
            _append(op, fblock)
    with ir.InsertionPoint(fblock), dispatch.location:
        ir.Operation.create("func.return", operands=results)
    clone.erase()
    decompose_attention.decompose_function(func)
    dest_types = [kinds[t][1] if t >= 0 else None for t, _ in updates]
    return ExtractedDispatch(func, input_args, updates, arg_values=[dispatch.operands[i] for i in input_args],
                             dest_types=dest_types, update_sizes=update_sizes)


STORE = "iree_tensor_ext.dispatch.tensor.store"
# Function attribute: the results written in place into a read-write operand, one
# dict per such result in call order: {"result": index, "shape": the operand's
# shape, "offsets" and "sizes": the box the result fills in it (per operand dim;
# the result may drop unit dims of the box, matched from the left as in `box_map`)}.
IN_PLACE_RESULTS = "torq.in_place_results"


def _replace_box_load(load: ir.Operation, arg: ir.Value, box: "Box", block: ir.Block) -> None:
    """Replace a load of unit-stride `box` of `arg`: stores read it as a
    `tensor.extract_slice` (a DMA box copied to the output), other users as a
    box read generic (`box_read_generic`)."""
    uses = [(u.owner, u.operand_number) for u in load.results[0].uses]
    stores = [(o, k) for o, k in uses if not isinstance(o, ir.Block) and o.name == STORE]
    with ir.InsertionPoint(block), load.location:
        if stores:
            view = ir.Operation.create(
                "tensor.extract_slice", results=[load.results[0].type], operands=[arg],
                attributes={"static_offsets": ir.DenseI64ArrayAttr.get(box.offsets),
                            "static_sizes": ir.DenseI64ArrayAttr.get(box.sizes),
                            "static_strides": ir.DenseI64ArrayAttr.get([1] * len(box.sizes)),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).results[0]
            for owner, k in stores:
                owner.operands[k] = view
        if len(stores) < len(uses):
            load.results[0].replace_all_uses_with(box_read_generic(arg, box, load.results[0].type))


def mark_in_place_updates(ex: ExtractedDispatch, func: ir.Operation) -> None:
    """Record (`IN_PLACE_RESULTS` on `func`, `ex.in_place`) that each result updating a
    box of a read-write operand is written in place on the NPU, except one the host
    finishes (a host tail: its box is inserted after the tail, `result_updates`)."""
    entries = []
    for k, ((tied, offsets), dest, sizes) in enumerate(zip(ex.result_updates, ex.dest_types, ex.update_sizes)):
        if tied < 0 or k in ex.host_tails:
            continue
        ex.in_place.append(k)
        entries.append(ir.DictAttr.get({
            "result": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k),
            "shape": ir.DenseI64ArrayAttr.get(list(static_shape(dest))),
            "offsets": ir.DenseI64ArrayAttr.get(list(offsets)),
            "sizes": ir.DenseI64ArrayAttr.get(list(sizes))}))
    if entries:
        func.attributes[IN_PLACE_RESULTS] = ir.ArrayAttr.get(entries)


class FlowModuleFacts:
    """Read-only facts of the flow-level module the Torq target runs on, each worked out
    once, on first use (the target only replaces dispatches: it adds no global and no
    store, so they hold for the whole run)."""

    def __init__(self, module_op: ir.Operation):
        self.module_op = module_op

    @cached_property
    def constant_globals(self) -> dict[str, ir.Attribute]:
        """Immutable globals with a constant initial value that no op stores (an immutable
        global may still be set once by an initializer): name -> initial value."""
        stored = {ir.FlatSymbolRefAttr(o.attributes["global"]).value
                  for o in walk_ops(self.module_op) if o.name == "util.global.store"}
        out = {}
        for op in self.module_op.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "util.global" or "is_mutable" in op.attributes or "initial_value" not in op.attributes:
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            init = op.attributes["initial_value"]
            if name not in stored and isinstance(init, (ir.DenseElementsAttr, ir.DenseResourceElementsAttr)):
                out[name] = init
        return out

    @cached_property
    def host_float(self):
        """The module's llvm-cpu float semantics (`requant.host_float_semantics`)."""
        return host_float_semantics(self.module_op)

    def constant(self, v: ir.Value) -> np.ndarray | None:
        """The value of flow-level `v` if it is an `arith.constant` or a `util.global.load`
        of one of `constant_globals`; else None."""
        op = v.owner
        if isinstance(op, ir.Block):
            return None
        if op.name == "arith.constant":
            return constant_value(op.attributes["value"])
        if op.name != "util.global.load" or "is_immutable" not in op.attributes:
            return None
        init = self.constant_globals.get(ir.FlatSymbolRefAttr(op.attributes["global"]).value)
        return constant_value(init) if init is not None else None


def lower_requantization(ex: ExtractedDispatch, func: ir.Operation, facts: FlowModuleFacts,
                         nearest: bool = True) -> list[RequantSummary]:
    """Float requantizations after integer contractions in `func` become integer rescales
    (`requant.lower_float_requantization`: exact, or with `nearest` the nearest within one
    output step); returns one summary per rewrite.

    Raises Unsupported, with `func` unchanged, when one cannot be reproduced. Arguments
    the rewrite leaves unread are removed (from `func` and `ex.input_operands`),
    and dequantize tails cut off become `ex.host_tails`.
    """
    had_users = set(range(len(func.regions[0].blocks[0].arguments))) - set(unused_arguments(func))
    constants = _ConstantArgs(ex, facts)
    try:
        done = lower_float_requantization(func, constants, lambda: facts.host_float, nearest)
        if not done.rescaled and is_int8_arithmetic(func, Known(constants)):
            done.rescaled = lower_int8_arithmetic(func, Known(constants), lambda: facts.host_float, nearest)
    except NotExact as e:
        raise Unsupported(str(e)) from None
    if not done.rescaled and not done.host_tails:
        return []
    ex.host_tails.update(done.host_tails)
    dropped = sorted((k for k in unused_arguments(func) if k in had_users), reverse=True)
    block = func.regions[0].blocks[0]
    for k in dropped:
        block.erase_argument(k)
        del ex.input_operands[k]
        del ex.arg_values[k]
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results)))
    return done.rescaled


class _ConstantArgs:
    """Function argument index -> constant value (or None), resolved on first use."""

    def __init__(self, ex: ExtractedDispatch, facts: FlowModuleFacts):
        self.ex, self.facts = ex, facts
        self.cache: dict[int, np.ndarray | None] = {}

    def get(self, k: int) -> np.ndarray | None:
        if k not in self.cache:
            self.cache[k] = self.facts.constant(self.ex.arg_values[k])
        return self.cache[k]


def _check_loads_and_stores(block: ir.Block, kinds, in_pos: dict, out_pos: dict) -> list:
    """Refuses (Unsupported) bodies the extraction cannot turn into a tensor function.

    Returns, per result, (tied operand, box offsets) for read-write stores, else (-1, None),
    and per result the box sizes of such a store (else None).
    """
    updates: list[tuple[int, list[int] | None]] = [(-1, None)] * len(out_pos)
    sizes: list[list[int] | None] = [None] * len(out_pos)
    stored = set()
    for op in block_ops(block):
        if op.name == "iree_tensor_ext.dispatch.tensor.load":
            src = op.operands[0]
            pos = src.arg_number if isinstance(src.owner, ir.Block) else None
            if pos not in in_pos:
                raise Unsupported("dispatch loads a tensor it does not take as input")
            if _is_full(op, static_shape(kinds[pos][1])):
                continue
            box = static_box(op)
            if box is None or box_map(kinds[pos][1], box, op.results[0].type) is None:
                raise Unsupported("dispatch loads a dynamic part of an input, or a part it cannot read as a box")
            stores_only = all(not isinstance(u.owner, ir.Block) and u.owner.name == STORE for u in op.results[0].uses)
            if not stores_only and not generic_can_read(kinds[pos][1], box, op.results[0].type):
                raise Unsupported("dispatch computes on a box of an input that starts at 0 and stops short of the "
                                  "input's end (e.g. x[:, :16]): no box read expresses it yet")
            if box.strided:
                check_strided_readers(op.results[0])
        elif op.name == "iree_tensor_ext.dispatch.tensor.store":
            dst = op.operands[1]
            pos = dst.arg_number if isinstance(dst.owner, ir.Block) else None
            if pos not in out_pos or pos in stored:
                raise Unsupported("dispatch stores an output twice")
            stored.add(pos)
            if kinds[pos][0] == "readwrite":
                box = static_box(op)
                if box is None or box.strided:
                    raise Unsupported("dispatch updates a strided or dynamic box")
                updates[out_pos[pos]] = (pos, box.offsets)
                sizes[out_pos[pos]] = box.sizes
            elif not _is_full(op, static_shape(op.operands[0].type)):
                raise Unsupported("dispatch stores part of an output")
    if len(stored) != len(out_pos):
        raise Unsupported("dispatch output never stored")
    return updates, sizes


def _append(op: ir.Operation, block: ir.Block) -> None:
    op.detach_from_parent()
    ir.InsertionPoint(block).insert(op)
