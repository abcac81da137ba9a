"""Turn a `flow.dispatch.workgroups` body into a standalone tensor function.

The Torq dispatch pipeline works on plain `func.func` ops over tensors: one
argument per dispatch input (full `dispatch.tensor.load`), one result per
dispatch output (full `dispatch.tensor.store`). Dispatches with partial loads
or stores, tied (read-write) results or dynamic shapes are `Unsupported` and
stay on the host.
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import block_ops, int_array, static_shape
from .patterns import Unsupported


def _tensor_of(binding_type: ir.Type) -> ir.Type:
    s = str(binding_type)  # !iree_tensor_ext.dispatch.tensor<readonly:tensor<...>>
    inner = s[s.index("<") + 1: -1]
    access, _, tensor = inner.partition(":")
    return access, ir.Type.parse(tensor)


def _is_full(op: ir.Operation, shape: tuple[int, ...]) -> bool:
    try:
        offsets = int_array(op.attributes["static_offsets"])
        sizes = int_array(op.attributes["static_sizes"])
        strides = int_array(op.attributes["static_strides"])
    except KeyError:
        return False
    return (all(o == 0 for o in offsets) and tuple(sizes) == tuple(shape)
            and all(s == 1 for s in strides) and len(op.operands) <= 2)


def extract_dispatch_function(dispatch: ir.Operation, name: str, module: ir.Module) -> ir.Operation:
    """Build `func.func @name` in `module` from a clone of `dispatch`'s body."""
    region = dispatch.regions[0]
    block = region.blocks[0]
    inputs, outputs = [], []
    for arg in block.arguments:
        if not str(arg.type).startswith("!iree_tensor_ext.dispatch.tensor"):
            raise Unsupported(f"dispatch takes a non-tensor operand ({arg.type})")
        access, t = _tensor_of(arg.type)
        if static_shape(t) is None:
            raise Unsupported("dispatch has dynamic shapes")
        if access == "readwrite":
            raise Unsupported("dispatch updates a tensor in place (read-write binding)")
        (inputs if access == "readonly" else outputs).append((arg, t))
    if not outputs:
        raise Unsupported("dispatch has no outputs")
    func_type = ir.FunctionType.get([t for _, t in inputs], [t for _, t in outputs])
    with ir.InsertionPoint(module.body):
        func = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(name),
                        "function_type": ir.TypeAttr.get(func_type),
                        "torq.dispatch": ir.UnitAttr.get()},
            loc=dispatch.location)
    fblock = func.regions[0].blocks.append(*[t for _, t in inputs])
    clone = dispatch.clone()
    try:
        cblock = clone.regions[0].blocks[0]
        in_index = {i: n for n, (_, _) in enumerate(inputs) for i in [None]}
        in_pos = {block_arg_pos: n for n, block_arg_pos in
                  enumerate(i for i, a in enumerate(block.arguments) if _tensor_of(a.type)[0] == "readonly")}
        out_pos = {block_arg_pos: n for n, block_arg_pos in
                   enumerate(i for i, a in enumerate(block.arguments) if _tensor_of(a.type)[0] == "writeonly")}
        results: list[ir.Value | None] = [None] * len(outputs)
        for op in block_ops(cblock):
            if op.name == "iree_tensor_ext.dispatch.tensor.load":
                src = op.operands[0]
                pos = src.arg_number if isinstance(src.owner, ir.Block) else None
                if pos not in in_pos or not _is_full(op, static_shape(op.results[0].type)):
                    raise Unsupported("dispatch loads part of an input")
                op.results[0].replace_all_uses_with(fblock.arguments[in_pos[pos]])
                op.erase()
            elif op.name == "iree_tensor_ext.dispatch.tensor.store":
                dst = op.operands[1]
                pos = dst.arg_number if isinstance(dst.owner, ir.Block) else None
                if pos not in out_pos or not _is_full(op, static_shape(op.operands[0].type)):
                    raise Unsupported("dispatch stores part of an output")
                if results[out_pos[pos]] is not None:
                    raise Unsupported("dispatch stores an output twice")
                results[out_pos[pos]] = op.operands[0]
                op.erase()
            elif op.name == "flow.return":
                op.erase()
            else:
                op.move_before_block_end(fblock) if hasattr(op, "move_before_block_end") else _append(op, fblock)
        if any(r is None for r in results):
            raise Unsupported("dispatch output never stored")
        with ir.InsertionPoint(fblock), dispatch.location:
            ir.Operation.create("func.return", operands=results)
    except Exception:
        func.erase()
        raise
    finally:
        clone.erase()
    return func


def _append(op: ir.Operation, block: ir.Block) -> None:
    op.detach_from_parent()
    ir.InsertionPoint(block).insert(op)
