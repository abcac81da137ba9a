"""End to end: the transformer ops (exp, sigmoid, tanh, GELU, softmax,
layer norm, attention batch matmuls) and a small BERT encoder layer, torch
-> torq.compile -> simulator, against torch fp32.

Each op must run on the NPU (asserted from the compile report) within the
bf16 bounds of DESIGN section 7 (rel L2 <= 1e-2, cosine >= 0.9999). Softmax
and layer norm also run at a small LRAM budget that forces tiling: the
result is only right if no tile cuts a row (the reduced last dim).
"""

import math
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_reference import run_against_torch

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import COSINE_LIMIT, REL_L2_LIMIT  # noqa: E402
from models import make_bert_encoder_layer  # noqa: E402

SMALL_LRAM = "SL2610:lram_kb=64"


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def run_on_torq(model, *xs, hw="SL2610", rel=REL_L2_LIMIT, cos=COSINE_LIMIT):
    """Compiles `model`, checks every dispatch runs on torq and the result against torch."""
    run = run_against_torch(model, *xs, hw=hw, rel=rel, cos=cos)
    return run.cm, run.rel_l2


def gen(seed):
    return torch.Generator().manual_seed(seed)


ELEMENTWISE = {
    "exp": torch.exp,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "abs": torch.abs,
    # EdgeNeXt's cross-covariance attention normalises q and k: |x| in the norm's body.
    "l2_normalize": lambda x: F.normalize(x, dim=-1),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_transcendentals(name):
    x = torch.randn(4, 16, 24, generator=gen(1)) * 2
    run_on_torq(Fn(ELEMENTWISE[name]), x)


def test_linear_gelu_fuses_into_the_matmul():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU())
    cm, _ = run_on_torq(model, torch.randn(1, 8, 32, generator=gen(2)))
    assert len(cm.report.dispatches) == 1  # matmul + bias + GELU: one dispatch, one TorqHL op


@pytest.mark.parametrize("hw", ["SL2610", SMALL_LRAM])
def test_softmax_last_dim(hw):
    # 8 x 64 x 96 bf16 = 96 KiB: at 64 KiB of LRAM the rows are tiled, never cut.
    x = torch.randn(8, 64, 96, generator=gen(3))
    cm, _ = run_on_torq(Fn(lambda t: torch.softmax(t, -1)), x, hw=hw)
    if hw == SMALL_LRAM:
        assert max(s["tiles"] for s in cm.last_stats) > 1


def test_softmax_other_dim():
    x = torch.randn(2, 24, 16, generator=gen(4))
    run_on_torq(Fn(lambda t: torch.softmax(t, 1)), x)


def _layer_norm(width: int, seed: int) -> nn.LayerNorm:
    """A LayerNorm with its scale in [0.5, 1.5) and shift in [-0.5, 0.5) (seeds seed, seed + 1)."""
    ln = nn.LayerNorm(width)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5, generator=gen(seed))
        ln.bias.uniform_(-0.5, 0.5, generator=gen(seed + 1))
    return ln


@pytest.mark.parametrize("hw", ["SL2610", SMALL_LRAM])
def test_layer_norm(hw):
    x = torch.randn(1, 96, 256, generator=gen(7)) * 3 + 1
    cm, _ = run_on_torq(_layer_norm(256, seed=5), x, hw=hw)
    if hw == SMALL_LRAM:
        assert max(s["tiles"] for s in cm.last_stats) > 1


class NormThenMean(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x):
        return self.norm(x).mean(1)


def test_layer_norm_then_mean_over_tokens():
    # EfficientFormer's head: IREE fuses the normalisation into the mean's body, each
    # element times its token's 1/std (read along the reduced dim alone) and the channel's
    # scale: a reduce whose prologue is materialised no larger than its input.
    x = torch.randn(1, 49, 448, generator=gen(10)) * 2 + 0.5
    run_on_torq(NormThenMean(_layer_norm(448, seed=8)), x)


def test_attention_batch_matmuls_and_transposes():
    """q, k, v sliced from one projection (IREE loads parts of one tensor), Q Kᵀ
    scaled, softmax, P V transposed back: every dispatch on torq."""
    heads, seq, dim = 4, 16, 8

    def attention(x):
        q, k, v = x.reshape(1, seq, 3, heads, dim).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dim), dim=-1)
        return (p @ v).transpose(1, 2).reshape(1, seq, heads * dim)

    x = torch.randn(1, seq, 3 * heads * dim, generator=gen(8))
    cm, _ = run_on_torq(Fn(attention), x)
    assert len(cm.report.dispatches) >= 3


@pytest.mark.parametrize("hw", ["SL2610", SMALL_LRAM])
def test_bert_encoder_layer_small(hw):
    model, x = make_bert_encoder_layer(seq=16, hidden=64, heads=4, ffn=128)
    cm, rel_l2 = run_on_torq(model, x, hw=hw)
    assert len(cm.report.dispatches) >= 10  # projections, attention, softmax, layer norms, FFN
    stats = cm.last_stats
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    assert all(s["lram_peak_bytes"] <= budget for s in stats)
