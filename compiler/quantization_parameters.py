"""Dispatches that compute a run-time quantization's parameters stay on the host in f32.

A dynamically quantized model (onnxruntime's `quantize_dynamic`: DynamicQuantizeLinear
before each MatMulInteger) computes every activation's scale and zero point when it runs:
the min and max of the tensor (two reductions to one value), then (max - min) / 255 and
the zero point from them (an elementwise dispatch on single values). IREE gives each its
own dispatch, of f32 only, which the NPU would run in bf16 as it runs a float model. But
every value quantized with that scale then moves: one bf16 rounding of the min moved all
768 outputs of a 16 x 64 x 48 MatMulInteger (relative L2 6.3e-3 from llvm-cpu), where
the int8 matmul itself is exact.

`quantization_parameter_reason(dispatch)` refuses, in a module that quantizes
(`module_quantizes`: some dispatch converts a float to an integer of at most 16 bits; asked
only when a dispatch computes single values, so other models never walk their ops for
it), a dispatch whose results are
all single values (a float scale, an integer zero point) computed from float tensors
only. A float model has no such conversion and is unaffected; a static int8 model's
scales are constants and need no such dispatch. --torq-int8-float-ops=bf16 (bf16 for an
int8 model's softmax and LayerNorm) does not move them: with the scale and zero point in
bf16, an all-negative input's zero point moved and the matmul's result with it
(relative L2 0.21 from llvm-cpu on that 16 x 64 x 48 MatMulInteger).
"""

from __future__ import annotations

import math

from iree.compiler import ir

from .ir_utils import walk_ops

_TO_INTEGER = ("arith.fptosi", "arith.fptoui")


def module_quantizes(dispatches: list[ir.Operation]) -> bool:
    """Whether one of a module's `dispatches` (its flow.dispatch.workgroups) converts a float to
    an integer of at most 16 bits (host code outside dispatches does not count)."""
    for dispatch in dispatches:
        for op in walk_ops(dispatch):
            t = op.results[0].type if op.name in _TO_INTEGER else None
            if isinstance(t, ir.IntegerType) and t.width <= 16:
                return True
    return False


def quantization_parameter_reason(dispatch: ir.Operation) -> str:
    """Why `dispatch` (a flow.dispatch.workgroups of a module that quantizes) stays on host: it
    computes single values from float tensors only (a scale, a zero point, their min or max);
    else ""."""
    results = [r.type for r in dispatch.results]
    if not results or not all(_single_value(t) for t in results):
        return ""
    tensors = [v.type for v in dispatch.operands if isinstance(v.type, ir.RankedTensorType)]
    if not tensors or not all(_is_float(t.element_type) for t in tensors):
        return ""  # (a contraction of int8 tensors with a single dequantized result is not one)
    return ("computes single values from f32 tensors in a model that quantizes at run time (a dynamic "
            "quantization's scale or zero point, or the min / max they are computed from): on host in f32, as "
            "every value quantized with them depends on their bits")


def _single_value(t: ir.Type) -> bool:
    """A tensor of one float or one integer (a zero point: at most 16 bits from onnxruntime's
    DynamicQuantizeLinear, i64 from torch's choose_qparams)."""
    if not (isinstance(t, ir.RankedTensorType) and t.has_static_shape and math.prod(t.shape) == 1):
        return False
    e = t.element_type
    return _is_float(e) or isinstance(e, ir.IntegerType)


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F32Type, ir.F16Type, ir.BF16Type))
