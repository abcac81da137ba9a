"""Exact rewrites of torch QDQ input (PT2E) before IREE: uint8 activations as int8.

torchao's PT2E flow (`prepare_pt2e` / `convert_pt2e` with X86InductorQuantizer,
exported through iree-turbine) quantizes activations to uint8:
`torch.quantized_decomposed.quantize_per_tensor(x, s, z, 0, 255, uint8)`
read by `dequantize_per_tensor` with the same parameters. IREE lowers a
uint8 operand of a contraction with `arith.extui` and the requantization
with `arith.fptoui`. As in compiler/onnx_qdq.py, such a tensor can hold its
value minus 128 instead, exactly: Q_u8(x; s, z, qmin, qmax) - 128 =
Q_i8(x; s, z - 128, qmin - 128, qmax - 128) and DQ_u8(q; s, z) =
DQ_i8(q - 128; s, z - 128), so the quantize and its dequantizes are rewritten
together, and the model computes the same numbers with int8 activations.
Done for a uint8 value only when every user is a dequantize of it and every
range and dtype parameter is a constant; a zero point computed when the model
runs (compiler/torch_dynamic_quant.py's) is read minus 128 (`aten.sub.int`).
The model's interface is untouched (a quantize's result is never a function
argument; one returned is left alone).
"""

from __future__ import annotations

from iree.compiler import ir

from .ir_utils import walk_ops
from .torch_ir import SCALAR_TYPES, TorchBuilder, torch_constant

_QUANTIZE = "torch.quantized_decomposed.quantize_per_tensor"
DEQUANTIZE = "torch.quantized_decomposed.dequantize_per_tensor"
# torch ScalarType codes of the `dtype` operand.
UINT8, INT8 = SCALAR_TYPES["ui8"], SCALAR_TYPES["si8"]
# Operands (zero point, qmin, qmax, dtype) of both ops.
_ZERO_POINT, _PARAMS = 2, (3, 4, 5)


def _int_params(op: ir.Operation) -> list[int] | None:
    """The constant (qmin, qmax, dtype) of a quantize / dequantize, or None."""
    values = [torch_constant(op.operands[k], "int") for k in _PARAMS]
    return None if None in values else values


def _shifted_zero_point(op: ir.Operation) -> ir.Value:
    """`op`'s zero point minus 128: a constant, or `aten.sub.int` of a run-time one."""
    b, zp = TorchBuilder(op), op.operands[_ZERO_POINT]
    value = torch_constant(zp, "int")
    return b.int(value - 128) if value is not None else b.int_op("torch.aten.sub.int", zp, b.int(128))


def rewrite_uint8_activations(module_op: ir.Operation) -> int:
    """Applies the module docstring's rewrite in place; returns the number of tensors rewritten."""
    done = 0
    for q in [o for o in walk_ops(module_op) if o.name == _QUANTIZE]:
        v = q.results[0]
        if not str(v.type).endswith(",ui8>"):
            continue
        users = [u.owner for u in v.uses]
        if not users or any(u.name != DEQUANTIZE or u.operands[0] != v for u in users):
            continue
        params = [_int_params(op) for op in [q] + users]
        if any(p is None or p[2] != UINT8 for p in params):
            continue
        for op, (qmin, qmax, _) in zip([q] + users, params):
            op.operands[_ZERO_POINT] = _shifted_zero_point(op)
            for k, value in zip(_PARAMS, (qmin - 128, qmax - 128, INT8)):
                op.operands[k] = TorchBuilder(op).int(value)
        v.set_type(ir.Type.parse(str(v.type)[: -len(",ui8>")] + ",si8>"))
        done += 1
    return done
