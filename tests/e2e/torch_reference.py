"""Compile a torch model for Torq, run it on the simulator and compare with torch fp32.

The one helper the e2e tests share for "this model runs on the NPU and agrees
with torch": the reference is torch's own output (never our kernels), the
bound the bf16 limits of samples/cnn.py unless a test asks for another.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import COSINE_LIMIT, REL_L2_LIMIT, error_figures, within_limits  # noqa: E402


@dataclass
class TorqRun:
    cm: torq.CompiledModule
    host: list[tuple[str, str]]  # (dispatch, reason) of each dispatch left on the host
    rel_l2: float
    cosine: float


def run_against_torch(model: torch.nn.Module, *xs: torch.Tensor, hw: str | None = None, npu_only: bool = True,
                      rel: float = REL_L2_LIMIT, cos: float = COSINE_LIMIT) -> TorqRun:
    """Compiles `model` on example inputs `xs`, runs it, and asserts the output is within
    (`rel`, `cos`) of torch's; with `npu_only`, also that no dispatch stayed on the host."""
    model = model.eval()
    with torch.no_grad():
        ref = model(*xs).numpy()
    cm = torq.compile(model, *xs, hw=hw)
    host = [(d.name, d.reason) for d in cm.report.dispatches if d.executor != "torq"]
    if npu_only:
        assert not host, host
    rel_l2, cosine = error_figures(cm(*(x.numpy() for x in xs)), ref)
    assert rel_l2 <= rel and cosine >= cos, (rel_l2, cosine)
    return TorqRun(cm, host, rel_l2, cosine)


def within_bf16_limits(y, ref) -> bool:
    """Whether an NPU (bf16) result is within DESIGN §7's bounds of its fp32 reference
    (relative L2 and cosine, samples/cnn.py's limits)."""
    return within_limits(*error_figures(np.asarray(y), np.asarray(ref)))
