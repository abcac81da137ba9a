"""int8 TOSA models: bit-exact against the same MLIR compiled by IREE for llvm-cpu.

The reference is IREE's own llvm-cpu backend on the unchanged input module
(DESIGN §7): int8 results must match it exactly, at the default LRAM budget
and at a small one that forces tiling.
"""

import os

import numpy as np
import pytest
from llvm_cpu import TOSA, llvm_cpu
from tosa_int8 import conv_rescale_clamp, two_layer_net

import torq

BUDGETS = ["SL2610", "SL2610:lram_kb=64"]


def llvm_cpu_reference(mlir: str, *xs: np.ndarray) -> np.ndarray:
    return llvm_cpu(mlir, *xs, flags=TOSA)


def random_int8(shape, seed):
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def check_bit_exact(mlir, x, hw, min_torq, *more_inputs):
    ref = llvm_cpu_reference(mlir, x, *more_inputs)
    cm = torq.compile(mlir, hw=hw, flags=TOSA)
    on_torq = [d for d in cm.report.dispatches if d.executor == "torq"]
    assert len(on_torq) >= min_torq, [(d.name, d.executor, d.reason) for d in cm.report.dispatches]
    y = cm(x, *more_inputs)
    assert y.dtype == np.int8 and y.shape == ref.shape
    mismatches = int((y != ref).sum())
    assert mismatches == 0, f"{mismatches} of {y.size} int8 outputs differ from llvm-cpu"
    # The requantization must not be trivial: outputs spread over the range and saturate.
    assert len(np.unique(ref)) > 64
    budget = torq.parse_hw_spec(hw).available_lram_bytes
    assert all(s["lram_peak_bytes"] <= budget for s in cm.last_stats)
    return cm


@pytest.mark.parametrize("hw", BUDGETS)
@pytest.mark.parametrize("rounding", ["DOUBLE_ROUND", "SINGLE_ROUND"])
def test_conv_bias_rescale_clamp(hw, rounding):
    mlir = conv_rescale_clamp(seed=3, x_shape=(1, 32, 32, 32), rounding=rounding)
    x = random_int8((1, 32, 32, 32), seed=4)
    cm = check_bit_exact(mlir, x, hw, min_torq=1)
    conv = max(cm.last_stats, key=lambda s: s["macs"])
    assert conv["macs"] == 32 * 32 * 32 * 32 * 9
    if hw.endswith("lram_kb=64"):
        # 36 KiB padded input + 32 KiB output + 9 KiB weights exceed the 50 KiB usable.
        assert conv["tiles"] > 1
    y = cm(x)
    assert y.min() == -10  # the ReLU clamp at the output zero point is reached


@pytest.mark.parametrize("hw", BUDGETS)
def test_two_layer_int8_net(hw):
    mlir = two_layer_net(seed=5)
    x = random_int8((1, 33, 33, 8), seed=6)
    check_bit_exact(mlir, x, hw, min_torq=2)


def test_strided_conv_odd_shape():
    mlir = conv_rescale_clamp(seed=7, x_shape=(1, 15, 13, 17), out_ch=9, k=3, stride=2, pad=1,
                              x_zp=11, out_zp=0)
    check_bit_exact(mlir, random_int8((1, 15, 13, 17), seed=8), "SL2610", min_torq=1)


def test_residual_add_with_requantization():
    """TOSA int8 add: both inputs rescaled to a common i32 scale, added, rescaled back."""
    with open(os.path.join(os.path.dirname(__file__), "tosa_int8_add.mlir")) as f:
        mlir = f.read()
    a, b = random_int8((1, 8, 8, 16), seed=9), random_int8((1, 8, 8, 16), seed=10)
    check_bit_exact(mlir, a, "SL2610", 1, b)


def test_batch_matmul_with_requantization():
    """Both operands are inputs; IREE's zero-point correction (column sums of rhs)
    is a reduction that stays on host, the batch matmul + rescale runs on torq."""
    with open(os.path.join(os.path.dirname(__file__), "tosa_int8_matmul.mlir")) as f:
        mlir = f.read()
    a, b = random_int8((2, 16, 24), seed=11), random_int8((2, 24, 12), seed=12)
    cm = check_bit_exact(mlir, a, "SL2610", 1, b)
    assert max(s["macs"] for s in cm.last_stats) == 2 * 16 * 12 * 24
