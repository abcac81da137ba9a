"""compiler/onnx_qdq.py's exact rewrites of ONNX Runtime's QDQ graphs, applied by torq's ONNX
input: int8 max pool and concat instead of dequantize -> op -> quantize, uint8 activations as
int8. Each must leave llvm-cpu's (or onnxruntime's) bits unchanged, and the rewritten model
runs on the NPU but for the input's quantize, within one step of llvm-cpu on the model as
written."""

import io

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")

from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import ConvConcat, ConvMaxPool, ort_quantized_model  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402
from torq.compiler.onnx_qdq import rewrite_qdq  # noqa: E402


def rewritten_and_checked(path, x, rewrites: int | None = None):
    """The model at `path` after `rewrite_qdq` (which makes `rewrites` rewrites, or some), checked:
    llvm-cpu bit-identical on both forms, torq's compile on the NPU but for the input's
    quantize (the output's dequantize is the last conv's host tail), within one step."""
    model = onnx.load(str(path))
    made = rewrite_qdq(model)
    assert made == rewrites if rewrites is not None else made > 0, made
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert np.array_equal(ref, llvm_cpu(import_onnx(model.SerializeToString(), "m_q.onnx"), x,
                                        function="main_graph"))
    remarks = io.StringIO()
    cm = torq.compile(str(path), remarks=remarks)
    y = cm(x)
    host = [d.reason for d in cm.report.dispatches if d.executor == "host"]
    # The input's quantize: its own host dispatch, or cut from the dispatch IREE fused it into.
    assert host == [] and "QuantizeLinear, fused into it) runs on the host before it" in remarks.getvalue() or \
        len(host) == 1 and host[0].startswith("quantize of an f32"), (host, remarks.getvalue())
    step = np.diff(np.unique(ref)).min()
    assert np.abs(y - ref).max() <= step * 1.0001, (np.abs(y - ref).max(), step)
    return model


def _producers(model):
    return {o: n.op_type for n in model.graph.node for o in n.output}


def test_max_pool_runs_on_int8(tmp_path):
    """Dequantize -> MaxPool -> quantize with one scale: an int8 max pool on the NPU instead of
    an f32 one on the host."""
    model = rewritten_and_checked(*ort_quantized_model(tmp_path, ConvMaxPool), rewrites=1)
    (pool,) = [n for n in model.graph.node if n.op_type == "MaxPool"]
    users = [n.op_type for n in model.graph.node if pool.output[0] in n.input]
    assert _producers(model)[pool.input[0]] == "QuantizeLinear" and users == ["DequantizeLinear"]


def test_concat_of_different_scales_runs_on_int8(tmp_path):
    """Dequantize -> Concat -> quantize: each input requantized to the concat's scale, then an
    int8 concat."""
    model = rewritten_and_checked(*ort_quantized_model(tmp_path, ConvConcat), rewrites=1)
    (cat,) = [n for n in model.graph.node if n.op_type == "Concat"]
    assert [_producers(model)[i] for i in cat.input] == ["QuantizeLinear", "QuantizeLinear"]


def test_uint8_activations_run_as_int8(tmp_path):
    """QUInt8 activations: every uint8 tensor int8, holding its value minus 128."""
    path, x = ort_quantized_model(tmp_path, ConvMaxPool, activation_type="QUInt8")
    assert any(t.data_type == onnx.TensorProto.UINT8 for t in onnx.load(str(path)).graph.initializer)
    model = rewritten_and_checked(path, x)
    assert not any(t.data_type == onnx.TensorProto.UINT8 for t in model.graph.initializer)


def _graph(nodes, inputs, outputs, inits):
    from onnx import helper, numpy_helper
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_max_pool_between_different_scales_is_requantized_first():
    """Q(DQ(x)) is non-decreasing, so it commutes with max: onnxruntime gives the same bits."""
    import onnxruntime
    from onnx import TensorProto, helper

    model = _graph([helper.make_node("DequantizeLinear", ["x", "s1", "z1"], ["d"]),
                    helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2]),
                    helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 1, 16, 16])],
                   [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 1, 8, 8])],
                   [("s1", np.float32(0.02)), ("s2", np.float32(0.031)), ("z1", np.int8(-5)), ("z2", np.int8(9))])
    original = model.SerializeToString()
    assert rewrite_qdq(model) == 1
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "QuantizeLinear", "MaxPool"]
    x = np.random.default_rng(0).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    run = lambda m: onnxruntime.InferenceSession(m).run(None, {"x": x})[0]  # noqa: E731
    assert np.array_equal(run(original), run(model.SerializeToString()))


def test_uint8_graph_output_is_left_as_written():
    """The model's interface stays as written: a uint8 graph output keeps every uint8 tensor."""
    from onnx import TensorProto, helper, numpy_helper

    model = _graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [4])],
                   [("s", np.float32(0.02)), ("z", np.uint8(7))])
    assert rewrite_qdq(model) == 0
    assert numpy_helper.to_array(model.graph.initializer[1]).dtype == np.uint8


def test_uint8_dequantize_without_zero_point_is_left_as_written():
    """A uint8 tensor's data and zero point shift together: a dequantize with the default zero
    point has none to shift, so nothing changes; with one, onnxruntime gives the same values."""
    import onnxruntime
    from onnx import TensorProto, helper

    def model(dq_inputs):
        return _graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                       helper.make_node("DequantizeLinear", dq_inputs, ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
                      [("s", np.float32(0.02)), ("z", np.uint8(7))])

    assert rewrite_qdq(model(["q", "s"])) == 0
    written, rewritten = model(["q", "s", "z"]), model(["q", "s", "z"])
    assert rewrite_qdq(rewritten) == 1
    x = np.random.default_rng(0).uniform(-3, 6, 64).astype(np.float32)
    run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]  # noqa: E731
    assert np.array_equal(run(written), run(rewritten))


class ResidualLinear(torch.nn.Module):
    """A transformer's residual Linear: the input's dequantize feeds the matmul and the add."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return x + self.linear(x)


def test_matmul_sharing_its_dequantized_input_runs_on_int8(tmp_path):
    """Without the rewrite IREE keeps this matmul in f32 (a host dispatch): it reads its own
    dequantize of the int8 input reshaped to 2-D, and the product is reshaped back."""
    model = rewritten_and_checked(*ort_quantized_model(tmp_path, ResidualLinear, shape=(1, 16, 64)), rewrites=1)
    (mm,) = [n for n in model.graph.node if n.op_type == "MatMul"]
    producers = {o: n for n in model.graph.node for o in n.output}
    assert producers[mm.input[0]].op_type == "DequantizeLinear"
    assert producers[producers[mm.input[0]].input[0]].op_type == "Reshape"
    assert [n.op_type for n in model.graph.node if mm.output[0] in n.input] == ["Reshape"]


def test_input_quantize_fused_into_the_matmul_runs_on_the_host_before_it(tmp_path):
    """With IREE's aggressive fusion (our default for QDQ input) the model's input
    QuantizeLinear lands in the matmul's dispatch (x has two users, the matmul and the
    residual add): the dispatch's f32 argument is only quantized, so the host quantizes it
    before the call (a head, as a dequantize tail after it) and the matmul, its rescales and
    the residual add run on the NPU."""
    path, x = ort_quantized_model(tmp_path, ResidualLinear, shape=(1, 16, 64))
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    remarks = io.StringIO()
    cm = torq.compile(str(path), remarks=remarks)
    y = cm(x)
    assert [(d.executor, d.macs) for d in cm.report.dispatches] == [("torq", 16 * 64 * 64)], remarks.getvalue()
    assert "the quantize of its f32 input 0 to i8 (the model input's QuantizeLinear, fused into it) runs on the " \
        "host before it" in remarks.getvalue()
    step = np.diff(np.unique(ref)).min()
    assert np.abs(y - ref).max() <= step * 1.0001, (np.abs(y - ref).max(), step)
    assert len(np.unique(ref)) > 50


class TokensOfAFeatureMap(torch.nn.Module):
    """LeViT's stem to its first block: a conv's map flattened to tokens, x.flatten(2).transpose(1, 2)
    (exported as a Reshape to a shape computed from Shape / Slice / Concat), then a residual Linear."""

    def __init__(self):
        super().__init__()
        self.conv, self.linear = torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.Linear(32, 32)

    def forward(self, x):
        t = self.conv(x).flatten(2).transpose(1, 2)
        return t + self.linear(t)


def test_matmul_of_tokens_reshaped_to_a_computed_shape_runs_on_int8(tmp_path):
    """The Linear's input shape is known only by propagating the computed Reshape shape (ONNX
    shape inference with data propagation, as the import's own): without it the rewrite skipped
    the matmul, which stayed f32 on the host (LeViT-128S: 55% of its MACs on the NPU)."""
    model = rewritten_and_checked(*ort_quantized_model(tmp_path, TokensOfAFeatureMap, shape=(1, 8, 6, 5)),
                                  rewrites=3)  # the Reshape and the Transpose on int8, the flatten
    (mm,) = [n for n in model.graph.node if n.op_type == "MatMul"]
    producers = {o: n for n in model.graph.node for o in n.output}
    assert producers[producers[mm.input[0]].input[0]].op_type == "Reshape"


def test_matmul_of_two_activations_over_two_batch_dims_is_collapsed():
    """Attention over patches x heads (MobileViT): both int8 inputs are read reshaped to one batch
    dim through their own dequantizes, the product reshaped back; onnxruntime gives the same
    bits. One batch dim that is not 1 is left as written (IREE forms the integer matmul)."""
    import onnxruntime
    from onnx import TensorProto, helper

    def model(a_shape, b_shape, y_shape):
        return _graph([helper.make_node("DequantizeLinear", ["a", "s", "z"], ["da"]),
                       helper.make_node("DequantizeLinear", ["b", "s2", "z2"], ["db"]),
                       helper.make_node("MatMul", ["da", "db"], ["y"])],
                      [helper.make_tensor_value_info("a", TensorProto.INT8, a_shape),
                       helper.make_tensor_value_info("b", TensorProto.INT8, b_shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                      [("s", np.float32(0.02)), ("z", np.int8(-5)), ("s2", np.float32(0.03)), ("z2", np.int8(7))])

    rng = np.random.default_rng(0)
    shapes = ([1, 4, 3, 8, 6], [1, 4, 3, 6, 8], [1, 4, 3, 8, 8])
    written, rewritten = model(*shapes), model(*shapes)
    assert rewrite_qdq(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node].count("Reshape") == 3
    feeds = {k: rng.integers(-128, 128, shape).astype(np.int8) for k, shape in zip("ab", shapes)}
    run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, feeds)[0]  # noqa: E731
    assert np.array_equal(run(written), run(rewritten))
    assert rewrite_qdq(model([1, 4, 8, 6], [1, 4, 6, 8], [1, 4, 8, 8])) == 0


class PatchAttention(torch.nn.Module):
    """MobileViT's transformer on unfolded patches: attention over (batch, patches, tokens, dim),
    its scores a matmul over two batch dims (patches, heads)."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, p, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, p, n, 3, self.heads, c // self.heads).permute(3, 0, 1, 4, 2, 5)
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        return self.proj((scores.softmax(-1) @ v).transpose(2, 3).reshape(b, p, n, c))


class PatchSdpa(PatchAttention):
    """MobileViT's attention as timm writes it, with scaled_dot_product_attention: the ONNX
    export scales q and k by the head dim's -1/4 power, each taken from the one qkv tensor
    (k transposed) and requantized: a slice fused into an int8 table
    (torq-split-box-reads)."""

    def forward(self, x):
        b, p, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, p, n, 3, self.heads, c // self.heads).permute(3, 0, 1, 4, 2, 5)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(a.transpose(2, 3).reshape(b, p, n, c))


class WindowAttention(torch.nn.Module):
    """TinyViT's attention over 4x4 windows: the window partition reshapes to a shape computed
    from the input's (padding by `%`, windows by `//`), which ONNX shape inference leaves
    symbolic; the scores are a matmul over two batch dims (windows, heads)."""

    def __init__(self, dim=16, window=4, heads=2):
        super().__init__()
        self.window, self.heads = window, heads
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, h, w, c = x.shape
        ws = self.window
        nh, nw = (h + (ws - h % ws) % ws) // ws, (w + (ws - w % ws) % ws) // ws
        x = x.view(b, nh, ws, nw, ws, c).transpose(2, 3).reshape(b * nh * nw, ws * ws, c)
        q, k, v = self.qkv(x).view(b * nh * nw, ws * ws, self.heads, -1).split([c // self.heads] * 3, dim=3)
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b * nh * nw, ws * ws, c))


@pytest.mark.parametrize("model_class,shape", [(PatchAttention, (1, 4, 16, 32)), (PatchSdpa, (1, 4, 16, 32)),
                                               (WindowAttention, (1, 8, 8, 16))],
                         ids=["patches", "patches-sdpa", "windows"])
def test_attention_runs_its_matmuls_on_int8(tmp_path, model_class, shape):
    """Every MAC on the NPU, within one step of llvm-cpu. Before the batch dims were collapsed,
    both attention matmuls stayed f32 on the host (MobileViT-XXS: 88.7% of its MACs on the
    NPU); before the shape computations were folded (on a copy of the model) for the shapes
    the rewrite reads, the windows' did (timm TinyViT-5M: 99.15%). The scaled q and k
    slices of scaled_dot_product_attention stayed on host, 0 MACs, before
    torq-split-box-reads ("no Torq pattern": MobileViT-XXS's 18 such dispatches)."""
    path, x = ort_quantized_model(tmp_path, model_class, shape=shape)
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    cm = torq.compile(str(path), remarks=io.StringIO())
    y = cm(x)
    assert cm.report.npu_mac_share == 1.0, [(d.executor, d.macs, d.reason) for d in cm.report.dispatches]
    # p.v's requantization, left out of its matmul's dispatch, reads the accumulator and the
    # two zero points' sums: integer arithmetic on the NPU (requant_zero_point.separate_correction).
    assert not [d.reason for d in cm.report.dispatches if d.executor != "torq" and "integer values" in d.reason]
    assert not [d.reason for d in cm.report.dispatches if d.executor != "torq" and "no Torq pattern" in d.reason]
    step = np.diff(np.unique(ref)).min()
    assert np.abs(y - ref).max() <= step * 1.0001, (np.abs(y - ref).max(), step)


class ResidualGeluMlp(torch.nn.Module):
    """A transformer's feed-forward block: x + fc2(gelu(fc1(x))), the erf GELU."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def test_transformer_feed_forward_runs_on_int8(tmp_path):
    """Both matmuls on the NPU: fc1 with the bias onnxruntime adds after its quantized matmul and
    the erf GELU (a table) after it; fc2 with its bias and the residual add after it. Both
    read a 2-D reshape of their input (fc1's is shared with the residual add)."""
    rewritten_and_checked(*ort_quantized_model(tmp_path, ResidualGeluMlp, shape=(1, 16, 64)), rewrites=2)


def test_split_between_quantizes_runs_on_int8():
    """A head split (DQ -> Split -> one Q per output, same parameters) becomes an int8 Split;
    onnxruntime gives the same bits. Outputs quantized with different parameters are left."""
    import onnxruntime
    from onnx import TensorProto, helper

    def model(s_out):
        outs = [helper.make_tensor_value_info(f"y{k}", TensorProto.INT8, [1, 16, 4]) for k in range(3)]
        return _graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
                       helper.make_node("Split", ["d", "sizes"], ["p0", "p1", "p2"], axis=2),
                       *[helper.make_node("QuantizeLinear", [f"p{k}", s_out[k], "z"], [f"y{k}"]) for k in range(3)]],
                      [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 16, 12])], outs,
                      [("s", np.float32(0.02)), ("z", np.int8(-5)), ("t", np.float32(0.03)),
                       ("sizes", np.array([4, 4, 4], np.int64))])

    written, rewritten = model(["s"] * 3), model(["s"] * 3)
    assert rewrite_qdq(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node] == ["Split"]
    x = np.random.default_rng(0).integers(-128, 128, (1, 16, 12)).astype(np.int8)
    run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})  # noqa: E731
    assert all(np.array_equal(a, b) for a, b in zip(run(written), run(rewritten)))
    assert rewrite_qdq(model(["s", "t", "s"])) == 0


def test_per_tensor_parameters_of_shape_1_are_per_tensor():
    """Hugging Face models export per-tensor scales as 1-element 1-D tensors: the rewrite takes
    them (it raised a TypeError inside the compiler before), and onnxruntime gives the same bits."""
    import onnxruntime
    from onnx import TensorProto, helper

    def model():
        return _graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
                       helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 1]),
                       helper.make_node("QuantizeLinear", ["t", "s", "z"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 16, 12])],
                      [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 12, 16])],
                      [("s", np.array([0.02], np.float32)), ("z", np.array([-5], np.int8))])

    written, rewritten = model(), model()
    assert rewrite_qdq(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node] == ["Transpose"]
    x = np.random.default_rng(0).integers(-128, 128, (1, 16, 12)).astype(np.int8)
    run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]  # noqa: E731
    assert np.array_equal(run(written), run(rewritten))


def test_dequantize_read_by_two_rewritten_ops_is_requantized_once():
    """One dequantize feeding two data-movement ops quantized to another scale: one shared
    requantize (two of the same name broke the graph's single assignment, as in a Hugging Face
    BertModel); onnxruntime gives the same bits."""
    import onnxruntime
    from onnx import TensorProto, helper

    def model():
        return _graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
                       helper.make_node("Identity", ["d"], ["a"]), helper.make_node("Identity", ["d"], ["b"]),
                       helper.make_node("QuantizeLinear", ["a", "t", "z"], ["y0"]),
                       helper.make_node("QuantizeLinear", ["b", "t", "z"], ["y1"])],
                      [helper.make_tensor_value_info("x", TensorProto.INT8, [64])],
                      [helper.make_tensor_value_info(f"y{k}", TensorProto.INT8, [64]) for k in range(2)],
                      [("s", np.float32(0.02)), ("t", np.float32(0.03)), ("z", np.int8(-5))])

    written, rewritten = model(), model()
    assert rewrite_qdq(rewritten) == 2
    assert [n.op_type for n in rewritten.graph.node].count("QuantizeLinear") == 1
    onnx.checker.check_model(rewritten)
    x = np.random.default_rng(0).integers(-128, 128, 64).astype(np.int8)
    run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})  # noqa: E731
    assert all(np.array_equal(a, b) for a, b in zip(run(written), run(rewritten)))


def test_shared_matmul_input_with_a_symbolic_batch_is_flattened():
    """An exporter's dynamic batch (a transformers BertModel's) leaves the leading dim symbolic:
    the product is reshaped back with -1 there. onnxruntime gives the same bits at batch 1 and 2."""
    import onnxruntime
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    wq = rng.integers(-128, 128, (64, 64)).astype(np.int8)

    def model():
        return _graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
                       helper.make_node("DequantizeLinear", ["wq", "sw"], ["w"]),
                       helper.make_node("MatMul", ["d", "w"], ["m"]),
                       helper.make_node("Add", ["d", "m"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.INT8, ["batch", 16, 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64])],
                      [("s", np.float32(0.02)), ("z", np.int8(-5)), ("sw", np.float32(0.01)),
                       ("wq", wq)])

    written, rewritten = model(), model()
    assert rewrite_qdq(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node].count("Reshape") == 2
    for batch in (1, 2):
        x = rng.integers(-128, 128, (batch, 16, 64)).astype(np.int8)
        run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]  # noqa: E731
        assert np.array_equal(run(written), run(rewritten))


def test_matmul_rows_over_two_dims_are_flattened():
    """A Linear on a channels-last map (1, H, W, C) reads a 2-D reshape of its int8 input even
    with no other reader (IREE would collapse H and W between the dequantize and the matmul),
    and so does one on (1, T, C) (IREE would keep its integer matmul 3-D, the elementwise ops
    around it 2-D). onnxruntime gives the same bits."""
    import onnxruntime
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    wq = rng.integers(-128, 128, (16, 32)).astype(np.int8)

    def model(shape):
        return _graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]),
                       helper.make_node("DequantizeLinear", ["wq", "sw"], ["w"]),
                       helper.make_node("MatMul", ["d", "w"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], 32])],
                      [("s", np.float32(0.02)), ("z", np.int8(-5)), ("sw", np.float32(0.01)), ("wq", wq)])

    for shape in ([1, 6, 5, 16], [1, 30, 16]):
        written, rewritten = model(shape), model(shape)
        assert rewrite_qdq(rewritten) == 1
        assert [n.op_type for n in rewritten.graph.node].count("Reshape") == 2
        x = rng.integers(-128, 128, shape).astype(np.int8)
        run = lambda m: onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]  # noqa: E731
        assert np.array_equal(run(written), run(rewritten))
    assert rewrite_qdq(model([30, 16])) == 0  # already 2-D

