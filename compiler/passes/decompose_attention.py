"""torq-decompose-attention: `iree_linalg_ext.attention` as linalg ops the Torq patterns match.

Contract: takes `func.func` ops over tensors (a Torq dispatch function; dispatch
extraction runs it on every dispatch, before the normalisation of
`pipeline.PRE_PASSES`). Each `iree_linalg_ext.attention` (operands Q, K, V,
a scalar scale, an optional float mask, the init; an identity score region;
one result) is replaced, in place, by

    S = Q Kᵀ          a batch-matmul `linalg.generic` over every loop but N,
                      accumulating into a zero `linalg.fill`;
    S = S * scale (+ mask)
                      an elementwise `linalg.generic` reading S (it fuses into
                      the matmul's group as its epilogue; an additive mask,
                      like torch's causal mask of 0 / -inf, is an operand of it);
                      a boolean (i1) mask, True = attend as in torch and
                      IREE, is an i1 operand of it instead:
                      S = mask ? S * scale : -inf, one select step
                      (`arith.select` on the i1 operand);
    P = softmax(S)    `linalg.softmax` over the key dim, which PRE_PASSES
                      decompose as for any softmax (max, exp(x - max), sum,
                      divide: each a Torq group reading whole rows);
    O = P V           a batch-matmul `linalg.generic` over every loop but K1,
                      accumulating into a zero fill; O replaces the result.

Every new op only reads its ins: IREE's own decompositions of attention
(online softmax) accumulate across steps into their output tensors, which
no Torq pattern matches. Loop roles come from the indexing maps, each a list
of plain loop dims: B in Q, the result and K or V or both; M in Q and the
result only; K1 in Q and K; K2 in K and V; N in V and the result; exactly
one K2 (the softmax dim) and at least one of each other role but B. S is
laid out as the result's B and M dims in the result's order, then K2. A B
dim that K or V lacks is a query dim of that matmul: grouped-query
attention as IREE presents it reads V by KV head only (the group dim is in
Q, K and the result), so P V runs over KV heads x (group, queries), two M
dims, and V is never repeated per query head.
`unsupported_reason(op)` says (read-only) why an attention op cannot be
decomposed; dispatch extraction calls it before taking a dispatch apart.

Why the i1 mask stays i1 (rather than becoming an additive bf16 mask of
select(mask, 0, -inf) in a separate op): the mask is read by the NPU as
one byte per score (i1 tensors are stored one byte per element, 0 or 1),
half the DDR and LRAM bytes of a bf16 additive mask, and no extra op or
intermediate tensor exists. select(mask, s, -inf) equals the additive
form s + select(mask, 0, -inf) for every finite s (scores of finite Q, K).
A query row whose mask is all False has all scores -inf; its softmax is
exp(-inf - max) with max = -inf: NaN, as IREE's llvm-cpu gives on the same
MLIR, where torch (2.13, "safe softmax") gives 0; see
tests/e2e/test_attention_bool_mask.py.
"""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from ..ir_utils import CompileError, functions, indexing_maps, location_str, map_dims, region_ops, static_shape
from . import PassOptions

NAME = "torq-decompose-attention"
ATTENTION = "iree_linalg_ext.attention"


class _Roles:
    """Loop roles of an attention op, from its Q, K, V and result maps."""

    def __init__(self, q: list[int], k: list[int], v: list[int], o: list[int], n_loops: int):
        sq, sk, sv, so = set(q), set(k), set(v), set(o)
        self.batch = [d for d in o if d in sq and (d in sk or d in sv)]
        self.m = [d for d in o if d in sq and d not in sk and d not in sv]
        self.n = [d for d in o if d in sv and d not in sq and d not in sk]
        self.k1 = [d for d in q if d in sk and d not in sv and d not in so]
        self.k2 = [d for d in k if d in sv and d not in sq and d not in so]
        self.n_loops = n_loops
        # S (the scores): the result's B and M dims in its order, then K2.
        self.s_dims = [d for d in o if d in self.batch or d in self.m] + self.k2

    def complete(self) -> bool:
        named = self.batch + self.m + self.n + self.k1 + self.k2
        return sorted(named) == list(range(self.n_loops)) and len(self.k2) == 1 \
            and self.m and self.n and self.k1


def _has_mask(op: ir.Operation) -> bool:
    return len(op.operands) == 6  # Q, K, V, scale, mask, init


def _is_bool_mask(mask: ir.Value) -> bool:
    """Whether `mask` is a keep / drop mask (i1: True = attend)."""
    elt = ir.RankedTensorType(mask.type).element_type
    return isinstance(elt, ir.IntegerType) and ir.IntegerType(elt).width == 1


def unsupported_reason(op: ir.Operation) -> str:
    """Why `op` (an attention op) cannot be decomposed, or "" if it can."""
    if len(op.results) != 1 or len(op.operands) not in (5, 6):
        return "attention with several results or an unexpected operand list has no Torq lowering"
    maps = indexing_maps(op)
    if len(maps) != len(op.operands):
        return "attention whose indexing maps do not match its operands"
    body = region_ops(op)
    args = list(op.regions[0].blocks[0].arguments)
    if len(body) != 1 or len(args) != 1 or list(body[0].operands) != args:
        return "attention with a score modification region has no Torq lowering"
    q, k, v, scale = op.operands[:4]
    if any(static_shape(x.type) is None for x in (q, k, v, op.results[0])):
        return "attention with dynamic shapes"
    elt = ir.RankedTensorType(op.results[0].type).element_type
    if any(ir.RankedTensorType(x.type).element_type != elt for x in (q, k, v)) or scale.type != elt:
        return "attention whose Q, K, V, scale and result types differ"
    if not isinstance(elt, (ir.F32Type, ir.BF16Type, ir.F16Type)):
        return f"attention on {elt} has no Torq lowering"
    dims = [map_dims(m) for m in maps]
    if any(d is None for d in dims) or dims[3] != []:
        return "attention whose indexing maps are not plain dims (or whose scale is no scalar)"
    roles = _Roles(dims[0], dims[1], dims[2], dims[-1], maps[0].n_dims)
    if not roles.complete():
        return "attention whose loops are not batch, query, key and value dims with one key dim"
    if _has_mask(op):
        mask = op.operands[4]
        if static_shape(mask.type) is None or not (
                ir.RankedTensorType(mask.type).element_type == elt or _is_bool_mask(mask)):
            return (f"attention with a {mask.type} mask has no Torq lowering "
                    f"(only an additive mask of the result's element type or a boolean i1 mask)")
        if not set(dims[4]) <= set(roles.s_dims):
            return "attention whose mask reads a dim of no score"
    return ""


def _map(n_loops: int, dims: list[int]) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_loops, 0, [ir.AffineExpr.get_dim(d) for d in dims]))


def _iterators(n_loops: int, reduction: set[int]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(
        f"#linalg.iterator_type<{'reduction' if d in reduction else 'parallel'}>") for d in range(n_loops)])


def _zeros(shape: list[int], elt: ir.Type) -> ir.Value:
    empty = tensor.EmptyOp(shape, elt).result
    zero = arith.ConstantOp(elt, ir.FloatAttr.get(elt, 0.0)).result
    return linalg.fill(zero, outs=[empty])


def _batch_matmul(lhs: ir.Value, rhs: ir.Value, loops: list[int], lhs_dims: list[int], rhs_dims: list[int],
                  out_dims: list[int], reduced: list[int], shape: list[int], elt: ir.Type) -> ir.Value:
    """sum over `reduced` of lhs * rhs, as a generic over attention loops `loops` (renumbered in order)."""
    pos = {d: i for i, d in enumerate(loops)}
    n = len(loops)
    op = linalg.GenericOp(
        [ir.RankedTensorType.get(shape, elt)], [lhs, rhs], [_zeros(shape, elt)],
        ir.ArrayAttr.get([_map(n, [pos[d] for d in ds]) for ds in (lhs_dims, rhs_dims, out_dims)]),
        _iterators(n, {pos[d] for d in reduced}))
    block = op.regions[0].blocks.append(elt, elt, elt)
    with ir.InsertionPoint(block):
        a, b, acc = block.arguments
        linalg.YieldOp([arith.addf(acc, arith.mulf(a, b))])
    return op.results[0]


def _scale_and_mask(s: ir.Value, scale: ir.Value, mask: ir.Value | None, mask_dims: list[int]) -> ir.Value:
    """s * scale, then + mask (additive) or mask ? . : -inf (i1), elementwise over s
    (mask read along `mask_dims`, positions in s)."""
    t = ir.RankedTensorType(s.type)
    n, elt = t.rank, t.element_type
    ins = [s] + ([mask] if mask is not None else [])
    maps = [_map(n, list(range(n)))] + ([_map(n, mask_dims)] if mask is not None else []) \
        + [_map(n, list(range(n)))]
    boolean = mask is not None and _is_bool_mask(mask)
    if boolean:
        neg_inf = arith.ConstantOp(elt, ir.FloatAttr.get(elt, float("-inf"))).result
    op = linalg.GenericOp([t], ins, [tensor.EmptyOp(list(t.shape), elt).result], ir.ArrayAttr.get(maps),
                          _iterators(n, set()))
    block = op.regions[0].blocks.append(*[ir.RankedTensorType(v.type).element_type for v in ins], elt)
    with ir.InsertionPoint(block):
        x = arith.mulf(block.arguments[0], scale)
        if boolean:
            x = arith.select(block.arguments[1], x, neg_inf)
        elif mask is not None:
            x = arith.addf(x, block.arguments[1])
        linalg.YieldOp([x])
    return op.results[0]


def decompose(op: ir.Operation) -> None:
    """Replace attention `op` (checked by `unsupported_reason`) by the ops of the module contract."""
    maps = indexing_maps(op)
    dims = [map_dims(m) for m in maps]
    q_dims, k_dims, v_dims, o_dims = dims[0], dims[1], dims[2], dims[-1]
    roles = _Roles(q_dims, k_dims, v_dims, o_dims, maps[0].n_dims)
    q, k, v, scale = op.operands[:4]
    mask = op.operands[4] if _has_mask(op) else None
    result_type = ir.RankedTensorType(op.results[0].type)
    elt = result_type.element_type
    size = {}
    for x, ds in ((q, q_dims), (k, k_dims), (v, v_dims), (op.results[0], o_dims)):
        for d, extent in zip(ds, static_shape(x.type)):
            size[d] = extent
    s_shape = [size[d] for d in roles.s_dims]
    with ir.InsertionPoint(op), op.location:
        qk_loops = [d for d in range(roles.n_loops) if d not in roles.n]
        s = _batch_matmul(q, k, qk_loops, q_dims, k_dims, roles.s_dims, roles.k1, s_shape, elt)
        mask_dims = [roles.s_dims.index(d) for d in dims[4]] if mask is not None else []
        s = _scale_and_mask(s, scale, mask, mask_dims)
        p = linalg.SoftmaxOp([s.type], s, tensor.EmptyOp(s_shape, elt).result, len(s_shape) - 1).results[0]
        pv_loops = [d for d in range(roles.n_loops) if d not in roles.k1]
        out = _batch_matmul(p, v, pv_loops, roles.s_dims, v_dims, o_dims, roles.k2, list(result_type.shape), elt)
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _attention_ops(func: ir.Operation) -> list[ir.Operation]:
    """The attention ops in `func`, without handles to anything nested in them
    (they are erased; a live handle to a nested op would dangle)."""
    found = []

    def visit(o):
        o = o.operation if hasattr(o, "operation") else o
        if o.name == ATTENTION:
            found.append(o)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    func.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def decompose_function(func: ir.Operation) -> None:
    """Decompose every attention op of `func`; a CompileError (nothing changed) if one cannot be."""
    ops = _attention_ops(func)
    for op in ops:  # decide everything before the IR changes
        reason = unsupported_reason(op)
        if reason:
            raise CompileError(f"{location_str(op)}: error: {ATTENTION}: {reason}")
    for op in ops:
        decompose(op)


def run(module: ir.Module, options: PassOptions) -> None:
    for func in functions(module):
        decompose_function(func)
