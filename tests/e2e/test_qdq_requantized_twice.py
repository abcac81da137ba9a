"""A contraction's int8 result requantized again in the same dispatch (GhostNet, quantized by
onnxruntime): the primary conv's map is quantized, and the concatenation it is a part of
quantizes it again to its own scale. IREE fuses both into the conv's dispatch as one
generic with two results; torq-lower-requantization splits it
(split_elementwise_results.split_requantization_results), rescales the conv's and makes the
second an integer table of the first (requant_elementwise.lower_requantized_results). Before,
the dispatch stayed on the host in f32 (timm ghostnet_100: 43% of its MACs). Every MAC must
be on the NPU, within one output step of IREE llvm-cpu."""

import io
import os
import sys

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.dirname(__file__))
from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import assert_within_one_step, ort_quantized_model, random_batchnorm  # noqa: E402

import torq  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


class GhostModule(nn.Module):
    """Half the channels by a 1x1 conv, the other half a depthwise conv of those, concatenated."""

    def __init__(self, cin, cout, relu):
        super().__init__()
        half, act = cout // 2, (nn.ReLU() if relu else nn.Identity())
        self.primary = nn.Sequential(nn.Conv2d(cin, half, 1, bias=False), random_batchnorm(half), act)
        self.cheap = nn.Sequential(nn.Conv2d(half, half, 3, padding=1, groups=half, bias=False), random_batchnorm(half), act)
        self.cout = cout

    def forward(self, x):
        x1 = self.primary(x)
        return torch.cat([x1, self.cheap(x1)], 1)[:, :self.cout]


class GhostBottleneck(nn.Module):
    """timm's GhostNet block: ghost module, a strided depthwise conv and squeeze-excite
    (hard sigmoid gate) when asked, ghost module, plus the shortcut."""

    def __init__(self, cin, mid, cout, stride=1, se=False):
        super().__init__()
        self.ghost1, self.ghost2 = GhostModule(cin, mid, True), GhostModule(mid, cout, False)
        self.down = nn.Sequential(nn.Conv2d(mid, mid, 5, stride, 2, groups=mid, bias=False), random_batchnorm(mid)) \
            if stride > 1 else nn.Identity()
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, 20, 1), nn.ReLU(), nn.Conv2d(20, mid, 1),
                                nn.Hardsigmoid()) if se else None
        self.shortcut = nn.Identity() if cin == cout and stride == 1 else nn.Sequential(
            nn.Conv2d(cin, cin, 5, stride, 2, groups=cin, bias=False), random_batchnorm(cin), nn.Conv2d(cin, cout, 1, bias=False),
            random_batchnorm(cout))

    def forward(self, x):
        y = self.down(self.ghost1(x))
        if self.se is not None:
            y = y * self.se(y)
        return self.ghost2(y) + self.shortcut(x)


class TwoGhostBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(24, 24, 1)
        self.blocks = nn.Sequential(GhostBottleneck(24, 72, 24), GhostBottleneck(24, 72, 40, stride=2, se=True))

    def forward(self, x):
        return self.blocks(self.stem(x))


def test_conv_result_requantized_for_its_concatenation_runs_on_the_npu(tmp_path):
    path, x = ort_quantized_model(tmp_path, TwoGhostBlocks, shape=(1, 24, 14, 14))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    with_macs = [d for d in cm.report.dispatches if d.macs]
    assert all(d.executor == "torq" for d in with_macs), [(d.name, d.reason) for d in with_macs]
    # The table of the second result is an int8 elementwise summary beside the conv's rescale.
    assert any(len(d.requant) == 2 and d.requant[1]["kind"] == "int8 elementwise" for d in with_macs), \
        [[s["kind"] for s in d.requant] for d in with_macs]
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    assert_within_one_step(np.asarray(cm(x)), ref)
