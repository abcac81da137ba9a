"""Exact rewrites of an ONNX QDQ graph before import (torq's ONNX input only).

ONNX Runtime's QDQ form puts a dequantize / quantize pair around ops that
need no arithmetic on the values. IREE lowers such a pair as written: f32
data in DDR around an f32 op that the NPU cannot run bit-exactly. The
rewrites here remove the pair where the int8 op computes the same bits.

- `DequantizeLinear`s -> MaxPool, Concat or data movement (Reshape,
  Transpose, Squeeze, Split, Slice, Gather, ...) -> `QuantizeLinear`
  (per-tensor scales s > 0; ONNX Runtime's quantized max pool and concat,
  and the QDQ pairs it leaves around a transformer's head split): the op on
  the int8 inputs, each first requantized to the output's scale and zero
  point by Q(DQ(x)) where they differ (an int8 -> int8 table on the NPU).
  Exact: Q is elementwise, so it commutes with concat and data movement, and Q(DQ(.)) is
  non-decreasing, so it commutes with max; with one scale and zero point
  Q(DQ(k)) = k for every int8 k (fl((k - z) s) / s is within a few f32
  ulps of k - z, far from a rounding boundary). Padding never wins a max.

- uint8 activations (ONNX Runtime's QUInt8) become int8 with every zero
  point lowered by 128: Q_u8(x; s, z) - 128 = Q_i8(x; s, z - 128) and
  DQ_u8(q; s, z) = DQ_i8(q - 128; s, z - 128), exactly, so every uint8
  tensor holds its value minus 128 instead (uint8 constants too). Max pool
  and data movement between them commute with the shift. Done only when
  every uint8 tensor is such a quantize's output or a constant, read only by
  dequantizes, max pools and data movement, and is no graph input or output
  (the model's interface stays as written); otherwise nothing changes.

- A MatMul of rank >= 3 activations by a 2-D matrix reads its own
  dequantize of the int8 tensor reshaped to 2-D, and its result is reshaped
  back. IREE turns a contraction of dequantized operands into integer math
  only when the contraction reads the dequantize directly: where the
  dequantize has other readers (a Linear whose input also feeds a residual
  add) the unit batch dim is folded into an expand_shape between the two,
  and rows over several dims that are not 1 (a Linear on a channels-last
  map, (1, H, W, C), as in ConvNeXt) are collapsed by a collapse_shape
  between them; the matmul stays f32 (a host dispatch). And IREE keeps a
  (1, T, K) integer matmul 3-D while it folds the unit dim of the
  elementwise ops around it, so a pre-norm transformer's residual (the
  block's input, which its LayerNorm reads too) reaches the epilogue through
  an expand_shape: a dispatch of its own dequantizes it and the epilogue
  adds an f32 tensor (DeiT: every attention output and fc2 on the host).
  2-D, the residual's dequantize is cloned into the contraction's dispatch
  (torq-fuse-dequantize then computes it in the epilogue). Exact: a reshape
  commutes with a per-tensor dequantize and only regroups the matmul's rows.

- A MatMul of two dequantized inputs with several batch dims that are not 1
  (MobileViT's attention: patches x heads) reads its dequantizes of the two
  int8 tensors reshaped to one batch dim, and its result is reshaped back:
  IREE collapses the batch dims between each dequantize and the matmul, which
  then stays f32 on the host. Exact for the same reason.

`rewrite_qdq(model)` applies them in place and returns how many it made.
The llvm-cpu references in the tests import the model without them.
"""

from __future__ import annotations

import numpy as np

from .onnx_fold import fold_shape_computations


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
    return s.reshape(()), z.reshape(())  # exporters write per-tensor parameters as () or (1,)


def rewrite_qdq(model) -> int:
    """Applies the module docstring's rewrites to `model` (an onnx.ModelProto) in place."""
    return (_uint8_to_int8(model) + _int8_data_movement(model) + _flatten_matmul_inputs(model)
            + _collapse_batch_matmul_inputs(model))


# Ops that move values without arithmetic: they commute with a shift of every value.
_DATA_MOVEMENT = {"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat",
                  "Slice", "Split", "Expand", "Tile", "GlobalMaxPool"}


def _uint8_tensors(model, zp_dtype) -> set[str] | None:
    """The uint8 activation tensors and constants, or None when one is used where the shift
    would not commute (see the module docstring)."""
    from onnx import TensorProto
    inits = {t.name: t for t in model.graph.initializer}
    u8 = {n for n, t in inits.items() if t.data_type == TensorProto.UINT8}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and zp_dtype(n) == "uint8":
            u8.add(n.output[0])
        elif n.op_type in _DATA_MOVEMENT and any(i in u8 for i in n.input):
            if n.input[0] not in u8 or (n.op_type == "Concat" and not all(i in u8 for i in n.input)):
                return None  # a uint8 tensor mixed with others
            u8.add(n.output[0])
    interface = {v.name for v in model.graph.input} | {v.name for v in model.graph.output}
    if u8 & interface:
        return None
    for n in model.graph.node:
        for k, i in enumerate(n.input):
            if i not in u8:
                continue
            zp_of_dq = n.op_type == "DequantizeLinear" and k in (0, 2)
            zp_of_q = n.op_type == "QuantizeLinear" and k == 2
            if not (zp_of_dq or zp_of_q or (n.op_type in _DATA_MOVEMENT and (k == 0 or n.op_type == "Concat"))):
                return None
        # A dequantize shifts its data and zero point together, or neither: a uint8 zero point
        # must come with shifted data, and shifted data with a zero point to shift.
        if n.op_type == "DequantizeLinear" and \
                ((len(n.input) > 2 and n.input[2] in u8) != (n.input[0] in u8) or (n.input[0] in u8) > (len(n.input) > 2)):
            return None
    return u8


def _uint8_to_int8(model) -> int:
    """uint8 activations as int8 (module docstring); returns the number of tensors shifted."""
    from onnx import numpy_helper
    inits = {t.name: t for t in model.graph.initializer}

    def zp_dtype(n):
        if len(n.input) < 3:
            return "uint8"  # QuantizeLinear's default output type
        t = inits.get(n.input[2])
        return str(numpy_helper.to_array(t).dtype) if t is not None else None

    u8 = _uint8_tensors(model, zp_dtype)
    if not u8:
        return 0
    shifted = [n for n in u8 if n in inits]
    for name in shifted:
        data = numpy_helper.to_array(inits[name]).astype(np.int16) - 128
        inits[name].CopyFrom(numpy_helper.from_array(data.astype(np.int8), name))
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and len(n.input) < 3 and n.output[0] in u8:
            zp = f"{n.output[0]}_zero_point_int8"
            model.graph.initializer.append(numpy_helper.from_array(np.array(-128, np.int8), zp))
            if len(n.input) == 1:
                n.input.append("")
            n.input.append(zp)
    stale = [v for v in model.graph.value_info if v.name in u8]
    for v in stale:  # types are inferred again after the rewrite
        model.graph.value_info.remove(v)
    return len(u8 - set(shifted))


# Ops whose int8 form computes the same bits as dequantize -> op -> quantize: data movement,
# and max pooling (Q(DQ(x)) is non-decreasing in x, so it commutes with max).
_INT8_OPS = {"MaxPool", "Concat", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Split", "Slice",
             "Identity", "Gather"}


def _value_inputs(n) -> list[int]:
    """The inputs of an `_INT8_OPS` node that carry values (not shapes, axes or indices)."""
    return list(range(len(n.input))) if n.op_type == "Concat" else [0]


def graph_index(model) -> tuple[list, dict, dict, set]:
    """(the graph's nodes, the node producing each value, the nodes reading each value, the
    graph's output names) of `model`, as the graph stands now."""
    nodes = list(model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    users: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            users.setdefault(i, []).append(n)
    return nodes, producer, users, {o.name for o in model.graph.output}


def _same_params(a, b) -> bool:
    return a[1].dtype == b[1].dtype and bool(np.all(a[0] == b[0])) and bool(np.all(a[1] == b[1]))


def _int8_data_movement(model) -> int:
    """`DequantizeLinear`s -> MaxPool / Concat / data movement -> `QuantizeLinear`s as the int8
    op; an input whose scale or zero point differs from the quantize's is requantized first
    (Q(DQ(x)), an int8 -> int8 op the NPU runs as a table). An op with several outputs (Split)
    needs one quantize per output, all with the same parameters. Returns the number of ops
    rewritten."""
    from onnx import helper
    nodes, producer, users, outputs = graph_index(model)
    done, detached, requantized = 0, [], {}
    for op in nodes:
        if op.op_type not in _INT8_OPS or any(o in outputs for o in op.output):
            continue
        after = [users.get(o, []) for o in op.output]
        dqs = [producer.get(op.input[k]) for k in _value_inputs(op)]
        if any(len(a) != 1 or a[0].op_type != "QuantizeLinear" for a in after) or \
                any(d is None or d.op_type != "DequantizeLinear" for d in dqs):
            continue
        qs = [a[0] for a in after]
        pqs = [_quant_params(model, q) for q in qs]
        pds = [_quant_params(model, d) for d in dqs]
        if any(p is None or not float(p[0]) > 0 for p in pqs + pds) or \
                any(not _same_params(p, pqs[0]) for p in pqs) or any(p[1].dtype != pqs[0][1].dtype for p in pds):
            continue
        q, pq = qs[0], pqs[0]
        at = list(model.graph.node).index(op)
        for k, d, pd in zip(_value_inputs(op), dqs, pds):
            if _same_params(pd, pq):
                op.input[k] = d.input[0]
            else:  # one requantize per dequantize and target parameters, shared by its readers
                key = (d.output[0], q.input[1], q.input[2])
                if key not in requantized:
                    requantized[key] = f"{d.output[0]}_requantized_{len(requantized)}"
                    model.graph.node.insert(at, helper.make_node("QuantizeLinear", list(key), [requantized[key]],
                                                                 name=requantized[key]))
                    at += 1
                op.input[k] = requantized[key]
        for k, qk in enumerate(qs):
            op.output[k] = qk.output[0]
            model.graph.node.remove(qk)
        detached.extend(dqs)
        done += 1
    # Dequantizes the rewrites left without readers, in one pass over the graph.
    read = {i for n in model.graph.node for i in n.input} | outputs
    for d in {id(d): d for d in detached}.values():
        if d.output[0] not in read:
            model.graph.node.remove(d)
    return done


def _shapes(model, fold: bool = False) -> dict[str, list[int | None]]:
    """Shapes of the model's tensors by ONNX shape inference, None for a dim it leaves symbolic
    (an exporter's dynamic batch); {} when it fails. With data propagation, as the import's
    own inference: a Reshape to a shape the graph computes from Shape / Gather / Concat of
    static tensors (LeViT's flatten(2).transpose(1, 2)) is known, so its readers' MatMuls
    are rewritten (without it, LeViT's Linears stayed f32 on the host). Dims data propagation
    leaves unknown (TinyViT's window partition: a Reshape to a shape computed with Mod and
    Div) are known with `fold`, once the shape computations are folded, on an inferred copy of
    the model (compiler/onnx_fold.py; without it, TinyViT's attention matmuls stayed f32 on
    the host). Only the batch-matmul rewrite asks for it: with folded shapes the flattening
    rewrite took a Linear of timm's CoaT-Lite that IREE then failed to import."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # the import's own shape inference reports a broken model
        return {}
    out = _inferred_shapes(inferred)
    static_inputs = all(None not in out.get(i.name, [None]) for i in model.graph.input)
    if fold and static_inputs and any(None in shape for shape in out.values()):  # a dynamic batch never folds
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        try:
            out = _inferred_shapes(fold_shape_computations(onnx, inferred, opset))
        except Exception:  # a second inference that fails: the shapes as first inferred
            pass
    return out


def _inferred_shapes(inferred) -> dict[str, list[int | None]]:
    out = {}
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if v.type.tensor_type.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
    return out


def _flatten_matmul_inputs(model) -> int:
    """MatMuls of a rank >= 3 dequantized input by a 2-D matrix read a 2-D reshape of the int8
    tensor through their own dequantize (module docstring).
    Returns the number rewritten."""
    producer = {o: n for n in model.graph.node for o in n.output}
    shapes = None
    done = 0
    for mm in list(model.graph.node):
        dq = producer.get(mm.input[0]) if mm.op_type == "MatMul" else None
        if dq is None or dq.op_type != "DequantizeLinear" or _quant_params(model, dq) is None:
            continue
        shapes = _shapes(model) if shapes is None else shapes
        a, b, y = (shapes.get(t) for t in (mm.input[0], mm.input[1], mm.output[0]))
        # Rank >= 3 by a static matrix; one symbolic dim of the product at most (Reshape's -1).
        if a is None or b is None or y is None or len(a) < 3 or len(b) != 2 or None in b or y.count(None) > 1:
            continue
        base = mm.name or mm.output[0]
        _reshaped_matmul(model, mm, [(dq, [-1, b[0]], f"{base}_flat_rows_shape", f"{base}_flat_int8",
                                      f"{base}_flat_input"), mm.input[1]],
                         [-1 if d is None else d for d in y], f"{base}_flat_shape", f"{base}_flat_product",
                         f"{base}_flat_restore")
        done += 1
    return done


def _collapse_batch_matmul_inputs(model) -> int:
    """MatMuls of two dequantized inputs of equal rank >= 4, with equal batch dims of which
    two or more are not 1, read their int8 inputs reshaped to (batch, rows, columns) through
    their own dequantizes (module docstring). Returns the number rewritten."""
    producer = {o: n for n in model.graph.node for o in n.output}
    shapes = None
    done = 0
    for mm in list(model.graph.node):
        dqs = [producer.get(i) for i in mm.input] if mm.op_type == "MatMul" else []
        if len(dqs) != 2 or any(d is None or d.op_type != "DequantizeLinear" or _quant_params(model, d) is None
                                for d in dqs):
            continue
        shapes = _shapes(model, fold=True) if shapes is None else shapes
        a, b, y = (shapes.get(t) for t in (*mm.input, mm.output[0]))
        if a is None or b is None or y is None or None in a + b + y or len(a) != len(b) or len(a) < 4 or \
                a[:-2] != b[:-2] or sum(d != 1 for d in a[:-2]) < 2:
            continue
        base = mm.name or mm.output[0]
        _reshaped_matmul(model, mm, [(dq, [-1, *shape[-2:]], *(f"{base}_batch_{k}_{x}" for x in ("shape", "int8", "input")))
                                     for k, (dq, shape) in enumerate(zip(dqs, (a, b)))],
                         y, f"{base}_batch_shape", f"{base}_batch_product", f"{base}_batch_restore")
        done += 1
    return done


def _reshaped_matmul(model, mm, inputs: list, shape: list[int], shape_name: str, product: str, restore: str) -> None:
    """Replaces MatMul `mm` by one reading `inputs` (an input's name as it is, or (its
    dequantize, the shape its int8 tensor is reshaped to, the names of that shape, the
    reshaped tensor and its own dequantize)), its product reshaped back to `shape`."""
    from onnx import helper, numpy_helper
    nodes, reads = [], []
    for x in inputs:
        if isinstance(x, str):
            reads.append(x)
            continue
        dq, rows, rows_name, int8, read = x
        model.graph.initializer.append(numpy_helper.from_array(np.array(rows, np.int64), rows_name))
        nodes += [helper.make_node("Reshape", [dq.input[0], rows_name], [int8], name=int8),
                  helper.make_node("DequantizeLinear", [int8, *dq.input[1:]], [read], name=read)]
        reads.append(read)
    model.graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), shape_name))
    nodes += [helper.make_node("MatMul", reads, [product], name=mm.name or mm.output[0]),
              helper.make_node("Reshape", [product, shape_name], [mm.output[0]], name=restore)]
    at = list(model.graph.node).index(mm)
    model.graph.node.remove(mm)
    for k, node in enumerate(nodes):
        model.graph.node.insert(at + k, node)
