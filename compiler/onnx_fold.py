"""Shape computations an ONNX exporter left in the graph, folded to constants before import.

torch.onnx's TorchScript exporter writes the shapes `nn.MultiheadAttention`
computes at run time (torchvision's ViT: `Shape`, `Gather`, `Mod`, `Slice`,
`Concat` on the input's shape, then `Reshape`) as ops. ONNX shape inference
follows few of them (`data_prop` stops at `Mod` and `Slice`), so the reshaped
tensor has no known rank, and IREE's importer cannot convert the `Transpose`
that reads it: the model did not import at all ("ONNX op Transpose is not
supported").

`fold_shape_computations` evaluates, in graph order, every node whose inputs
are all known (initializers, `Constant` nodes, values folded before, and a
`Shape` of a tensor whose shape inference gave every dim) and whose outputs
are small (at most `MAX_FOLDED_ELEMENTS` each: shapes and indices, never a
weight), with ONNX's reference evaluator, and replaces the node by
initializers holding its outputs; shape inference then runs again. It is
applied only to a model in which some tensor is left without a rank, so a
model that imports as written is imported as written. Exact: the reference
evaluator computes what the ops define, on the values they would read.
"""

from __future__ import annotations

import numpy as np

# Outputs larger than this stay ops: folding is for shapes and indices, not for data.
MAX_FOLDED_ELEMENTS = 64
# Nodes whose value depends on more than their inputs.
_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli", "If", "Loop", "Scan"}


def tensor_types(model) -> dict:
    """The tensor type shape inference gave each value of `model` (graph inputs, outputs and the
    values between), by name."""
    return {v.name: v.type.tensor_type for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}


def unranked(types: dict, name: str) -> bool:
    """Whether the value `name` has no rank in `types` (`tensor_types`)."""
    return name not in types or not types[name].HasField("shape")


def has_unranked_values(model) -> bool:
    """Whether some node output has no rank after shape inference (`model` already inferred)."""
    types = tensor_types(model)
    return any(out and unranked(types, out) for node in model.graph.node for out in node.output)


def _static_shapes(model) -> dict[str, list[int]]:
    return {name: [d.dim_value for d in t.shape.dim] for name, t in tensor_types(model).items()
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim)}


def _shape_value(node, shape: list[int]) -> np.ndarray:
    """What `Shape` gives for a tensor of `shape` (its start / end attributes applied)."""
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.array(shape[start:end], np.int64)


def _evaluate(node, values: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """`node` on `values` (None for an omitted optional input) by onnx's reference evaluator, or
    None when it cannot run it."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{k}" if name else "" for k, name in enumerate(node.input)]
    inits = [numpy_helper.from_array(v, n) for n, v in zip(names, values) if n]
    copy = helper.make_node(node.op_type, names, [f"out{k}" for k in range(len(node.output))], domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph([copy], "fold", [], [helper.make_empty_tensor_value_info(o) for o in copy.output], inits)
    try:
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, {})]
    except Exception:  # an op or a case the reference evaluator does not implement: left as it is
        return None


def _fold_once(model, opset: int) -> int:
    from onnx import numpy_helper

    known = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    shapes = _static_shapes(model)
    outputs = {o.name for o in model.graph.output}
    folded, kept = 0, []
    for node in model.graph.node:
        values = None
        if node.domain in ("", "ai.onnx") and node.op_type not in _NOT_FOLDED and node.output and \
                not outputs.intersection(node.output):
            if node.op_type == "Shape" and node.input[0] in shapes:
                values = [_shape_value(node, shapes[node.input[0]])]
            elif all(not i or i in known for i in node.input):
                values = _evaluate(node, [known[i] if i else None for i in node.input], opset)
        if values is None or any(v.size > MAX_FOLDED_ELEMENTS for v in values):
            kept.append(node)
            continue
        for name, v in zip(node.output, values):
            known[name] = v
            model.graph.initializer.append(numpy_helper.from_array(v, name))
        folded += 1
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return folded


def fold_shape_computations(onnx, model, opset: int):
    """`model` (shape-inferred) with its small constant computations folded (module docstring),
    shape-inferred again; `model` itself when nothing folds."""
    for _ in range(8):  # a Reshape's shape known makes the next Shape of its output foldable
        if not _fold_once(model, opset):
            break
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    return model
