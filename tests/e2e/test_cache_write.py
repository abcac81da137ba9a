"""End to end: a row written at a runtime position (a KV cache update, `cache[:, :, pos] = k`
or `index_copy`) runs on the NPU as one DMA scatter into the cache, in place
(compiler/torch_index_put.py rewrites torch's index_put into a slice update; the
dispatch's runtime offset reaches the NPU program as an index buffer; contract/program.py
DmaOut, scatter form).

The reference is torch's own result. The update moves bytes and computes nothing: the
written row is torch's rounded once to bf16 (the DDR dtype of f32 tensors), and the rest of
the cache is the caller's, untouched: checked bit for bit. Out-of-range positions fail the
call as torch raises, naming the op's location.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch_reference import within_bf16_limits

import torq


class IndexCopy(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, cache, row, position):
        return cache.index_copy(self.dim, position, row)


class SetItem(nn.Module):
    """The form a decoder writes its cache in: `cache[:, :, position] = k`."""

    def forward(self, cache, row, position):
        cache = cache.clone()
        cache[:, :, position] = row
        return cache


class MutatedCaches(nn.Module):
    """Per-layer caches the model writes in place (iree-turbine exports the mutation of an
    argument as overwriting it; the runtime copies them back into the caller's arrays),
    the row exported without its leading unit dim ([H, 1, D] for c[:, :, p] on [1, H, S, D])."""

    def forward(self, keys, values, row, position):
        keys[:, :, position] = row
        values[:, :, position] = row * 2
        return keys.sum(-1) + values.sum(-1)


class TwoIndices(nn.Module):
    """Not a single row: torch-mlir's scatter, left to the host."""

    def forward(self, cache, row, heads, position):
        cache = cache.clone()
        cache[:, heads, position] = row
        return cache


def _bf16(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.bfloat16).float().numpy()


def _on_npu(cm) -> list[str]:
    return [d.executor for d in cm.report.dispatches]


@pytest.mark.parametrize("model, dim", [(IndexCopy(2), 2), (SetItem(), 2), (IndexCopy(0), 0), (IndexCopy(3), 3)])
def test_row_at_runtime_position_on_the_npu(model, dim):
    torch.manual_seed(0)
    shape = (2, 3, 16, 8)
    cache = torch.randn(shape)
    row = torch.randn(*[1 if d == dim else e for d, e in enumerate(shape)])
    cm = torq.compile(model, cache, row, torch.tensor([5]), remarks=io.StringIO())
    assert _on_npu(cm) == ["torq"], [(d.name, d.reason) for d in cm.report.dispatches]
    # index_put wraps a negative position once (index_copy's eager check refuses it, but
    # torch.export writes index_copy as index_put)
    for p in (0, shape[dim] // 3, shape[dim] - 1) + ((-1, -shape[dim]) if isinstance(model, SetItem) else ()):
        out = cm(cache.numpy(), row.numpy(), np.array([p]))
        rounded_row = torch.from_numpy(_bf16(row))
        np.testing.assert_array_equal(out, model(cache, rounded_row, torch.tensor([p])).numpy())
    (stats,) = cm.last_stats
    # The row and its position in, the row out: the rest of the cache stays where it is.
    row_bytes = row.numel() * 2
    assert (stats["dma_bytes_in"], stats["dma_bytes_out"]) == (row_bytes + 4, row_bytes)


def test_caches_written_in_place_as_arguments():
    torch.manual_seed(2)
    args = (torch.randn(1, 3, 16, 8), torch.randn(1, 3, 16, 8), torch.randn(1, 3, 1, 8), torch.tensor([5]))
    cm = torq.compile(MutatedCaches(), *[a.clone() for a in args], remarks=io.StringIO())
    assert set(_on_npu(cm)) == {"torq"}, [(d.name, d.reason) for d in cm.report.dispatches]
    for p in (0, 7, 15):
        # The row already in bf16: the caches the call writes are then exactly torch's.
        inputs = [a.clone() for a in args[:2]] + [torch.from_numpy(_bf16(args[2])), torch.tensor([p])]
        arrays = [a.clone().numpy() for a in inputs]
        out = cm(*arrays)
        expected = MutatedCaches()(*inputs).numpy()  # mutates inputs[0] and inputs[1]
        assert within_bf16_limits(out, expected)
        # The caller's arrays hold the caches written in place, as torch's tensors do.
        np.testing.assert_array_equal(arrays[0], inputs[0].numpy())
        np.testing.assert_array_equal(arrays[1], inputs[1].numpy())
        np.testing.assert_array_equal(arrays[2], inputs[2].numpy())  # not written


def test_position_outside_the_cache_fails_as_torch_raises():
    model = IndexCopy(2)
    cache, row = torch.zeros(1, 2, 8, 4), torch.ones(1, 2, 1, 4)
    with pytest.raises(IndexError):
        model(cache, row, torch.tensor([8]))
    cm = torq.compile(model, cache, row, torch.tensor([0]), remarks=io.StringIO())
    for p in (8, -9):
        with pytest.raises(Exception, match=r"the position along dim 2 of an index_put / index_copy is outside \[-8, 8\)"):
            cm(cache.numpy(), row.numpy(), np.array([p]))


def test_other_index_puts_stay_on_the_host_and_stay_right():
    torch.manual_seed(1)
    model = TwoIndices()
    cache, row = torch.randn(2, 3, 16, 8), torch.randn(2, 1, 8)
    cm = torq.compile(model, cache, row, torch.tensor([1]), torch.tensor([4]), remarks=io.StringIO())
    assert "torq" not in _on_npu(cm)
    out = cm(cache.numpy(), row.numpy(), np.array([2]), np.array([9]))
    np.testing.assert_allclose(out, model(cache, row, torch.tensor([2]), torch.tensor([9])).numpy(), rtol=1e-2)
