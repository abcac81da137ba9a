"""End to end: in-place updates and data-movement dispatches on the NPU.

IREE writes each part of an inner-dim `torch.cat` into the result with a
dispatch that stores a box of a read-write operand, and a pad at the model's
output as a splat plus such a dispatch; a pad some other dispatch reads is a
`tensor.pad` dispatch of its own. All of these run on the NPU: a dispatch
that updates a box takes the operand as an aliased in/out tensor and DMAs
only the box (the rest of the operand is kept exactly, even f32 values bf16
cannot hold), a copy is DMA-in -> LRAM -> DMA-out (in chunks when it does not
fit LRAM), and a standalone pad fills its border from a buffer holding the
pad value. References: torch fp32 (bf16 bounds, DESIGN §7) and, where the
NPU only copies or computes exactly, torch on the bf16-rounded inputs
(equal); IREE llvm-cpu for int8 TOSA (bit-exact).
"""

from __future__ import annotations

import io
import os
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402
from llvm_cpu import TOSA, llvm_cpu  # noqa: E402


def bf16(x) -> np.ndarray:
    """The values the NPU sees: f32 rounded to the nearest bf16."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def all_on_torq(model, *args, hw: str = "SL2610", flags=()):
    remarks = io.StringIO()
    cm = torq.compile(model, *args, hw=hw, flags=flags, remarks=remarks)
    host = [(d.name, d.reason) for d in cm.report.dispatches if d.executor == "host"]
    assert not host, (host, remarks.getvalue())
    return cm


def check_bf16_bounds(y, ref):
    rel_l2, cosine = error_figures(np.asarray(y), np.asarray(ref))
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


class ConcatComputed(nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.relu(x), y * 2], dim=-1)


class ConcatRaw(nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.relu(x), y], dim=-1)


@pytest.mark.parametrize("model", [ConcatComputed, ConcatRaw])
def test_inner_dim_concat(model):
    """Each half is written into its box of the result by a copy dispatch on the NPU; the
    second keeps the half the first wrote. relu, * 2 and copies are exact in bf16."""
    m = model().eval()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 4, 8, 16, generator=g), torch.randn(1, 4, 8, 16, generator=g)
    cm = all_on_torq(m, x, y)
    assert len(cm.report.dispatches) >= 3
    out = cm(x.numpy(), y.numpy())
    with torch.no_grad():
        check_bf16_bounds(out, m(x, y).numpy())
        exact = m(torch.from_numpy(bf16(x)), torch.from_numpy(bf16(y))).numpy()
    np.testing.assert_array_equal(out, exact)


def test_concat_copies_are_tiled_to_fit_lram():
    """128 KiB (bf16) per half through a 50 KiB budget: the copies run in chunks."""
    m = ConcatRaw().eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(1, 16, 64, 64, generator=g), torch.randn(1, 16, 64, 64, generator=g)
    hw = "SL2610:lram_kb=64"
    cm = all_on_torq(m, x, y, hw=hw)
    out = cm(x.numpy(), y.numpy())
    np.testing.assert_array_equal(out, m(torch.from_numpy(bf16(x)), torch.from_numpy(bf16(y))).numpy())
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    stats = cm.last_stats
    assert all(s["lram_peak_bytes"] <= budget for s in stats)
    half = 16 * 64 * 64 * 2
    copies = [s for s in stats if s["macs"] == 0 and s["dma_bytes_in"] == s["dma_bytes_out"] == half]
    assert len(copies) >= 2 and all(s["tiles"] >= 3 for s in copies), stats
    # In place: a copy writes its half only, and nothing else is moved.
    assert all(s["compulsory_bytes"] == 2 * half for s in copies)


class PadOutput(nn.Module):
    def __init__(self, value: float, relu: bool):
        super().__init__()
        self.value, self.relu = value, relu

    def forward(self, x):
        return F.pad(torch.relu(x) if self.relu else x, (1, 2, 3, 0), value=self.value)


@pytest.mark.parametrize("value,relu", [(0.5, False), (0.1, True)], ids=["copy", "computed_box"])
def test_pad_as_model_output(value, relu):
    """IREE fills the result with the pad value and a dispatch writes the box of x (copied,
    or relu computed into it in place). The border is the host's f32 fill, kept exactly:
    for 0.1 not the bf16 0.10009765625 a round trip through the NPU's DDR dtype would give."""
    m = PadOutput(value, relu).eval()
    x = torch.randn(1, 4, 8, 16, generator=torch.Generator().manual_seed(2))
    cm = all_on_torq(m, x)
    out = cm(x.numpy())
    with torch.no_grad():
        check_bf16_bounds(out, m(x).numpy())
        exact = m(torch.from_numpy(bf16(x))).numpy()
    interior = (slice(None), slice(None), slice(3, 11), slice(1, 17))
    np.testing.assert_array_equal(out[interior], exact[interior])
    border = np.ones(out.shape, bool)
    border[interior] = False
    np.testing.assert_allclose(out[border], value, rtol=1e-7)  # IREE's f32 constant of the float, not bf16
    (s,) = cm.last_stats
    assert s["dma_bytes_in"] == s["dma_bytes_out"] == 4 * 8 * 16 * 2  # only the box moves


class PadThenDouble(nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 2, 3, 0), value=0.5) * 2


@pytest.mark.parametrize("hw", ["SL2610", "SL2610:lram_kb=15"])
def test_standalone_pad_fills_its_border(hw):
    """A pad another dispatch reads is a `tensor.pad` dispatch: the NPU writes the border
    with the pad value and copies x into the interior (in chunks with 1 KiB of LRAM)."""
    m = PadThenDouble().eval()
    x = torch.randn(1, 4, 8, 16, generator=torch.Generator().manual_seed(3))
    cm = all_on_torq(m, x, hw=hw)
    out = cm(x.numpy())
    with torch.no_grad():
        check_bf16_bounds(out, m(x).numpy())
        np.testing.assert_array_equal(out, m(torch.from_numpy(bf16(x))).numpy())
    padded = 4 * 11 * 19 * 2
    pads = [s for s in cm.last_stats if s["dma_bytes_in"] == 4 * 8 * 16 * 2 and s["dma_bytes_out"] == padded]
    assert len(pads) == 1, cm.last_stats  # the border is written by the NPU, not read from DDR
    if hw.endswith("=15"):
        assert pads[0]["tiles"] > 2 and pads[0]["lram_peak_bytes"] <= 1024


# int8 pad as an output (a host fill of -5 + an NPU copy), concat on the channel dim
# (two NPU copies), and a pad of 7 that a clamp reads (a tensor.pad dispatch: the NPU
# writes the border).
TOSA_PAD_CONCAT = """
func.func @main(%x: tensor<1x6x7x16xi8>, %y: tensor<1x6x7x8xi8>)
    -> (tensor<1x9x10x16xi8>, tensor<1x6x7x24xi8>, tensor<1x9x10x16xi8>) {
  %p = "tosa.const_shape"() <{values = dense<[0, 0, 1, 2, 2, 1, 0, 0]> : tensor<8xindex>}> : () -> !tosa.shape<8>
  %v = "tosa.const"() <{values = dense<-5> : tensor<1xi8>}> : () -> tensor<1xi8>
  %v2 = "tosa.const"() <{values = dense<7> : tensor<1xi8>}> : () -> tensor<1xi8>
  %r = "tosa.pad"(%x, %p, %v) : (tensor<1x6x7x16xi8>, !tosa.shape<8>, tensor<1xi8>) -> tensor<1x9x10x16xi8>
  %c = "tosa.concat"(%x, %y) <{axis = 3 : i32}> : (tensor<1x6x7x16xi8>, tensor<1x6x7x8xi8>) -> tensor<1x6x7x24xi8>
  %r2 = "tosa.pad"(%x, %p, %v2) : (tensor<1x6x7x16xi8>, !tosa.shape<8>, tensor<1xi8>) -> tensor<1x9x10x16xi8>
  %m = "tosa.clamp"(%r2) <{min_val = -3 : i8, max_val = 100 : i8}> : (tensor<1x9x10x16xi8>) -> tensor<1x9x10x16xi8>
  return %r, %c, %m : tensor<1x9x10x16xi8>, tensor<1x6x7x24xi8>, tensor<1x9x10x16xi8>
}
"""


@pytest.mark.parametrize("hw", ["SL2610", "SL2610:lram_kb=15"])
def test_int8_tosa_pad_and_concat_bit_exact(hw):
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 6, 7, 16)).astype(np.int8)
    y = rng.integers(-128, 128, (1, 6, 7, 8)).astype(np.int8)
    refs = llvm_cpu(TOSA_PAD_CONCAT, x, y, flags=TOSA)
    cm = all_on_torq(TOSA_PAD_CONCAT, hw=hw, flags=TOSA)
    outs = cm(x, y)
    for out, ref in zip(outs, refs):
        assert out.dtype == np.int8 and out.shape == ref.shape
        assert int((out != ref).sum()) == 0
    assert (refs[0][0, 0] == -5).all() and (refs[2][0, 0] == 7).all()  # the borders are checked


class StridedSlice(nn.Module):
    def forward(self, x):
        return x[:, :, ::2, 1:]


def test_strided_copy_is_a_box_of_the_input_reshaped():
    """x[:, :, ::2, 1:] of 8 rows: the input passed as 4 pairs of rows, the copy a DMA box of
    the first row of each pair (box_reads.StrideSplit)."""
    m = StridedSlice().eval()
    x = torch.randn(1, 4, 8, 16)
    cm = torq.compile(m, x, remarks=io.StringIO())
    (d,) = cm.report.dispatches
    assert d.executor == "torq", d.reason
    # The NPU holds the f32 model's values as bf16: the copy is exact on those.
    np.testing.assert_array_equal(cm(x.numpy()), m(x).to(torch.bfloat16).float().numpy())


def test_strided_copy_of_an_odd_extent_stays_on_host_with_a_remark():
    """Rows 0, 2, 4, 6 of 7 (LeViT's subsampling of a 7x7 map): no reshape into pairs makes
    them a unit-stride box, and DMA boxes are unit-stride, so the copy stays on the host,
    saying why."""
    m = StridedSlice().eval()
    x = torch.randn(1, 4, 7, 16)
    remarks = io.StringIO()
    cm = torq.compile(m, x, remarks=remarks)
    (d,) = cm.report.dispatches
    assert d.executor == "host" and "strided part of an input" in d.reason
    assert "stays on host" in remarks.getvalue()
    np.testing.assert_array_equal(cm(x.numpy()), m(x).numpy())
