"""torch's dynamic quantization (PT2E, `is_dynamic=True`) in ops IREE imports, before IREE.

torchao's PT2E flow with a dynamic config (X86InductorQuantizer's
`get_default_x86_inductor_quantization_config(is_dynamic=True)`, XNNPACK's
dynamic config: torch's recipe for transformers and LSTMs) quantizes each
Linear's input when the model runs:

    s, z = quantized_decomposed.choose_qparams.tensor(x, qmin, qmax, eps, dtype)
    q = quantized_decomposed.quantize_per_tensor.tensor(x, s, z, qmin, qmax, dtype)
    linear(quantized_decomposed.dequantize_per_tensor.tensor(q, s, z, ...), w_dq, b)

iree-turbine exports these as `torch.operator`s, and IREE (3.13) has no
lowering for choose_qparams: "failed to legalize operation 'torch.operator'",
for the whole model. Rewritten here, exactly as torch defines them
(torch/ao/quantization/fx/_decomposed.py, `determine_qparams` per tensor
affine), in aten ops:

    lo = min(min(x), 0), hi = max(max(x), 0)                  (f32)
    s = max((hi - lo) / (qmax - qmin), eps)                   (f32, then f64 [1])
    z = clamp(qmin - round_half_even(lo / s), qmin, qmax)     (then si64 [1])

and each `.tensor` quantize / dequantize becomes the scalar form IREE imports
(`quantized_decomposed.quantize_per_tensor` with `aten.Float.Tensor(s)`,
`aten.Int.Tensor(z)`), from which IREE makes an i8 x i8 -> i32 matmul and an f32
epilogue that reads the run-time scale and zero point: the matmul runs on the
NPU, the parameters and the epilogue on the host in f32
(compiler/quantization_parameters.py, compiler/requant_tail.py). The quantize
is then IREE's, round(x / s) + z, as for a static PT2E model; torch's
reference multiplies by 1 / s, which can round a value at a tie the other way.

compiler/torch_qdq.py's rewrite, which runs next, then holds a uint8 activation that
only dequantizes read as int8 (its value, zero point and range minus 128: exact), as
for a static model.

Only per-tensor affine choose_qparams of an f32 tensor with constant range,
eps and dtype is rewritten (choose_qparams_symmetric and per-token variants
are left as written, and IREE's own error names them). Not faithful to torch on a NaN input:
torch's scale is then NaN, IREE's lowering of these min / max / clamp ops drops the NaN.
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import walk_ops
from .torch_ir import TorchBuilder, operator_name, torch_constant
from .torch_qdq import DEQUANTIZE

_CHOOSE = "torch.quantized_decomposed.choose_qparams.tensor"
_QUANTIZE_T = "torch.quantized_decomposed.quantize_per_tensor.tensor"
_DEQUANTIZE_T = "torch.quantized_decomposed.dequantize_per_tensor.tensor"
_QUANTIZE = "torch.quantized_decomposed.quantize_per_tensor"
_SCALAR_FORMS = {_QUANTIZE_T: _QUANTIZE, _DEQUANTIZE_T: DEQUANTIZE}
def _decompose_choose_qparams(op: ir.Operation) -> bool:
    """Replaces choose_qparams `op` by the module docstring's aten ops; False if it is not
    the form rewritten here."""
    if len(op.operands) != 5:
        return False
    x, qmin, qmax = op.operands[0], torch_constant(op.operands[1], "int"), torch_constant(op.operands[2], "int")
    eps = torch_constant(op.operands[3], "float")
    if None in (qmin, qmax, eps) or torch_constant(op.operands[4], "int") is None or not str(x.type).endswith(",f32>"):
        return False
    b = TorchBuilder(op)
    lo = b.f32("torch.aten.clamp_max", b.f32("torch.aten.min", x), b.float(0.0))
    hi = b.f32("torch.aten.clamp_min", b.f32("torch.aten.max", x), b.float(0.0))
    scale = b.f32("torch.aten.div.Scalar", b.f32("torch.aten.sub.Tensor", hi, lo, b.int(1)), b.float(float(qmax - qmin)))
    scale = b.f32("torch.aten.clamp_min", scale, b.float(eps))
    level = b.f32("torch.aten.round", b.f32("torch.aten.div.Tensor", lo, scale))
    zero_point = b.f32("torch.aten.clamp", b.f32("torch.aten.rsub.Scalar", level, b.int(qmin), b.int(1)),
                       b.int(qmin), b.int(qmax))
    op.results[0].replace_all_uses_with(b.as_tensor_1(scale, "f64"))
    op.results[1].replace_all_uses_with(b.as_tensor_1(zero_point, "si64"))
    op.erase()
    return True


def _scalar_form(op: ir.Operation, name: str) -> None:
    """Replaces the `.tensor` quantize / dequantize `op` by its scalar form `name`."""
    b = TorchBuilder(op)
    scale = b.op("torch.aten.Float.Tensor", [op.operands[1]], ir.Type.parse("!torch.float"))
    zero_point = b.op("torch.aten.Int.Tensor", [op.operands[2]], b.int_t)
    new = b.op(name, [op.operands[0], scale, zero_point, *op.operands[3:]], op.results[0].type)
    op.results[0].replace_all_uses_with(new)
    op.erase()


def rewrite_dynamic_quantization(module_op: ir.Operation) -> int:
    """Applies the module docstring's rewrites in place; returns how many choose_qparams."""
    chosen = sum(_decompose_choose_qparams(op) for op in
                 [o for o in walk_ops(module_op) if operator_name(o) == _CHOOSE])
    for op in [o for o in walk_ops(module_op) if operator_name(o) in _SCALAR_FORMS]:
        name = _SCALAR_FORMS[operator_name(op)]
        if len(op.operands) == (6 if name == _QUANTIZE else 7) \
                and None not in [torch_constant(v, "int") for v in op.operands[3:6]]:
            _scalar_form(op, name)
    return chosen
