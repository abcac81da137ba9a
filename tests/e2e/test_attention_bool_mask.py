"""End to end: boolean (keep / drop) attention masks on the NPU.

A boolean `attn_mask` of torch's scaled_dot_product_attention (True = attend)
reaches the dispatch as the i1 mask operand of `iree_linalg_ext.attention`;
torq-decompose-attention makes it an i1 operand of the scores' epilogue
(mask ? S * scale : -inf), read by the NPU at one byte per score.
nn.TransformerEncoderLayer / nn.MultiheadAttention turn their boolean masks
(True = do not attend) into an additive float mask with `where(mask, -inf, 0)`
before the attention: that `where` is an elementwise select on an i1
operand, also on the NPU. Checked against torch fp32 within the bf16 bounds
of DESIGN section 7, with no host dispatch.

A query row whose mask is all False (every score -inf): torch 2.13 returns 0
for it (its "safe softmax"); the Torq lowering, like IREE's llvm-cpu on the
same MLIR, returns NaN (softmax of a row of -inf). The numeric tests use
masks with at least one attended key per row;
`test_fully_masked_row_is_nan_like_llvm_cpu` pins the difference down.
"""

import os
import sys

import iree.turbine.aot as aot
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402
from llvm_cpu import llvm_cpu  # noqa: E402
from test_attention import SMALL_LRAM, qkv, run_on_torq  # noqa: E402


class MaskedSdpa(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def keep_mask(shape, seed, keep=0.5):
    """A random boolean mask (True = attend) with at least one True per row."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=g) < keep
    rows = mask.reshape(-1, shape[-1])
    rows[torch.arange(rows.shape[0]), torch.randint(shape[-1], (rows.shape[0],), generator=g)] = True
    return mask


def assert_mask_matters(y, model, q, k, v, mask):
    """The result is far from the attention under the inverted mask (the mask is no no-op)."""
    with torch.no_grad():
        inverted = model(q, k, v, ~mask).numpy()
    rel_l2, _ = error_figures(y, np.nan_to_num(inverted))
    assert rel_l2 > 0.5, rel_l2


def test_sdpa_bool_mask():
    """seq 32, 2 heads, head dim 16, one mask per head: one NPU dispatch, the mask read as one byte per score."""
    q, k, v = qkv(1, 2, 32, 16, seed=20)
    mask = keep_mask((1, 2, 32, 32), seed=21)
    cm, host = run_on_torq(MaskedSdpa(), (q, k, v, mask))
    assert not host, host
    assert len(cm.report.dispatches) == 1
    assert_mask_matters(cm(q.numpy(), k.numpy(), v.numpy(), mask.numpy()), MaskedSdpa(), q, k, v, mask)
    # DMA in: Q, K, V in bf16 (3 x 2 x 32 x 16 x 2 bytes) and the mask at 1 byte per score.
    (stats,) = cm.last_stats
    assert stats["dma_bytes_in"] == 3 * 2 * 32 * 16 * 2 + 2 * 32 * 32


def test_sdpa_bool_mask_shared_by_heads_tiled():
    """A (1, 1, seq, seq) mask broadcast over 4 heads, at an LRAM budget that forces
    tiling: the mask is tiled with the score rows it masks. (A rank-2 mask, bool or
    float, fails inside IREE 3.13 before dispatch creation, on llvm-cpu too.)"""
    q, k, v = qkv(1, 4, 64, 64, seed=22)
    mask = keep_mask((1, 1, 64, 64), seed=23, keep=0.3)
    cm, host = run_on_torq(MaskedSdpa(), (q, k, v, mask), hw=SMALL_LRAM)
    assert not host, host
    assert max(s["tiles"] for s in cm.last_stats) > 1
    assert_mask_matters(cm(q.numpy(), k.numpy(), v.numpy(), mask.numpy()), MaskedSdpa(), q, k, v, mask)


class EncoderWithPadding(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, padding):
        return self.layer(x, src_key_padding_mask=padding)


def test_transformer_encoder_layer_key_padding_mask():
    """d_model 64, seq 16, the last 5 positions padded (True = ignore): no host dispatch."""
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    x = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(24))
    padding = torch.zeros(1, 16, dtype=torch.bool)
    padding[0, 11:] = True
    model = EncoderWithPadding(layer).eval()
    cm, host = run_on_torq(model, (x, padding))
    assert not host, host
    assert cm.report.npu_mac_share == 1.0
    # The padding matters: without it (or with it inverted) torch gives something else.
    y = cm(x.numpy(), padding.numpy())
    with torch.no_grad():
        for other in (torch.zeros_like(padding), ~padding):
            assert error_figures(y, model(x, other).numpy())[0] > 0.02


class SelfAttention(nn.Module):
    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x, mask):
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


def test_multihead_attention_bool_attn_mask():
    """nn.MultiheadAttention with a boolean attn_mask (True = not allowed): no host dispatch."""
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(25))
    blocked = ~keep_mask((16, 16), seed=26)
    cm, host = run_on_torq(SelfAttention(mha).eval(), (x, blocked))
    assert not host, host


def test_fully_masked_row_is_nan_like_llvm_cpu():
    """Rows with no attended key: NaN on the NPU and on IREE llvm-cpu (same MLIR), 0 in torch.
    Every other row matches llvm-cpu within the bf16 bounds."""
    q, k, v = qkv(1, 2, 32, 16, seed=27)
    mask = keep_mask((1, 2, 32, 32), seed=28)
    dead = [(0, 0, 3), (0, 1, 17), (0, 1, 31)]
    for row in dead:
        mask[row] = False
    xs = (q, k, v, mask)
    mlir = str(aot.export(MaskedSdpa(), args=xs).mlir_module)
    cm = torq.compile(mlir)
    assert all(d.executor == "torq" for d in cm.report.dispatches), cm.report.dispatches
    args = [x.numpy() for x in xs]
    y, ref = cm(*args), llvm_cpu(mlir, *args)
    nan_rows = np.isnan(y).any(-1)
    assert sorted(zip(*np.nonzero(nan_rows))) == dead
    assert np.isnan(y[nan_rows]).all() and np.array_equal(np.isnan(ref), np.isnan(y))
    rel_l2, cosine = error_figures(y[~nan_rows], ref[~nan_rows])
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
    with torch.no_grad():  # the documented difference: torch's safe softmax gives 0 there
        torch_dead = MaskedSdpa()(*xs).numpy()[nan_rows]
    assert (torch_dead == 0).all()
