"""End to end: strided reads of a dispatch input fold into the convolution reading them.

IREE slices the input of a 1x1 stride-2 convolution that shares its input with
another op (ResNet's downsample branch) as a strided `dispatch.tensor.load`
(`x[:, ::2, ::2]`) followed by a 1x1 stride-1 convolution. Dispatch extraction
folds the stride into the convolution's input map, so the dispatch runs on the
NPU as a stride-2 conv2d. An elementwise op that reads an input strided (MobileOne's
and FastViT's 1x1 stride-2 branch) reads it with a strided DMA (`StridedBranches`).
Checked against torch fp32 within the bf16 bounds of DESIGN section 7, at the default
LRAM and at a budget that forces tiling; the int8 form against onnxruntime.
"""

import os
import sys

import pytest
import torch
import torch.nn as nn
from torch_reference import run_against_torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from models import BasicBlock, _init  # noqa: E402

SMALL_LRAM = "SL2610:lram_kb=64"


def compile_and_check(model, x, hw="SL2610"):
    cm = run_against_torch(model, x, hw=hw).cm
    assert cm.report.npu_mac_share == 1.0
    return cm


class ReluThenTwoConvs(nn.Module):
    """A ReLU read by a 3x3 stride-2 conv and by a 1x1 stride-2 conv (the shared
    input is what makes IREE load the 1x1 conv's input strided)."""

    def __init__(self, cin=8, cout=16):
        super().__init__()
        self.wide = nn.Conv2d(cin, cout, 3, stride=2, padding=1)
        self.down = nn.Conv2d(cin, cout, 1, stride=2)

    def forward(self, x):
        x = torch.relu(x)
        return self.wide(x) * self.down(x)


def test_relu_then_1x1_stride2_conv():
    torch.manual_seed(0)
    model = nn.Sequential(nn.ReLU(), nn.Conv2d(8, 16, 1, stride=2))
    compile_and_check(model, torch.randn(1, 8, 16, 16, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("hw", ["SL2610", SMALL_LRAM])
def test_shared_input_strided_load(hw):
    torch.manual_seed(0)
    x = torch.randn(1, 8, 64, 64, generator=torch.Generator().manual_seed(2))  # 64 KiB in bf16
    cm = compile_and_check(ReluThenTwoConvs(), x, hw=hw)
    if hw == SMALL_LRAM:
        assert max(s["tiles"] for s in cm.last_stats) > 1


def test_basic_block_with_downsample():
    x = torch.randn(1, 16, 32, 32, generator=torch.Generator().manual_seed(3))
    cm = compile_and_check(_init(BasicBlock(16, 32, 2), 0), x)
    assert len(cm.report.dispatches) >= 3  # conv, downsample conv, conv + residual


class StridedBranches(nn.Module):
    """MobileOne's / FastViT's stride-2 block at train time: a 3x3 stride-2 depthwise conv
    plus a 1x1 stride-2 depthwise branch, then GELU. IREE folds the 1x1 branch into the
    conv's elementwise consumer as a strided read x[c, 2y, 2x] * w[c], which its own
    llvm-cpu then fails to compile ("write affecting operations on global resources are
    restricted to workgroup distributed contexts"); Torq reads it with a strided DMA."""

    def __init__(self, c=16):
        super().__init__()
        self.kxk = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c)
        self.scale = nn.Conv2d(c, c, 1, stride=2, groups=c)

    def forward(self, x):
        return nn.functional.gelu(self.kxk(x) + self.scale(x))


@pytest.mark.parametrize("hw,size", [("SL2610", 32), (SMALL_LRAM, 127)])
def test_elementwise_read_of_a_strided_branch(hw, size):
    torch.manual_seed(0)
    x = torch.randn(1, 16, size, size, generator=torch.Generator().manual_seed(4))
    cm = compile_and_check(StridedBranches(), x, hw=hw)
    if hw == SMALL_LRAM:
        assert max(s["tiles"] for s in cm.last_stats) > 1


def test_int8_strided_branch_within_one_step_of_onnxruntime(tmp_path):
    """The same block quantized by onnxruntime (QDQ, per channel): the requantization adds
    the 1x1 branch read strided, a strided DMA box of the int8 input. IREE's llvm-cpu
    fails on this dispatch as in bf16, so the reference is onnxruntime's own run."""
    pytest.importorskip("onnxruntime.quantization")
    import io

    import numpy as np
    import onnxruntime as ort
    from test_ort_quantized import assert_within_one_step, ort_quantized_model

    import torq

    path, x = ort_quantized_model(tmp_path, StridedBranches, shape=(1, 16, 16, 16))
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache",))
    assert cm.report.npu_mac_share == 1.0, [(d.name, d.reason) for d in cm.report.dispatches]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert_within_one_step(np.asarray(cm(x)), session.run(None, {"x": x})[0])
