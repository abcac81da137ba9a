"""ONNX models whose exporter wrote run-time shape computations (compiler/onnx_fold.py).

torch.onnx's TorchScript exporter writes nn.MultiheadAttention's head split as
Shape / Gather / Mod / Slice / Concat ops feeding a Reshape; ONNX shape inference
leaves the reshaped tensor without a rank, and IREE's importer could not convert the
Transpose reading it (torchvision's ViT did not import: "ONNX op Transpose is not
supported"). Folded to constants, the model imports; f32 against onnxruntime, int8
(onnxruntime QDQ) against IREE llvm-cpu on the same file.
"""

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import assert_within_one_step, ort_quantized_model  # noqa: E402
from torch_reference import REL_L2_LIMIT  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_fold import has_unranked_values  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


class AttentionBlock(torch.nn.Module):
    """torchvision's ViT encoder block, small: pre-norm nn.MultiheadAttention, then an MLP."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


SHAPE = (1, 16, 32)


def test_exported_attention_has_unranked_values(tmp_path):
    """The case exists: shape inference alone leaves the head split without a rank."""
    path = tmp_path / "m.onnx"
    torch.manual_seed(0)
    torch.onnx.export(AttentionBlock().eval(), (torch.randn(*SHAPE),), str(path), dynamo=False,
                      input_names=["x"], output_names=["y"], opset_version=17)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)), data_prop=True)
    assert has_unranked_values(inferred)


# Three heads: the head split's gathers unroll in three pieces, a split of a split
# (torq-unroll-index-dims flattens it; before, six 'tensor.insert_slice' host dispatches
# in torchvision's 2-layer ViT).
@pytest.mark.parametrize("d,heads", [(32, 2), (48, 3)])
def test_f32_attention_imports_and_matches_onnxruntime(tmp_path, d, heads):
    path = tmp_path / "m.onnx"
    shape = (*SHAPE[:2], d)
    torch.manual_seed(0)
    torch.onnx.export(AttentionBlock(d, heads).eval(), (torch.randn(*shape),), str(path), dynamo=False,
                      input_names=["x"], output_names=["y"], opset_version=17)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    # The folded import is exact: llvm-cpu on it gives onnxruntime's values (f32 rounding aside).
    cpu = llvm_cpu(import_onnx(path.read_bytes(), "m.onnx"), x, function="main_graph")
    assert np.linalg.norm(cpu - ref) / np.linalg.norm(ref) < 1e-5
    cm = torq.compile(str(path), remarks=io.StringIO())
    y = np.asarray(cm(x))
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) <= REL_L2_LIMIT
    assert all(k.executor == "torq" for k in cm.report.dispatches), cm.report.dispatches


def test_int8_attention_on_npu_within_one_step(tmp_path):
    """Quantized by onnxruntime: every matmul on the NPU, within one output step of llvm-cpu (a
    generic with a scalar operand crashed torq-unroll-index-dims' loop ranges before)."""
    path, x = ort_quantized_model(tmp_path, AttentionBlock, shape=SHAPE)
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    remarks = io.StringIO()
    cm = torq.compile(str(path), remarks=remarks)
    y = np.asarray(cm(x))
    host_macs = sum(d.macs for d in cm.report.dispatches if d.executor == "host")
    assert host_macs < 0.01 * sum(d.macs for d in cm.report.dispatches), remarks.getvalue()
    assert_within_one_step(y, ref)
    assert len(np.unique(ref)) > 50
