"""End to end: depthwise / grouped convolution, pooling and global average pooling on the NPU.

Each model is compiled with torq.compile at the default LRAM budget and at a
small one that forces tiling, run on the simulator, and compared with torch
fp32 (relative L2 <= 1e-2, cosine >= 0.9999); the two budgets must give
identical results. The op under test must run on torq: a torq dispatch whose
MAC / element count (as the compiler counts it, recomputed here from the
torch layer's shapes) is the op's. int8 TOSA depthwise convolutions are
bit-exact against IREE llvm-cpu. A MobileNetV2-style block and a ResNet basic
block (+ maxpool, global average pooling, fc) report the share of their MACs
that ran on the NPU.
"""

from __future__ import annotations

import io
import os
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn as nn
from test_int8_tosa import check_bit_exact, random_int8
from torch_reference import run_against_torch
from tosa_int8 import TosaBuilder, depthwise_block, depthwise_rescale_clamp, ttype

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import error_figures, within_limits  # noqa: E402

BUDGETS = ["SL2610", "SL2610:lram_kb=64"]


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


class GlobalMean(nn.Module):
    """x.mean((2, 3)): global average pooling without AdaptiveAvgPool2d."""

    def forward(self, x):
        return x.mean((2, 3))


def reference_counts(model: nn.Module, x: torch.Tensor) -> list[tuple[str, int]]:
    """(layer type, count) per layer, from the torch layers' shapes: MACs for
    Conv2d (output elements * in_channels / groups * kh * kw) and Linear,
    window elements for MaxPool2d / AvgPool2d (output elements * kh * kw),
    input elements for global average pooling."""
    counts: list[tuple[str, int]] = []

    def hook(m, inputs, out):
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            n = out.numel() * (m.in_channels // m.groups) * kh * kw
        elif isinstance(m, nn.Linear):
            n = out.numel() * m.in_features
        elif isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            kh, kw = _pair(m.kernel_size)
            n = out.numel() * kh * kw
        elif isinstance(m, (nn.AdaptiveAvgPool2d, GlobalMean)):
            n = inputs[0].numel()
        else:
            return
        counts.append((type(m).__name__, n))

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return counts


def compile_and_run(model: nn.Module, x: torch.Tensor, hw: str, remarks=None):
    model = model.eval()
    with torch.no_grad():
        ref = model(x).numpy()
    t0 = time.time()
    cm = torq.compile(model, x, hw=hw, remarks=remarks)
    y = cm(x.numpy())
    rel_l2, cosine = error_figures(y, ref)
    assert within_limits(rel_l2, cosine), (hw, rel_l2, cosine)
    stats = cm.last_stats
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    assert stats and all(s["lram_peak_bytes"] <= budget for s in stats)
    planned = {d.name: (d.tiles, d.lram_peak) for d in cm.report.dispatches if d.executor == "torq"}
    assert planned == {s["name"]: (s["tiles"], s["lram_peak_bytes"]) for s in stats}
    print(f"{type(model).__name__} {tuple(x.shape)} {hw}: rel L2 {rel_l2:.2e}, cosine {cosine:.7f}, "
          f"{time.time() - t0:.1f} s")
    return cm, y


def dispatch_with_count(cm, count: int) -> dict:
    """The stats of the one torq dispatch whose MAC / element count is `count`."""
    hits = [s for s in cm.last_stats if s["macs"] == count]
    assert len(hits) == 1, ([(s["name"], s["macs"]) for s in cm.last_stats], count)
    executors = {d.name: d.executor for d in cm.report.dispatches}
    assert executors[hits[0]["name"]] == "torq"
    return hits[0]


def check_op_on_both_budgets(model, x, layer_type, tiled_at_small_budget=True):
    """The op runs on torq at both budgets with its count; tiling changes nothing."""
    torch.manual_seed(0)
    (count,) = [n for t, n in reference_counts(model, x) if t == layer_type]
    outs = []
    for hw in BUDGETS:
        cm, y = compile_and_run(model, x, hw)
        s = dispatch_with_count(cm, count)
        if hw.endswith("lram_kb=64") and tiled_at_small_budget:
            assert s["tiles"] > 1, s
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])


def seeded(module: nn.Module) -> nn.Module:
    """Non-trivial batch-norm statistics, so folded scale and shift matter."""
    g = torch.Generator().manual_seed(3)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 0.4 - 0.2)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) * 0.4 - 0.2)
    return module.eval()


def x_of(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- depthwise / grouped convolution

CONVS = {
    # name: (layers, input shape, tiled at 64 KiB)
    "dw3x3_s1_bias_relu6": (lambda: [nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU6()], (1, 32, 40, 40), True),
    "dw3x3_s2_bn_relu6": (lambda: [nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32, bias=False),
                                   nn.BatchNorm2d(32), nn.ReLU6()], (1, 32, 40, 40), True),
    "dw5x5_s2_odd_shape": (lambda: [nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24)], (1, 24, 23, 19), False),
    "dw3x3_no_bias": (lambda: [nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)], (1, 16, 20, 20), False),
    "grouped_g4": (lambda: [nn.Conv2d(32, 64, 3, padding=1, groups=4), nn.ReLU()], (1, 32, 30, 30), True),
    "dw_multiplier2": (lambda: [nn.Conv2d(16, 32, 3, padding=1, groups=16)], (1, 16, 24, 24), False),
    "dw_batch2_dilation2": (lambda: [nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8), nn.ReLU()],
                            (2, 8, 12, 12), False),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_depthwise_and_grouped_conv(name):
    torch.manual_seed(0)
    layers, shape, tiled = CONVS[name]
    check_op_on_both_budgets(seeded(nn.Sequential(*layers())), x_of(*shape), "Conv2d", tiled)


def test_depthwise_int8_tosa_bit_exact_stride1_and_tiled():
    mlir = depthwise_rescale_clamp(seed=3, x_shape=(1, 48, 48, 32))
    x = random_int8((1, 48, 48, 32), seed=4)
    for hw in BUDGETS:
        cm = check_bit_exact(mlir, x, hw, 1)
        s = dispatch_with_count(cm, 48 * 48 * 32 * 9)
        if hw.endswith("lram_kb=64"):
            assert s["tiles"] > 1  # 48x48x32 int8 in + out do not fit 50 KiB (at 512 KiB the default
            # strategy may still split it for the slices)
        assert cm(x).min() == -10  # the ReLU clamp at the output zero point is reached


def test_depthwise_int8_tosa_bit_exact_stride2():
    mlir = depthwise_rescale_clamp(seed=5, x_shape=(1, 49, 49, 32), stride=2, x_zp=7, out_zp=3,
                                   rounding="SINGLE_ROUND")
    x = random_int8((1, 49, 49, 32), seed=6)
    for hw in BUDGETS:
        cm = check_bit_exact(mlir, x, hw, 1)
        dispatch_with_count(cm, 25 * 25 * 32 * 9)


def test_depthwise_int8_multiplier2_then_maxpool_bit_exact():
    """Channel multiplier 2 (a grouped conv2d without per-group input channels),
    then an int8 max pool 3x3 stride 2 with padding (-128)."""
    b = TosaBuilder(np.random.default_rng(11))
    xs = (1, 17, 15, 8)
    y, s = depthwise_block(b, "%x", xs, 0, 2, 3, 1, 1, -10, relu=True)
    out_shape = (1, 9, 8, 16)
    r = b._val()
    b.lines.append(f'{r} = "tosa.max_pool2d"({y}) <{{kernel = array<i64: 3, 3>, pad = array<i64: 1, 1, 1, 1>, '
                   f'stride = array<i64: 2, 2>}}> : ({ttype(s, "i8")}) -> {ttype(out_shape, "i8")}')
    mlir = b.function(xs, r, out_shape)
    x = random_int8(xs, seed=12)
    cm = check_bit_exact(mlir, x, "SL2610", 2)
    dispatch_with_count(cm, 17 * 15 * 16 * 9)  # the depthwise conv
    dispatch_with_count(cm, 9 * 8 * 16 * 9)  # the max pool


# ---------------------------------------------------------------- pooling

POOLS = {
    "maxpool3x3_s2_p1": (lambda: nn.MaxPool2d(3, 2, 1), (1, 24, 64, 64), "MaxPool2d", True),
    "maxpool2x2": (lambda: nn.MaxPool2d(2), (1, 16, 32, 48), "MaxPool2d", True),
    "maxpool3x3_s2_ceil": (lambda: nn.MaxPool2d(3, 2, ceil_mode=True), (1, 8, 14, 14), "MaxPool2d", False),
    "avgpool3x3_s2_p1": (lambda: nn.AvgPool2d(3, 2, 1), (1, 24, 64, 64), "AvgPool2d", True),
    "avgpool2x2": (lambda: nn.AvgPool2d(2), (1, 16, 32, 48), "AvgPool2d", True),
    "avgpool3x3_s1_p1": (lambda: nn.AvgPool2d(3, 1, 1), (1, 8, 15, 13), "AvgPool2d", False),
    # count_include_pad=False divides each window sum by the positions inside the input
    # (a constant of the output position, torq-fold-index-constants): PoolFormer's and
    # EfficientFormer's token mixer, TensorFlow's 'SAME' average pooling.
    "avgpool3x3_s2_p1_exclude_pad": (lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 24, 64, 64),
                                     "AvgPool2d", True),
    "avgpool3x3_s1_p1_exclude_pad": (lambda: nn.AvgPool2d(3, 1, 1, count_include_pad=False), (1, 8, 15, 13),
                                     "AvgPool2d", False),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling(name):
    make, shape, layer, tiled = POOLS[name]
    check_op_on_both_budgets(make(), x_of(*shape), layer, tiled)


class PoolMixer(nn.Module):
    """PoolFormer's token mixer: pool(x) - x, count_include_pad=False."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)

    def forward(self, x):
        return self.pool(x) - x


def test_pool_mixer_runs_on_the_npu():
    run_against_torch(PoolMixer(), x_of(1, 48, 28, 28))


# ---------------------------------------------------------------- global average pooling


GLOBAL = {
    "mean_hw": (GlobalMean, (1, 96, 24, 24), True),
    "adaptive_7x7": (lambda: nn.AdaptiveAvgPool2d(1), (1, 64, 7, 7), False),
    "adaptive_16x16": (lambda: nn.AdaptiveAvgPool2d(1), (1, 32, 16, 16), False),
}


@pytest.mark.parametrize("name", list(GLOBAL))
def test_global_average_pooling(name):
    make, shape, tiled = GLOBAL[name]
    model = make()
    x = x_of(*shape) + 0.5  # a mean away from 0, so the relative error is meaningful
    check_op_on_both_budgets(model, x, type(model).__name__, tiled)


class ResidualReluMean(nn.Module):
    """relu(x + bn(y)).mean((2, 3)): IREE fuses the add, the batch norm and the ReLU
    into the reduction's body, which becomes an elementwise prologue of the reduce."""

    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x, y):
        return torch.relu(x + self.bn(y)).mean((2, 3))


def test_global_mean_with_fused_prologue_tiled():
    model = seeded(ResidualReluMean(128))
    x, y = x_of(1, 128, 32, 32, seed=1), x_of(1, 128, 32, 32, seed=2)
    with torch.no_grad():
        ref = model(x, y).numpy()
    outs, tiles = [], []
    for hw in BUDGETS:
        cm = torq.compile(model, x, y, hw=hw)
        out = cm(x.numpy(), y.numpy())
        rel_l2, cosine = error_figures(out, ref)
        assert within_limits(rel_l2, cosine), (rel_l2, cosine)
        (s,) = cm.last_stats  # one dispatch: prologue + reduce, on torq
        assert s["macs"] == 128 * 32 * 32 and s["executor"] == "torq"
        outs.append(out)
        tiles.append(s["tiles"])
    assert tiles[1] > max(tiles[0], 1)  # the small budget tiles it (more)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_adaptive_avg_pool_too_large_untiled_stays_on_host():
    """The gather form cannot be tiled: beyond the LRAM budget it stays on host, with a remark."""
    model, x = nn.AdaptiveAvgPool2d(1).eval(), x_of(1, 1280, 7, 7)
    big, small = io.StringIO(), io.StringIO()
    cm, _ = compile_and_run(model, x, "SL2610", remarks=big)
    dispatch_with_count(cm, 1280 * 49)
    cm, _ = compile_and_run(model, x, "SL2610:lram_kb=64", remarks=small)
    assert all(s["macs"] != 1280 * 49 for s in cm.last_stats)
    assert "a gathering reduction (adaptive average pooling) needs" in small.getvalue()
    assert "cannot be tiled" in small.getvalue() and "gathering" not in big.getvalue()


def test_whole_tensor_sum_accumulates_in_steps(tmp_path):
    """GroupNorm(1, C) sums a whole tensor (and its squares) to one value: no result dim to
    tile, so beyond the budget the sums' reduction loops are tiled, each step adding its
    slice's sum to an f32 sum kept in LRAM (a reduce in accumulate form, contract/ops.py;
    PoolFormer's first stage at 224x224 stayed on host before). Within the bf16 limits of
    torch either way, and every dispatch on the NPU."""
    model, x = nn.GroupNorm(1, 16).eval(), x_of(1, 16, 64, 64)  # 128 KiB of bf16 input
    with torch.no_grad():
        model.weight.normal_(generator=torch.Generator().manual_seed(2))
        model.bias.normal_(generator=torch.Generator().manual_seed(3))
    for hw in ("SL2610", "SL2610:lram_kb=64"):
        cm, _ = compile_and_run(model, x, hw)
        assert all(d.executor == "torq" for d in cm.report.dispatches), hw
    dump = tmp_path / "tiling.json"
    cm = torq.compile(model, x, hw="SL2610:lram_kb=64", flags=[f"--torq-dump-tiling={dump}"])
    sums = [r for d in cm.report.tiling for r in d["roots"] if r["shape"] == []]
    assert len(sums) == 2, cm.report.tiling  # the sum and the sum of squares
    assert all(r["reduction_steps"] > 1 for r in sums), sums


# ---------------------------------------------------------------- blocks of real models


def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU6):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return layers + ([act()] if act else [])


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand + ReLU6, depthwise 3x3 + ReLU6, 1x1 project, residual if shapes allow."""

    def __init__(self, cin, cout, stride, expand=6):
        super().__init__()
        h = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(*conv_bn(cin, h, 1), *conv_bn(h, h, 3, stride, groups=h),
                                  *conv_bn(h, cout, 1, act=None))

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = InvertedResidual(16, 24, 2)  # depthwise stride 2, no residual
        self.same = InvertedResidual(24, 24, 1)  # depthwise stride 1, residual

    def forward(self, x):
        return self.same(self.down(x))


class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Sequential(*conv_bn(c, c, 3, act=nn.ReLU))
        self.b = nn.Sequential(*conv_bn(c, c, 3, act=None))

    def forward(self, x):
        return torch.relu(x + self.b(self.a(x)))


class ResNetBlocks(nn.Module):
    """ResNet-18 stem (7x7 stride 2 + BN + ReLU), maxpool 3x3/2, one basic block,
    global average pooling (torchvision's AdaptiveAvgPool2d or x.mean) and fc."""

    def __init__(self, adaptive: bool):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(3, 32, 7, 2, act=nn.ReLU))
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.block = BasicBlock(32)
        self.gap = nn.AdaptiveAvgPool2d(1) if adaptive else GlobalMean()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.gap(self.block(self.pool(self.stem(x)))), 1))


def npu_share(model, x, hw) -> float:
    """Share of the model's MACs (conv/linear MACs + pooling elements, counted from
    the torch layers) that ran on torq dispatches, asserted >= 98%."""
    torch.manual_seed(0)
    total = sum(n for _, n in reference_counts(model, x))
    cm, _ = compile_and_run(model, x, hw)
    on_npu = sum(s["macs"] for s in cm.last_stats)
    share = on_npu / total
    host = [(d.name, d.reason) for d in cm.report.dispatches if d.executor == "host"]
    print(f"  {type(model).__name__} on {hw}: {on_npu:,} of {total:,} MACs on the NPU ({100 * share:.2f}%); "
          f"host dispatches: {host}")
    assert on_npu <= total  # the compiler counts no more work than the layers have
    assert share >= 0.98
    return share


@pytest.mark.parametrize("hw", BUDGETS)
def test_mobilenetv2_block_on_npu(hw):
    torch.manual_seed(0)
    npu_share(seeded(MobileNetV2Blocks()), x_of(1, 16, 32, 32), hw)


@pytest.mark.parametrize("hw", BUDGETS)
@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive_avg_pool", "mean"])
def test_resnet_block_on_npu(hw, adaptive):
    torch.manual_seed(0)
    npu_share(seeded(ResNetBlocks(adaptive)), x_of(1, 3, 64, 64), hw)
