"""Elementwise fusion and reshape propagation happen before Torq marking.

Issue 3 asks for elementwise fusion and reshape propagation by collapsing
dimensions before marking, so reshapes sit at dispatch edges and fuse groups
see projected-permutation indexing maps. IREE's dispatch creation already runs
these (ElementwiseOpFusion, BubbleUpExpandShapes, CollapseDimensions) before the
Torq target sees a dispatch; we add no pass of our own. This test pins that
down on a torch model whose elementwise chain is cut by two reshapes.
"""

import os
import re
import subprocess
import sys

import torch
import torch.nn as nn
from torch_reference import within_bf16_limits  # noqa: E402

import torq

BIN = os.path.dirname(sys.executable)


class ReshapedChain(nn.Module):
    """sigmoid, scale, reshape to (1, 8, 256), add a per-channel bias, relu, reshape
    back, multiply by the input: one elementwise chain cut by two reshapes."""

    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(1, 8, 1, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        y = torch.sigmoid(x) * 2.0
        y = y.reshape(1, 8, 256) + self.b
        y = torch.relu(y).reshape(1, 8, 16, 16)
        return y * x


def _dispatch_bodies(text: str) -> list[str]:
    """The text of each flow.dispatch.workgroups region (brace-matched)."""
    bodies = []
    for m in re.finditer(r"flow\.dispatch\.workgroups", text):
        start = text.index("{", m.end())
        depth, i = 0, start
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        bodies.append(text[start:i])
    return bodies


def test_reshapes_move_to_dispatch_edges_and_the_chain_is_one_group(tmp_path):
    import iree.turbine.aot as aot

    model = ReshapedChain().eval()
    x = torch.randn(1, 8, 16, 16, generator=torch.Generator().manual_seed(0))
    src = tmp_path / "m.mlir"
    src.write_text(str(aot.export(model, args=(x,)).mlir_module))
    out = tmp_path / "dc.mlir"
    r = subprocess.run([os.path.join(BIN, "torq-compile"), str(src), "--compile-to=dispatch-creation",
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bodies = _dispatch_bodies(out.read_text())
    assert len(bodies) == 1, f"expected the whole chain in one dispatch, got {len(bodies)}"
    body = bodies[0]
    assert "expand_shape" not in body and "collapse_shape" not in body
    generics = re.findall(r"linalg\.generic \{indexing_maps = \[(.*?)\], iterator_types", body)
    assert len(generics) == 1, generics
    # Collapsed to (channel, position) with the bias broadcast along positions:
    # every map is a projected permutation (dims only, no arithmetic).
    for result in re.findall(r"-> \(([^)]*)\)", generics[0]):
        assert all(re.fullmatch(r"d\d+", e.strip()) for e in result.split(",")), result

    with torch.no_grad():
        ref = model(x).numpy()
    cm = torq.compile(model, x)
    assert [d.executor for d in cm.report.dispatches] == ["torq"]
    y = cm(x.numpy())
    assert within_bf16_limits(y, ref)
