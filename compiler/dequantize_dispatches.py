"""A dispatch that only dequantizes an int8 tensor, read by int8 contractions' dispatches, is
moved into them (flow level, before the Torq target extracts any dispatch).

MobileViT's patch unfold is an int8 transpose (onnx_qdq's data-movement rewrite). Its
dequantize feeds the block's LayerNorm and the residual add after the attention's output
projection. IREE clones the dequantize into the LayerNorm's dispatch, but fuses the
transpose into the residual's copy: a dispatch of its own that writes the unfolded patches
in f32, which the projection's dispatch reads. Its requantization then adds an f32
tensor, and the projection stayed on the host ("operand 0 of the requantization is an f32
tensor"; 3 of timm mobilevit_xxs's matmuls, 6.4M MACs).

`move_dequantizes_into_consumers` finds such a dispatch: one int8 input read whole through
a permutation, one f32 result written whole by one generic that dequantizes
(passes/fuse_dequantize.is_dequantize). Its readers are dispatches (directly or through
`flow.tensor.reshape`s) that load the value whole; those with an integer contraction (a
reduction into i32) read instead the int8 tensor permuted by a copy dispatch (an int8
transpose, which the NPU runs as an elementwise copy) and dequantize it themselves with a
copy of the generic's body, where torq-fuse-dequantize then computes it in their
requantization. Other readers keep the f32 dispatch; it is erased when none is left. The
values are those of the dequantize dispatch, bit for bit: the same f32 ops on the same
int8 values.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import flow, tensor

from .box_reads import Box, argument_index, binding_tensor, dispatch_arguments, is_whole
from .dispatch_extraction import STORE
from .host_dispatches import LOAD, clone_host_dispatch, dispatch_end, dispatch_load, ints_text
from .ir_utils import (
    block_ops,
    clone_remapped,
    element_type,
    indexing_maps,
    iterator_types,
    map_dims,
    n_inputs,
    region_ops,
    static_shape,
    walk_ops,
)
from .passes.fuse_dequantize import is_dequantize


@dataclass
class _Dequantize:
    dispatch: ir.Operation
    generic: ir.Operation  # the dequantize, in the dispatch's body


@dataclass
class _Reader:
    dispatch: ir.Operation
    operand: int  # the operand of `dispatch` that reads the (reshaped) f32 value
    binding: ir.BlockArgument


def _dequantize_dispatch(op: ir.Operation) -> _Dequantize | None:
    """The dequantize of a dispatch that is one (module docstring), or None."""
    if op.name != "flow.dispatch.workgroups" or len(op.operands) != 1 or len(op.results) != 1:
        return None
    src, res = op.operands[0].type, op.results[0].type
    if static_shape(src) is None or static_shape(res) is None or \
            str(ir.RankedTensorType(src).element_type) != "i8" or str(ir.RankedTensorType(res).element_type) != "f32":
        return None
    body = block_ops(op.regions[0].blocks[0])
    generics = [o for o in body if o.name == "linalg.generic"]
    if len(generics) != 1 or any(o.name not in ("arith.constant", LOAD, "tensor.empty", "linalg.generic", STORE,
                                                "flow.return") for o in body):
        return None
    g = generics[0]
    load = g.operands[0].owner
    if n_inputs(g) != 1 or not is_dequantize(g) or isinstance(load, ir.Block) or load.name != LOAD or \
            load.results[0].type != src or not is_whole(load, static_shape(src)) or g.results[0].type != res:
        return None  # the types compared: a load or store may drop unit dims
    stores = [o for o in body if o.name == STORE]
    if len(stores) != 1 or stores[0].operands[0] != g.results[0] or not is_whole(stores[0], static_shape(res)):
        return None
    return _Dequantize(op, g)


def _has_integer_contraction(dispatch: ir.Operation) -> bool:
    """Whether `dispatch` sums int8 products into i32 (a generic reducing into i32 that reads i8)."""
    return any(o.name == "linalg.generic" and len(o.results) == 1 and "reduction" in iterator_types(o) and
               str(element_type(o.results[0])) == "i32" and
               any(str(element_type(o.operands[i])) == "i8" for i in range(n_inputs(o)))
               for o in walk_ops(dispatch))


def _readers(value: ir.Value) -> list[_Reader] | None:
    """The dispatches reading `value`, through reshapes, with whole loads of their binding;
    None when something else reads it."""
    out = []
    for use in value.uses:
        user = use.owner
        if user.name == "flow.tensor.reshape":
            inner = _readers(user.results[0])
            if inner is None:
                return None
            out += inner
            continue
        if user.name != "flow.dispatch.workgroups":
            return None
        k = use.operand_number - argument_index(user, 0)
        if not 0 <= k < len(dispatch_arguments(user)):
            return None  # a workload operand
        binding = user.regions[0].blocks[0].arguments[k]
        shape = static_shape(value.type)
        if shape is None or binding_tensor(binding.type)[0] != "readonly" or \
                any(u.owner.name != LOAD or u.owner.results[0].type != value.type or not is_whole(u.owner, shape)
                    for u in binding.uses):
            return None  # a read-write (tied) binding, or a load of a part or without unit dims
        out.append(_Reader(user, use.operand_number, binding))
    return out


def _permute_dispatch(dq: _Dequantize) -> ir.Value:
    """An int8 copy dispatch writing the dequantize's input permuted as its result is, at the
    insertion point."""
    src = dq.dispatch.operands[0]
    st = src.type
    rt = ir.RankedTensorType.get(static_shape(dq.dispatch.results[0].type), ir.IntegerType.get_signless(8))
    ro = f"!iree_tensor_ext.dispatch.tensor<readonly:{st}>"
    wo = f"!iree_tensor_ext.dispatch.tensor<writeonly:{rt}>"
    maps = indexing_maps(dq.generic)
    rank_s, rank_r = len(static_shape(st)), len(static_shape(rt))

    text = f"""
util.func private @torq_int8_permute(%src: {st}) -> {rt} {{
  %r = flow.dispatch.workgroups(%src) : ({st}) -> {rt} =
      (%a: {ro}, %b: {wo}) {{
    %v = iree_tensor_ext.dispatch.tensor.load %a, offsets = [{ints_text([0] * rank_s)}], sizes = [{ints_text(static_shape(st))}], strides = [{ints_text([1] * rank_s)}] : {ro} -> {st}
    %e = tensor.empty() : {rt}
    %t = linalg.generic {{indexing_maps = [{ir.AffineMapAttr.get(maps[0])}, {ir.AffineMapAttr.get(maps[1])}],
                          iterator_types = [{", ".join(['"parallel"'] * rank_r)}]}}
        ins(%v : {st}) outs(%e : {rt}) {{
    ^bb0(%in: i8, %out: i8):
      linalg.yield %in : i8
    }} -> {rt}
    iree_tensor_ext.dispatch.tensor.store %t, %b, offsets = [{ints_text([0] * rank_r)}], sizes = [{ints_text(static_shape(rt))}], strides = [{ints_text([1] * rank_r)}] : {rt} -> {wo}
{dispatch_end(rt)}"""
    return clone_host_dispatch(text, [src])


def _dequantize_in(reader: _Reader, dq: _Dequantize, int8: ir.Value) -> None:
    """`reader` reads `int8` (the permuted int8 tensor, reshaped as it read the f32 one) and
    dequantizes each load of it with a copy of the dequantize's body."""
    f32_type = reader.dispatch.operands[reader.operand].type
    shape = static_shape(f32_type)
    i8_type = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(8))
    with ir.InsertionPoint(reader.dispatch), reader.dispatch.location:
        reader.dispatch.operands[reader.operand] = int8 if int8.type == i8_type else \
            flow.TensorReshapeOp(i8_type, int8, [], []).result
    reader.binding.set_type(ir.Type.parse(f"!iree_tensor_ext.dispatch.tensor<readonly:{i8_type}>"))
    body = region_ops(dq.generic)
    outside = {v.owner: None for o in body for v in o.operands
               if not isinstance(v.owner, ir.Block) and v.owner.name == "arith.constant" and
               v.owner.parent != dq.generic}
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(len(shape)))
    for load in [u.owner for u in reader.binding.uses]:
        with ir.InsertionPoint(load), load.location:
            new_load = dispatch_load(reader.binding, Box([0] * len(shape), list(shape), [1] * len(shape)),
                                      i8_type, load)
            mapping = {}
            clone_remapped(list(outside), mapping)
            empty = tensor.EmptyOp(list(shape), ir.F32Type.get()).result
            generic = ir.Operation.create(
                "linalg.generic", results=[f32_type], operands=[new_load, empty],
                attributes={"indexing_maps": ir.ArrayAttr.get([identity, identity]),
                            "iterator_types": ir.ArrayAttr.get([dq.generic.attributes["iterator_types"][0]] *
                                                               len(shape)),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
                regions=1)
            block = generic.regions[0].blocks.append(ir.IntegerType.get_signless(8), ir.F32Type.get())
            old_args = list(dq.generic.regions[0].blocks[0].arguments)
            mapping.update(zip(old_args, block.arguments))
        with ir.InsertionPoint(block), load.location:
            clone_remapped(body, mapping)
        load.results[0].replace_all_uses_with(generic.results[0])
        load.erase()


def _erase_unused(value: ir.Value) -> None:
    for use in list(value.uses):
        if use.owner.name == "flow.tensor.reshape":
            _erase_unused(use.owner.results[0])
    if not list(value.uses):
        value.owner.erase()


def move_dequantizes_into_consumers(module_op: ir.Operation) -> int:
    """The rewrite of the module docstring; returns how many readers now dequantize."""
    moved = 0
    for op in [o for o in walk_ops(module_op) if o.name == "flow.dispatch.workgroups"]:
        dq = _dequantize_dispatch(op)
        readers = _readers(op.results[0]) if dq is not None else None
        chosen = [r for r in readers or () if _has_integer_contraction(r.dispatch)]
        if not chosen:
            continue
        if map_dims(indexing_maps(dq.generic)[0]) == list(range(len(static_shape(op.results[0].type)))):
            int8 = op.operands[0]  # read as it is: nothing to permute
        else:
            with ir.InsertionPoint(op), op.location:
                int8 = _permute_dispatch(dq)
        for reader in chosen:
            _dequantize_in(reader, dq, int8)
            moved += 1
        _erase_unused(op.results[0])
    return moved
