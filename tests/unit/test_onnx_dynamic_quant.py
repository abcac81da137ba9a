"""compiler/onnx_dynamic_quant.py: onnxruntime's `quantize_dynamic` MatMulIntegers rewritten
to MatMuls of int8 dequantizes. IREE llvm-cpu must give the rewritten model the same bits as
the model as written, and IREE must then form i8 x i8 -> i32 matmuls (the NPU's) where it
formed i32 x i32 -> i64 ones."""

import re
import sys
import types
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from torq.compiler.onnx_dynamic_quant import rewrite_dynamic_quant  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


def _inputs(shape, seed=0) -> dict[str, np.ndarray]:
    """Activations whose DynamicQuantizeLinear zero point is in between, 0 (all positive),
    255 (all negative), with ranges from tiny to large, and all zero (scale 0)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    return {"mixed": x, "small": x * np.float32(0.01), "large": x * np.float32(300.0),
            "skewed": x + np.float32(2.0), "positive": np.abs(x), "negative": -np.abs(x) - np.float32(0.5),
            "zeros": np.zeros(shape, np.float32)}


def _llvm_cpu_outputs(model_bytes: bytes, xs: dict) -> dict[str, np.ndarray]:
    """The model imported as written (no torq rewrites), compiled once for llvm-cpu (host CPU)
    and run on each input."""
    import iree.compiler as ireec
    import iree.runtime as ireert

    model = onnx.load_model_from_string(model_bytes)
    vmfb = ireec.compile_str(import_onnx(model_bytes, "m.onnx", qdq_rewrites=False), target_backends=["llvm-cpu"],
                             extra_args=["--iree-llvmcpu-target-cpu=host"], input_type="auto")
    config = ireert.Config("local-task")
    ctx = ireert.SystemContext(config=config)
    ctx.add_vm_module(ireert.VmModule.copy_buffer(config.vm_instance, vmfb))
    fn = ctx.modules.module[model.graph.name]
    return {k: np.asarray(fn(x)) for k, x in xs.items()}


def _rewritten_bit_identical(model, xs: dict) -> int:
    """Rewrites `model` (a ModelProto, in place), checks that it rewrote every MatMulInteger and
    that llvm-cpu gives the same bits on `xs` as for the model as written; returns the count."""
    written = model.SerializeToString()
    matmul_integers = sum(n.op_type == "MatMulInteger" for n in model.graph.node)
    made = rewrite_dynamic_quant(model)
    assert made == matmul_integers > 0, (made, matmul_integers)
    assert not any(n.op_type == "MatMulInteger" for n in model.graph.node)
    onnx.checker.check_model(model)
    ref, out = _llvm_cpu_outputs(written, xs), _llvm_cpu_outputs(model.SerializeToString(), xs)
    for k in xs:
        same = np.array_equal(ref[k], out[k])
        assert same, (k, np.abs(ref[k] - out[k]).max(), np.count_nonzero(ref[k] != out[k]))
        assert np.all(np.isfinite(ref[k])), k
    return made


def _flow_matmuls(model_bytes: bytes) -> Counter:
    """The matmul dispatches IREE forms for torq's import of the model (its ONNX rewrites and
    dispatch flags), by name suffix (`matmul_like_16x48x64_i8xi8xi32`), counted by call.
    IREE alone up to its flow phase: dispatch formation is IREE's, before the Torq target."""
    import iree.compiler as ireec

    from torq.compiler.driver import DISPATCH_FLAGS, HOST_FLAGS, QDQ_DISPATCH_FLAGS

    flow = ireec.compile_str(import_onnx(model_bytes, "m.onnx", qdq_rewrites=True), input_type="auto",
                             extra_args=[*HOST_FLAGS, *DISPATCH_FLAGS, *QDQ_DISPATCH_FLAGS, "--compile-to=flow"])
    text = flow.decode() if isinstance(flow, bytes) else flow
    return Counter(re.findall(r"flow\.dispatch @\S+::@\S+?_dispatch_\d+_(\w*matmul\w*)", text))


def _assert_integer_matmuls(model_bytes: bytes, n: int) -> Counter:
    found = _flow_matmuls(model_bytes)
    integer = sum(c for name, c in found.items() if name.endswith("_i8xi8xi32"))
    assert integer == n and not any("i64" in name for name in found), found
    return found


# ---------------------------------------------------------------------------------------------
# The pattern as quantize_dynamic writes it, by hand.


def _pattern(per_column: bool, opset: int = 17, k: int = 64, n: int = 48, lead: tuple = (16,), uint8: bool = False):
    """x (*lead, k) -> DynamicQuantizeLinear -> MatMulInteger by an int8 (k, n) weight -> Cast ->
    times the scales -> plus a bias. Per column: a scale and a nonzero zero point per column.
    `uint8`: a uint8 weight (quantize_dynamic's QUInt8) with zero points near 128."""
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w_scale = (rng.uniform(0.5, 2.0, n) * 0.01).astype(np.float32) if per_column else np.float32(0.013)
    w_zp = rng.integers(-20, 21, n).astype(np.int8) if per_column else np.int8(0)
    if uint8:
        w, w_zp = (w.astype(np.int16) + 128).astype(np.uint8), (w_zp.astype(np.int16) + 131).astype(np.uint8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="x_quantize"),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zp"], ["acc"], name="fc_quant"),
             helper.make_node("Cast", ["acc"], ["accf"], name="fc_cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "w_scale"], ["scales"], name="fc_scales"),
             helper.make_node("Mul", ["accf", "scales"], ["mm"], name="fc_scale"),
             helper.make_node("Add", ["mm", "bias"], ["y"], name="fc_bias")]
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in
             [("w", w), ("w_scale", w_scale), ("w_zp", w_zp), ("bias", rng.standard_normal(n).astype(np.float32))]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*lead, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_per_tensor_pattern_is_bit_identical():
    model = _pattern(per_column=False)
    _rewritten_bit_identical(model, _inputs((16, 64)))
    ops = [nd.op_type for nd in model.graph.node]
    assert ops.count("QuantizeLinear") == 1 and ops.count("MatMul") == 1 and "Cast" in ops
    (mm,) = [nd for nd in model.graph.node if nd.op_type == "MatMul"]
    assert mm.name == "fc_quant" and mm.output[0] == "accf"
    assert len({nd.name for nd in model.graph.node}) == len(model.graph.node)


def test_per_column_pattern_is_bit_identical():
    """A nonzero zero point per weight column: a per-column dequantize (axis 1)."""
    model = _pattern(per_column=True)
    _rewritten_bit_identical(model, _inputs((16, 64), seed=2))
    (w_dq,) = [nd for nd in model.graph.node if nd.op_type == "DequantizeLinear" and nd.input[0] == "w"]
    assert helper.get_node_attr_value(w_dq, "axis") == 1


@pytest.mark.parametrize("per_column", [False, True])
def test_uint8_weights_are_shifted_to_int8_bit_identical(per_column):
    """quantize_dynamic's QUInt8 weights: W - z = (W - 128) - (z - 128), both int8."""
    model = _pattern(per_column=per_column, uint8=True)
    assert _rewritten_bit_identical(model, _inputs((16, 64), seed=3)) == 1
    (w_dq,) = [nd for nd in model.graph.node if nd.op_type == "DequantizeLinear" and nd.input[0] != "xq"
               and "input" not in nd.output[0]]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits[w_dq.input[0]].dtype == np.int8 and "w" not in inits  # the uint8 weight is gone
    found = _assert_integer_matmuls(model.SerializeToString(), 1)
    assert set(found) == {"matmul_like_16x48x64_i8xi8xi32"}, found


@pytest.mark.parametrize("per_column", [False, True])
def test_pattern_forms_an_integer_matmul(per_column):
    found = _assert_integer_matmuls(_pattern(per_column).SerializeToString(), 1)
    assert set(found) == {"matmul_like_16x48x64_i8xi8xi32"}, found


def test_symbolic_batch_and_tokens_are_flattened():
    """(batch, tokens, k) activations with both dims symbolic: the product's leading dims are
    computed from the input's shape. IREE left the 3-D matmul f32 without the flattening."""
    model = _pattern(per_column=False, lead=("batch", "tokens"))
    written = model.SerializeToString()
    _rewritten_bit_identical(model, _inputs((2, 8, 64), seed=3))
    assert [nd.op_type for nd in model.graph.node].count("Shape") == 1
    found = _assert_integer_matmuls(written, 1)
    assert set(found) == {"matmul_like_Dx48x64_i8xi8xi32"}, found


def test_other_patterns_are_left_as_written():
    """A per-column zero point before opset 13 (no axis), an accumulator read by other than a
    Cast to float or a graph output, a weight computed at run time: nothing changes."""
    cases = [_pattern(per_column=True, opset=12)]
    model = _pattern(per_column=False)
    model.graph.node[2].attribute[0].i = TensorProto.DOUBLE
    cases.append(model)
    model = _pattern(per_column=False)
    model.graph.output.append(helper.make_tensor_value_info("acc", TensorProto.INT32, [16, 48]))
    cases.append(model)
    model = _pattern(per_column=False)
    model.graph.node.insert(0, helper.make_node("Identity", ["w"], ["w_copy"]))
    model.graph.node[2].input[1] = "w_copy"
    cases.append(model)
    for model in cases:
        written = model.SerializeToString()
        assert rewrite_dynamic_quant(model) == 0
        assert model.SerializeToString() == written


# ---------------------------------------------------------------------------------------------
# Models exported by torch and quantized by onnxruntime.


def _quantize_dynamic(module, x, tmp_path) -> bytes:
    torch = pytest.importorskip("torch")
    ort_quant = pytest.importorskip("onnxruntime.quantization")
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    with torch.no_grad():
        torch.onnx.export(module, (x,), str(fp32), dynamo=False, opset_version=17)
    ort_quant.quantize_dynamic(str(fp32), str(int8), weight_type=ort_quant.QuantType.QInt8)
    return int8.read_bytes()


def test_torch_mlp_is_bit_identical_with_integer_matmuls(tmp_path):
    """A transformer's feed-forward block on (1, T, K) activations: rank 3, flattened to rows."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 32)).eval()
    data = _quantize_dynamic(module, torch.randn(1, 8, 64), tmp_path)
    assert _rewritten_bit_identical(onnx.load_model_from_string(data), _inputs((1, 8, 64))) == 2
    found = _assert_integer_matmuls(data, 2)
    assert set(found) == {"matmul_like_8x96x64_i8xi8xi32", "matmul_like_8x32x96_i8xi8xi32"}, found


@pytest.mark.slow
def test_bert_encoder_is_bit_identical_with_integer_matmuls(tmp_path):
    """A 2-layer BERT encoder (hidden 128): Q, K, V, attention output and both feed-forward
    Linears of each layer become integer matmuls (the attention's own two matmuls quantize_dynamic
    leaves f32)."""
    torch = pytest.importorskip("torch")
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=256, vocab_size=100, max_position_embeddings=64)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(config).eval()

        def forward(self, x):
            return self.bert(inputs_embeds=x).last_hidden_state

    torch.manual_seed(0)
    data = _quantize_dynamic(Encoder().eval(), torch.randn(1, 16, 128), tmp_path)
    assert _rewritten_bit_identical(onnx.load_model_from_string(data), _inputs((1, 16, 128))) == 12
    found = _assert_integer_matmuls(data, 12)
    assert sum(c for name, c in found.items() if name.endswith("_f32")) == 4, found
