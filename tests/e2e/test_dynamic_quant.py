"""A model quantized by onnxruntime's `quantize_dynamic`, as its documentation advises for
transformers: each MatMul's activation is quantized when the model runs
(DynamicQuantizeLinear: its scale and zero point from its min and max), its weight ahead
(int8), and a MatMulInteger multiplies them.

The integer matmul runs on the NPU and writes its i32 accumulator; the host computes the
run-time scale and zero point in f32 and the f32 epilogue from the accumulator (the
zero-point correction with the run-time zero point, the scales, the bias), so the result
is llvm-cpu's on the original model, bit for bit.
"""

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort_quant = pytest.importorskip("onnxruntime.quantization")
torch = pytest.importorskip("torch")

from feed_forward import FeedForward  # noqa: E402
from llvm_cpu import llvm_cpu  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402

PARAMETERS_ON_HOST = "computes single values from f32 tensors in a model that quantizes at run time"


def _quantize_dynamic(model, x, tmp_path, **options):
    fp32, q = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    torch.manual_seed(0)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(fp32), dynamo=False, input_names=["x"], output_names=["y"],
                          opset_version=17)
    ort_quant.quantize_dynamic(str(fp32), str(q), **({"weight_type": ort_quant.QuantType.QInt8} | options))
    return q


def _compiled_as_llvm_cpu(q, x, *flags):
    """(the compiled model, its remarks) of quantized file `q`, whose output on `x` is llvm-cpu's
    on the same file, bit for bit."""
    remarks = io.StringIO()
    cm = torq.compile(str(q), remarks=remarks, flags=["--torq-no-cache", *flags])
    reference = llvm_cpu(import_onnx(q.read_bytes(), str(q)), x.numpy(), function="main_graph")
    assert np.array_equal(np.asarray(cm(x.numpy())), reference)
    return cm, remarks


def _inputs(shape):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    # A zero point of 0 (all positive), of 255 (all negative), and one in between.
    return {"mixed": x, "positive": np.abs(x), "negative": -np.abs(x)}


@pytest.mark.parametrize("flags, options", [([], {}), (["--torq-int8-float-ops=bf16"], {}),
                                             ([], {"per_channel": True, "weight_type": "QUInt8"})])
def test_dynamically_quantized_matmuls_run_on_the_npu_bit_identical_to_llvm_cpu(tmp_path, flags, options):
    """Also with an int8 model's float ops in bf16 (the scales and zero points stay f32 on the
    host, and the quantize that reads the run-time zero point, a push constant, with them), and
    with uint8 weights quantized per column."""
    torch.manual_seed(0)
    model = FeedForward().eval()
    x = torch.randn(1, 8, 64)
    if "weight_type" in options:
        options = options | {"weight_type": getattr(ort_quant.QuantType, options["weight_type"])}
    q = _quantize_dynamic(model, x, tmp_path, **options)
    assert sum(n.op_type == "MatMulInteger" for n in onnx.load(str(q)).graph.node) == 2
    remarks = io.StringIO()
    cm = torq.compile(str(q), remarks=remarks, flags=["--torq-no-cache", *flags])
    assert cm.report.npu_mac_share == 1.0, remarks.getvalue()
    reference = import_onnx(q.read_bytes(), str(q))  # as written: MatMulInteger, no rewrite
    for name, v in _inputs((1, 8, 64)).items():
        y, ref = np.asarray(cm(v)), llvm_cpu(reference, v, function="main_graph")
        assert np.array_equal(y, ref), f"{name}: {np.count_nonzero(y != ref)} of {y.size} outputs differ"
    on_host = [d.reason for d in cm.report.dispatches if d.executor != "torq"]
    assert any(PARAMETERS_ON_HOST in r for r in on_host)
    if flags:  # the quantize reads the zero point, a scalar operand the call cannot pass
        assert any("non-tensor operand (i64) that its NPU part reads" in r for r in on_host), on_host


def test_a_dynamically_quantized_gpt2_compiles_and_its_matmuls_run_on_the_npu(tmp_path):
    """Hugging Face GPT-2 (tiny, random) quantized by quantize_dynamic. IREE's aggressive fusion
    (which torq runs for statically quantized models) made a dispatch of the embedding's
    LayerNorm and the first quantization's min reduction that IREE's own llvm-cpu cannot
    compile (its stack allocation limit); a dynamically quantized model gets the default
    fusion. With its float ops on the host in f32 the result is llvm-cpu's bit for bit; in
    bf16 on the NPU (the default) it is within bf16's error."""
    from test_hf_text_models import LastHidden, transformers  # (transformers needs torchvision's stub)

    torch.manual_seed(0)
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(vocab_size=500, n_embd=128, n_layer=1, n_head=2)).eval()
    ids = torch.randint(0, 500, (1, 32))  # 32 x 128 f32 rows: the fused dispatch passed the limit
    q = _quantize_dynamic(LastHidden(gpt2), ids, tmp_path)
    reference = llvm_cpu(import_onnx(q.read_bytes(), str(q)), ids.numpy(), function="main_graph")
    for flags in ([], ["--torq-keep-f32"]):
        remarks = io.StringIO()
        cm = torq.compile(str(q), remarks=remarks, flags=["--torq-no-cache", *flags])
        matmuls = [d for d in cm.report.dispatches if d.ops.startswith("matmul")]
        assert matmuls and all(d.executor == "torq" for d in matmuls), remarks.getvalue()
        y = np.asarray(cm(ids.numpy()))
        error = np.linalg.norm(y - reference) / np.linalg.norm(reference)
        assert (error == 0.0) if flags else (error < 5e-2), (flags, error)


def test_a_dynamically_quantized_cnn_runs_its_conv_integers_on_the_npu_bit_identical_to_llvm_cpu(tmp_path):
    """quantize_dynamic also quantizes convolutions (ConvInteger), padded with the run-time zero
    point z, which IREE subtracts inside the conv. Without the padding fusion (which makes a pad
    of z that IREE's own llvm-cpu fails on), sum (x - z) w = sum x w - z W
    (compiler/runtime_zero_point.py): the int8 conv runs on the NPU and the dequantize on the
    host, llvm-cpu's bits. The depthwise conv's dispatch already has that form, its epilogue
    reading z captured in its body (dispatch_extraction makes it a broadcast input)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 8, 3, padding=1, stride=2)).eval()
    x = torch.randn(1, 3, 32, 32)
    q = _quantize_dynamic(model, x, tmp_path)
    assert sum(n.op_type == "ConvInteger" for n in onnx.load(str(q)).graph.node) == 3
    cm, remarks = _compiled_as_llvm_cpu(q, x)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 3 and all(d.executor == "torq" for d in convs), remarks.getvalue()


class _TwoBranches(torch.nn.Module):
    """A residual block's join: two convs of one input, their dequantized sums added."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        return torch.relu(self.a(x) + self.b(x))


def test_a_conv_integer_whose_accumulator_another_dispatch_dequantizes_runs_on_the_npu(tmp_path):
    """IREE fuses one conv's dequantize into the add, so the other conv's dispatch returns its
    i32 accumulator, its zero point still inside (ResNet's downsampling blocks: 4 of
    ResNet-18's 20 convs). The NPU computes the plain conv and the host acc - z * W
    (compiler/runtime_zero_point.py), llvm-cpu's bits; the 1x1 conv's weights are a constant
    IREE inlined into the dispatch."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 16, 16)
    q = _quantize_dynamic(_TwoBranches().eval(), x, tmp_path)
    cm, remarks = _compiled_as_llvm_cpu(q, x)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), remarks.getvalue()


def test_a_conv_integer_with_a_two_result_epilogue_runs_on_the_npu(tmp_path):
    """A conv whose SiLU is pooled after it: IREE's conv dispatch yields x and sigmoid(x) (the
    multiply is fused into the pool's dispatch), an epilogue of two results (EfficientNet's last
    conv). The rewrite keeps both; with --torq-keep-f32 the result is llvm-cpu's bits."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 64, 1), torch.nn.SiLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    x = torch.randn(1, 8, 16, 16)
    q = _quantize_dynamic(model, x, tmp_path)
    cm, remarks = _compiled_as_llvm_cpu(q, x, "--torq-keep-f32")
    convs = [d for d in cm.report.dispatches if d.macs >= 100_000]  # (the pool counts 16,384)
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), remarks.getvalue()


def test_a_float_model_computes_its_single_values_on_the_npu():
    """The rule is for models that quantize: a float model's reduction to one value (a
    normalisation by the tensor's largest magnitude) runs on the NPU in bf16 as before."""

    class Normalise(torch.nn.Module):
        def forward(self, x):
            return x / x.abs().amax()

    cm = torq.compile(Normalise(), torch.randn(4, 64), remarks=io.StringIO(), flags=["--torq-no-cache"])
    assert not any(PARAMETERS_ON_HOST in d.reason for d in cm.report.dispatches)
    assert any(d.executor == "torq" and "reduction" in d.ops for d in cm.report.dispatches)


def test_layers_with_per_tensor_weight_scales_share_their_compiles(tmp_path):
    """quantize_dynamic's default per-tensor weight scale is a scalar IREE clones into each
    layer's dispatch, another value per layer; the epilogue that reads it is the host's, and
    extraction makes it a constant argument (compiler/epilogue_scalars.py), so three Linear +
    ReLU layers are one NPU compile. The executables equal a compile with the cache off (every
    dispatch compiled on its own) and the result is llvm-cpu's, bit for bit."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())]).eval()
    x = torch.randn(1, 16, 128)
    q = _quantize_dynamic(model, x, tmp_path)
    fresh = torq.compile(str(q), flags=["--torq-quiet", "--torq-no-cache", "--torq-jobs=1"])
    cm = torq.compile(str(q), flags=["--torq-quiet", f"--torq-cache-dir={tmp_path / 'cache'}", "--torq-jobs=1"])
    npu = [d for d in cm.report.dispatches if d.executor == "torq" and d.macs]
    assert cm.report.npu_mac_share == 1.0 and [d.cached for d in npu] == [False, True, True]
    # (each executable: two compiles of one ONNX file give .vmfbs whose llvm-cpu ELF differs)
    executables = lambda c: [(d.name, d.executor, d.executable_sha256) for d in c.report.dispatches]  # noqa: E731
    assert executables(cm) == executables(fresh)
    reference = import_onnx(q.read_bytes(), str(q))
    for name, v in _inputs((1, 16, 128)).items():
        y, ref = np.asarray(cm(v)), llvm_cpu(reference, v, function="main_graph")
        assert np.array_equal(y, ref), f"{name}: {np.count_nonzero(y != ref)} of {y.size} outputs differ"
