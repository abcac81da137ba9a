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
offsets (`box_read_generic`, lowered to a DMA box by torq-lower-to-torq-hl).
A load of a static *strided* box (`x[:, :, ::2, ::2]`: IREE slices the input
of a 1x1 stride-2 convolution this way) is folded into the `linalg.generic`
ops that read it: each reads the whole argument through its indexing map
composed with the box map (`stride * d + offset`), so a 1x1 convolution
reading every 2nd pixel becomes a 1x1 convolution with stride 2
(`fold_strided_box_read`). Dynamic boxes, strided boxes read by anything
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
records a dequantize tail for the host (`host_tail_dispatch` builds it).

For a dispatch left on the host, `hoist_input_pads` edits the flow-level
dispatch itself: a padding of a loaded input is built before the dispatch
(a splat and a host copy dispatch, `box_copy_dispatch`, as IREE does for a
padding it does not fuse) and the dispatch reads the padded tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith, flow, iree_tensor_ext

from .f32_chain import host_float_semantics
from .ir_utils import block_ops, constant_value, int_array, region_ops, static_shape, walk_ops
from .passes import decompose_attention
from .patterns import Unsupported
from .requant import lower_float_requantization, unused_arguments
from .requant_channels import Known
from .requant_elementwise import is_int8_arithmetic, lower_int8_arithmetic
from .requant_summary import RequantSummary
from .requant_tail import HostTail
from .rescale_fit import NotExact


def _tensor_of(binding_type: ir.Type) -> ir.Type:
    s = str(binding_type)  # !iree_tensor_ext.dispatch.tensor<readonly:tensor<...>>
    inner = s[s.index("<") + 1: -1]
    access, _, tensor = inner.partition(":")
    return access, ir.Type.parse(tensor)


def _is_full(op: ir.Operation, shape: tuple[int, ...]) -> bool:
    box = _static_box(op)
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
        access, t = _tensor_of(arg.type)
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
            box = _static_box(op)
            if _is_full(op, static_shape(arg.type)):
                op.results[0].replace_all_uses_with(arg)
            elif box.strided:
                fold_strided_box_read(op.results[0], arg, _box_map(arg.type, box, op.results[0].type))
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
# the result may drop unit dims of the box, matched from the left as in `_box_map`)}.
IN_PLACE_RESULTS = "torq.in_place_results"


def _replace_box_load(load: ir.Operation, arg: ir.Value, box: "_Box", block: ir.Block) -> None:
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


def host_tail_dispatch(value: ir.Value, tail: HostTail, element_type: ir.Type) -> ir.Value:
    """A host dispatch computing `tail` elementwise from `value` (a tensor of `element_type`
    results, the same shape), at the insertion point."""
    src = value.type
    shape = static_shape(src)
    result_type = ir.RankedTensorType.get(list(shape), element_type)
    zeros = ", ".join("0" for _ in shape)
    ones = ", ".join("1" for _ in shape)
    sizes = ", ".join(str(d) for d in shape)
    dims = ", ".join(f"d{k}" for k in range(len(shape)))
    ident = f"affine_map<({dims}) -> ({dims})>"
    parallel = ", ".join(['"parallel"'] * len(shape))
    ro = f"!iree_tensor_ext.dispatch.tensor<readonly:{src}>"
    wo = f"!iree_tensor_ext.dispatch.tensor<writeonly:{result_type}>"
    body = "\n        ".join(tail.ops_text.splitlines())
    # Per-channel constants the tail reads, made inside the dispatch.
    consts = "".join(f"\n    %p{k}_t = arith.constant dense<{values}> : tensor<{len(values)}x{t}>"
                     for k, (_, t, values) in enumerate(tail.channel_values))
    ins = "".join(f", %p{k}_t" for k in range(len(tail.channel_values)))
    in_types = "".join(f", tensor<{len(values)}x{t}>" for _, t, values in tail.channel_values)
    maps = "".join(f", affine_map<({dims}) -> (d{dim})>" for dim, _, _ in tail.channel_values)
    args = "".join(f", %p{k}: {t}" for k, (_, t, _) in enumerate(tail.channel_values))
    text = f"""
util.func private @torq_host_tail(%x: {src}) -> {result_type} {{
  %r = flow.dispatch.workgroups(%x) : ({src}) -> {result_type} =
      (%a: {ro}, %b: {wo}) {{
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [{zeros}], sizes = [{sizes}], strides = [{ones}] : {ro} -> {src}
    %e = tensor.empty() : {result_type}{consts}
    %g = linalg.generic {{indexing_maps = [{ident}{maps}, {ident}], iterator_types = [{parallel}]}}
        ins(%v{ins} : {src}{in_types}) outs(%e : {result_type}) {{
      ^bb0(%q: {tail.in_type}{args}, %out: {tail.result_type}):
        {body}
        linalg.yield {tail.result} : {tail.result_type}
    }} -> {result_type}
    iree_tensor_ext.dispatch.tensor.store %g, %b, offsets = [{zeros}], sizes = [{sizes}], strides = [{ones}] : {result_type} -> {wo}
    flow.return
  }} count() -> (index, index, index) {{
    %x0, %y0, %z0 = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x0, %y0, %z0 : index, index, index
  }}
  util.return %r : {result_type}
}}"""
    return clone_host_dispatch(text, [value])


def clone_host_dispatch(text: str, operands: list[ir.Value]) -> ir.Value:
    """A small host dispatch written as text: `text` is a util.func holding one
    flow.dispatch.workgroups; that dispatch is cloned at the current insertion
    point with `operands` in place of its own, and its result returned."""
    helper = ir.Module.parse(text)
    template = next(op for op in walk_ops(helper.operation) if op.name == "flow.dispatch.workgroups")
    copy = template.clone()
    for i, v in enumerate(operands):
        copy.operands[i] = v
    return copy.results[0]


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
            box = _static_box(op)
            if box is None or _box_map(kinds[pos][1], box, op.results[0].type) is None:
                raise Unsupported("dispatch loads a dynamic part of an input, or a part it cannot read as a box")
            stores_only = all(not isinstance(u.owner, ir.Block) and u.owner.name == STORE for u in op.results[0].uses)
            if not stores_only and not _generic_can_read(kinds[pos][1], box, op.results[0].type):
                raise Unsupported("dispatch computes on a box of an input that starts at 0 and stops short of the "
                                  "input's end (e.g. x[:, :16]): no box read expresses it yet")
            if box.strided:
                _check_strided_readers(op.results[0])
        elif op.name == "iree_tensor_ext.dispatch.tensor.store":
            dst = op.operands[1]
            pos = dst.arg_number if isinstance(dst.owner, ir.Block) else None
            if pos not in out_pos or pos in stored:
                raise Unsupported("dispatch stores an output twice")
            stored.add(pos)
            if kinds[pos][0] == "readwrite":
                box = _static_box(op)
                if box is None or box.strided:
                    raise Unsupported("dispatch updates a strided or dynamic box")
                updates[out_pos[pos]] = (pos, box.offsets)
                sizes[out_pos[pos]] = box.sizes
            elif not _is_full(op, static_shape(op.operands[0].type)):
                raise Unsupported("dispatch stores part of an output")
    if len(stored) != len(out_pos):
        raise Unsupported("dispatch output never stored")
    return updates, sizes


@dataclass
class _Box:
    """A static box of a tensor: `sizes` elements at `offsets`, every `strides`-th per dim."""
    offsets: list[int]
    sizes: list[int]
    strides: list[int]

    @property
    def strided(self) -> bool:
        return any(st != 1 for st, sz in zip(self.strides, self.sizes) if sz > 1)


def _static_box(op: ir.Operation) -> _Box | None:
    """The static box a `dispatch.tensor.load` / `store` reads or writes, or None if dynamic."""
    try:
        offsets = int_array(op.attributes["static_offsets"])
        strides = int_array(op.attributes["static_strides"])
        sizes = int_array(op.attributes["static_sizes"])
    except KeyError:
        return None
    if any(o < 0 for o in offsets) or any(s < 1 for s in strides) or any(s < 0 for s in sizes) \
            or len(op.operands) > 2:
        return None  # negative values are the dynamic sentinel; more operands are dynamic values
    return _Box(offsets, sizes, strides)


def _box_map(source: ir.Type, box: _Box, result: ir.Type) -> ir.AffineMap | None:
    """The map from `result` indices to the `source` indices of `box`, or None.

    The result may drop unit dims of the box (a rank-reducing load); they
    are matched from the left, as `tensor.extract_slice` infers them. Each
    kept dim is read at `stride * d + offset`, each dropped one at its
    constant offset. None when the box is no such read or leaves the source.
    """
    src, res = static_shape(source), static_shape(result)
    n = len(src) if src is not None else -1
    if src is None or res is None or not len(box.offsets) == len(box.sizes) == len(box.strides) == n:
        return None
    if any(s and o + (s - 1) * st >= d for o, s, st, d in zip(box.offsets, box.sizes, box.strides, src)):
        return None
    exprs, j = [], 0
    for o, s, st in zip(box.offsets, box.sizes, box.strides):
        if j < len(res) and s == res[j]:
            e = ir.AffineExpr.get_dim(j)
            if st != 1 and s > 1:
                e = ir.AffineExpr.get_mul(e, ir.AffineExpr.get_constant(st))
            exprs.append(ir.AffineExpr.get_add(e, ir.AffineExpr.get_constant(o)) if o else e)
            j += 1
        elif s == 1:
            exprs.append(ir.AffineExpr.get_constant(o))
        else:
            return None
    if j != len(res):
        return None
    return ir.AffineMap.get(len(res), 0, exprs)


def _generic_can_read(source: ir.Type, box: _Box, result: ir.Type) -> bool:
    """Whether a box read generic can express `box`: linalg takes a loop's range from
    any operand dim its map reads as a plain `d`, so a box that starts at 0 and stops
    short of the source's end on a kept dim has no valid generic (the verifier would
    take the source's size for the loop's)."""
    src, res = static_shape(source), static_shape(result)
    j = 0
    for o, s, st, d in zip(box.offsets, box.sizes, box.strides, src):
        if j < len(res) and s == res[j]:
            if o == 0 and (st == 1 or s == 1) and s < d:  # read as a plain d (a stride makes it `st * d`)
                return False
            j += 1
    return True


def box_read_generic(source: ir.Value, box: _Box, result: ir.Type) -> ir.Value:
    """A copy generic reading the unit-stride `box` (`_box_map`) of `source`, at the insertion point."""
    res = static_shape(result)
    elt = ir.RankedTensorType(result).element_type
    dims = ", ".join(f"d{k}" for k in range(len(res)))
    parallel = ", ".join(['"parallel"'] * len(res))
    template = ir.Module.parse(f"""
func.func @box(%src: {source.type}) -> {result} {{
  %e = tensor.empty() : {result}
  %r = linalg.generic {{indexing_maps = [{ir.AffineMapAttr.get(_box_map(source.type, box, result))},
                                         affine_map<({dims}) -> ({dims})>],
                        iterator_types = [{parallel}]}}
      ins(%src : {source.type}) outs(%e : {result}) {{
  ^bb0(%in: {elt}, %out: {elt}):
    linalg.yield %in : {elt}
  }} -> {result}
  return %r : {result}
}}""")
    empty, copy = [o.operation for o in template.body.operations[0].regions[0].blocks[0].operations][:2]
    empty = empty.clone()
    copy = copy.clone()
    copy.operands[0] = source
    copy.operands[1] = empty.results[0]
    return copy.results[0]


def _generic_inputs_reading(value: ir.Value) -> list[tuple[ir.Operation, int]] | None:
    """(user, operand index) of every use of `value`, if each is an input of a
    `linalg.generic`; None otherwise."""
    out = []
    for use in value.uses:
        user = use.owner
        if isinstance(user, ir.Block) or user.name != "linalg.generic":
            return None
        n_ins = list(ir.DenseI32ArrayAttr(user.attributes["operandSegmentSizes"]))[0]
        if use.operand_number >= n_ins:
            return None
        out.append((user, use.operand_number))
    return out


def _check_strided_readers(value: ir.Value) -> None:
    """Refuses (Unsupported) a strided box load that cannot fold into its readers."""
    if _generic_inputs_reading(value) is None:
        users = sorted({u.owner.name for u in value.uses if not isinstance(u.owner, ir.Block)})
        raise Unsupported(f"dispatch loads a strided part of an input that {', '.join(users) or 'a block'} "
                          f"reads (only a linalg.generic input takes the stride into its indexing map)")


def fold_strided_box_read(value: ir.Value, source: ir.Value, box_map: ir.AffineMap) -> None:
    """Make every generic reading `value` (a box of `source` at `box_map`) read `source` itself.

    The reader's indexing map of that input becomes `box_map` composed with
    it: a 1x1 convolution map `(o, y, x, c) -> (c, y, x)` over the box
    `(c, y, x) -> (c, 2 * y, 2 * x)` gives `(o, y, x, c) -> (c, 2 * y, 2 * x)`,
    the map of a 1x1 convolution with stride 2. The readers were checked by
    `_check_strided_readers`.
    """
    readers = _generic_inputs_reading(value)
    assert readers is not None
    for user, k in readers:  # all uses collected before any is changed
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(user.attributes["indexing_maps"])]
        m = maps[k]
        maps[k] = ir.AffineMap.get(m.n_dims, m.n_symbols, [e.compose(m) for e in box_map.results])
        user.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(x) for x in maps])
        user.operands[k] = source


def _append(op: ir.Operation, block: ir.Block) -> None:
    op.detach_from_parent()
    ir.InsertionPoint(block).insert(op)


LOAD = "iree_tensor_ext.dispatch.tensor.load"


@dataclass
class _PadHoist:
    """A `tensor.pad` of a loaded input that `hoist_input_pads` can build at flow level."""
    pad: ir.Operation
    load: ir.Operation  # the load the pad reads
    binding: ir.BlockArgument  # the readonly binding that load reads
    operand: int  # the dispatch operand of that binding
    value: ir.Attribute  # the scalar pad value
    # Whole input: the dispatch operand itself is padded by `low` / `high` (per
    # input dim) and every load of the binding reads its box shifted by `low`.
    # Else only the loaded box is padded (by `low` / `high` per dim of the pad).
    whole: bool
    low: list[int]
    high: list[int]


def hoist_input_pads(dispatch: ir.Operation, accept) -> int:
    """Move the paddings of `dispatch`'s inputs that `accept(pad)` takes out of it;
    returns how many moved.

    Contract: each accepted `tensor.pad` (static amounts, a constant pad value)
    of a static `dispatch.tensor.load` of a readonly binding is built before
    the dispatch as IREE builds a padding it does not fuse: `flow.tensor.splat`
    of the pad value, and a host copy dispatch (`box_copy_dispatch`) writing
    the input into it. When the loaded box spans the input on every padded
    dim (a whole tensor, or a slice of channels padded in H and W), the whole
    input is padded so: the padded tensor replaces the dispatch operand, the
    binding is retyped to it, the pad becomes a load of the padded box and
    every other load of the binding reads its box shifted by the low padding
    (the same values). Otherwise only the loaded box is padded and becomes
    the operand, when nothing else reads the binding; anything else stays in
    the dispatch.
    """
    moved = 0
    while True:  # re-walk after each rewrite: the previous walk's handles may be stale
        plan = _next_pad_hoist(dispatch, accept)
        if plan is None:
            return moved
        _hoist_pad(dispatch, plan)
        moved += 1


def _next_pad_hoist(dispatch: ir.Operation, accept) -> _PadHoist | None:
    n_workload, n_args = list(ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"]))[:2]
    for op in block_ops(dispatch.regions[0].blocks[0]):
        if op.name == "tensor.pad":
            plan = _pad_hoist_plan(op, n_workload, n_args)
            if plan is not None and accept(op):
                return plan
    return None


def _pad_hoist_plan(pad: ir.Operation, n_workload: int, n_args: int) -> _PadHoist | None:
    """The plan to hoist `pad`, or None if it is not a padding of a loaded input `hoist_input_pads` can move."""
    try:
        low, high = int_array(pad.attributes["static_low"]), int_array(pad.attributes["static_high"])
    except KeyError:
        return None
    if len(pad.operands) != 1 or any(x < 0 for x in low + high):
        return None  # dynamic amounts
    value = _pad_value(pad)
    load = pad.operands[0].owner
    if value is None or isinstance(load, ir.Block) or load.name != LOAD:
        return None
    binding = load.operands[0]
    if not isinstance(binding.owner, ir.Block) or binding.arg_number >= n_args \
            or _tensor_of(binding.type)[0] != "readonly":
        return None
    binding = ir.BlockArgument(binding)
    box, shape = _static_box(load), static_shape(_tensor_of(binding.type)[1])
    kept = _kept_dims(box, static_shape(load.results[0].type)) if box is not None else None
    if kept is None or static_shape(pad.results[0].type) is None:
        return None
    operand = n_workload + binding.arg_number
    # Amounts per input dim: a dim the load drops is not padded.
    low_in = [low[j] if j is not None else 0 for j in kept]
    high_in = [high[j] if j is not None else 0 for j in kept]
    spans = all(not (lo or hi) or (o == 0 and sz == d and st == 1)
                for lo, hi, o, sz, st, d in zip(low_in, high_in, box.offsets, box.sizes, box.strides, shape))
    readers = [u.owner for u in binding.uses]
    if spans and all(not isinstance(r, ir.Block) and r.name == LOAD and _static_box(r) is not None
                     for r in readers):
        return _PadHoist(pad, load, binding, operand, value, True, low_in, high_in)
    if len(readers) == 1 and len(list(load.results[0].uses)) == 1:
        return _PadHoist(pad, load, binding, operand, value, False, low, high)
    return None


def _kept_dims(box: _Box, result: tuple[int, ...]) -> list[int | None] | None:
    """Per dim of a loaded box, the result dim it becomes (None for a unit dim the
    load drops; matched from the left, as `_box_map` does), or None if no match."""
    kept, j = [], 0
    for size in box.sizes:
        if j < len(result) and size == result[j]:
            kept.append(j)
            j += 1
        elif size == 1:
            kept.append(None)
        else:
            return None
    return kept if j == len(result) else None


def _pad_value(pad: ir.Operation) -> ir.Attribute | None:
    """The scalar `arith.constant` attribute `pad` yields, or None."""
    ops = region_ops(pad)
    if len(ops) != 1 or ops[0].name != "tensor.yield":
        return None
    owner = ops[0].operands[0].owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    value = owner.attributes["value"]
    return value if isinstance(value, (ir.FloatAttr, ir.IntegerAttr)) else None


def _hoist_pad(dispatch: ir.Operation, plan: _PadHoist) -> None:
    box = _static_box(plan.load)
    source = dispatch.operands[plan.operand]
    if plan.whole:
        elt = ir.RankedTensorType(source.type).element_type
        shape = [d + lo + hi for d, lo, hi in zip(static_shape(source.type), plan.low, plan.high)]
        padded_type = ir.RankedTensorType.get(shape, elt)
    else:
        padded_type = plan.pad.results[0].type
    with ir.InsertionPoint(dispatch), dispatch.location:
        splat = flow.TensorSplatOp(padded_type, arith.ConstantOp(plan.value.type, plan.value).result, []).result
        if plan.whole:
            padded = box_copy_dispatch(source, splat, plan.low)
        else:
            padded = box_copy_dispatch(source, splat, plan.low, box, plan.load.results[0].type)
    dispatch.operands[plan.operand] = padded
    plan.binding.set_type(ir.Type.parse(f"!iree_tensor_ext.dispatch.tensor<readonly:{padded_type}>"))
    readers = [u.owner for u in plan.binding.uses]  # the loads, before the new one
    if plan.whole:  # the loaded box grown by the padding (it starts at 0 on padded dims)
        padded_box = _Box(box.offsets, [sz + lo + hi for sz, lo, hi in zip(box.sizes, plan.low, plan.high)],
                          box.strides)
    else:
        rank = len(static_shape(padded_type))
        padded_box = _Box([0] * rank, list(static_shape(padded_type)), [1] * rank)
    plan.pad.results[0].replace_all_uses_with(
        _dispatch_load(plan.binding, padded_box, plan.pad.results[0].type, plan.pad))
    plan.pad.erase()
    for load in readers:
        if list(load.results[0].uses):  # another read of the unpadded input: the same box, shifted
            b = _static_box(load)
            shifted = _Box([o + lo for o, lo in zip(b.offsets, plan.low)], b.sizes, b.strides)
            load.results[0].replace_all_uses_with(_dispatch_load(plan.binding, shifted, load.results[0].type, load))
        load.erase()


def box_copy_dispatch(source: ir.Value, dest: ir.Value, offsets: list[int], box: _Box | None = None,
                      box_type: ir.Type | None = None) -> ir.Value:
    """A host copy dispatch, at the insertion point, writing `box` of `source` (the
    whole of it by default; read as `box_type`, which may drop unit dims of the box)
    into `dest` at `offsets`; its result is `dest` updated (tied to it).

    This is the dispatch IREE itself makes for an insertion into a padded
    tensor (its "slow_memcpy"): a `flow.tensor.update` would be wrong there,
    as the box is not contiguous in `dest`.
    """
    st, dt = source.type, dest.type
    rank = len(static_shape(dt))
    if box is None:
        shape = list(static_shape(st))
        box, box_type = _Box([0] * len(shape), shape, [1] * len(shape)), st
    ro = f"!iree_tensor_ext.dispatch.tensor<readonly:{st}>"
    rw = f"!iree_tensor_ext.dispatch.tensor<readwrite:{dt}>"

    def ints(values):
        return ", ".join(str(v) for v in values)
    text = f"""
util.func private @torq_box_copy(%src: {st}, %dest: {dt}) -> {dt} {{
  %r = flow.dispatch.workgroups(%src, %dest) : ({st}, {dt}) -> %dest =
      (%a: {ro}, %b: {rw}) {{
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [{ints(box.offsets)}], sizes = [{ints(box.sizes)}], strides = [{ints(box.strides)}] : {ro} -> {box_type}
    iree_tensor_ext.dispatch.tensor.store %v, %b, offsets = [{ints(offsets)}], sizes = [{ints(static_shape(box_type))}], strides = [{ints([1] * rank)}] : {box_type} -> {rw}
    flow.return
  }} count() -> (index, index, index) {{
    %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x, %y, %z : index, index, index
  }}
  util.return %r : {dt}
}}"""
    return clone_host_dispatch(text, [source, dest])


def _dispatch_load(binding: ir.Value, box: _Box, result: ir.Type, before: ir.Operation) -> ir.Value:
    """`dispatch.tensor.load` of the static `box` of `binding` as `result`, inserted before `before`."""
    with ir.InsertionPoint(before), before.location:
        return iree_tensor_ext.DispatchTensorLoadOp(result, binding, [], [], [], [], box.offsets, box.sizes,
                                                    box.strides).result
