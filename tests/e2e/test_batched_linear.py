"""Linears on rank >= 3 activations read their weights as stored (compiler/torch_linear.py).

torch-mlir lowers `nn.Linear` on (batch, tokens, features) as a batch matmul by
the transposed weight; IREE then transposes every weight at compile time
(inline) or hoists the transpose into a load-time initializer (parameters).
Rewritten on the 2-D view of the activations, the product reads the weight as
(N, K) with no transpose. Checked in IREE's global-optimization IR (no
transpose initializer is left, no batch matmul), and end to end against torch.
"""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch_reference import within_bf16_limits

import torq

aot = pytest.importorskip("iree.turbine.aot")
BIN = os.path.dirname(sys.executable)


class Projections(nn.Module):
    """A Linear on a batch of 2 token rows, one without bias on a 4-D map, and a tied head
    (`x @ w.t()`) reading the first Linear's weight."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 48)
        self.down = nn.Linear(48, 32, bias=False)

    def forward(self, x):
        y = self.down(torch.tanh(self.up(x)))  # (2, 8, 32)
        z = self.down(torch.tanh(self.up(y.reshape(2, 2, 4, 32))))  # 4-D
        return z.reshape(2, 8, 32) @ self.up.weight.t()


def _global_optimization_ir(model, x, tmp_path, external: bool) -> str:
    if external:
        aot.externalize_module_parameters(model)
    src = tmp_path / "m.mlir"
    src.write_text(str(aot.export(model, x).mlir_module))
    out = subprocess.run([os.path.join(BIN, "torq-compile"), str(src), "--compile-to=global-optimization",
                          "--torq-cache-dir=none", "-o", "-"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("external", [False, True], ids=["inline", "parameters"])
def test_weights_read_as_stored(tmp_path, external):
    torch.manual_seed(0)
    ir_text = _global_optimization_ir(Projections().eval(), torch.randn(2, 8, 32), tmp_path, external)
    assert "util.initializer" not in ir_text  # no weight transposed at load
    assert "batch_matmul" not in ir_text
    assert ir_text.count("linalg.matmul") == 5


def test_projections_match_torch():
    torch.manual_seed(0)
    model = Projections().eval()
    x = torch.randn(2, 8, 32)
    cm = torq.compile(aot.export(model, x), remarks=io.StringIO())
    assert cm.report.npu_mac_share == 1.0, [(d.name, d.reason) for d in cm.report.dispatches]
    with torch.no_grad():
        ref = model(x).numpy()
    assert within_bf16_limits(np.asarray(cm(x.numpy())), ref)


def test_only_candidate_modules_pay_for_the_rewrite():
    """The driver exports the module for the rewrite only when its text may hold a linear of
    rank >= 3 input or a product by a transposed matrix (`may_rewrite`)."""
    from torq.compiler.torch_linear import may_rewrite

    flat = b"%3 = torch.aten.linear %1, %2, %none : !torch.vtensor<[8,64],f32>, !torch.vtensor<[32,64],f32>"
    batched = b"%3 = torch.aten.linear %1, %2, %none : !torch.vtensor<[1,8,64],f32>, !torch.vtensor<[32,64],f32>"
    tied = b"%5 = torch.aten.transpose.int %3, %i0, %i1\n%6 = torch.aten.matmul %4, %5"
    assert not may_rewrite(flat) and may_rewrite(batched) and may_rewrite(tied)
