"""torq-fuse-dequantize: a dequantize the dispatch computes on its own is computed in the
float requantization that reads it.

Contract: takes Torq dispatch functions after the pre-passes (generic linalg
ops), before torq-lower-requantization. In a pre-norm transformer the residual
stream's int8 tensor is dequantized once for two readers, the LayerNorm and
the residual add after the next contraction (ViT / DeiT: x + attn(ln(x)),
x + mlp(ln(x))). IREE clones the dequantize into both dispatches, but in the
contraction's dispatch as a generic of its own beside the epilogue, which then
reads an f32 tensor: the requantization saw "an f32 residual" and the whole
dispatch (the contraction's MACs) stayed on the host. With one reader IREE
fuses the dequantize into the epilogue's body, which the requantization reads
as an int8 residual.

A dequantize here is an all-parallel generic with one result whose output map
is the identity, whose first input is an integer tensor read through a
permutation of the loops (EdgeNeXt's transposed residual), whose other inputs
(per-channel scales, zero points) are read through projections, and whose body converts that integer to f32 (arith ops
only, a sitofp / uitofp among them, nothing read from its output). Each
elementwise generic that reads its result as an input and is a float
requantization (`requant.is_float_requant`) reads the dequantize's inputs
instead, through its own map of that operand composed with theirs, and
computes the dequantize in its body, as IREE's elementwise fusion would; the
dequantize is erased once nothing reads it. The function computes exactly
what it did, op for op; nothing else changes.
"""

from __future__ import annotations

from iree.compiler import ir

from ..ir_utils import (
    clone_remapped,
    element_type,
    functions,
    indexing_maps,
    iterator_types,
    map_dims,
    n_inputs,
    region_ops,
    walk_ops,
)
from ..requant import is_float_requant
from . import PassOptions

NAME = "torq-fuse-dequantize"

_DEQUANTIZE_OPS = {"arith.extsi", "arith.extui", "arith.subi", "arith.addi", "arith.sitofp", "arith.uitofp",
                   "arith.mulf", "arith.subf", "arith.addf", "arith.constant", "linalg.yield"}


def _is_identity(m: ir.AffineMap) -> bool:
    return map_dims(m) == list(range(m.n_dims))


def _is_permutation(m: ir.AffineMap) -> bool:
    dims = map_dims(m)
    return dims is not None and sorted(dims) == list(range(m.n_dims))


def _composed(inner: ir.AffineMap, outer: ir.AffineMap) -> ir.AffineMap | None:
    """inner after outer: the consumer's loops -> the dequantize's input dims, where `outer`
    takes the consumer's loops to the dequantize's loops (its result's dims) and `inner`, a
    projection, takes those to the input's dims; None when `inner` is not one."""
    exprs = []
    for e in inner.results:
        if isinstance(e, ir.AffineDimExpr):
            exprs.append(outer.results[ir.AffineDimExpr(e).position])
        elif isinstance(e, ir.AffineConstantExpr):
            exprs.append(e)
        else:
            return None
    return ir.AffineMap.get(outer.n_dims, 0, exprs)


def is_dequantize(op: ir.Operation) -> bool:
    """Whether `op` is a dequantize of the module docstring's form."""
    if op.name != "linalg.generic" or len(op.results) != 1 or n_inputs(op) < 1:
        return False
    if any(it != "parallel" for it in iterator_types(op)):
        return False
    maps = indexing_maps(op)
    if not (_is_identity(maps[-1]) and _is_permutation(maps[0])):
        return False
    if any(_composed(m, maps[-1]) is None for m in maps[1:-1]):
        return False
    if not all(isinstance(v.type, ir.RankedTensorType) for v in (op.operands[0], op.results[0])):
        return False
    if str(element_type(op.results[0])) != "f32" or not isinstance(element_type(op.operands[0]), ir.IntegerType):
        return False
    if not _computes_a_dequantize(op):
        return False
    out_arg = op.regions[0].blocks[0].arguments[n_inputs(op)]
    return not list(out_arg.uses)


def _computes_a_dequantize(op: ir.Operation) -> bool:
    """Whether the body of generic `op` converts integers to f32 with arith ops only (a
    sitofp / uitofp among them: no f32 compute of its own)."""
    names = {o.name for o in region_ops(op)}
    return names <= _DEQUANTIZE_OPS and bool({"arith.sitofp", "arith.uitofp"} & names)


def _reads_as_input(consumer: ir.Operation, value: ir.Value) -> list[int]:
    return [i for i in range(n_inputs(consumer)) if consumer.operands[i] == value]


def _fusable(consumer: ir.Operation, dq: ir.Operation) -> bool:
    return (consumer.name == "linalg.generic" and is_float_requant(consumer)
            and all(it == "parallel" for it in iterator_types(consumer))
            and bool(_reads_as_input(consumer, dq.results[0])))


def _fuse(dq: ir.Operation, consumer: ir.Operation) -> None:
    """Replaces `consumer` by a generic reading `dq`'s inputs where it read `dq`'s result."""
    n_dq, n_c = n_inputs(dq), n_inputs(consumer)
    dq_maps, c_maps = indexing_maps(dq), indexing_maps(consumer)
    dq_block, c_block = dq.regions[0].blocks[0], consumer.regions[0].blocks[0]
    fused = set(_reads_as_input(consumer, dq.results[0]))
    operands, maps, arg_types = [], [], []
    # Per consumer input, where its value comes from in the new generic: ("in", k) new input k;
    # ("dq", k) the dequantize computed from new inputs k, k + 1, ... (its inputs).
    sources: list[tuple[str, int]] = []
    for i in range(n_c):
        if i in fused:
            sources.append(("dq", len(operands)))
            for j in range(n_dq):
                operands.append(dq.operands[j])
                maps.append(_composed(dq_maps[j], c_maps[i]))
                arg_types.append(dq_block.arguments[j].type)
        else:
            sources.append(("in", len(operands)))
            operands.append(consumer.operands[i])
            maps.append(c_maps[i])
            arg_types.append(c_block.arguments[i].type)
    outs = list(consumer.operands)[n_c:]
    with ir.InsertionPoint(consumer), consumer.location:
        new = ir.Operation.create(
            "linalg.generic", results=[r.type for r in consumer.results], operands=operands + outs,
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps + c_maps[n_c:]]),
                        "iterator_types": consumer.attributes["iterator_types"],
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(operands), len(outs)])},
            regions=1)
    block = new.regions[0].blocks.append(*arg_types, *[a.type for a in list(c_block.arguments)[n_c:]])
    args = list(block.arguments)
    mapping = dict(zip(list(c_block.arguments)[n_c:], args[len(operands):]))
    dq_body = [o.operation for o in dq_block.operations]
    with ir.InsertionPoint(block), consumer.location:
        for i, (kind, at) in enumerate(sources):
            if kind == "in":
                mapping[c_block.arguments[i]] = args[at]
                continue
            dq_mapping = dict(zip(list(dq_block.arguments)[:n_dq], args[at:at + n_dq]))
            clone_remapped(dq_body[:-1], dq_mapping)
            yielded = dq_body[-1].operands[0]
            mapping[c_block.arguments[i]] = dq_mapping.get(yielded, yielded)
        clone_remapped([o.operation for o in c_block.operations], mapping)
    for old, res in zip(consumer.results, new.results):
        old.replace_all_uses_with(res)
    consumer.erase()


def fuse_function(func: ir.Operation) -> int:
    """Fuses the function's dequantizes into the requantizations reading them; returns how many
    requantizations now compute a dequantize."""
    done = 0
    for dq in [o for o in walk_ops(func) if is_dequantize(o)]:
        consumers = [u.owner for u in dq.results[0].uses]
        for consumer in {c.operation: None for c in consumers}:
            if _fusable(consumer, dq):
                _fuse(dq, consumer)
                done += 1
        if not list(dq.results[0].uses):
            dq.erase()
    return done


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        fuse_function(func)
