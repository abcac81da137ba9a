"""Dispatches that compute a run-time quantization's parameters stay on the host in f32.

A dynamically quantized model (onnxruntime's `quantize_dynamic`: DynamicQuantizeLinear
before each MatMulInteger) computes every activation's scale and zero point when it runs:
the min and max of the tensor (two reductions to one value), then (max - min) / 255 and
the zero point from them (an elementwise dispatch on single values). IREE gives each its
own dispatch, of f32 only, which the NPU would run in bf16 as it runs a float model. But
every value quantized with that scale then moves: one bf16 rounding of the min moved all
768 outputs of a 16 x 64 x 48 MatMulInteger (relative L2 6.3e-3 from llvm-cpu), where
the int8 matmul itself is exact.

`quantization_parameter_reason(dispatch)` refuses, in a module that quantizes (some
dispatch converts a float to an integer of at most 16 bits), a dispatch whose results are
all single float values computed from float tensors. A float model has no such
conversion and is unaffected; a static int8 model's scales are constants and need no
such dispatch. --torq-int8-float-ops=bf16 (the user's choice of bf16 for an int8 model's
float ops) lets the NPU compute them in bf16.
"""

from __future__ import annotations

import math

from iree.compiler import ir

from .ir_utils import walk_ops

_TO_INTEGER = ("arith.fptosi", "arith.fptoui")


def module_quantizes(module_op: ir.Operation) -> bool:
    """Whether a dispatch of `module_op` converts a float to an integer of at most 16 bits."""
    for op in walk_ops(module_op):
        if op.name in _TO_INTEGER:
            t = op.results[0].type
            if isinstance(t, ir.IntegerType) and t.width <= 16:
                return True
    return False


def quantization_parameter_reason(dispatch: ir.Operation) -> str:
    """Why `dispatch` (a flow.dispatch.workgroups of a module that quantizes) stays on host: it
    computes single float values from float tensors (a scale, its min or max); else ""."""
    results = [r.type for r in dispatch.results]
    if not results or not all(_single_float(t) for t in results):
        return ""
    if not any(isinstance(v.type, ir.RankedTensorType) and _is_float(v.type.element_type)
               for v in dispatch.operands):
        return ""
    return ("computes single f32 values in a model that quantizes at run time (a dynamic quantization's "
            "scale, or the min / max it is computed from): on host in f32, as every value quantized with it "
            "depends on its bits (--torq-int8-float-ops=bf16 runs it on the NPU in bf16)")


def _single_float(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType) and t.has_static_shape and math.prod(t.shape) == 1 \
        and _is_float(t.element_type)


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F32Type, ir.F16Type, ir.BF16Type))
