"""A Linear on rank >= 3 activations as a Linear on their 2-D view, before IREE.

torch exports `nn.Linear` on (batch, tokens, features) as `torch.aten.linear`
of a 3-D input. torch-mlir lowers it as a batch matmul by the weight
transposed and expanded to (1, K, N): a transpose of every weight, which
IREE evaluates at compile time when the weight is inline (const-eval) and
hoists into a load-time initializer when it is a parameter (an LLM's 420
weights: 422 host dispatches at load, and IREE's initializer pipeline and
global folding over them on every compile). The same Linear on a 2-D input
lowers to a matmul that reads the weight as stored, (N, K), with no
transpose; the NPU's matmul takes that layout as it is (rhs dims NK).

So, for `linear(x, w, b)` with x static of rank >= 3, [d0, ..., K], and w a
static [N, K] matrix:

    view(linear(view(x, [d0 * ... , K]), w, b), [d0, ..., N])

Exact: a view only regroups the rows of the product. A product by a
transposed matrix, `matmul(x, w.t())` (a tied LM head reading the embedding
table), is that linear without bias first: the same product, so the table
is read as stored too instead of transposed at load. Not applied to
quantized (PT2E) inputs, where IREE forms the integer matmul only from a
dequantize it reads directly (compiler/onnx_qdq.py, the same effect on
ONNX); a symbolic dim is left as written.

On quantized inputs (`rewrite_quantized_linears`), a linear of a dequantized
tensor of rank >= 4 (ConvNeXt's MLP on (batch, height, width, channels)) or
of rank 3 with a leading dim above 1 (MobileViT's transformer on (patches,
tokens, channels)): IREE forms no integer matmul from it, and it stayed a
float matmul on host (83% of ConvNeXt-Tiny's MACs under PT2E). The view goes
before the dequantize, onto the integer tensor, and to (1, rows, K), the
form IREE makes an integer matmul of (a transformer's Linear):

    view(linear(dequantize(view(q, [1, d0 * ... , K])), w, b), [d0, ..., N])

Exact for the same reason: the dequantize is elementwise.
"""

from __future__ import annotations

import math
import re

from iree.compiler import ir

from .ir_utils import walk_ops
from .torch_ir import TorchBuilder, shape_and_dtype, torch_constant
from .torch_qdq import DEQUANTIZE

LINEAR = "torch.aten.linear"
# In MLIR text: a linear whose input (its first type) has rank >= 3, or a product by a
# transposed matrix; a module with neither does not pay for the rewrite's export.
_CANDIDATE = re.compile(rb"torch\.aten\.linear [^\n]*?: !torch\.vtensor<\[[^\],]*,[^\],]*,")
_TRANSPOSED_PRODUCT = (b"torch.aten.matmul", (b"torch.aten.t ", b"torch.aten.transpose.int"))


def may_rewrite(data: bytes) -> bool:
    """Whether the MLIR text `data` may hold a linear or product the module docstring rewrites."""
    product, transposes = _TRANSPOSED_PRODUCT
    return bool(_CANDIDATE.search(data)) or (product in data and any(t in data for t in transposes))


def _rows_view(op: ir.Operation) -> tuple[list[int], list[int], str] | None:
    """(x's shape, the result's, dtype) when `op` is a linear the module docstring rewrites."""
    if op.name != LINEAR:
        return None
    x, w = shape_and_dtype(op.operands[0].type), shape_and_dtype(op.operands[1].type)
    y = shape_and_dtype(op.results[0].type)
    if x is None or w is None or y is None or len(x[0]) < 3 or len(w[0]) != 2 or y[1] != x[1]:
        return None
    if y[0] != [*x[0][:-1], w[0][0]]:
        return None
    return x[0], y[0], y[1]


def _view(value: ir.Value, shape: list[int], dtype: str, before: ir.Operation) -> ir.Value:
    b = TorchBuilder(before)
    return b.op("torch.aten.view", [value, b.int_list(shape)], b.tensor_type(shape, dtype))


def _transposed_matrix(v: ir.Value) -> ir.Value | None:
    """The static 2-D w when `v` is w.t() or w.transpose(0, 1), else None."""
    op = None if isinstance(v.owner, ir.Block) else v.owner
    if op is None or op.name not in ("torch.aten.t", "torch.aten.transpose.int"):
        return None
    w = shape_and_dtype(op.operands[0].type)
    if w is None or len(w[0]) != 2:
        return None
    if op.name == "torch.aten.transpose.int":
        dims = []
        for d in op.operands[1:]:
            if torch_constant(d, "int") is None:
                return None
            dims.append(torch_constant(d, "int") % 2)
        if sorted(dims) != [0, 1]:
            return None
    return op.operands[0]


def _matmuls_as_linears(module_op: ir.Operation) -> None:
    """Each `matmul(x, w.t())` of a static x of rank >= 2 becomes `linear(x, w, None)`."""
    for op in [o for o in walk_ops(module_op) if o.name == "torch.aten.matmul"]:
        w = _transposed_matrix(op.operands[1])
        x = shape_and_dtype(op.operands[0].type)
        if w is None or x is None or len(x[0]) < 2:
            continue
        b = TorchBuilder(op)
        none = b.op("torch.constant.none", [], ir.Type.parse("!torch.none"))
        linear = b.op(LINEAR, [op.operands[0], w, none], op.results[0].type)
        transpose = op.operands[1].owner
        op.results[0].replace_all_uses_with(linear)
        op.erase()
        if not list(transpose.results[0].uses):
            transpose.erase()


def rewrite_batched_linears(module_op: ir.Operation) -> int:
    """Applies the module docstring's rewrites in place; returns the number of linears rewritten."""
    _matmuls_as_linears(module_op)
    done = 0
    for op in [o for o in walk_ops(module_op) if o.name == LINEAR]:
        found = _rows_view(op)
        if found is None:
            continue
        x_shape, _, dtype = found
        rows = [math.prod(x_shape[:-1])]
        _linear_on_rows(op, _view(op.operands[0], [*rows, x_shape[-1]], dtype, op), rows, found)
        done += 1
    return done


def _linear_on_rows(op: ir.Operation, flat_x: ir.Value, rows: list[int], found: tuple) -> None:
    """Replaces linear `op` by the linear of `flat_x` (its input viewed as `rows` x K), viewed
    back to its result's shape; `found` is `_rows_view(op)`."""
    _, y_shape, dtype = found
    flat_y = TorchBuilder(op).op(LINEAR, [flat_x, *op.operands[1:]], TorchBuilder.tensor_type([*rows, y_shape[-1]], dtype))
    op.results[0].replace_all_uses_with(_view(flat_y, y_shape, dtype, op))
    op.erase()


def rewrite_quantized_linears(module_op: ir.Operation) -> int:
    """The quantized rewrite of the module docstring, in place; returns how many linears."""
    done = 0
    for op in [o for o in walk_ops(module_op) if o.name == LINEAR]:
        found = _rows_view(op)
        dq = op.operands[0].owner
        if found is None or isinstance(dq, ir.Block) or dq.name != DEQUANTIZE:
            continue
        x_shape, _, dtype = found
        if len(x_shape) == 3 and x_shape[0] == 1:  # already the form IREE makes an int8 matmul of
            continue
        q = shape_and_dtype(dq.operands[0].type)
        if q is None or q[0] != x_shape:
            continue
        rows = [1, math.prod(x_shape[:-1])]
        flat_q = _view(dq.operands[0], [*rows, x_shape[-1]], q[1], op)
        flat_x = TorchBuilder(op).op(DEQUANTIZE, [flat_q, *dq.operands[1:]], TorchBuilder.tensor_type([*rows, x_shape[-1]], dtype))
        _linear_on_rows(op, flat_x, rows, found)
        if not list(dq.results[0].uses):
            dq.erase()
        done += 1
    return done
