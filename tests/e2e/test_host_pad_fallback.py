"""End to end: a depthwise conv left on the host with its padding fused into its dispatch.

For the NPU the driver fuses a conv's zero padding into the conv's dispatch
as a `tensor.pad` (driver.DISPATCH_FLAGS; torq-fold-padding folds it there).
A dispatch that stays on the host keeps that pad, and llvm-cpu cannot compile
one feeding a depthwise conv, so the target builds the padding before the
dispatch the way IREE does without the fusion: a splat of the pad value and
a copy dispatch writing the input into it (`dispatch_extraction.
hoist_input_pads`). Here the seed tiling strategy refuses the depthwise conv
at small LRAM budgets and --torq-host-fallback-on-error leaves it on the
host. Reference: torch fp32 (host f32: rel L2 <= 1e-5; with bf16 NPU
dispatches around it, the bf16 bounds of DESIGN §7).
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torq
import torq.compiler.target as target

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

SEED = ["--torq-super-tiling-strategy=seed", "--torq-host-fallback-on-error"]
ALL_HOST = "SL2610:lram_kb=15"  # 1 KiB budget: the seed refuses every conv here
DEPTHWISE_HOST = "SL2610:lram_kb=16"  # 2 KiB: it refuses only the depthwise conv


class ConvDepthwise(nn.Module):
    """1x1 conv -> depthwise 3x3 (pad 1) -> 1x1 conv, as in a MobileNetV2 block."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.expand = nn.Conv2d(8, c, 1)
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.project = nn.Conv2d(c, 8, 1)

    def forward(self, x):
        return self.project(torch.relu(self.depthwise(torch.relu(self.expand(x)))))


class DepthwiseResidual(nn.Module):
    """depthwise(x) + x: the dispatch reads its input both padded and not."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)

    def forward(self, x):
        return self.depthwise(x) + x


class DepthwiseOfChannelSlice(nn.Module):
    """A depthwise conv of channels 8..23 times channels 4..19: the dispatch loads two
    boxes of its input, one padded in H and W (so the whole input is padded)."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)

    def forward(self, x):
        return self.depthwise(x[:, 8:24]) * x[:, 4:20]


class DepthwiseOfPaddedCrop(nn.Module):
    """A depthwise conv of a crop padded in H, where it is cropped: only the crop is padded."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, groups=c)

    def forward(self, x):
        return self.depthwise(F.pad(x[:, 8:24, 2:12], (1, 1, 1, 1)))


def _compile_and_run(model, x, hw):
    """Compile with the seed's host fallback, check the depthwise conv's dispatch was
    refused (so it runs on the host), run, and give (rel L2, cosine) vs torch."""
    remarks = io.StringIO()
    cm = torq.compile(model, x, hw=hw, flags=SEED, remarks=remarks)
    (dw,) = [d for d in cm.report.dispatches if "depthwise_conv2d" in d.reason]
    assert dw.executor == "host", remarks.getvalue()
    with torch.no_grad():
        ref = model(x).numpy()
    return cm, error_figures(cm(x.numpy()), ref)


def _inputs(channels: int) -> torch.Tensor:
    return torch.randn(1, channels, 16, 16, generator=torch.Generator().manual_seed(1))


def test_depthwise_on_host_between_host_convs():
    torch.manual_seed(2)
    cm, (rel_l2, cosine) = _compile_and_run(ConvDepthwise().eval(), _inputs(8), ALL_HOST)
    assert all(d.executor == "host" for d in cm.report.dispatches)
    assert rel_l2 <= 1e-5 and cosine >= 0.99999, (rel_l2, cosine)  # host f32


def test_depthwise_on_host_between_npu_convs():
    """The padded tensor is built from an NPU result; the convs' bf16 bounds the error."""
    torch.manual_seed(2)
    cm, (rel_l2, cosine) = _compile_and_run(ConvDepthwise().eval(), _inputs(8), DEPTHWISE_HOST)
    assert [d.executor for d in cm.report.dispatches].count("torq") == 2
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def test_input_read_padded_and_unpadded():
    """The residual reads the same loaded input: after the hoist it reads the inside
    of the padded tensor, which must be the input itself."""
    torch.manual_seed(3)
    cm, (rel_l2, cosine) = _compile_and_run(DepthwiseResidual().eval(), _inputs(16), ALL_HOST)
    assert rel_l2 <= 1e-5 and cosine >= 0.99999, (rel_l2, cosine)


@pytest.mark.parametrize("model", [DepthwiseOfChannelSlice, DepthwiseOfPaddedCrop])
def test_pad_of_a_box_of_the_input(model):
    torch.manual_seed(4)
    _, (rel_l2, cosine) = _compile_and_run(model().eval(), _inputs(32), ALL_HOST)
    assert rel_l2 <= 1e-5 and cosine >= 0.99999, (rel_l2, cosine)


def test_int8_depthwise_padded_with_its_zero_point():
    """TOSA int8 pads with the input zero point (-3 here, not 0): bit-exact vs llvm-cpu."""
    from test_int8_tosa import TOSA, llvm_cpu_reference, random_int8
    from tosa_int8 import depthwise_rescale_clamp

    mlir = depthwise_rescale_clamp(0, x_shape=(1, 16, 16, 16))
    x = random_int8((1, 16, 16, 16), 1)
    cm = torq.compile(mlir, hw=ALL_HOST, flags=TOSA + SEED, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["host"]
    ref = llvm_cpu_reference(mlir, x)
    assert len(np.unique(ref)) > 64
    np.testing.assert_array_equal(cm(x), ref)


def test_llvm_cpu_fails_on_the_fused_pad(monkeypatch):
    """Why the hoist exists: without it llvm-cpu cannot compile the dispatch (if this
    starts passing, IREE handles the fused pad and the hoist can go)."""
    monkeypatch.setattr(target, "_hoist_pads_for_host", lambda dispatch: None)
    torch.manual_seed(2)
    with pytest.raises(torq.TorqCompileError, match="IREE compilation failed"):
        torq.compile(ConvDepthwise().eval(), _inputs(8), hw=ALL_HOST, flags=SEED, remarks=io.StringIO())


class PaddedConv1d(nn.Module):
    """Whisper's stem: padded 1-D convs, the second strided."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(16, 32, 3, padding=1)
        self.conv2 = nn.Conv1d(32, 32, 3, stride=2, padding=1)

    def forward(self, x):
        return F.gelu(self.conv2(F.gelu(self.conv1(x))))


def test_padded_conv1d_on_host_compiles():
    """A 1-D conv left on the host (here the seed strategy refuses it at a 1 KiB budget) keeps
    its fused pad, which llvm-cpu cannot compile: the hoist builds the padding before it
    (before, the whole compile failed in IREE's llvm-cpu translation, issue 15)."""
    torch.manual_seed(5)
    model, x = PaddedConv1d().eval(), torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(1))
    remarks = io.StringIO()
    cm = torq.compile(model, x, hw=ALL_HOST, flags=SEED, remarks=remarks)
    convs = [d for d in cm.report.dispatches if d.macs]
    assert len(convs) == 2 and all(d.executor == "host" for d in convs), remarks.getvalue()
    with torch.no_grad():
        rel_l2, cosine = error_figures(cm(x.numpy()), model(x).numpy())
    assert rel_l2 <= 1e-5 and cosine >= 0.99999, (rel_l2, cosine)
