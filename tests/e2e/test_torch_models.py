"""End to end: torch model -> torq.compile -> simulator, against torch fp32."""

import os
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, make_model, within_limits  # noqa: E402

BUDGETS = ["SL2610", "SL2610:lram_kb=64"]


def check(model, x, hw, min_torq=1):
    model = model.eval()
    with torch.no_grad():
        ref = model(x).numpy()
    cm = torq.compile(model, x, hw=hw)
    assert sum(d.executor == "torq" for d in cm.report.dispatches) >= min_torq
    y = cm(x.numpy())
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (rel_l2, cosine)
    stats = cm.last_stats
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    assert stats and all(s["lram_peak_bytes"] <= budget for s in stats)
    # What the compiler planned is what the simulator measured, dispatch by dispatch.
    planned = {d.name: (d.tiles, d.lram_peak) for d in cm.report.dispatches if d.executor == "torq"}
    measured = {s["name"]: (s["tiles"], s["lram_peak_bytes"]) for s in stats}
    assert planned == measured
    return cm, y


@pytest.mark.parametrize("hw", BUDGETS)
def test_sample_cnn(hw):
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    cm, _ = check(make_model(), x, hw, min_torq=5)


CONVS = {
    "stride2": (nn.Conv2d(8, 16, 3, stride=2, padding=1), (1, 8, 16, 16)),
    "dilation2": (nn.Conv2d(4, 8, 3, dilation=2, padding=2), (1, 4, 12, 12)),
    "1x1": (nn.Conv2d(16, 8, 1), (1, 16, 9, 9)),
    "odd17ch": (nn.Conv2d(17, 17, 3, padding=1), (1, 17, 15, 13)),
    "batch2": (nn.Conv2d(3, 8, 3, padding=1), (2, 3, 10, 10)),
}


@pytest.mark.parametrize("hw", BUDGETS)
@pytest.mark.parametrize("name", list(CONVS))
def test_conv_variants(name, hw):
    torch.manual_seed(0)
    layer, shape = CONVS[name]
    check(nn.Sequential(layer, nn.ReLU()), torch.randn(*shape), hw)


def test_mlp():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU6(), nn.Linear(32, 10))
    check(mlp, torch.randn(4, 64), "SL2610", min_torq=3)


def test_matmul_weights_larger_than_lram():
    # 512x256 bf16 weights = 256 KiB > 50 KiB usable at lram_kb=64: must be tiled.
    torch.manual_seed(0)
    cm, _ = check(nn.Linear(512, 256), torch.randn(8, 512), "SL2610:lram_kb=64")
    assert max(s["tiles"] for s in cm.last_stats) > 1


def test_save_and_load(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    cm = torq.compile(model, x)
    path = tmp_path / "m.vmfb"
    cm.save(path)
    m = torq.load(str(path))
    np.testing.assert_array_equal(m.main(x.numpy()), cm(x.numpy()))
    assert m.last_stats[0]["executor"] == "torq"
