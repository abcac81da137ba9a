"""torchao's int8 dynamic quantization (`quantize_(model, Int8DynamicActivationInt8WeightConfig())`)
in ops IREE imports and the NPU runs, before IREE.

A model quantized with torchao's `quantize_` API and exported (torch.export, iree-turbine)
computes each Linear as: the activation's scale per token from its min and max
(`torchao.choose_qparams_affine`), its int8 value (`torchao.quantize_affine`), then, on
CPU, torchao's u8 x s8 trick: the int8 value plus 128 as uint8, `aten._int_mm` by the
int8 weight, minus 128 times the weight's column sums; then the i32 product times both
scales, plus the bias. IREE (3.13) cannot import the two torchao ops ("failed to legalize
operation 'torch.operator'"), for the whole model. Rewritten here:

- `choose_qparams_affine(x, mapping, block, dtype, qmin, qmax, eps, scale_dtype, zp_dtype,
  keepdim)` with blocks of whole dims (per tensor, per token), as torchao defines it
  (torchao/quantization/quant_primitives.py `_choose_qparams_affine`), in aten ops:
  lo = min(amin(x), 0), hi = max(amax(x), 0) over the block; SYMMETRIC:
  s = max(max(-lo, hi) / ((qmax - qmin) / 2), eps), z = int((qmax + qmin + 1) / 2);
  ASYMMETRIC: s = max((hi - lo) / (qmax - qmin), eps),
  z = clamp(qmin - round_half_even(lo / s), qmin, qmax);
- `quantize_affine(x, block, s, z, dtype, qmin, qmax)` likewise:
  clamp(round_half_even(x * (1 / s)) + z, qmin, qmax);
- the u8 trick undone: `_int_mm(u8(i32(q) + 128), W) - 128 * colsum(W)` is
  `_int_mm(q, W)` in i32, exactly (the NPU multiplies signed int8: a uint8 operand stays
  on the host, compiler/patterns/contraction.py).

IREE then makes an i8 x i8 -> i32 matmul, which runs on the NPU, and an f32 epilogue
reading the per-token scales, on the host (compiler/requant_tail.py). Other mapping types
and sub-dim blocks (per group) are left as written, and IREE's own error names them. As in
compiler/torch_dynamic_quant.py, a NaN input gives finite parameters where torchao's are NaN.
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import walk_ops
from .torch_ir import SCALAR_TYPES, TorchBuilder, operator_name, shape_and_dtype, torch_constant

_CHOOSE = "torch.torchao.choose_qparams_affine"
_QUANTIZE = "torch.torchao.quantize_affine"


def _int_list(v: ir.Value) -> list[int] | None:
    op = v.owner
    if isinstance(op, ir.Block) or op.name != "torch.prim.ListConstruct":
        return None
    values = [torch_constant(x, "int") for x in op.operands]
    return None if None in values else values


def _string(v: ir.Value) -> str | None:
    op = v.owner
    if isinstance(op, ir.Block) or op.name != "torch.constant.str":
        return None
    return ir.StringAttr(op.attributes["value"]).value


def _reduced_shape(x: ir.Value, block: list[int] | None) -> tuple[list[int], list[int]] | None:
    """(the dims a block reduces, the shape of its parameters kept in x's rank) when `block`
    covers whole dims of the static f32 `x` (1 or the dim's extent each), else None."""
    found = shape_and_dtype(x.type)
    if found is None or found[1] != "f32" or block is None or len(block) != len(found[0]) \
            or any(b not in (1, n) for b, n in zip(block, found[0])):
        return None
    dims = [d for d, (b, n) in enumerate(zip(block, found[0])) if b == n and b != 1]
    return dims, [1 if d in dims else n for d, n in enumerate(found[0])]


def _decompose_choose_qparams(op: ir.Operation) -> bool:
    """Replaces choose_qparams_affine `op` by the module docstring's aten ops; False if it is
    not a form rewritten here."""
    if len(op.operands) != 10:
        return False
    mapping, reduced = _string(op.operands[1]), _reduced_shape(op.operands[0], _int_list(op.operands[2]))
    qmin, qmax, eps = torch_constant(op.operands[4], "int"), torch_constant(op.operands[5], "int"), torch_constant(op.operands[6], "float")
    out = [shape_and_dtype(r.type) for r in op.results]
    if mapping not in ("SYMMETRIC", "ASYMMETRIC") or reduced is None or None in (qmin, qmax, eps) or None in out \
            or out[0][1] != "f32" or out[1][1] not in SCALAR_TYPES:
        return False
    dims, shape = reduced
    b = TorchBuilder(op)
    t = b.tensor_type(shape, "f32")
    keep = b.op("torch.constant.bool", [], b.bool_t, {"value": ir.BoolAttr.get(True)})
    lo = b.op("torch.aten.amin", [op.operands[0], b.int_list(dims), keep], t)
    hi = b.op("torch.aten.amax", [op.operands[0], b.int_list(dims), keep], t)
    lo, hi = b.op("torch.aten.clamp_max", [lo, b.float(0.0)], t), b.op("torch.aten.clamp_min", [hi, b.float(0.0)], t)
    if mapping == "SYMMETRIC":
        bound = b.op("torch.aten.maximum", [b.op("torch.aten.neg", [lo], t), hi], t)
        scale = b.op("torch.aten.div.Scalar", [bound, b.float((qmax - qmin) / 2)], t)
        none = b.op("torch.constant.none", [], ir.Type.parse("!torch.none"))
        zero_point = b.op("torch.aten.full", [b.int_list(shape), b.int(int((qmax + qmin + 1) / 2)),
                                              b.int(SCALAR_TYPES["f32"]), none, none, none], t)
        scale = b.op("torch.aten.clamp_min", [scale, b.float(eps)], t)
    else:
        scale = b.op("torch.aten.div.Scalar", [b.op("torch.aten.sub.Tensor", [hi, lo, b.int(1)], t),
                                               b.float(float(qmax - qmin))], t)
        scale = b.op("torch.aten.clamp_min", [scale, b.float(eps)], t)
        level = b.op("torch.aten.round", [b.op("torch.aten.div.Tensor", [lo, scale], t)], t)
        zero_point = b.op("torch.aten.clamp", [b.op("torch.aten.rsub.Scalar", [level, b.int(qmin), b.int(1)], t),
                                               b.int(qmin), b.int(qmax)], t)
    results = [b.op("torch.aten.view", [v, b.int_list(o[0])], b.tensor_type(o[0], "f32"))
               for v, o in zip((scale, zero_point), out)]
    results[1] = b.to_dtype(results[1], out[1][0], out[1][1])
    for r, new in zip(op.results, results):
        r.replace_all_uses_with(new)
    op.erase()
    return True


def _decompose_quantize(op: ir.Operation) -> bool:
    """Replaces quantize_affine `op` by the module docstring's aten ops; False if it is not a
    form rewritten here."""
    if len(op.operands) != 7:
        return False
    x, scale, zero_point = op.operands[0], op.operands[2], op.operands[3]
    reduced = _reduced_shape(x, _int_list(op.operands[1]))
    qmin, qmax = torch_constant(op.operands[5], "int"), torch_constant(op.operands[6], "int")
    out, zp = shape_and_dtype(op.results[0].type), shape_and_dtype(zero_point.type)
    scale_type = shape_and_dtype(scale.type)
    if reduced is None or None in (qmin, qmax) or out is None or zp is None or out[1] != "si8" \
            or scale_type is None or scale_type[1] != "f32":
        return False
    b = TorchBuilder(op)
    shape, t = reduced[1], b.tensor_type(out[0], "f32")
    inverse = b.op("torch.aten.reciprocal", [b.op("torch.aten.view", [scale, b.int_list(shape)],
                                                    b.tensor_type(shape, "f32"))], b.tensor_type(shape, "f32"))
    level = b.op("torch.aten.round", [b.op("torch.aten.mul.Tensor", [x, inverse], t)], t)
    zero_point = b.op("torch.aten.view", [zero_point, b.int_list(shape)], b.tensor_type(shape, zp[1]))
    q = b.op("torch.aten.clamp", [b.op("torch.aten.add.Tensor", [level, zero_point, b.int(1)], t),
                                  b.int(qmin), b.int(qmax)], t)
    op.results[0].replace_all_uses_with(b.to_dtype(q, out[0], "si8"))
    op.erase()
    return True


def _shifted_int8(v: ir.Value) -> ir.Value | None:
    """q when `v` is torchao's uint8 form of the int8 tensor q: u8(i32(q) + 128)."""
    chain = []
    for name in ("torch.prims.convert_element_type", "torch.aten.add.Scalar", "torch.prims.convert_element_type"):
        op = v.owner
        if isinstance(op, ir.Block) or op.name != name:
            return None
        chain.append(op)
        v = op.operands[0]
    to_u8, add, to_i32 = chain
    if not str(to_u8.results[0].type).endswith(",ui8>") or torch_constant(add.operands[1], "int") != 128 \
            or torch_constant(add.operands[2], "int") != 1 or not str(v.type).endswith(",si8>"):
        return None
    return v


def _is_shift_correction(v: ir.Value, weight: ir.Value) -> bool:
    """Whether `v` is 128 * colsum(weight) in i32: sum(weight, [0], keepdim, int32) * 128."""
    mul = v.owner
    if isinstance(mul, ir.Block) or mul.name != "torch.aten.mul.Scalar" or torch_constant(mul.operands[1], "int") != 128:
        return False
    total = mul.operands[0].owner
    return not isinstance(total, ir.Block) and total.name == "torch.aten.sum.dim_IntList" \
        and total.operands[0] == weight and _int_list(total.operands[1]) == [0] \
        and torch_constant(total.operands[3], "int") == SCALAR_TYPES["si32"] and str(v.type).endswith(",si32>")


def _undo_uint8_shift(mm: ir.Operation) -> bool:
    """`_int_mm(u8(i32(q) + 128), W) - 128 * colsum(W)` as `_int_mm(q, W)` (module docstring)."""
    q = _shifted_int8(mm.operands[0])
    uses = list(mm.results[0].uses)
    if q is None or len(uses) != 1:
        return False
    sub = uses[0].owner
    if sub.name != "torch.aten.sub.Tensor" or uses[0].operand_number != 0 or sub.results[0].type != mm.results[0].type \
            or torch_constant(sub.operands[2], "int") != 1 or not _is_shift_correction(sub.operands[1], mm.operands[1]):
        return False
    signed = TorchBuilder(sub).op("torch.aten._int_mm", [q, mm.operands[1]], mm.results[0].type)
    sub.results[0].replace_all_uses_with(signed)
    return True


def rewrite_torchao_quantization(module_op: ir.Operation) -> int:
    """Applies the module docstring's rewrites in place; returns how many choose_qparams_affine."""
    chosen = sum(_decompose_choose_qparams(op) for op in
                 [o for o in walk_ops(module_op) if operator_name(o) == _CHOOSE])
    for op in [o for o in walk_ops(module_op) if operator_name(o) == _QUANTIZE]:
        _decompose_quantize(op)
    for mm in [o for o in walk_ops(module_op) if o.name == "torch.aten._int_mm"]:
        _undo_uint8_shift(mm)
    return chosen
