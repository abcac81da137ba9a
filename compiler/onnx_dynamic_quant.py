"""Exact rewrite of ONNX Runtime's dynamic quantization before import (torq's ONNX input only).

`onnxruntime.quantization.quantize_dynamic` (ONNX Runtime's recommended
quantization for transformers) writes each MatMul as

    (xq: uint8, xs, xz: uint8) = DynamicQuantizeLinear(x)
    acc: int32 = MatMulInteger(xq, W: int8, xz [, W_zp: int8])
    y = Mul(Cast(acc, to=FLOAT), Mul(xs, W_scale))

IREE's ONNX import turns MatMulInteger into an i32 x i32 -> i64 matmul
(both operands widened after the zero points are subtracted), which the NPU
cannot run. A MatMul of two `DequantizeLinear`s of int8 tensors is what IREE
turns into an i8 x i8 -> i32 integer matmul with an elementwise epilogue, so
each such MatMulInteger and the Casts reading it become (the first three
once per DynamicQuantizeLinear, the rest per MatMulInteger):

    zp8 = Cast(Sub(Cast(xz, to=INT32), 128), to=INT8)     # xz - 128
    xq8 = QuantizeLinear(x, xs, zp8)                        # xq - 128
    xr  = Reshape(xq8, (-1, K))                             # unless x is 2-D
    y'  = MatMul(DequantizeLinear(xr, 1.0, zp8),
                 DequantizeLinear(W, 1.0 [per column], W_zp or 0))
    <each Cast's output> = Reshape(y', x.shape[:-1] + (N,)) # (y' itself for 2-D x)

Exact, bit for bit on IREE:
- QuantizeLinear(x, s, z - 128) = saturate_int8(round(x / s) + z - 128) =
  saturate_uint8(round(x / s) + z) - 128 = xq - 128. IREE lowers both
  quantizes to the same f32 ops: x / s, round half to even, plus the zero
  point converted to f32, clamp, convert to an integer. |x / s| <= 255 or
  so (s is the range of x and 0, over 255), so both sums are exact integers
  128 apart, as are the clamp bounds. They differ only on NaN (the clamp of
  DynamicQuantizeLinear propagates it, QuantizeLinear's does not): x / s is
  NaN for an all-zero x (s = 0, 0 / 0), where the result is the accumulator
  times the scale 0 either way (a zero, whose sign may differ); a NaN in x
  makes the min / max, the scale and so every result NaN either way.
- DequantizeLinear(q, 1.0, zp) = q - zp exactly, so the product is
  sum((xq8 - zp8)(W - W_zp)) = sum((xq - xz)(W - W_zp)): MatMulInteger's
  int32. IREE computes it as an integer matmul whose epilogue converts the
  i32 to f32 (the Cast's sitofp) and multiplies by the scales 1.0 (exact).
- A reshape only regroups the matmul's rows. Activations of any rank but 2
  are flattened: with two symbolic dims (a dynamic batch and sequence) IREE
  leaves an N-D matmul of the dequantize f32, which is not even exact once
  its sums pass 2^24, and the 2-D form is the one compiler/onnx_qdq.py's
  flattening rewrite gives a static int8 model's (1, T, K) Linears for the
  NPU (that rewrite needs constant quantization parameters, so it does not
  see these matmuls). The leading dims are restored from constants where
  at most one is symbolic, else from the input's Shape. Each matmul reads
  its own dequantize, as there.

The DynamicQuantizeLinear stays for its scale and zero point; its uint8
output is left without readers and IREE drops it. Rewritten only where the
pattern is exactly this: W a 2-D int8 initializer, W_zp absent or an int8
initializer (one value, or one per column: a per-column dequantize, which
needs opset 13), the accumulator read only by Casts to float and no graph
output. A uint8 W (quantize_dynamic's QUInt8 weights) and its zero point (0
when absent) are both stored minus 128 as int8 first: W - W_zp is unchanged. `rewrite_dynamic_quant(model)` applies it in place and returns how
many MatMulIntegers it rewrote. The llvm-cpu references in the tests import
the model without it.
"""

from __future__ import annotations

import numpy as np

from .onnx_qdq import _initializer, _shapes, graph_index


def rewrite_dynamic_quant(model) -> int:
    """Applies the module docstring's rewrite to `model` (an onnx.ModelProto) in place."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if opset < 11:  # DynamicQuantizeLinear exists from opset 11
        return 0
    nodes, producer, users, outputs = graph_index(model)
    taken = {t for n in nodes for t in (*n.input, *n.output, n.name)} | \
        {t.name for t in model.graph.initializer} | {v.name for v in model.graph.input}
    shapes, shifted, gone, orphans = None, {}, set(), set()
    for mm in nodes:
        found = _match(model, mm, producer, users, outputs, opset) if mm.op_type == "MatMulInteger" else None
        if found is None:
            continue
        dq, weight, weight_zp, casts, stored = found
        shapes = _shapes(model) if shapes is None else shapes
        new = []
        if dq.output[0] not in shifted:  # the int8 activations once per DynamicQuantizeLinear
            shifted[dq.output[0]], new = _shifted_activations(model, dq, weight.shape[0], shapes, taken)
        new += _integer_matmul(model, mm, shifted[dq.output[0]], (weight, stored), weight_zp, casts, taken)
        at = list(model.graph.node).index(mm)
        for n in [mm, *casts]:
            model.graph.node.remove(n)
        for k, n in enumerate(new):
            model.graph.node.insert(at + k, n)
        gone.add(mm.output[0])
        orphans.update(mm.input[1:4:2])  # the weight (when shifted) and its zero point
    for v in [v for v in model.graph.value_info if v.name in gone]:  # the accumulators are gone
        model.graph.value_info.remove(v)
    # The weights' zero points are new initializers (scalars, or per column); the old ones
    # nothing else reads go.
    read = {i for n in model.graph.node for i in n.input} | outputs
    for t in [t for t in model.graph.initializer if t.name in orphans - read]:
        model.graph.initializer.remove(t)
    return len(gone)


def _match(model, mm, producer, users, outputs, opset):
    """(DynamicQuantizeLinear, int8 weight, its int8 zero point (one, or per column), Casts, the
    weight's initializer name, or None when a uint8 weight was shifted to int8 and needs a new
    one) when MatMulInteger `mm` is the module docstring's pattern, else None."""
    from onnx import TensorProto, helper
    if len(mm.input) < 3 or not mm.input[2]:
        return None
    dq = producer.get(mm.input[0])
    if dq is None or dq.op_type != "DynamicQuantizeLinear" or dq.domain not in ("", "ai.onnx") or \
            list(dq.output[0:1]) + list(dq.output[2:3]) != [mm.input[0], mm.input[2]]:
        return None
    weight = _initializer(model, mm.input[1])
    if weight is None or weight.dtype not in (np.int8, np.uint8) or weight.ndim != 2:
        return None
    weight_zp = np.zeros((), weight.dtype)  # MatMulInteger's default
    if len(mm.input) > 3 and mm.input[3]:
        weight_zp = _initializer(model, mm.input[3])
        if weight_zp is None or weight_zp.dtype != weight.dtype or weight_zp.size not in (1, weight.shape[1]) or \
                weight_zp.ndim > 1:
            return None
    stored = mm.input[1]
    if weight.dtype == np.uint8:  # W - z = (W - 128) - (z - 128), both int8
        weight, weight_zp, stored = _minus_128(weight), _minus_128(weight_zp), None
    if weight_zp.ndim > 0:
        weight_zp = weight_zp.reshape(-1)
        if np.all(weight_zp == weight_zp[0]):  # one value: a per-tensor dequantize
            weight_zp = weight_zp[:1].reshape(())
        elif opset < 13:  # DequantizeLinear's axis comes with opset 13
            return None
    casts = users.get(mm.output[0], [])
    if not casts or mm.output[0] in outputs or any(
            c.op_type != "Cast" or helper.get_node_attr_value(c, "to") != TensorProto.FLOAT for c in casts):
        return None
    return dq, weight, weight_zp, casts, stored


def _minus_128(a: np.ndarray) -> np.ndarray:
    """uint8 values minus 128, as int8 (exactly)."""
    return (a.astype(np.int16) - 128).astype(np.int8)


def _fresh(taken: set[str], name: str) -> str:
    """`name`, or `name` with a suffix, that names no tensor or node of the model yet."""
    k, candidate = 0, name
    while candidate in taken:
        k += 1
        candidate = f"{name}_{k}"
    taken.add(candidate)
    return candidate


def _shifted_activations(model, dq, k: int, shapes, taken) -> tuple[tuple, list]:
    """((int8 activations, their zero point, the leading dims of a matmul's product or None),
    nodes): DynamicQuantizeLinear `dq`'s uint8 output minus 128, as an int8 QuantizeLinear of
    its input, reshaped to (-1, `k`) rows unless the input is 2-D (module docstring). The
    leading dims are the input's but the last: a list when at most one of them is symbolic
    (-1 for it), else the name of a tensor that computes them from the input's shape."""
    from onnx import TensorProto, helper, numpy_helper
    base = dq.name or dq.output[0]
    x, scale, zp = dq.input[0], dq.output[1], dq.output[2]
    c128, zp32, zp_sub, zp8, q8 = (_fresh(taken, f"{base}_{s}") for s in
                                   ("128", "zero_point_int32", "zero_point_minus_128", "zero_point_int8", "int8"))
    model.graph.initializer.append(numpy_helper.from_array(np.array(128, np.int32), c128))
    nodes = [helper.make_node("Cast", [zp], [zp32], name=zp32, to=TensorProto.INT32),
             helper.make_node("Sub", [zp32, c128], [zp_sub], name=zp_sub),
             helper.make_node("Cast", [zp_sub], [zp8], name=zp8, to=TensorProto.INT8),
             helper.make_node("QuantizeLinear", [x, scale, zp8], [q8], name=q8)]
    shape = shapes.get(x)
    if shape is not None and len(shape) == 2:
        return (q8, zp8, None), nodes
    rows_shape, rows = _fresh(taken, f"{base}_rows_shape"), _fresh(taken, f"{base}_int8_rows")
    model.graph.initializer.append(numpy_helper.from_array(np.array([-1, k], np.int64), rows_shape))
    nodes.append(helper.make_node("Reshape", [q8, rows_shape], [rows], name=rows))
    if shape is not None and shape[:-1].count(None) <= 1:
        return (rows, zp8, [-1 if d is None else d for d in shape[:-1]]), nodes
    # Several symbolic dims, or no known rank: IREE left such a matmul f32 (not exact once the
    # sums pass 2^24), so the rows are flattened all the same and the dims computed.
    x_shape, starts, ends, lead = (_fresh(taken, f"{base}_{s}") for s in
                                   ("input_shape", "lead_starts", "lead_ends", "leading_dims"))
    model.graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), starts),
                                    numpy_helper.from_array(np.array([-1], np.int64), ends)])
    nodes += [helper.make_node("Shape", [x], [x_shape], name=x_shape),
              helper.make_node("Slice", [x_shape, starts, ends], [lead], name=lead)]
    return (rows, zp8, lead), nodes


def _integer_matmul(model, mm, shifted: tuple, weight: tuple, weight_zp: np.ndarray, casts, taken) -> list:
    """The nodes that compute MatMulInteger `mm`'s accumulator as float into each Cast's output:
    a MatMul of the dequantized `shifted` activations (`_shifted_activations`) by the dequantized
    weight ((int8 values, their initializer or None for a new one)), reshaped back to the leading
    dims and the weight's columns when they were flattened."""
    from onnx import helper, numpy_helper
    q8, zp8, lead = shifted
    base = mm.name or mm.output[0]
    values, stored = weight
    n = values.shape[1]
    one, act, w_zp, w_deq = (_fresh(taken, f"{base}_{s}") for s in ("one", "input", "weight_zero_point", "weight"))
    per_column = weight_zp.ndim == 1
    model.graph.initializer.extend([numpy_helper.from_array(np.array(1.0, np.float32), one),
                                    numpy_helper.from_array(weight_zp, w_zp)])
    if stored is None:
        stored = _fresh(taken, f"{base}_weight_int8")
        model.graph.initializer.append(numpy_helper.from_array(values, stored))
    w_scale = one
    if per_column:  # a per-column zero point comes with a per-column scale (of ones)
        w_scale = _fresh(taken, f"{base}_weight_scale")
        model.graph.initializer.append(numpy_helper.from_array(np.ones(n, np.float32), w_scale))
    nodes = [helper.make_node("DequantizeLinear", [q8, one, zp8], [act], name=act),
             helper.make_node("DequantizeLinear", [stored, w_scale, w_zp], [w_deq], name=w_deq,
                              **({"axis": 1} if per_column else {}))]
    out = casts[0].output[0]
    if lead is None:
        nodes.append(helper.make_node("MatMul", [act, w_deq], [out], name=base))
    else:
        product, shape = _fresh(taken, f"{base}_product"), _fresh(taken, f"{base}_product_shape")
        if isinstance(lead, str):
            columns = _fresh(taken, f"{base}_columns")
            model.graph.initializer.append(numpy_helper.from_array(np.array([n], np.int64), columns))
            nodes.append(helper.make_node("Concat", [lead, columns], [shape], name=shape, axis=0))
        else:
            model.graph.initializer.append(numpy_helper.from_array(np.array([*lead, n], np.int64), shape))
        nodes += [helper.make_node("MatMul", [act, w_deq], [product], name=base),
                  helper.make_node("Reshape", [product, shape], [out], name=_fresh(taken, f"{base}_restore"))]
    # Further Casts of the same accumulator compute the same values.
    nodes += [helper.make_node("Identity", [out], [c.output[0]], name=c.name or _fresh(taken, c.output[0]))
              for c in casts[1:]]
    return nodes
