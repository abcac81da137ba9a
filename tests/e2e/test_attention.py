"""End to end: torch's scaled_dot_product_attention on the NPU.

IREE keeps `F.scaled_dot_product_attention` as one `iree_linalg_ext.attention`
op in one dispatch; torq-decompose-attention makes it Q Kᵀ (scaled, plus the
causal mask as an additive operand), a softmax and P V, several Torq groups
in that one dispatch. Checked against torch fp32 within the bf16 bounds of
DESIGN section 7, at the default LRAM and at a budget that forces tiling
(the rows of the scores are the softmax rows: tiles must not cut them).
Boolean masks: tests/e2e/test_attention_bool_mask.py.
"""

import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_reference import run_against_torch

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))

SMALL_LRAM = "SL2610:lram_kb=64"


class Sdpa(nn.Module):
    def __init__(self, causal=False, scale=None):
        super().__init__()
        self.causal = causal
        self.scale = scale

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)


def qkv(batch, heads, seq, dim, seed, kv_seq=None):
    g = torch.Generator().manual_seed(seed)
    kv_seq = kv_seq or seq
    return (torch.randn(batch, heads, seq, dim, generator=g), torch.randn(batch, heads, kv_seq, dim, generator=g),
            torch.randn(batch, heads, kv_seq, dim, generator=g))


def run_on_torq(model, xs, hw="SL2610"):
    run = run_against_torch(model, *xs, hw=hw, npu_only=False)
    return run.cm, run.host


@pytest.mark.parametrize("shape", [(1, 2, 16, 16), (1, 4, 64, 32), (1, 4, 32, 64)])
def test_sdpa(shape):
    cm, host = run_on_torq(Sdpa(), qkv(*shape, seed=sum(shape)))
    assert not host, host
    assert len(cm.report.dispatches) == 1
    b, h, s, d = shape
    assert cm.report.dispatches[0].macs == 2 * b * h * s * s * d  # Q Kᵀ and P V


def test_sdpa_cross_attention_lengths_and_scale():
    """Fewer keys than queries and an explicit scale."""
    cm, host = run_on_torq(Sdpa(scale=0.3), qkv(1, 2, 32, 16, seed=5, kv_seq=24))
    assert not host, host


def test_sdpa_tiled():
    # 4 heads x 64 x 64 scores in bf16 = 32 KiB, plus q, k, v and the result
    # (32 KiB each): more than 64 KiB of LRAM holds, so the dispatch is tiled.
    cm, host = run_on_torq(Sdpa(), qkv(1, 4, 64, 64, seed=6), hw=SMALL_LRAM)
    assert not host, host
    budget = torq.parse_hw_spec(SMALL_LRAM).available_lram_bytes
    assert max(s["tiles"] for s in cm.last_stats) > 1
    assert all(s["lram_peak_bytes"] <= budget for s in cm.last_stats)


class MaskedSdpa(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_sdpa_float_mask_broadcast_over_heads():
    q, k, v = qkv(1, 2, 16, 16, seed=8)
    mask = torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(9))
    cm, host = run_on_torq(MaskedSdpa(), (q, k, v, mask))
    assert not host, host


@pytest.mark.parametrize("hw", ["SL2610", SMALL_LRAM])
def test_sdpa_causal(hw):
    """The causal mask (0 / -inf) comes from an initializer dispatch; it is an
    additive operand of the scores on the NPU."""
    cm, host = run_on_torq(Sdpa(causal=True), qkv(1, 4, 64, 32, seed=7), hw=hw)
    attention = [d for d in cm.report.dispatches if d.name.startswith("main")]
    assert attention and all(d.executor == "torq" for d in attention), host


def test_transformer_encoder_layer():
    """torch's own encoder layer (its attention is scaled_dot_product_attention): no host dispatch."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    x = torch.randn(1, 32, 64, generator=torch.Generator().manual_seed(12))
    cm, host = run_on_torq(layer, (x,))
    assert not host, host
    assert cm.report.npu_mac_share == 1.0
