"""A requantization whose constants vary per element but repeat (LeViT's attention bias per
(head, query, key), one value per relative offset) fits each distinct channel once
(compiler/requant_channels.py `distinct_channels`): the executables must be byte-identical
with and without the merge, and the model within one output step of IREE llvm-cpu."""

import io
import os
import sys

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort_quant = pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.dirname(__file__))
from llvm_cpu import llvm_cpu  # noqa: E402
from test_ort_quantized import ort_quantized_model  # noqa: E402

import torq  # noqa: E402
import torq.compiler.passes.serialize_executable as serialize  # noqa: E402
from torq.compiler import requant_channels  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402


class BiasedAttention(torch.nn.Module):
    """LeViT's attention on a 4 x 4 map: scores plus a learned bias per head and relative offset."""

    def __init__(self, side=4, dim=32, heads=2, key=8):
        super().__init__()
        self.heads, self.key = heads, key
        self.qkv = torch.nn.Linear(dim, heads * key * 3)
        points = [(i, j) for i in range(side) for j in range(side)]
        offsets: dict = {}
        index = [[offsets.setdefault((abs(a[0] - b[0]), abs(a[1] - b[1])), len(offsets)) for b in points]
                 for a in points]
        self.biases = torch.nn.Parameter(torch.randn(heads, len(offsets)) * 0.5)
        self.register_buffer("index", torch.tensor(index))
        self.proj = torch.nn.Linear(heads * key, dim)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, self.heads, 3 * self.key).split([self.key] * 3, dim=3)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        scores = (q @ k.transpose(-2, -1)) * self.key ** -0.5 + self.biases[:, self.index]
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1))


def _compiled(path, monkeypatch, merge: bool):
    """(the compiled model, its Torq executables, (channels, distinct) per fit) with the merge on or off."""
    real_merge, real_serialize = requant_channels.distinct_channels, serialize.serialize_program
    fits, blobs = [], []

    def merge_or_not(channels):
        firsts, which = real_merge(channels) if merge else (list(range(len(channels))),) * 2
        fits.append((len(channels), len(firsts)))
        return firsts, which

    monkeypatch.setattr(requant_channels, "distinct_channels", merge_or_not)
    monkeypatch.setattr(serialize, "serialize_program", lambda *a, **k: blobs.append(real_serialize(*a, **k))
                        or blobs[-1])
    cm = torq.compile(str(path), remarks=io.StringIO(), flags=("--torq-no-cache", "--torq-jobs=1"))
    monkeypatch.undo()
    return cm, blobs, fits


def test_repeated_channels_fit_once_and_compile_alike(tmp_path, monkeypatch):
    path, x = ort_quantized_model(tmp_path, BiasedAttention, shape=(1, 16, 32))
    cm, blobs, fits = _compiled(path, monkeypatch, merge=True)
    _, fresh_blobs, fresh_fits = _compiled(path, monkeypatch, merge=False)
    assert blobs == fresh_blobs and len(blobs) >= 4
    # The scores' bias: 2 heads x 16 x 16 channels, at most 2 heads x 16 offsets distinct.
    assert (512, 512) in fresh_fits and any(n == 512 and k <= 32 for n, k in fits), fits
    assert [(d.executor, d.macs) for d in cm.report.dispatches if d.macs] == [("torq", d.macs) for d in
                                                                             cm.report.dispatches if d.macs]
    ref = llvm_cpu(import_onnx(path.read_bytes(), "m_q.onnx"), x, function="main_graph")
    y = cm(x)
    step = np.diff(np.unique(ref)).min()
    assert np.abs(y - ref).max() <= step * 1.0001, (np.abs(y - ref).max(), step)
