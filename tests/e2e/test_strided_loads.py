"""End to end: strided reads of a dispatch input fold into the convolution reading them.

IREE slices the input of a 1x1 stride-2 convolution that shares its input with
another op (ResNet's downsample branch) as a strided `dispatch.tensor.load`
(`x[:, ::2, ::2]`) followed by a 1x1 stride-1 convolution. Dispatch extraction
folds the stride into the convolution's input map, so the dispatch runs on the
NPU as a stride-2 conv2d. Checked against torch fp32 within the bf16 bounds of
DESIGN section 7, at the default LRAM and at a budget that forces tiling.
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
