"""compiler/onnx_fold.py: an exporter's constant shape computations folded to initializers,
values checked against onnx's reference evaluation of the graph as written."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from torq.compiler.onnx_fold import fold_shape_computations, has_unranked_values  # noqa: E402


def _model():
    """x (1, 6, 8) reshaped to (-1, 6, 8) through a Slice of its shape whose end is computed
    (Gather, Mod, Add) and whose optional axes are omitted: ONNX's data propagation stops at
    Mod, so the Slice's length, the target shape's and the Reshape's rank are unknown."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["g"]),
             helper.make_node("Mod", ["g", "four"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["end"]),
             helper.make_node("Slice", ["s", "one", "end", "", "one"], ["hw"]),
             helper.make_node("Concat", ["minus_one", "hw"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("one", [1]), ("four", [4]), ("minus_one", [-1])]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_computation_folds_to_a_ranked_reshape():
    written = _model()
    inferred = onnx.shape_inference.infer_shapes(written, data_prop=True)
    assert has_unranked_values(inferred)  # Mod stops ONNX's data propagation
    folded = fold_shape_computations(onnx, onnx.shape_inference.infer_shapes(_model(), data_prop=True), 17)
    assert [n.op_type for n in folded.graph.node] == ["Reshape", "Transpose"]
    assert not has_unranked_values(folded)
    shape = next(i for i in folded.graph.initializer if i.name == "shape")
    assert numpy_helper.to_array(shape).tolist() == [-1, 6, 8]
    x = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    assert np.array_equal(ReferenceEvaluator(written).run(None, {"x": x})[0],
                          ReferenceEvaluator(folded).run(None, {"x": x})[0])


def test_large_constants_stay_ops():
    """Folding is for shapes: a computed tensor over MAX_FOLDED_ELEMENTS stays an op."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["zeros"]),
             helper.make_node("Add", ["x", "zeros"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    folded = fold_shape_computations(onnx, model, 17)
    assert [n.op_type for n in folded.graph.node] == ["ConstantOfShape", "Add"]  # the Shape alone folds
