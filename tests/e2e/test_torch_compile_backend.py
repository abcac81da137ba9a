"""`torch.compile(model, backend="torq")`: dynamo's graphs compiled for Torq and run on the simulator.

Every result is compared with the same model in eager torch fp32 (the bf16
bounds of samples/cnn.py). Graph breaks must run their Python in eager torch
and their graphs on Torq; new shapes must compile once each and reuse what
was compiled (counted by `torq.dynamo_backend.STATS`).
"""

import os
import sys

import pytest
import torch

import torq.dynamo_backend as backend
from torq import TorqCompileError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_caches():
    torch._dynamo.reset()
    backend.clear_cache()
    yield
    torch._dynamo.reset()


def assert_matches_eager(model, got, *xs):
    with torch.no_grad():
        ref = model(*xs)
    assert isinstance(got, torch.Tensor) and got.shape == ref.shape and got.dtype == ref.dtype
    rel_l2, cosine = error_figures(got.numpy(), ref.numpy())
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)


def executors():
    return {s["executor"] for s in backend.STATS.last_module.last_stats}


class SmallConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(h.mean(dim=(2, 3)))


def test_entry_point_names_the_backend():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("torq") is backend.torq_backend


def test_conv_net_runs_on_torq_like_eager():
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    x = torch.randn(1, 3, 16, 16)
    compiled = torch.compile(model, backend="torq", options={"hw": "SL2610:lram_kb=64"})
    assert_matches_eager(model, compiled(x), x)
    assert "torq" in executors()
    assert (backend.STATS.graphs, backend.STATS.compiles) == (1, 1)


class BranchOnData(torch.nn.Module):
    """A print and a data-dependent Python branch: dynamo breaks the graph at both."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(16, 32)
        self.pos = torch.nn.Linear(32, 8)
        self.neg = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = self.stem(x)
        print("between the graphs")
        if x.sum() > 0:
            return self.pos(torch.relu(h))
        return self.neg(h) * 2


def test_graph_breaks_run_python_in_eager_and_graphs_on_torq(capsys):
    torch.manual_seed(0)
    model = BranchOnData().eval()
    compiled = torch.compile(model, backend="torq")
    x = torch.randn(4, 16).abs()
    for sign in (1, -1):
        got = compiled(sign * x)
        assert capsys.readouterr().out.count("between the graphs") == 1  # Python ran once, eagerly
        assert executors() == {"torq"}
        assert_matches_eager(model, got, sign * x)  # prints too
        capsys.readouterr()
    assert backend.STATS.graphs >= 3  # the stem, the comparison, each branch's tail
    assert backend.STATS.compiles == backend.STATS.graphs


class LinearReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 24)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_new_shapes_compile_once_each():
    torch.manual_seed(0)
    model = LinearReLU().eval()
    compiled = torch.compile(model, backend="torq")
    for batch in (2, 4, 2, 4, 8, 2):
        x = torch.randn(batch, 16)
        assert_matches_eager(model, compiled(x), x)
    # Dynamo recompiles once with a dynamic batch; the shapes 2, 4 and 8 compile once each.
    assert backend.STATS.compiles == 3
    assert backend.STATS.cached_calls >= 2


def test_weight_update_compiles_anew():
    torch.manual_seed(0)
    model = LinearReLU().eval()
    compiled = torch.compile(model, backend="torq")
    x = torch.randn(4, 16)
    compiled(x)
    with torch.no_grad():
        model.fc.weight.mul_(-1)  # the weights the first program holds as constants are stale now
    assert_matches_eager(model, compiled(x), x)
    assert backend.STATS.compiles == 2


def test_bad_option_is_named():
    compiled = torch.compile(LinearReLU().eval(), backend="torq", options={"lram_kb": 64})
    with pytest.raises(Exception, match="torq backend: unknown option 'lram_kb' \\(options: hw, flags\\)"):
        compiled(torch.randn(2, 16))


def test_training_mode_batch_norm_is_refused_clearly():
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8)).train()
    compiled = torch.compile(model, backend="torq")
    with pytest.raises(TorqCompileError, match=r"updates tensors in place .*running_mean.*model.eval\(\)"):
        compiled(torch.randn(4, 16))
