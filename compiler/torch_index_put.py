"""A row written at a runtime position (`cache[:, :, pos] = k`) as a slice update, before IREE.

torch exports `index_copy(dim, pos, k)` and `x[:, :, pos] = k` as
`torch.aten.index_put(x, [None, None, pos], k, accumulate=false)`. torch-mlir
lowers that to a scatter of every element, with i64 index grids built by
their own dispatches (a KV cache write became 8 host dispatches and a scatter
that reads the cache it updates). With one index tensor of one element, the
op is exactly a slice update at that position:

    slice_scatter(x, k, dim, p', p' + 1)   with p' = p + S * (p < 0)

(torch wraps a negative index once; S = x.shape[dim]), after
`torch.runtime.assert` that p' is in [0, S): torch raises an IndexError for
any other p, and the compiled module fails the call with the assert's message
instead of writing outside the tensor. IREE makes the update a dispatch that
stores k at a runtime offset of the read-write operand, which the Torq target
runs on the NPU as a DMA scatter (compiler/passes/mark_in_place_updates.py).

Only this form is rewritten: `accumulate` false, exactly one index tensor,
of shape [1] and an integer dtype, static shapes, and `values` of x's shape
with dim `dim` of extent 1, or that shape without leading unit dims (torch
drops them: `c[:, :, pos] = k` on c [1, H, S, D] exports k as [H, 1, D]; no
other broadcast). Anything else is left to torch-mlir.
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import location_str, walk_ops
from .torch_ir import TorchBuilder, shape_and_dtype

INDEX_PUT_OPS = ("torch.aten.index_put", "torch.aten.index_put.hacked_twin", "torch.aten._unsafe_index_put")


def _owner_name(v: ir.Value) -> str:
    return "" if isinstance(v.owner, ir.Block) else v.owner.name


def _bool_constant(v: ir.Value) -> bool | None:
    if _owner_name(v) != "torch.constant.bool":
        return None
    return ir.BoolAttr(v.owner.attributes["value"]).value


def indexed_row(op: ir.Operation) -> tuple[int, ir.Value] | None:
    """(dim, index tensor) when `op` is an index_put the module docstring rewrites, else None."""
    if op.name not in INDEX_PUT_OPS or _bool_constant(op.operands[3]) is not False:
        return None
    x, indices, values = op.operands[0], op.operands[1], op.operands[2]
    if _owner_name(indices) != "torch.prim.ListConstruct":
        return None
    tensors = [(d, v) for d, v in enumerate(indices.owner.operands) if _owner_name(v) != "torch.constant.none"]
    xs, vs = shape_and_dtype(x.type), shape_and_dtype(values.type)
    if len(tensors) != 1 or xs is None or vs is None or xs[1] != vs[1]:
        return None
    dim, index = tensors[0]
    idx = shape_and_dtype(index.type)
    if idx is None or idx[0] != [1] or idx[1] not in ("si64", "si32") or dim >= len(xs[0]):
        return None
    row = [1 if d == dim else e for d, e in enumerate(xs[0])]
    missing = len(row) - len(vs[0])  # torch drops leading unit dims of the values
    if missing < 0 or vs[0] != row[missing:] or any(e != 1 for e in row[:missing]) \
            or str(op.results[0].type) != str(x.type):
        return None
    return dim, index


def _rewrite(op: ir.Operation, dim: int, index: ir.Value) -> None:
    x, values = op.operands[0], op.operands[2]
    extent = shape_and_dtype(x.type)[0][dim]
    b = TorchBuilder(op)
    zero, one, size = b.int(0), b.int(1), b.int(extent)
    scalar_t = ir.Type.parse(f"!torch.vtensor<[],{shape_and_dtype(index.type)[1]}>")
    p = b.op("torch.aten.item", [b.op("torch.aten.select.int", [index, zero, zero], scalar_t)], b.int_t)
    negative = b.op("torch.aten.Int.bool", [b.bool_op("torch.aten.lt.int", p, zero)], b.int_t)
    p = b.int_op("torch.aten.add.int", p, b.int_op("torch.aten.mul.int", negative, size))
    in_range = b.bool_op("torch.aten.__and__.bool", b.bool_op("torch.aten.ge.int", p, zero),
                         b.bool_op("torch.aten.lt.int", p, size))
    where = location_str(op)
    message = (f"{where + ': ' if where else ''}the position along dim {dim} of an index_put / index_copy is outside "
               f"[-{extent}, {extent})")
    ir.Operation.create("torch.runtime.assert", operands=[in_range],
                        attributes={"message": ir.StringAttr.get(message)}, loc=b.loc, ip=b.ip)
    end = b.int_op("torch.aten.add.int", p, one)
    shape, dtype = shape_and_dtype(values.type)
    while len(shape) < len(shape_and_dtype(x.type)[0]):  # the leading unit dims torch dropped
        shape = [1, *shape]
        values = b.op("torch.aten.unsqueeze", [values, zero],
                      ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{dtype}>"))
    update = b.op("torch.aten.slice_scatter", [x, values, b.int(dim), p, end, one], x.type)
    op.results[0].replace_all_uses_with(update)
    op.erase()


def rewrite_indexed_rows(module_op: ir.Operation) -> int:
    """Applies the module docstring's rewrite in place; returns the number of ops rewritten."""
    done = 0
    for op in [o for o in walk_ops(module_op) if o.name in INDEX_PUT_OPS]:
        found = indexed_row(op)
        if found is not None:
            _rewrite(op, *found)
            done += 1
    return done
