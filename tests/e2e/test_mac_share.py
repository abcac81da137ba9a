"""MAC accounting per dispatch (compiler/macs.py) and the NPU share of MACs.

Expected counts are computed by hand from the shapes, not taken from the compiler.
"""

import io

import numpy as np
import pytest
import torch
import torch.nn as nn
from iree.compiler import ir

import torq
from torq.compiler.macs import count_macs
from torq.report import host_dispatches, mac_share_line

CONV = 1 * 16 * 16 * 8 * 3 * 3 * 3  # N·OH·OW·F·KH·KW·C of Conv2d(3, 8, 3, padding=1) on 16x16
FC = 1 * (8 * 16 * 16) * 10  # M·K·N of Linear(2048, 10)
INT_MATMUL = 6 * 12 * 5  # M·K·N of an i64 (6x12)·(12x5) matmul


class ConvFc(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class ConvFcAndIntMatmul(ConvFc):
    """ConvFc plus an i64 matmul: the slices have no i64, so that dispatch stays on the host."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randint(-3, 4, (12, 5), generator=torch.Generator().manual_seed(0)))

    def forward(self, x, i):
        return super().forward(x), i @ self.w


def test_conv_and_matmul_all_on_npu():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    cm = torq.compile(ConvFc().eval(), x, remarks=io.StringIO())
    rep = cm.report
    torq_macs = sorted(d.macs for d in rep.dispatches if d.executor == "torq")
    assert torq_macs == sorted([CONV, FC])
    assert rep.total_macs == CONV + FC and rep.npu_mac_share == 1.0
    assert "100.0%" in mac_share_line(rep)


def test_host_dispatch_macs_counted():
    torch.manual_seed(0)
    model = ConvFcAndIntMatmul().eval()
    x = torch.randn(1, 3, 16, 16)
    i = torch.randint(-5, 5, (6, 12), generator=torch.Generator().manual_seed(1))
    cm = torq.compile(model, x, i, remarks=io.StringIO())
    rep = cm.report
    host = [(name, macs) for name, macs, reason in host_dispatches(rep) if "i64" in reason]
    assert [m for _, m in host] == [INT_MATMUL]
    assert rep.torq_macs == CONV + FC
    assert rep.total_macs == CONV + FC + INT_MATMUL
    assert rep.npu_mac_share == pytest.approx((CONV + FC) / (CONV + FC + INT_MATMUL))
    # The model still runs: the host computes the integer matmul exactly.
    _, z = cm(x.numpy(), i.numpy())
    np.testing.assert_array_equal(z, (i @ model.w).numpy())


IR = """
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x8x6xf32>, %bo: tensor<2x4x6xf32>,
             %x: tensor<1x9x9x5xf32>, %w: tensor<3x3x5xf32>, %o: tensor<1x4x4x5xf32>,
             %s: tensor<2x4xf32>)
    -> (tensor<2x4x6xf32>, tensor<1x4x4x5xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = linalg.batch_matmul ins(%q, %k : tensor<2x4x8xf32>, tensor<2x8x6xf32>) outs(%bo : tensor<2x4x6xf32>) -> tensor<2x4x6xf32>
  %1 = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
       ins(%x, %w : tensor<1x9x9x5xf32>, tensor<3x3x5xf32>) outs(%o : tensor<1x4x4x5xf32>) -> tensor<1x4x4x5xf32>
  %2 = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
       ins(%q, %q : tensor<2x4x8xf32>, tensor<2x4x8xf32>) outs(%q : tensor<2x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<2x4x8xf32>
  %3 = linalg.generic {indexing_maps = [#id3, #red], iterator_types = ["parallel", "parallel", "reduction"]}
       ins(%q : tensor<2x4x8xf32>) outs(%s : tensor<2x4xf32>) {
  ^bb0(%a: f32, %c: f32):
    %m = arith.addf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4xf32>
  %4 = linalg.generic {indexing_maps = [#id3, #red], iterator_types = ["parallel", "parallel", "reduction"]}
       ins(%q : tensor<2x4x8xf32>) outs(%s : tensor<2x4xf32>) {
  ^bb0(%a: f32, %c: f32):
    %m = arith.mulf %a, %a : f32
    %n = arith.addf %m, %c : f32
    linalg.yield %n : f32
  } -> tensor<2x4xf32>
  return %0, %1, %2, %3, %4 : tensor<2x4x6xf32>, tensor<1x4x4x5xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}
func.func @dyn(%d: tensor<?x8xf32>, %e: tensor<8x3xf32>, %f: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %0 = linalg.matmul ins(%d, %e : tensor<?x8xf32>, tensor<8x3xf32>) outs(%f : tensor<?x3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}
"""


def test_mac_rule_on_named_and_generic_ops():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(IR)
        f, dyn = (op.operation for op in module.body.operations)
        batch_matmul = 2 * 4 * 6 * 8  # B·M·N·K
        depthwise = 1 * 4 * 4 * 5 * 3 * 3  # N·OH·OW·C·KH·KW
        # elementwise multiply (no reduction) and a plain sum (no multiply): 0
        sum_of_squares = 2 * 4 * 8
        assert count_macs(f) == batch_matmul + depthwise + sum_of_squares
        assert count_macs(dyn) is None  # a contraction over a dynamic loop: unknown, not 0


def test_share_line_names_host_dispatches_of_unknown_macs():
    """A matmul with a dynamic dim stays on the host and its MACs are unknown: the share
    line must not read as if every MAC were on the NPU without saying so."""
    from iree.turbine import aot

    model = nn.Linear(16, 8).eval()
    x = torch.randn(4, 16)
    text = str(aot.export(model, x, dynamic_shapes={"input": {0: torch.export.Dim("rows", max=64)}}).mlir_module)
    rep = torq.compile(text, remarks=io.StringIO()).report
    assert rep.uncounted_host_dispatches >= 1
    assert "not counting" in mac_share_line(rep) and "dynamic shapes" in mac_share_line(rep)
