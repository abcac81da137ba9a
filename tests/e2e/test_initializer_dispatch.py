"""A dispatch IREE hoists into a util.initializer (a causal SDPA's constant mask)
compiles: it is named `initializer_dispatch_N`, runs on the host once at load
(compiler/target.py LOAD_TIME_REASON) and the model matches torch.
Before, looking for its enclosing util.func crashed the compiler."""

from __future__ import annotations

import numpy as np
import torch
from torch_reference import within_bf16_limits  # noqa: E402

import torq
from torq.compiler.target import LOAD_TIME_REASON


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_causal_sdpa_with_initializer_dispatch_compiles_and_matches_torch():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    cm = torq.compile(CausalAttention(), q, k, v, remarks=None)
    names = [d.name for d in cm.report.dispatches]
    assert any(n.startswith("initializer_dispatch_") for n in names), names
    assert {(d.executor, d.reason) for d in cm.report.dispatches if d.name.startswith("initializer_")} \
        == {("host", LOAD_TIME_REASON)}
    assert all(d.executor == "torq" for d in cm.report.dispatches if d.name.startswith("main_"))
    y = np.asarray(cm(q.numpy(), k.numpy(), v.numpy()))
    ref = CausalAttention()(q, k, v).numpy()
    assert within_bf16_limits(y, ref)
