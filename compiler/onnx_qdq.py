"""Exact rewrites of an ONNX QDQ graph before import (torq's ONNX input only).

ONNX Runtime's QDQ form puts a dequantize / quantize pair around ops that
need no arithmetic on the values. IREE lowers such a pair as written: f32
data in DDR around an f32 op that the NPU cannot run bit-exactly. The
rewrites here remove the pair where the int8 op computes the same bits.

- `DequantizeLinear(x, s, z) -> MaxPool -> QuantizeLinear(s, z)`, with one
  per-tensor scale s > 0 and zero point z on both sides (ONNX Runtime's
  quantized max pool): MaxPool of the int8 x. Exact: dequantization with
  s > 0 is strictly increasing, so the max commutes with it, and
  Q(DQ(k)) = k for every int8 k (fl((k - z) s) / s is within a few f32 ulps
  of k - z, far from a rounding boundary). Padding never wins in either
  form (MaxPool ignores it).

`rewrite_qdq(model)` applies them in place and returns how many it made.
The llvm-cpu references in the tests import the model without them.
"""

from __future__ import annotations

import numpy as np


def _initializer(model, name: str) -> np.ndarray | None:
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return None


def _quant_params(model, node) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, zero point) of a Q / DQ node when both are per-tensor constants, else None."""
    if len(node.input) < 3:
        return None
    s, z = _initializer(model, node.input[1]), _initializer(model, node.input[2])
    if s is None or z is None or s.size != 1 or z.size != 1:
        return None
    return s, z


def rewrite_qdq(model) -> int:
    """Applies the module docstring's rewrites to `model` (an onnx.ModelProto) in place."""
    nodes = list(model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    users: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            users.setdefault(i, []).append(n)
    outputs = {o.name for o in model.graph.output}
    done = 0
    for pool in nodes:
        if pool.op_type != "MaxPool" or len(pool.output) != 1 or pool.output[0] in outputs:
            continue
        dq = producer.get(pool.input[0])
        after = users.get(pool.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or len(after) != 1 or after[0].op_type != "QuantizeLinear":
            continue
        q = after[0]
        pd, pq = _quant_params(model, dq), _quant_params(model, q)
        if pd is None or pq is None or not (float(pd[0]) > 0 and pd[0] == pq[0] and pd[1] == pq[1]
                                             and pd[1].dtype == pq[1].dtype):
            continue
        pool.input[0] = dq.input[0]
        pool.output[0] = q.output[0]
        model.graph.node.remove(q)
        if not [u for u in users.get(dq.output[0], []) if u is not pool] and dq.output[0] not in outputs:
            model.graph.node.remove(dq)
        done += 1
    return done
