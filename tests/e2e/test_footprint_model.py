"""Super tiling's footprint model (compiler/tiling/footprint_model.py) against the
allocator, and the search with it against the search without it.

Every real probe of the search is compared with what the model predicted for it
beforehand: where the probe has the structure the model was fitted on and its
footprint is its full tiles' (no body outside the tile loops is larger), the
prediction must equal it; nowhere may it exceed it (the search takes "does not
fit" on the model's word). And the executables must be byte-identical with the
model switched off (every size probed), which takes more probes.
"""

import os
import sys

import pytest
import torch

import torq
from torq.compiler.tiling import footprint_model, search

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from models import ViTEncoderLayer  # noqa: E402

HW = "SL2610:lram_kb=128"  # small enough that most roots tile, some in 2-D


class ConvStack(torch.nn.Module):
    """Strided, depthwise and padded convs: input rows (t - 1) * stride + kernel per t output rows."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.down = torch.nn.Conv2d(32, 64, 3, stride=2)

    def forward(self, x):
        return self.down(torch.relu(self.dw(torch.relu(self.stem(x)))))


def _models():
    torch.manual_seed(0)
    vit = ViTEncoderLayer(192, 3, 768).eval()  # 197 tokens: peeled loops, 2-D matmul tilings
    g = torch.Generator().manual_seed(1)
    return [(vit, torch.randn(1, 197, 192, generator=g)), (ConvStack().eval(), torch.randn(1, 3, 160, 160, generator=g))]


def _compile(model, x):
    search._CHOICES.clear()  # search every root again
    return torq.compile(model, x, hw=HW, flags=["--torq-no-cache", "-j1"]).vmfb


@pytest.fixture(scope="module")
def with_model():
    """Executables compiled with the model, the (prediction, footprint, full-tile footprint or
    None when the structure is not the fitted one) of each probe it predicted, and the probe count."""
    probes, count, measured = [], [0], {}
    real_footprint, real_measure = search.TileSearch.footprint, search.measure

    def measure(func, options):
        measured["last"] = m = real_measure(func, options)
        return m

    def footprint(self, sizes, outer=None, red=None):
        key = search._key(sizes, outer, red)
        if key in self.footprints:
            return self.footprints[key]
        count[0] += 1
        predicted = self.estimate(sizes, outer, red)
        measured.pop("last", None)
        real = real_footprint(self, sizes, outer, red)
        m = measured.get("last")
        if predicted is not None and m is not None and m.full is not None:
            fitted = self.models[search._family(sizes, outer, red)[0]]._fitted()[0]
            full = max(layout.footprint(list(shapes), self.options) for layout, shapes in m.full)
            probes.append((predicted, real, full if fitted == footprint_model._layouts(m) else None))
        return real

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "measure", measure)
        mp.setattr(search.TileSearch, "footprint", footprint)
        vmfbs = [_compile(model, x) for model, x in _models()]
    return vmfbs, probes, count[0]


def test_predictions_equal_the_allocator(with_model):
    _, probes, _ = with_model
    assert len(probes) > 20, "the model predicted too few probes for the test to mean much"
    assert all(p <= real for p, real, _ in probes), [t for t in probes if t[0] > t[1]]
    exact = [(p, full) for p, real, full in probes if real == full]
    assert len(exact) > 10 and all(p == full for p, full in exact), exact


def test_search_with_the_model_chooses_as_without(with_model, monkeypatch):
    vmfbs, _, probes_with = with_model
    count = [0]
    real_footprint = search.TileSearch.footprint

    def footprint(self, sizes, outer=None, red=None):
        count[0] += search._key(sizes, outer, red) not in self.footprints
        return real_footprint(self, sizes, outer, red)

    monkeypatch.setattr(search.TileSearch, "footprint", footprint)
    monkeypatch.setattr(search.TileSearch, "estimate", lambda self, *a, **k: None)
    for (model, x), vmfb in zip(_models(), vmfbs):
        assert _compile(model, x) == vmfb
    assert probes_with < count[0], (probes_with, count[0])
