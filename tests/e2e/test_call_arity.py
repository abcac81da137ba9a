"""End to end: a dispatch with many inputs runs on the NPU up to the torq module's arity.

A model exported with iree-turbine keeps its parameters as globals, so an elementwise
dispatch after several branches reads each branch's tensor and each BatchNorm vector as
an input of its own: MobileOne's and FastViT's train-time blocks need 17 to 21 of them.
The torq VM module exports `run_i{N}_o{M}` up to `module_abi.MAX_INPUTS` inputs; a
dispatch that needs more stays on the host and says so. Checked against torch.
"""

import io

import pytest
import torch
from torch_reference import within_bf16_limits

import torq
from torq.contract.module_abi import MAX_INPUTS


class WeightedSum(torch.nn.Module):
    """relu(sum_i (i + 1) * x_i): one elementwise dispatch reading every input."""

    def forward(self, *xs):
        return torch.relu(sum((i + 1) * x for i, x in enumerate(xs)))


def _inputs(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return [torch.randn(4, 64, generator=g) for _ in range(n)]


@pytest.mark.parametrize("n", [17, MAX_INPUTS])
def test_dispatch_with_many_inputs_runs_on_the_npu(n):
    xs = _inputs(n)
    cm = torq.compile(WeightedSum(), *xs, remarks=io.StringIO())
    assert [d.executor for d in cm.report.dispatches] == ["torq"], [d.reason for d in cm.report.dispatches]
    with torch.no_grad():
        ref = WeightedSum()(*xs).numpy()
    assert within_bf16_limits(cm(*(x.numpy() for x in xs)), ref)


def test_dispatch_with_more_inputs_stays_on_host_and_says_why():
    xs = _inputs(MAX_INPUTS + 1)
    cm = torq.compile(WeightedSum(), *xs, remarks=io.StringIO())
    (d,) = cm.report.dispatches
    assert d.executor != "torq"
    assert f"take at most {MAX_INPUTS} tensors" in d.reason and f"needs {MAX_INPUTS + 1}" in d.reason
    # Not run: IREE's own CPU dispatch takes at most 32 bindings (inputs and results), and
    # stock iree-compile's module fails the same way when the VM context is created.
