"""Flow-level dispatches the target builds for the host: a requantization's
dequantize tail (`host_tail_dispatch`), a box copy (`box_copy_dispatch`),
and the paddings of a host dispatch's inputs hoisted before it
(`hoist_input_pads`), as IREE builds a padding it does not fuse; a padding of
a value the dispatch computes is moved to that value's inputs when it is
elementwise (`pad_elementwise_inputs`), or after the dispatch when it is stored
(`sink_result_pads`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith, flow, iree_tensor_ext, linalg, tensor

from .box_reads import Box, argument_index, binding_tensor, dispatch_arguments, is_whole, static_box
from .dispatch_extraction import STORE
from .ir_utils import block_ops, indexing_maps, int_array, iterator_types, region_ops, static_shape, walk_ops
from .passes.fold_index_constants import MAX_ELEMENTS, with_constant_inputs
from .requant_tail import HostTail


def host_tail_dispatch(value: ir.Value, tail: HostTail, element_type: ir.Type, tensors=()) -> ir.Value:
    """A host dispatch computing `tail` elementwise from `value` (a tensor of `element_type`
    results, the same shape) and `tensors` (the tail's `%x<j>`, each read along the result dims
    `tail.tensors` gives it; a scalar operand as it is), at the insertion point. The tail's
    per-channel constants (`%p<k>`) are made outside the dispatch and passed in like the
    tensors, so that tails differing only in them (one per layer) are one executable for
    IREE's llvm-cpu to compile, as IREE itself deduplicates the dispatches they came from."""
    src = value.type
    shape = static_shape(src)
    result_type = ir.RankedTensorType.get(list(shape), element_type)
    dims = ", ".join(f"d{k}" for k in range(len(shape)))
    ident = f"affine_map<({dims}) -> ({dims})>"
    ro = f"!iree_tensor_ext.dispatch.tensor<readonly:{src}>"
    wo = f"!iree_tensor_ext.dispatch.tensor<writeonly:{result_type}>"
    body = "\n        ".join(tail.ops_text.splitlines())
    # Every input the tail reads besides `value`: (operand, block argument, its type, the
    # result dims it is read along), the per-channel constants first.
    reads = [(_constant(values, f"tensor<{'x'.join(map(str, np.shape(values)))}x{t}>"), f"%p{k}", t, along)
             for k, (along, t, values) in enumerate(tail.channel_values)]
    reads += [(v, f"%x{j}", elt, along) for j, (v, (_, elt, along)) in enumerate(zip(tensors, tail.tensors))]
    types = [str(v.type) for v, _, _, _ in reads]
    scalar = [not isinstance(v.type, ir.ShapedType) for v, _, _, _ in reads]
    bound = [t if sc else f"!iree_tensor_ext.dispatch.tensor<readonly:{t}>" for t, sc in zip(types, scalar)]
    loads = "".join(_whole_load(f"%v{j}", f"%a{j}", t, r, static_shape(v.type))
                    for j, (t, r, (v, _, _, _), sc) in enumerate(zip(types, bound, reads, scalar)) if not sc)
    ins = "".join(f", %a{j}" if sc else f", %v{j}" for j, sc in enumerate(scalar))
    maps = "".join(f", affine_map<({dims}) -> ({', '.join(f'd{d}' for d in along)})>" for _, _, _, along in reads)
    args = "".join(f", {name}: {elt}" for _, name, elt, _ in reads)
    operands = ", ".join(["%x"] + [f"%xt{j}" for j in range(len(reads))])
    text = f"""
util.func private @torq_host_tail(%x: {src}{"".join(f", %xt{j}: {t}" for j, t in enumerate(types))}) -> {result_type} {{
  %r = flow.dispatch.workgroups({operands}) : ({", ".join([str(src)] + types)}) -> {result_type} =
      (%a: {ro}{"".join(f", %a{j}: {t}" for j, t in enumerate(bound))}, %b: {wo}) {{
    {_whole_load("%v", "%a", src, ro, shape).strip()}{loads}
    %e = tensor.empty() : {result_type}
    %g = linalg.generic {{indexing_maps = [{ident}{maps}, {ident}], iterator_types = [{", ".join(['"parallel"'] * len(shape))}]}}
        ins(%v{ins} : {src}{"".join(f", {t}" for t in types)}) outs(%e : {result_type}) {{
      ^bb0(%q: {tail.in_type}{args}, %out: {tail.result_type}):
        {body}
        linalg.yield {tail.result} : {tail.result_type}
    }} -> {result_type}
{_whole_store("%g", "%b", result_type, wo, shape)}
{dispatch_end(result_type)}"""
    return clone_host_dispatch(text, [value, *(v for v, _, _, _ in reads)])


def _constant(values, tensor_type: str) -> ir.Value:
    """An `arith.constant` of `values` (nested lists) of `tensor_type`, at the insertion point."""
    attr = ir.Attribute.parse(f"dense<{values}> : {tensor_type}")
    return ir.Operation.create("arith.constant", results=[attr.type], attributes={"value": attr}).results[0]


def _whole_store(value: str, binding: str, tensor: str, binding_type: str, shape) -> str:
    """A dispatch body's store of `value` (of type `tensor`) into all of `binding`."""
    return (f"    iree_tensor_ext.dispatch.tensor.store {value}, {binding}, offsets = [{ints_text([0] * len(shape))}], "
            f"sizes = [{ints_text(shape)}], strides = [{ints_text([1] * len(shape))}] : {tensor} -> {binding_type}")


def _whole_load(name: str, binding: str, tensor: str, binding_type: str, shape) -> str:
    """A dispatch body's load of all of `binding` (of tensor type `tensor`) as `name`."""
    return _load_text(name, binding, binding_type, tensor, Box([0] * len(shape), list(shape), [1] * len(shape)))


def _load_text(name: str, binding: str, binding_type: str, result: str, box: Box) -> str:
    """A dispatch body's load of `box` of `binding` as `name` (of type `result`), on a new line."""
    return (f"\n    {name} = iree_tensor_ext.dispatch.tensor.load {binding}, offsets = [{ints_text(box.offsets)}], "
            f"sizes = [{ints_text(box.sizes)}], strides = [{ints_text(box.strides)}] : {binding_type} -> {result}")


def ints_text(values) -> str:
    """Integers as an MLIR list's elements: `1, 2, 3`."""
    return ", ".join(str(v) for v in values)


def dispatch_end(result_type) -> str:
    """The end of a host dispatch's text after its stores: the workgroup count IREE derives
    from the slice, and the util.func's return of the dispatch's result %r."""
    return f"""    flow.return
  }} count() -> (index, index, index) {{
    %x0, %y0, %z0 = iree_tensor_ext.dispatch.workgroup_count_from_slice()
    flow.return %x0, %y0, %z0 : index, index, index
  }}
  util.return %r : {result_type}
}}"""


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


def sink_result_pads(dispatch: ir.Operation) -> int:
    """Each whole result `dispatch` stores as a `tensor.pad` (static amounts, a constant value)
    of a value it computes is stored unpadded, and padded after the dispatch as IREE pads
    without the fusion (a splat of the value and a host copy dispatch into it); returns how
    many. llvm-cpu fails on such a pad in its producer's dispatch, which IREE forms under
    --iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops (GoogLeNet under
    PT2E: a dequantize padded with -inf for a ceil-mode max pool, "large vector sizes";
    stock iree-compile with that flag fails the same way)."""
    n_args = len(dispatch_arguments(dispatch))
    if "tied_operands" in dispatch.attributes and \
            any(ir.IntegerAttr(t).value >= 0 for t in ir.ArrayAttr(dispatch.attributes["tied_operands"])):
        return 0  # a result binding is then not the result's position past the arguments
    done = 0
    for store in [o for o in block_ops(dispatch.regions[0].blocks[0]) if o.name == STORE]:
        pad, binding = store.operands[0].owner, store.operands[1]
        if isinstance(pad, ir.Block) or pad.name != "tensor.pad" or len(pad.operands) != 1 or \
                len(list(pad.results[0].uses)) != 1 or not isinstance(binding.owner, ir.Block) or \
                ir.BlockArgument(binding).arg_number < n_args or not is_whole(store, static_shape(pad.results[0].type)):
            continue
        src, value, padded_type = pad.operands[0], _pad_value(pad), pad.results[0].type
        if value is None or (not isinstance(src.owner, ir.Block) and src.owner.name == LOAD):
            continue  # (a padded copy of an input: llvm-cpu compiles it)
        low = int_array(pad.attributes["static_low"])
        result = dispatch.results[ir.BlockArgument(binding).arg_number - n_args]
        uses = [(u.owner, u.operand_number) for u in result.uses]
        binding.set_type(ir.Type.parse(f"!iree_tensor_ext.dispatch.tensor<writeonly:{src.type}>"))
        unpadded = store.clone(ip=ir.InsertionPoint(store))
        unpadded.operands[0] = src
        unpadded.attributes["static_sizes"] = ir.DenseI64ArrayAttr.get(list(static_shape(src.type)))
        store.erase()
        pad.erase()
        result.set_type(src.type)
        with ir.InsertionPoint.after(dispatch), dispatch.location:
            splat = flow.TensorSplatOp(padded_type, arith.ConstantOp(value.type, value).result, []).result
            padded = box_copy_dispatch(result, splat, low)
        for owner, k in uses:
            owner.operands[k] = padded
        done += 1
    return done


def pad_elementwise_inputs(dispatch: ir.Operation) -> int:
    """Each `tensor.pad` (static amounts, a constant value v) of the only use of an
    elementwise `linalg.generic` G in `dispatch` becomes G over its inputs padded, yielding
    v in the padding (a select on a constant mask, read along the padded dims); returns how
    many. The values are the same; the pads then read what G read (padded again if that is
    an elementwise value too; a load, which `hoist_input_pads` builds before the dispatch).
    llvm-cpu fails on a pad of a computed value feeding a pool ("large vector sizes"): PT2E
    GoogLeNet's check copies of its ceil-mode pools (dequantize, pad with -inf, max pool,
    quantize). The mask is a constant because llvm-cpu miscomputes the same select on
    `linalg.index` once it fuses G into the pool (1,374 of 2,704 elements wrong).

    G: all loops parallel, every indexing map the identity, one result, its init not read,
    and a mask of at most `fold_index_constants.MAX_ELEMENTS` elements."""
    done = 0
    work = [o for o in walk_ops(dispatch) if o.name == "tensor.pad"]
    while work:
        pad = work.pop()
        producer = pad.operands[0].owner if len(pad.operands) == 1 else None
        value = _pad_value(pad)
        if value is None or not _is_padded_elementwise(producer, pad):
            continue
        work += _pad_inputs_of(producer, pad, value)
        done += 1
    return done


def _is_padded_elementwise(g, pad: ir.Operation) -> bool:
    """Whether `pad` may move before `g` (`pad_elementwise_inputs`'s G)."""
    if g is None or isinstance(g, ir.Block) or g.name != "linalg.generic" or len(g.results) != 1:
        return False
    if len(list(g.results[0].uses)) != 1 or any(t != "parallel" for t in iterator_types(g)):
        return False
    body = g.regions[0].blocks[0]
    shape, amounts = static_shape(g.results[0].type) or (), _amounts(pad)
    if amounts is None:
        return False
    padded = [n for n, lo, hi in zip(static_shape(pad.results[0].type) or (), *amounts) if lo or hi]
    return bool(shape) and bool(padded) and math.prod(padded) <= MAX_ELEMENTS and \
        all(m == ir.AffineMap.get_identity(len(shape)) for m in indexing_maps(g)) and \
        not list(body.arguments[len(body.arguments) - 1].uses) and \
        "tensor.extract" not in [o.name for o in region_ops(g)] and \
        all(static_shape(v.type) is not None for v in g.operands)


def _amounts(pad: ir.Operation) -> tuple[list[int], list[int]] | None:
    """(low, high) of a `tensor.pad` of one operand and static amounts, else None."""
    if len(pad.operands) != 1 or "static_low" not in pad.attributes:
        return None
    low, high = int_array(pad.attributes["static_low"]), int_array(pad.attributes["static_high"])
    return None if any(x < 0 for x in low + high) else (low, high)  # (negative: dynamic)


def _pad_inputs_of(g: ir.Operation, pad: ir.Operation, value: ir.Attribute) -> list[ir.Operation]:
    """Rewrites `pad` of `g` (see `pad_elementwise_inputs`); returns the pads of g's inputs."""
    low, high = _amounts(pad)
    shape = static_shape(g.results[0].type)
    padded_type = pad.results[0].type
    n_in = len(g.operands) - 1
    pads = []
    with ir.InsertionPoint(g), g.location:
        for k in range(n_in):
            src = g.operands[k]
            elt = ir.RankedTensorType(src.type).element_type
            t = ir.RankedTensorType.get(list(static_shape(padded_type)), elt)
            zero = ir.IntegerAttr.get(elt, 0) if isinstance(elt, ir.IntegerType) else ir.FloatAttr.get(elt, 0.0)
            zero = arith.ConstantOp(elt, zero).result  # outside the pad's region, as `_pad_value` reads it
            p = tensor.PadOp(t, src, [], [], low, high)
            with ir.InsertionPoint(p.regions[0].blocks.append(*[ir.IndexType.get()] * len(shape))):
                tensor.YieldOp(zero)
            g.operands[k] = p.result
            pads.append(p.operation)
        g.operands[n_in] = tensor.EmptyOp(list(static_shape(padded_type)), ir.RankedTensorType(padded_type).element_type).result
    _yield_value_in_padding(g, low, high, shape, value)
    g.results[0].set_type(padded_type)
    pad.results[0].replace_all_uses_with(g.results[0])
    pad.erase()
    with_constant_inputs(g)  # the mask read from a constant (see pad_elementwise_inputs)
    return pads


def _yield_value_in_padding(g: ir.Operation, low: list[int], high: list[int], shape, value: ir.Attribute) -> None:
    """`g`'s yield made select(mask != 0, yielded, value): mask 1.0 where each padded dim's
    index is in [low, low + extent), else 0.0 (an f32 of the indices alone, which
    `with_constant_inputs` turns into a constant input)."""
    yield_op = block_ops(g.regions[0].blocks[0])[-1]
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(yield_op), g.location:
        inside = None
        for d, (lo, hi, n) in enumerate(zip(low, high, shape)):
            if not (lo or hi):
                continue
            i = linalg.IndexOp(d).result
            bounds = [arith.ConstantOp(ir.IndexType.get(), b).result for b in (lo, lo + n)]
            both = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.sge, i, bounds[0]).result,
                                arith.CmpIOp(arith.CmpIPredicate.slt, i, bounds[1]).result).result
            inside = both if inside is None else arith.AndIOp(inside, both).result
        one, zero = (arith.ConstantOp(f32, ir.FloatAttr.get(f32, c)).result for c in (1.0, 0.0))
        mask = arith.SelectOp(inside, one, zero).result
        keep = arith.CmpFOp(arith.CmpFPredicate.ONE, mask, zero).result
        yield_op.operands[0] = arith.SelectOp(keep, yield_op.operands[0],
                                              arith.ConstantOp(value.type, value).result).result


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
    amounts = _amounts(pad)
    if amounts is None:
        return None
    low, high = amounts
    value = _pad_value(pad)
    load = pad.operands[0].owner
    if value is None or isinstance(load, ir.Block) or load.name != LOAD:
        return None
    binding = load.operands[0]
    if not isinstance(binding.owner, ir.Block) or binding.arg_number >= n_args \
            or binding_tensor(binding.type)[0] != "readonly":
        return None
    binding = ir.BlockArgument(binding)
    box, shape = static_box(load), static_shape(binding_tensor(binding.type)[1])
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
    if spans and all(not isinstance(r, ir.Block) and r.name == LOAD and static_box(r) is not None
                     for r in readers):
        return _PadHoist(pad, load, binding, operand, value, True, low_in, high_in)
    if len(readers) == 1 and len(list(load.results[0].uses)) == 1:
        return _PadHoist(pad, load, binding, operand, value, False, low, high)
    return None


def _kept_dims(box: Box, result: tuple[int, ...]) -> list[int | None] | None:
    """Per dim of a loaded box, the result dim it becomes (None for a unit dim the
    load drops; matched from the left, as `box_map` does), or None if no match."""
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
    box = static_box(plan.load)
    source = dispatch.operands[argument_index(dispatch, plan.operand)]
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
    dispatch.operands[argument_index(dispatch, plan.operand)] = padded
    plan.binding.set_type(ir.Type.parse(f"!iree_tensor_ext.dispatch.tensor<readonly:{padded_type}>"))
    readers = [u.owner for u in plan.binding.uses]  # the loads, before the new one
    if plan.whole:  # the loaded box grown by the padding (it starts at 0 on padded dims)
        padded_box = Box(box.offsets, [sz + lo + hi for sz, lo, hi in zip(box.sizes, plan.low, plan.high)],
                          box.strides)
    else:
        rank = len(static_shape(padded_type))
        padded_box = Box([0] * rank, list(static_shape(padded_type)), [1] * rank)
    plan.pad.results[0].replace_all_uses_with(
        dispatch_load(plan.binding, padded_box, plan.pad.results[0].type, plan.pad))
    plan.pad.erase()
    for load in readers:
        if list(load.results[0].uses):  # another read of the unpadded input: the same box, shifted
            b = static_box(load)
            shifted = Box([o + lo for o, lo in zip(b.offsets, plan.low)], b.sizes, b.strides)
            load.results[0].replace_all_uses_with(dispatch_load(plan.binding, shifted, load.results[0].type, load))
        load.erase()


def box_copy_dispatch(source: ir.Value, dest: ir.Value, offsets: list[int], box: Box | None = None,
                      box_type: ir.Type | None = None, dest_sizes: list[int] | None = None) -> ir.Value:
    """A host copy dispatch, at the insertion point, writing `box` of `source` (the
    whole of it by default; read as `box_type`, which may drop unit dims of the box)
    into `dest` at `offsets`, a box of `dest_sizes` there (default: `box_type`'s shape,
    which must then have `dest`'s rank); its result is `dest` updated (tied to it).

    This is the dispatch IREE itself makes for an insertion into a padded
    tensor (its "slow_memcpy"): a `flow.tensor.update` would be wrong there,
    as the box is not contiguous in `dest`.
    """
    st, dt = source.type, dest.type
    rank = len(static_shape(dt))
    if box is None:
        shape = list(static_shape(st))
        box, box_type = Box([0] * len(shape), shape, [1] * len(shape)), st
    ro = f"!iree_tensor_ext.dispatch.tensor<readonly:{st}>"
    rw = f"!iree_tensor_ext.dispatch.tensor<readwrite:{dt}>"

    text = f"""
util.func private @torq_box_copy(%src: {st}, %dest: {dt}) -> {dt} {{
  %r = flow.dispatch.workgroups(%src, %dest) : ({st}, {dt}) -> %dest =
      (%a: {ro}, %b: {rw}) {{{_load_text("%v", "%a", ro, box_type, box)}
    iree_tensor_ext.dispatch.tensor.store %v, %b, offsets = [{ints_text(offsets)}], sizes = [{ints_text(dest_sizes or static_shape(box_type))}], strides = [{ints_text([1] * rank)}] : {box_type} -> {rw}
{dispatch_end(dt)}"""
    return clone_host_dispatch(text, [source, dest])


def dispatch_load(binding: ir.Value, box: Box, result: ir.Type, before: ir.Operation) -> ir.Value:
    """`dispatch.tensor.load` of the static `box` of `binding` as `result`, inserted before `before`."""
    with ir.InsertionPoint(before), before.location:
        return iree_tensor_ext.DispatchTensorLoadOp(result, binding, [], [], [], [], box.offsets, box.sizes,
                                                    box.strides).result
