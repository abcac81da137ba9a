"""MetaFormer's scaled residual, `x * res_scale + mixer(x)` (timm ConvFormer / PoolFormer v2),
quantized by onnxruntime: the Mul's int8 output is requantized per channel from the int8
residual in the contraction's dispatch, then added. compiler/requant_split.py splits that
per-channel rescale off the residual and fits it on the 256 int8 levels
(requant._residual_fits); the dispatch must run on the NPU within one step of IREE llvm-cpu.
Without the split the chain reads the per-channel scale after the add and the dispatch stays
on the host ("neither a constant nor per channel")."""

import io
import os
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.dirname(__file__))
from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import assert_within_one_step, ort_quantized_model  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


class ScaledResidualLinear(torch.nn.Module):
    """Tokens x channels: y = x * res_scale + fc(x), res_scale one positive value per channel."""

    def __init__(self, dim=32):
        super().__init__()
        self.fc = torch.nn.Linear(dim, dim)
        self.res_scale = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        return x * self.res_scale + self.fc(x)


class ScaledResidualConv(torch.nn.Module):
    """NCHW: y = x * res_scale + conv1x1(x), res_scale of either sign per channel."""

    def __init__(self, dim=16):
        super().__init__()
        self.conv = torch.nn.Conv2d(dim, dim, 1)
        self.res_scale = torch.nn.Parameter(torch.rand(dim, 1, 1) * 3 - 1.5)

    def forward(self, x):
        return x * self.res_scale + self.conv(x)


@pytest.mark.parametrize("model_class,shape", [(ScaledResidualLinear, (1, 49, 32)),
                                               (ScaledResidualConv, (1, 16, 8, 8))], ids=["linear", "conv"])
def test_scaled_residual_runs_on_the_npu_within_one_step(tmp_path, model_class, shape):
    path, x = ort_quantized_model(tmp_path, model_class, shape=shape)
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    with_macs = [d for d in cm.report.dispatches if d.macs]
    assert with_macs and all(d.executor == "torq" for d in with_macs), \
        [(d.name, d.executor, d.reason) for d in with_macs]
    # The residual's own rescale, one per channel, fitted on the int8 levels; then the sum.
    (block,) = [s for d in with_macs for s in d.requant if s["residual_differing"] is not None]
    assert block["residual_type"] == "i8" and len(block["residual_differing"]) == shape[-1 if len(shape) == 3 else 1]
    assert block["sum_pairs"] == 256 * 256, block
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)
