"""End to end: the data movement of LLMs on the NPU: embedding lookups (rows of a table
chosen by runtime indices) as gather DMAs (contract/program.py DmaIn, gather form;
compiler/nss_gathers.py), also fused into the op that reads them
(compiler/passes/split_fused_gathers.py), and rotate_half's computed-index read
(compiler/passes/unroll_index_dims.py).

The reference is torch's own result. A gather moves bytes and computes nothing, a
negation is exact, so the result is exactly torch's rounded once to bf16 (the DDR dtype
of f32 tensors): checked bit for bit, at the default LRAM and at a budget that needs
several chunks.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch_reference import within_bf16_limits

import torq


class Lookup(nn.Module):
    def __init__(self, vocab: int, width: int):
        super().__init__()
        self.table = nn.Embedding(vocab, width)

    def forward(self, tokens):
        return self.table(tokens)


class RowAt(nn.Module):
    """A decode step's mask row: row `position` of a fixed table (`index_select`)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((24, 24), -1e4), 1))

    def forward(self, position):
        return torch.index_select(self.mask, 0, position)


def _bf16(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.bfloat16).float().numpy()


@pytest.mark.parametrize("hw", ["SL2610", "SL2610:lram_kb=32"])
def test_embedding_rows_exactly(hw):
    torch.manual_seed(0)
    model = Lookup(1000, 768).eval()
    tokens = torch.randint(0, 1000, (2, 24))
    cm = torq.compile(model, tokens, hw=hw, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"], [(d.name, d.reason) for d in cm.report.dispatches]
    tokens = torch.tensor([[0, 999, 5, 5] * 6, list(range(500, 524))])  # ends of the table, a repeat
    out = cm(tokens.numpy())
    with torch.no_grad():
        np.testing.assert_array_equal(out, _bf16(model(tokens)))
    (stats,) = cm.last_stats
    # 48 rows of 768 bf16, in and out, plus the 48 i64 indices: at 32 KiB in several chunks
    assert (stats["dma_bytes_in"], stats["dma_bytes_out"]) == (48 * 768 * 2 + 48 * 8, 48 * 768 * 2)
    assert (stats["tiles"] > 1) == (hw != "SL2610")


def test_row_by_scalar_position():
    model = RowAt().eval()
    cm = torq.compile(model, torch.tensor([3]), remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"]
    for p in (0, 7, 23):
        np.testing.assert_array_equal(cm(np.array([p])), _bf16(model(torch.tensor([p]))))


def test_index_outside_the_table_fails_naming_the_gather():
    """torch raises on such a token; IREE's llvm-cpu asserts; the NPU's gather DMA refuses it."""
    model = Lookup(100, 64).eval()
    cm = torq.compile(model, torch.zeros(1, 4, dtype=torch.int64), remarks=io.StringIO())
    with pytest.raises(torq.TorqRuntimeError, match=r"DmaIn gather\): index 100 at position 2 is outside \[0, 100\)"):
        cm(np.array([[1, 2, 100, 3]]))


class RotateHalf(nn.Module):
    """Llama's rotate_half: cat(-x[..., D/2:], x[..., :D/2]) (IREE: one generic reading x at a
    computed index; torq-unroll-index-dims makes it a negation and a copy of boxes)."""

    def forward(self, x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


@pytest.mark.parametrize("hw", ["SL2610", "SL2610:lram_kb=32"])
def test_rotate_half_runs_on_the_npu(hw):
    x = torch.randn(1, 9, 128, 64, generator=torch.Generator().manual_seed(0))
    cm = torq.compile(RotateHalf(), x, hw=hw, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"], [(d.name, d.reason) for d in cm.report.dispatches]
    # moves and negates bf16 values: exactly torch's result rounded to bf16
    np.testing.assert_array_equal(cm(x.numpy()), _bf16(RotateHalf()(x)))


class EmbedPlusPosition(nn.Module):
    """GPT-2's input embedding, wte[ids] + wpe[positions] (IREE fuses the lookup into the add:
    torq-split-fused-gathers makes the add read a gathered view)."""

    def __init__(self, vocab: int, width: int, length: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(length, width)

    def forward(self, ids):
        return self.wte(ids) + self.wpe.weight[: ids.shape[1]] * 0.5


@pytest.mark.parametrize("hw", ["SL2610", "SL2610:lram_kb=32"])
def test_lookup_fused_into_an_add_runs_on_the_npu(hw):
    torch.manual_seed(0)
    model = EmbedPlusPosition(1000, 256, 64).eval()
    ids = torch.randint(0, 1000, (1, 64))
    cm = torq.compile(model, ids, hw=hw, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"], [(d.name, d.reason) for d in cm.report.dispatches]
    ids = torch.tensor([[999, 0, 5, 5] * 16])
    with torch.no_grad():
        assert within_bf16_limits(cm(ids.numpy()), model(ids).numpy())
    (stats,) = cm.last_stats
    assert (stats["tiles"] > 1) == (hw != "SL2610")


def test_rows_larger_than_a_buffer_move_in_parts():
    """At 20 KiB (6 KiB usable) a 16 KiB row is gathered in parts of its dim."""
    torch.manual_seed(0)
    model = Lookup(50, 8192).eval()
    ids = torch.tensor([[3, 49, 0]])
    cm = torq.compile(model, ids, hw="SL2610:lram_kb=20", remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"]
    with torch.no_grad():
        np.testing.assert_array_equal(cm(ids.numpy()), _bf16(model(ids)))
    (stats,) = cm.last_stats
    assert stats["tiles"] >= 3 * 8192 * 2 // 3072
