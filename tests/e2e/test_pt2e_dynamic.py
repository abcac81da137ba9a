"""A model quantized with torch's PT2E flow in a dynamic configuration (torchao's
X86InductorQuantizer / ArmInductorQuantizer with `is_dynamic=True`): each Linear's input is
quantized when the model runs, with a scale and zero point from its min and max
(`quantized_decomposed.choose_qparams.tensor`), which IREE cannot import.
compiler/torch_dynamic_quant.py rewrites those ops in aten ops before IREE; the integer
matmuls then run on the NPU, the parameters and the f32 epilogue on the host.

References: torch itself (the converted model and its quantized_decomposed ops, run
eagerly), and llvm-cpu on the module after the rewrite (llvm-cpu cannot compile the module
as written).
"""

import io

import numpy as np
import pytest
import torch
from feed_forward import FeedForward
from llvm_cpu import llvm_cpu
from torch_reference import REL_L2_LIMIT

import torq
from torq.compiler.torch_dynamic_quant import rewrite_dynamic_quantization
from torq.compiler.torch_ir import rewritten_text
from torq.compiler.torch_qdq import rewrite_uint8_activations

pytest.importorskip("torchao.quantization.pt2e")  # (also defines torch.ops.quantized_decomposed)
qd = torch.ops.quantized_decomposed


def _rewritten(text: str) -> str:
    """`text` after the two torch-level rewrites torq-compile makes of it first: the dynamic
    quantization in ops IREE imports, then uint8 activations as int8."""
    return rewritten_text(text, lambda m: (rewrite_dynamic_quantization(m), rewrite_uint8_activations(m)))


class QuantizeAtRunTime(torch.nn.Module):
    """The ops a dynamic PT2E model runs per quantized input, returned one by one (`with_q`:
    the quantize's result too, so a uint8 one stays uint8; without it, the dequantize is its
    only reader and the rewrite holds it as int8, value - 128)."""

    def __init__(self, qmin: int, qmax: int, dtype: torch.dtype, with_q: bool = True):
        super().__init__()
        self.qmin, self.qmax, self.dtype, self.with_q = qmin, qmax, dtype, with_q

    def forward(self, x):
        scale, zero_point = qd.choose_qparams.tensor(x, self.qmin, self.qmax, torch.finfo(torch.float32).eps,
                                                     self.dtype)
        q = qd.quantize_per_tensor.tensor(x, scale, zero_point, self.qmin, self.qmax, self.dtype)
        dq = qd.dequantize_per_tensor.tensor(q, scale, zero_point, self.qmin, self.qmax, self.dtype)
        # (IREE returns no f64: the scale is an f32 value)
        return (scale.float(), zero_point, q, dq) if self.with_q else (scale.float(), zero_point, dq)


def _inputs(shape) -> dict[str, np.ndarray]:
    """Zero points in between, at qmin (all positive), at qmax (all negative), scales from
    eps (all zero, tiny) to large."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return {"mixed": x, "positive": np.abs(x) + np.float32(0.5), "negative": -np.abs(x) - np.float32(0.5),
            "zeros": np.zeros(shape, np.float32), "tiny": x * np.float32(1e-6), "large": x * np.float32(3e4)}


@pytest.mark.parametrize("with_q", [True, False], ids=["q_returned", "q_only_dequantized"])
@pytest.mark.parametrize("qmin, qmax, dtype", [(0, 255, torch.uint8), (-128, 127, torch.int8)])
def test_rewritten_parameters_and_quantize_equal_torch(qmin, qmax, dtype, with_q):
    """Scale, zero point, quantized and dequantized values, bit for bit, on each input. A
    returned uint8 quantize stays uint8 (IREE returns its bits as int8)."""
    from iree.turbine import aot

    model = QuantizeAtRunTime(qmin, qmax, dtype, with_q)
    text = str(aot.export(model, torch.zeros(8, 64)).mlir_module)
    assert "choose_qparams.tensor" in text
    rewritten = _rewritten(text)
    assert "torch.operator" not in rewritten
    assert (",ui8>" in rewritten) == (with_q and dtype == torch.uint8)
    for name, x in _inputs((8, 64)).items():
        ours = llvm_cpu(rewritten, x)
        ref = [t.numpy() for t in model(torch.from_numpy(x))]
        if with_q:
            ours[2] = ours[2].view(ref[2].dtype)
        for k, (a, b) in enumerate(zip(ours, ref)):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name}: result {k}: {a.ravel()[:4]} vs {b.ravel()[:4]}"


def _quantizer(name: str):
    from torchao.quantization.pt2e.quantizer import arm_inductor_quantizer as aiq
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    if name == "x86":  # uint8 activations
        return xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=True))
    return aiq.ArmInductorQuantizer().set_global(aiq.get_default_arm_inductor_quantization_config(is_dynamic=True))


def pt2e_dynamic_export(model: torch.nn.Module, x: torch.Tensor, quantizer: str):
    """(MLIR text, the converted torch model): `model` quantized by torchao's PT2E flow in the
    quantizer's dynamic configuration (one calibration call), exported by iree-turbine."""
    from iree.turbine import aot
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(torch.export.export(model.eval(), (x,), strict=True).module(), _quantizer(quantizer))
    prepared(x)
    converted = convert_pt2e(prepared)
    return str(aot.export(converted, x).mlir_module), converted


def _rel_l2(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("quantizer", ["x86", "arm"])
def test_dynamically_quantized_linears_run_on_the_npu(quantizer):
    """Both matmuls on the NPU; the result is llvm-cpu's on the rewritten module bit for bit
    (the NPU's i32 accumulator is exact, the host computes the rest in f32 as llvm-cpu
    does), and within f32 rounding of torch's converted model (which multiplies the
    dequantized values in f32)."""
    torch.manual_seed(0)
    x = torch.randn(1, 32, 64)
    text, converted = pt2e_dynamic_export(FeedForward(), x, quantizer)
    assert text.count("choose_qparams.tensor") == 2
    with torch.no_grad():
        ref_torch = converted(x).numpy()
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks)
    assert cm.report.npu_mac_share == 1.0, remarks.getvalue()
    # The scale and the (i64) zero point are computed on the host as quantization parameters.
    reasons = [d.reason for d in cm.report.dispatches if d.executor != "torq"]
    assert sum("computes single values from f32 tensors" in r for r in reasons) == 6, reasons
    rewritten = _rewritten(text)
    for name, v in _inputs((1, 32, 64)).items():
        y, ref = np.asarray(cm(v)), llvm_cpu(rewritten, v)
        assert np.array_equal(y, ref), f"{name}: {np.count_nonzero(y != ref)} of {y.size} outputs differ"
    y = np.asarray(cm(x.numpy()))
    assert _rel_l2(y, ref_torch) < 1e-5


def test_a_dynamically_quantized_bert_layer_runs_its_linears_on_the_npu():
    """Hugging Face BERT (one layer, random weights): Q, K and V share one run-time
    quantization. All MACs on the NPU with its float ops in bf16 (the default), within
    bf16's error of llvm-cpu on the rewritten module; with --torq-keep-f32 attention's f32
    matmuls stay on the host and the result is llvm-cpu's bit for bit."""
    from test_hf_text_models import LastHidden, transformers  # (transformers needs torchvision's stub)

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=500, hidden_size=128, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=256)
    bert = LastHidden(transformers.BertModel(config, add_pooling_layer=False))  # (an unused pooler fails torchao)
    ids = torch.randint(0, 500, (1, 32))
    text, _ = pt2e_dynamic_export(bert, ids, "x86")
    assert text.count("choose_qparams.tensor") == 4
    reference = llvm_cpu(_rewritten(text), ids.numpy())
    for flags in ([], ["--torq-keep-f32"]):
        remarks = io.StringIO()
        cm = torq.compile(text, remarks=remarks, flags=flags)
        y = np.asarray(cm(ids.numpy()))
        if flags:
            assert np.array_equal(y, reference)
            assert 0.9 < cm.report.npu_mac_share < 1.0, remarks.getvalue()
        else:
            assert cm.report.npu_mac_share == 1.0, remarks.getvalue()
            assert _rel_l2(y, reference) < REL_L2_LIMIT
