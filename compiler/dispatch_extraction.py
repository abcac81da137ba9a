"""Turn a `flow.dispatch.workgroups` body into a standalone tensor function.

The Torq dispatch pipeline works on plain `func.func` ops over tensors: one
argument per dispatch input (full `dispatch.tensor.load`), one result per
dispatch output (full `dispatch.tensor.store`). A dispatch that writes a
box of a read-write operand (IREE fuses a consumer's padding this way) returns
the box; the host inserts it with `flow.tensor.update`. Partial loads, reads
of a read-write operand and dynamic shapes are `Unsupported`: host.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from .ir_utils import block_ops, int_array, static_shape
from .patterns import Unsupported


def _tensor_of(binding_type: ir.Type) -> ir.Type:
    s = str(binding_type)  # !iree_tensor_ext.dispatch.tensor<readonly:tensor<...>>
    inner = s[s.index("<") + 1: -1]
    access, _, tensor = inner.partition(":")
    return access, ir.Type.parse(tensor)


def _is_full(op: ir.Operation, shape: tuple[int, ...]) -> bool:
    offsets = _static_box_offsets(op)
    sizes = int_array(op.attributes["static_sizes"]) if offsets is not None else None
    return offsets is not None and all(o == 0 for o in offsets) and tuple(sizes) == tuple(shape)


@dataclass
class ExtractedDispatch:
    func: ir.Operation
    input_operands: list[int]  # dispatch operand index of each function argument
    # For each dispatch result: (tied operand index, store offsets) when the
    # dispatch writes a box of a read-write operand, else (-1, None).
    result_updates: list[tuple[int, list[int] | None]]


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
    updates = _check_loads_and_stores(block, kinds, in_pos, out_pos)
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
            op.results[0].replace_all_uses_with(fblock.arguments[in_pos[op.operands[0].arg_number]])
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
    return ExtractedDispatch(func, input_args, updates)


def _check_loads_and_stores(block: ir.Block, kinds, in_pos: dict, out_pos: dict) -> list:
    """Refuses (Unsupported) bodies the extraction cannot turn into a tensor function.

    Returns, per result, (tied operand, box offsets) for read-write stores, else (-1, None).
    """
    updates: list[tuple[int, list[int] | None]] = [(-1, None)] * len(out_pos)
    stored = set()
    for op in block_ops(block):
        if op.name == "iree_tensor_ext.dispatch.tensor.load":
            src = op.operands[0]
            pos = src.arg_number if isinstance(src.owner, ir.Block) else None
            if pos not in in_pos or not _is_full(op, static_shape(op.results[0].type)):
                raise Unsupported("dispatch loads part of an input")
        elif op.name == "iree_tensor_ext.dispatch.tensor.store":
            dst = op.operands[1]
            pos = dst.arg_number if isinstance(dst.owner, ir.Block) else None
            if pos not in out_pos or pos in stored:
                raise Unsupported("dispatch stores an output twice")
            stored.add(pos)
            if kinds[pos][0] == "readwrite":
                offsets = _static_box_offsets(op)
                if offsets is None:
                    raise Unsupported("dispatch updates a strided or dynamic box")
                updates[out_pos[pos]] = (pos, offsets)
            elif not _is_full(op, static_shape(op.operands[0].type)):
                raise Unsupported("dispatch stores part of an output")
    if len(stored) != len(out_pos):
        raise Unsupported("dispatch output never stored")
    return updates


def _static_box_offsets(op: ir.Operation) -> list[int] | None:
    try:
        offsets = int_array(op.attributes["static_offsets"])
        strides = int_array(op.attributes["static_strides"])
        sizes = int_array(op.attributes["static_sizes"])
    except KeyError:
        return None
    if any(o < 0 for o in offsets) or any(s != 1 for s in strides) or any(s < 0 for s in sizes) \
            or len(op.operands) > 2:
        return None
    return offsets


def _append(op: ir.Operation, block: ir.Block) -> None:
    op.detach_from_parent()
    ir.InsertionPoint(block).insert(op)
