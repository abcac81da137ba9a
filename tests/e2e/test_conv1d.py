"""1-D convolutions on the NPU: Whisper's and Moonshine's audio front ends, depthwise and
grouped 1-D convs. IREE folds a conv's unit H away, so a Conv1d (or a Conv2d over one row)
reaches the target as a generic with one sliding window; it lowers to conv2d without H
(contract/ops.py), padded along W only. Reference: torch fp32 (bf16 bounds of DESIGN §7).
"""

from __future__ import annotations

import io
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402
from models import WaveformFrontEnd  # noqa: E402


class WhisperFrontEnd(nn.Module):
    """Whisper's encoder stem: conv1d k3 pad 1, GELU, conv1d k3 stride 2 pad 1, GELU."""

    def __init__(self, mels: int = 80, width: int = 128):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)

    def forward(self, x):
        return F.gelu(self.conv2(F.gelu(self.conv1(x))))


class SeparableConv1d(nn.Module):
    """Pointwise, depthwise (k5 pad 2), dilated (k3 dilation 2) and grouped (4 groups) 1-D
    convs on a batch of two."""

    def __init__(self):
        super().__init__()
        self.pointwise = nn.Conv1d(32, 64, 1)
        self.depthwise = nn.Conv1d(64, 64, 5, padding=2, groups=64)
        self.dilated = nn.Conv1d(64, 32, 3, padding=2, dilation=2)
        self.grouped = nn.Conv1d(32, 32, 3, padding=1, groups=4)

    def forward(self, x):
        return self.grouped(torch.relu(self.dilated(torch.relu(self.depthwise(self.pointwise(x))))))


class OneRowConv2d(nn.Module):
    """A Conv2d over a single row (kernel 1x5): IREE makes it a 1-D conv too."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, (1, 5), stride=(1, 2), padding=(0, 2))

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("model, shape", [(WhisperFrontEnd, (1, 80, 200)), (SeparableConv1d, (2, 32, 100)),
                                          (WaveformFrontEnd, (1, 1, 16000)), (OneRowConv2d, (1, 16, 1, 64))])
def test_conv1d_runs_on_the_npu(model, shape):
    torch.manual_seed(0)
    m, x = model().eval(), torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    remarks = io.StringIO()
    cm = torq.compile(m, x, remarks=remarks)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert convs and all(d.executor == "torq" for d in convs), remarks.getvalue()
    with torch.no_grad():
        figures = error_figures(cm(x.numpy()), m(x).numpy())
    assert within_limits(*figures), figures


def test_int8_conv1d_within_one_step(tmp_path):
    """The Whisper stem quantized by onnxruntime (QDQ): both convs on the NPU with their
    integer rescale and GELU as a table; every output within one step of llvm-cpu."""
    pytest.importorskip("onnxruntime")
    import numpy as np
    from llvm_cpu import llvm_cpu
    from test_ort_quantized import ort_quantized_model

    from torq.compiler.onnx_import import import_onnx

    path, x = ort_quantized_model(tmp_path, WhisperFrontEnd, shape=(1, 80, 200))
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    remarks = io.StringIO()
    cm = torq.compile(str(path), remarks=remarks)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "torq" for d in convs), remarks.getvalue()
    assert all(s["table_entries"] == 256 for d in convs for s in d.requant), remarks.getvalue()
    step = np.diff(np.unique(ref)).min()
    assert np.abs(cm(x) - ref).max() <= step * 1.0001
    assert len(np.unique(ref)) > 50
