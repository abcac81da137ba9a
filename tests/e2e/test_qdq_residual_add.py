"""A QDQ residual add fused after an int8 conv (ResNet's block output) on the NPU.

ONNX Runtime's QDQ form of `relu(conv(x) + r)`: the conv's result is
quantized (stage 1), dequantized, added to the dequantized int8 residual and
quantized again, all in one dispatch. compiler/requant.py makes stage 1 the
nearest integer rescale and the add an integer rescale of the sum of the two
int8 values (fitted and checked on all 65,536 pairs); every output must be
within one step of IREE llvm-cpu on the same MLIR.
"""

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from llvm_cpu import llvm_cpu  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402

C, H = 8, 16


def conv_residual_add_model(s1: float, k: int, seed: int = 0) -> onnx.ModelProto:
    """int8 xq, rq -> DQ -> Conv kxk (DQ per-channel weights, int32 bias) -> Q/DQ (s1, 43)
    -> Add(DQ rq) -> Q (0.0194, -128): the int8 result."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    sx = np.float32(0.0213)
    sw = rng.uniform(0.006, 0.014, C).astype(np.float32)
    nodes.append(helper.make_node("DequantizeLinear", ["xq", const("sx", sx), const("zx", np.int8(-3))], ["xd"]))
    nodes.append(helper.make_node("DequantizeLinear", ["rq", const("sr", np.float32(0.031)),
                                                       const("zr", np.int8(-128))], ["rd"]))
    nodes.append(helper.make_node("DequantizeLinear", [
        const("w", rng.integers(-127, 128, (C, C, k, k)).astype(np.int8)), const("sw", sw),
        const("zw", np.zeros(C, np.int8))], ["wd"], axis=0))
    nodes.append(helper.make_node("DequantizeLinear", [
        const("b", rng.integers(-300, 300, C).astype(np.int32)), const("sb", (sx * sw).astype(np.float32)),
        const("zb", np.zeros(C, np.int32))], ["bd"], axis=0))
    nodes.append(helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[k // 2] * 4))
    nodes.append(helper.make_node("QuantizeLinear", ["c", const("s1", np.float32(s1)), const("z1", np.int8(43))],
                                  ["cq"]))
    nodes.append(helper.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["cd"]))
    nodes.append(helper.make_node("Add", ["cd", "rd"], ["a"]))
    nodes.append(helper.make_node("QuantizeLinear", ["a", const("sy", np.float32(0.0194)),
                                                      const("zy", np.int8(-128))], ["yq"]))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT8, [1, C, H, H]) for n in ("xq", "rq")]
    graph = helper.make_graph(nodes, "main_graph", ins, [helper.make_tensor_value_info(
        "yq", TensorProto.INT8, [1, C, H, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


# (conv output scale, kernel, whether the sum's integer rescale is exact for this seed)
@pytest.mark.parametrize("s1,k,sum_exact", [(0.0459, 3, False), (0.3, 1, True)],
                         ids=["3x3-sum-scale-2.4", "1x1-sum-scale-15"])
def test_conv_residual_add_on_npu_within_one_step(s1, k, sum_exact):
    model = conv_residual_add_model(s1, k)
    rng = np.random.default_rng(5)
    x, r = (rng.integers(-128, 128, (1, C, H, H)).astype(np.int8) for _ in range(2))
    ref = llvm_cpu(import_onnx(model.SerializeToString(), "m.onnx"), x, r, function="main_graph")
    remarks = io.StringIO()
    cm = torq.compile(model, remarks=remarks)
    y = cm(x, r)
    (conv,) = [d for d in cm.report.dispatches if d.macs == H * H * C * C * k * k]
    assert conv.executor == "torq", (cm.report.dispatches, remarks.getvalue())
    (summary,) = conv.requant
    assert summary["sum_pairs"] == 256 * 256 and summary["sum_differing"] < 256, summary
    steps = y.astype(np.int64) - ref.astype(np.int64)
    assert np.abs(steps).max() <= 1, np.unique(steps, return_counts=True)
    assert len(np.unique(ref)) > 50  # not trivial: many output levels
    # --torq-requant=exact keeps the dispatch on the NPU only when every fit is exact.
    assert (summary["sum_differing"] == 0) == sum_exact, summary
    all_exact = sum_exact and summary["exact_channels"] == summary["channels"]
    exact = torq.compile(model, remarks=io.StringIO(), flags=("--torq-requant=exact",))
    assert [d.executor for d in exact.report.dispatches if d.macs == conv.macs] == ["torq" if all_exact else "host"]
    if all_exact:
        assert np.array_equal(exact(x, r), ref)
