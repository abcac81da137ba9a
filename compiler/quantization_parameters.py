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

from .box_reads import dispatch_arguments
from .ir_utils import indexing_maps, n_inputs, walk_ops

_TO_INTEGER = ("arith.fptosi", "arith.fptoui")


def module_quantizes(dispatches: list[ir.Operation]) -> bool:
    """Whether one of a module's `dispatches` (its flow.dispatch.workgroups) converts a float to
    an integer of at most 16 bits (host code outside dispatches does not count)."""
    return any(_narrows_to_integer(op) for dispatch in dispatches for op in walk_ops(dispatch))


def quantization_parameter_reason(dispatch: ir.Operation) -> str:
    """Why `dispatch` (a flow.dispatch.workgroups of a module that quantizes) stays on host: it
    computes single values from float tensors only (a scale, a zero point, their min or max);
    else ""."""
    results = [r.type for r in dispatch.results]
    if not results or not all(_single_value(t) for t in results):
        return ""
    if not _float_tensors_only(dispatch):
        return ""  # (a contraction of int8 tensors with a single dequantized result is not one)
    return ("computes single values from f32 tensors in a model that quantizes at run time (a dynamic "
            "quantization's scale or zero point, or the min / max they are computed from): on host in f32, as "
            "every value quantized with them depends on their bits")


PER_TOKEN_REASON = ("computes what a run-time quantize reads along some of its dims (a per-token scale or "
                    "zero point, or the min / max it is computed from): on host in f32, as every value quantized "
                    "with it depends on its bits")


def per_token_parameter_dispatches(dispatches: list[ir.Operation]) -> set[ir.Operation]:
    """In a model quantized when it runs (torchao's per-token scales): the dispatches computing
    what a quantize reads broadcast, and those they read, up through dispatches whose results
    are all smaller than that quantize's result and whose tensor operands are all float."""
    found: set = set()
    for q in dispatches:
        for operand, size in _broadcast_quantize_operands(q):
            stack = [operand]
            while stack:
                d = stack.pop().owner
                if isinstance(d, ir.Block) or d.name != "flow.dispatch.workgroups" or d in found \
                        or not all(_elements(r.type) < size for r in d.results) or not _float_tensors_only(d):
                    continue
                found.add(d)
                stack.extend(dispatch_arguments(d))
    return found


def _broadcast_quantize_operands(q: ir.Operation) -> list[tuple[ir.Value, int]]:
    """(operand, the quantized result's element count) for each operand of dispatch `q` that a
    generic converting a float to a <= 16-bit integer loads and reads broadcast (through a map
    with fewer results than the generic has loops)."""
    args, out = dispatch_arguments(q), []
    for g in walk_ops(q):
        if g.name != "linalg.generic" or not any(_narrows_to_integer(o) for o in walk_ops(g)):
            continue
        maps = indexing_maps(g)
        for i in range(n_inputs(g)):
            load = g.operands[i].owner
            if len(maps[i].results) >= maps[i].n_dims or isinstance(load, ir.Block) \
                    or load.name != "iree_tensor_ext.dispatch.tensor.load" or not isinstance(load.operands[0].owner, ir.Block):
                continue
            k = ir.BlockArgument(load.operands[0]).arg_number
            if k < len(args):
                out.append((args[k], _elements(g.results[0].type)))
    return out


def _narrows_to_integer(op: ir.Operation) -> bool:
    t = op.results[0].type if op.name in _TO_INTEGER else None
    return isinstance(t, ir.IntegerType) and t.width <= 16


def _elements(t: ir.Type) -> int:
    return math.prod(t.shape) if isinstance(t, ir.RankedTensorType) and t.has_static_shape else 0


def _float_tensors_only(d: ir.Operation) -> bool:
    tensors = [v.type for v in dispatch_arguments(d) if isinstance(v.type, ir.RankedTensorType)]
    return bool(tensors) and all(_is_float(t.element_type) for t in tensors)


def _single_value(t: ir.Type) -> bool:
    """A tensor of one float or one integer (a zero point: at most 16 bits from onnxruntime's
    DynamicQuantizeLinear, i64 from torch's choose_qparams)."""
    if not (isinstance(t, ir.RankedTensorType) and t.has_static_shape and math.prod(t.shape) == 1):
        return False
    e = t.element_type
    return _is_float(e) or isinstance(e, ir.IntegerType)


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F32Type, ir.F16Type, ir.BF16Type))
