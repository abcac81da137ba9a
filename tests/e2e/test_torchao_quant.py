"""A model quantized with torchao's `quantize_` API in its int8 dynamic configuration
(`Int8DynamicActivationInt8WeightConfig`: each Linear's input quantized per token when the
model runs, symmetric; int8 weights per channel), exported by iree-turbine. IREE cannot
import torchao's choose_qparams_affine / quantize_affine; compiler/torchao_quant.py
rewrites them in aten ops, and undoes torchao's CPU trick of a uint8 operand (which the
NPU's signed MACs cannot take), so the integer matmuls run on the NPU.

References: torchao itself (its ops and the quantized model, run eagerly), and llvm-cpu on
the module after the rewrite (llvm-cpu cannot compile it as written).
"""

import io

import numpy as np
import pytest
import torch
from feed_forward import FeedForward
from llvm_cpu import llvm_cpu

import torq
from torq.compiler.torch_ir import rewritten_text
from torq.compiler.torchao_quant import rewrite_torchao_quantization

pytest.importorskip("torchao.quantization")


def _rewritten(text: str) -> str:
    return rewritten_text(text, rewrite_torchao_quantization)


class AffineQuantize(torch.nn.Module):
    """torchao's two ops on one input, their results returned."""

    def __init__(self, mapping: str, block: list[int]):
        super().__init__()
        self.mapping, self.block = mapping, block

    def forward(self, x):
        scale, zero_point = torch.ops.torchao.choose_qparams_affine(
            x, self.mapping, self.block, torch.int8, -128, 127, torch.finfo(torch.float32).eps, torch.float32,
            torch.int8, True)
        q = torch.ops.torchao.quantize_affine(x, self.block, scale, zero_point, torch.int8, -128, 127)
        return scale, zero_point, q


def _inputs(shape) -> dict[str, np.ndarray]:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return {"mixed": x, "positive": np.abs(x) + np.float32(0.5), "negative": -np.abs(x) - np.float32(0.5),
            "zeros": np.zeros(shape, np.float32), "tiny": x * np.float32(1e-6), "large": x * np.float32(3e4)}


@pytest.mark.parametrize("mapping", ["SYMMETRIC", "ASYMMETRIC"])
@pytest.mark.parametrize("block", [[1, 64], [8, 64]], ids=["per_token", "per_tensor"])
def test_rewritten_affine_ops_equal_torchao(mapping, block):
    """Scales, zero points and int8 values bit for bit, on each input."""
    import torchao.quantization.quant_primitives  # noqa: F401 (defines torch.ops.torchao)
    from iree.turbine import aot

    model = AffineQuantize(mapping, block)
    rewritten = _rewritten(str(aot.export(model, torch.zeros(8, 64)).mlir_module))
    assert "torch.operator" not in rewritten
    for name, x in _inputs((8, 64)).items():
        ours, ref = llvm_cpu(rewritten, x), [t.numpy() for t in model(torch.from_numpy(x))]
        for k, (a, b) in enumerate(zip(ours, ref)):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name}: result {k}"


def _rel_l2(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("uint8_trick", [True, False], ids=["u8s8", "s8s8"])
def test_int8_dynamic_linears_run_on_the_npu(monkeypatch, uint8_trick):
    """Both matmuls on the NPU, with default flags and --torq-keep-f32; the result is llvm-cpu's
    on the rewritten module bit for bit (the NPU's i32 accumulator is exact, the per-token
    scales and the GELU stay on the host in f32) and within f32 rounding of torchao's. torchao exports its u8 x
    s8 form on a CPU with VNNI and no AMX, else the s8 x s8 one: both, whatever this CPU."""
    import torchao.kernel.intmm as intmm
    from iree.turbine import aot
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    monkeypatch.setattr(intmm, "_cpu_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(intmm, "_cpu_is_vnni_supported", lambda: uint8_trick)
    torch.manual_seed(0)
    model, x = FeedForward().eval(), torch.randn(1, 32, 64)
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    text = str(aot.export(model, x).mlir_module)
    assert text.count("torchao.choose_qparams_affine") == 2 and "_int_mm" in text
    assert (",ui8>" in text) == uint8_trick
    with torch.no_grad():
        ref_torchao = model(x).numpy()
    reference = llvm_cpu(_rewritten(text), x.numpy())
    for flags in ([], ["--torq-keep-f32"]):
        remarks = io.StringIO()
        cm = torq.compile(text, remarks=remarks, flags=flags)
        assert cm.report.npu_mac_share == 1.0, remarks.getvalue()
        y = np.asarray(cm(x.numpy()))
        # The per-token scales stay on the host in f32 with default flags too (in bf16 on
        # the NPU they moved the result 6.6e-3 from llvm-cpu's).
        assert sum("per-token scale" in d.reason for d in cm.report.dispatches) >= 2
        assert np.array_equal(y, reference)
        assert _rel_l2(y, ref_torchao) < 1e-5


def test_an_int8_dynamic_llama_runs_its_linears_on_the_npu():
    """Hugging Face Llama (2 layers, random weights, grouped-query attention), quantized by
    quantize_ and exported with the 4-D causal mask (tests/e2e/test_hf_llama.py's recipe):
    every Linear on the NPU; with --torq-keep-f32 attention's f32 matmuls stay on the host
    and the logits are llvm-cpu's on the rewritten module bit for bit."""
    from iree.turbine import aot
    from test_hf_llama import CausalLM, transformers  # (transformers needs torchvision's stub)
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = CausalLM(transformers.LlamaForCausalLM(config).eval(), mask=True)
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    text = str(aot.export(model, ids).mlir_module)
    assert text.count("torchao.choose_qparams_affine") == 15  # 7 Linears a layer and the LM head
    reference = llvm_cpu(_rewritten(text), ids.numpy())
    remarks = io.StringIO()
    cm = torq.compile(text, remarks=remarks, flags=["--torq-keep-f32"])
    assert np.array_equal(np.asarray(cm(ids.numpy())), reference)
    linears = [d for d in cm.report.dispatches if d.macs and d.executor == "torq"]
    assert len(linears) >= 15 and cm.report.npu_mac_share > 0.9, remarks.getvalue()
