"""End to end: padding folded into the consuming conv / pooling (no pad dispatch).

With IREE's consumer pad fusion (driver.DISPATCH_FLAGS) a conv's or pool's
padding lands in its own dispatch as a `tensor.pad`; torq-fold-padding makes
it the op's `pad` / `pad_value` and the NSS program moves only the real
input bytes. Each model runs on the simulator at the default LRAM budget and
at 64 KiB (tiled: a spatial tile at the border reads padding, not DDR) and
is compared with torch fp32 (relative L2 <= 1e-2, cosine >= 0.9999); every
dispatch must run on torq, and the two budgets must agree bit for bit.
A pad no op can absorb is a DMA-only dispatch of its own on the NPU
(tests/e2e/test_inplace_and_copies.py has more); the kernels' padding
semantics are checked against torch directly.
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
from torq.runtime.kernels import run_principal

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

BUDGETS = ["SL2610", "SL2610:lram_kb=64"]


class PadThen(nn.Module):
    """F.pad with explicit (left, right, top, bottom) amounts, then `layer`."""

    def __init__(self, amounts, layer):
        super().__init__()
        self.amounts, self.layer = amounts, layer

    def forward(self, x):
        return self.layer(F.pad(x, self.amounts))


MODELS = {
    # name: (model, input shape, tiled at 64 KiB)
    "conv3x3_p1": (lambda: nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()), (1, 16, 48, 48), True),
    "conv3x3_s2_p1": (lambda: nn.Conv2d(8, 16, 3, stride=2, padding=1), (1, 8, 33, 31), False),
    "conv7x7_s2_p3": (lambda: nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), (1, 3, 40, 40), False),
    "asymmetric_pad_conv": (lambda: PadThen((2, 0, 1, 2), nn.Conv2d(8, 8, 3)), (1, 8, 20, 17), False),
    "depthwise5x5_s2_p2": (lambda: nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32), (1, 32, 40, 40), True),
    "dilated_p2": (lambda: nn.Conv2d(8, 8, 3, padding=2, dilation=2), (1, 8, 24, 24), False),
    "maxpool3x3_s2_p1": (lambda: nn.MaxPool2d(3, 2, 1), (1, 24, 64, 64), True),
    "avgpool3x3_s1_p1": (lambda: nn.AvgPool2d(3, 1, 1), (1, 16, 24, 24), False),
    "conv_then_pool": (lambda: nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                                             nn.Conv2d(16, 8, 3, padding=1)), (1, 8, 32, 32), True),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_padding_folded_into_consumer(name):
    torch.manual_seed(0)
    make, shape, tiled = MODELS[name]
    model = make().eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    outs = []
    for hw in BUDGETS:
        cm = torq.compile(model, x, hw=hw, remarks=io.StringIO())
        host = [(d.name, d.reason) for d in cm.report.dispatches if d.executor == "host"]
        assert not host, host
        y = cm(x.numpy())
        rel_l2, cosine = error_figures(y, ref)
        assert within_limits(rel_l2, cosine), (hw, rel_l2, cosine)
        if hw.endswith("lram_kb=64") and tiled:
            assert max(s["tiles"] for s in cm.last_stats) > 1, cm.last_stats
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_padding_moves_no_bytes():
    """The DMA-in of the padded conv moves exactly the input and weight bytes (bf16)."""
    model = nn.Conv2d(8, 8, 3, padding=1, bias=False).eval()
    x = torch.randn(1, 8, 16, 16)
    cm = torq.compile(model, x, remarks=io.StringIO())
    cm(x.numpy())
    (s,) = cm.last_stats
    assert s["dma_bytes_in"] == (8 * 16 * 16 + 8 * 8 * 3 * 3) * 2, s


def test_unfoldable_pad_is_a_dma_dispatch():
    """A pad read by an elementwise op (no window to pad) is a dispatch of its own, which
    the NPU runs with DMAs (and a fill of the border), correct."""
    model = PadThen((1, 1, 1, 1), nn.Sigmoid()).eval()
    x = torch.randn(1, 4, 8, 8)
    remarks = io.StringIO()
    cm = torq.compile(model, x, remarks=remarks)
    assert all(d.executor == "torq" for d in cm.report.dispatches), remarks.getvalue()
    with torch.no_grad():
        ref = model(x).numpy()
    rel_l2, cosine = error_figures(cm(x.numpy()), ref)
    assert within_limits(rel_l2, cosine)


def test_sample_cnn_has_no_host_dispatch():
    from cnn import make_model

    model = make_model()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    cm = torq.compile(model, x, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"] * len(cm.report.dispatches)
    with torch.no_grad():
        ref = model(x).numpy()
    rel_l2, cosine = error_figures(cm(x.numpy()), ref)
    assert within_limits(rel_l2, cosine)


# ---------------------------------------------------------------- kernel semantics vs torch

def test_kernel_pad_matches_torch_conv_and_pools():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 9, 7, generator=g)
    w = torch.randn(6, 4, 3, 3, generator=g)
    conv = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [2, 1],
            "dilation": [1, 1], "pad": [1, 2, 0, 1], "pad_value": 0.0}
    got, _ = run_principal("conv2d", [x.numpy(), w.numpy()], conv)
    ref = F.conv2d(F.pad(x, (0, 1, 1, 2)), w, stride=(2, 1)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    pool = {"input_dims": "NCHW", "output_dims": "NCHW", "kernel": [3, 3], "stride": [2, 2], "dilation": [1, 1],
            "pad": [1, 1, 1, 1], "pad_value": float("-inf")}
    got, _ = run_principal("maxpool2d", [x.numpy()], pool)
    np.testing.assert_array_equal(got, F.max_pool2d(x, 3, 2, 1).numpy())
    pool["pad_value"] = 0.0
    got, _ = run_principal("avg_pool2d", [x.numpy()], pool)
    np.testing.assert_allclose(got, F.avg_pool2d(x, 3, 2, 1).numpy(), rtol=1e-6, atol=1e-6)
    dw = {"input_dims": "NCHW", "weight_dims": "CHW", "output_dims": "NCHW", "stride": [1, 1],
          "dilation": [2, 2], "pad": [2, 2, 2, 2], "pad_value": 0.0}
    wd = torch.randn(4, 3, 3, generator=g)
    got, _ = run_principal("depthwise_conv2d", [x.numpy(), wd.numpy()], dw)
    ref = F.conv2d(x, wd[:, None], padding=2, dilation=2, groups=4).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_kernel_int8_pad_value_is_the_zero_point():
    """An int8 conv padded with its input zero point z: sum (x - z) * w with padding z
    contributes nothing at the border, like torch's zero-padded conv of x - z."""
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (1, 3, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (2, 3, 3, 3), dtype=np.int8)
    z = -3
    attrs = {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1],
             "dilation": [1, 1], "pad": [1, 1, 1, 1], "pad_value": z}
    got, _ = run_principal("conv2d", [x, w], attrs)
    wsum = F.conv2d(torch.ones(1, 3, 8, 8, dtype=torch.float64), torch.from_numpy(w).double()).numpy()
    ref = F.conv2d(torch.from_numpy(x.astype(np.float64) - z), torch.from_numpy(w).double(), padding=1).numpy()
    np.testing.assert_array_equal(got, np.rint(ref + z * wsum).astype(np.int64))


def test_padded_depthwise_conv_left_on_host_compiles_for_llvm_cpu():
    """Dispatch creation fuses each pad into its consumer's dispatch for the NPU; a
    dispatch that then stays on the host (here: the seed strategy's tiling is refused
    at 1 KiB and --torq-host-fallback-on-error keeps it on the host) gets its pad
    back as fill + insert_slice, since llvm-cpu fails to compile a depthwise conv
    with a fused tensor.pad ("failed to run translation" before)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU6()).eval()
    x = torch.randn(1, 16, 16, 16)
    cm = torq.compile(model, x, hw="SL2610:lram_kb=15", remarks=None,
                      flags=["--torq-super-tiling-strategy=seed", "--torq-host-fallback-on-error"])
    assert [d.executor for d in cm.report.dispatches] == ["host"]
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(np.asarray(cm(x.numpy())), ref, rtol=1e-5, atol=1e-5)


def test_keep_f32_does_not_fuse_pads_into_host_dispatches():
    """With --torq-keep-f32 everything f32 stays on the host, so pads are not fused
    into their consumers' dispatches at all: llvm-cpu cannot compile a large padded
    depthwise conv with a fused pad even after decomposing it ("large vector
    sizes"), which broke --torq-keep-f32 on MobileNetV2."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(144, 144, 3, padding=1, groups=144), nn.ReLU6()).eval()
    x = torch.randn(1, 144, 16, 16)
    cm = torq.compile(model, x, remarks=None, flags=["--torq-keep-f32"])
    assert {d.executor for d in cm.report.dispatches} == {"host"}
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(np.asarray(cm(x.numpy())), ref, rtol=1e-5, atol=1e-5)


class ConvOnLeadingChannels(nn.Module):
    """A conv on x[:, :16]: a box that starts at 0 and stops short of the input's end."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x[:, :16])


@pytest.mark.parametrize("hw", BUDGETS)
def test_box_from_zero_short_of_the_end_runs_on_the_npu(hw):
    # linalg takes a loop's range from an operand dim its map reads as a plain d, so no box
    # read generic expresses x[:, :16]; dispatch extraction reads it as a tensor.extract_slice
    # (a DMA box; a tile's box of it composes with it). It stayed on host before.
    torch.manual_seed(0)
    model = ConvOnLeadingChannels().eval()
    x = torch.randn(1, 32, 32, 32, generator=torch.Generator().manual_seed(1))
    cm = torq.compile(model, x, hw=hw, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"], [(d.name, d.reason) for d in cm.report.dispatches]
    with torch.no_grad():
        ref = model(x).numpy()
    assert within_limits(*error_figures(cm(x.numpy()), ref))
