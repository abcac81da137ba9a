"""Kernels of the depthwise / grouped convolution, pooling and reduce Compute ops.

References are independent: torch.nn.functional in float64 for float
operands, direct numpy loops in int64 for integer operands. Float kernels
accumulate in f32, so they agree with the float64 reference to a small
multiple of 2^-24 * sum |terms|; integer kernels agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nss_builders import ProgramBuilder, bf16_round, const, step, val

from torq.contract.hw import TorqHw
from torq.contract.program_validator import ExecutableError, validate_program
from torq.runtime import kernels
from torq.runtime.kernels import KernelError, run_principal
from torq.runtime.simulator import Simulator

F32_SLACK = 1e-5  # relative to sum |terms| (f32 accumulation of at most a few hundred terms)


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def assert_f32_close(got: np.ndarray, ref: np.ndarray, terms: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= F32_SLACK * terms + 1e-30), float(np.max(err - F32_SLACK * terms))


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- depthwise conv


@pytest.mark.parametrize("stride,dilation", [((1, 1), (1, 1)), ((2, 2), (1, 1)), ((2, 1), (1, 2))])
def test_depthwise_float_matches_torch_grouped_conv(stride, dilation):
    x = bf16_round(rng(1).normal(0, 1, (2, 6, 11, 9))).astype(np.float32)
    w = bf16_round(rng(2).normal(0, 0.5, (6, 3, 3))).astype(np.float32)
    attrs = {"input_dims": "NCHW", "weight_dims": "CHW", "output_dims": "NCHW",
             "stride": list(stride), "dilation": list(dilation)}
    y, macs = run_principal("depthwise_conv2d", [x, w], attrs)
    ref = F.conv2d(t64(x), t64(w)[:, None], stride=stride, dilation=dilation, groups=6).numpy()
    terms = F.conv2d(t64(np.abs(x)), t64(np.abs(w))[:, None], stride=stride, dilation=dilation, groups=6).numpy()
    assert_f32_close(y, ref, terms)
    assert macs == ref.size * 9


def test_depthwise_layouts_hwc_and_weights_hwc():
    # NHWC-style input without N, weights (kh, kw, c): the dims strings say where each dim is.
    x = rng(3).normal(0, 1, (10, 12, 5)).astype(np.float32)  # H W C
    w = rng(4).normal(0, 1, (3, 2, 5)).astype(np.float32)  # H W C
    attrs = {"input_dims": "HWC", "weight_dims": "HWC", "output_dims": "HWC", "stride": [1, 2],
             "dilation": [1, 1]}
    y, macs = run_principal("depthwise_conv2d", [x, w], attrs)
    ref = F.conv2d(t64(x.transpose(2, 0, 1))[None], t64(w.transpose(2, 0, 1))[:, None], stride=(1, 2),
                   groups=5).numpy()[0].transpose(1, 2, 0)
    terms = F.conv2d(t64(np.abs(x).transpose(2, 0, 1))[None], t64(np.abs(w).transpose(2, 0, 1))[:, None],
                     stride=(1, 2), groups=5).numpy()[0].transpose(1, 2, 0)
    assert_f32_close(y, ref, terms)
    assert y.shape == (8, 6, 5) and macs == 8 * 6 * 5 * 6


def test_depthwise_int8_exact_against_loop():
    x = rng(5).integers(-128, 128, (7, 9, 4)).astype(np.int8)  # H W C
    w = rng(6).integers(-128, 128, (3, 3, 4)).astype(np.int8)
    attrs = {"input_dims": "HWC", "weight_dims": "HWC", "output_dims": "HWC", "stride": [2, 2],
             "dilation": [1, 1]}
    y, macs = run_principal("depthwise_conv2d", [x, w], attrs)
    oh, ow = (7 - 3) // 2 + 1, (9 - 3) // 2 + 1
    ref = np.zeros((oh, ow, 4), np.int64)
    for yy in range(oh):
        for xx in range(ow):
            for c in range(4):
                for i in range(3):
                    for j in range(3):
                        ref[yy, xx, c] += int(x[2 * yy + i, 2 * xx + j, c]) * int(w[i, j, c])
    np.testing.assert_array_equal(y, ref)
    assert y.dtype == np.int64 and macs == oh * ow * 4 * 9


def test_depthwise_errors():
    x = np.zeros((4, 6, 6), np.float32)
    base = {"input_dims": "CHW", "weight_dims": "CHW", "output_dims": "CHW"}
    with pytest.raises(KernelError, match="input has 4 channels, weight has 3"):
        run_principal("depthwise_conv2d", [x, np.zeros((3, 3, 3), np.float32)], base)
    with pytest.raises(KernelError, match="weight_dims='OHW'"):
        run_principal("depthwise_conv2d", [x, np.zeros((4, 3, 3), np.float32)], {**base, "weight_dims": "OHW"})
    with pytest.raises(KernelError, match="window 7x7 larger than input 6x6"):
        run_principal("depthwise_conv2d", [x, np.zeros((4, 7, 7), np.float32)], base)
    with pytest.raises(KernelError, match="mixes integer and float"):
        run_principal("depthwise_conv2d", [x, np.zeros((4, 3, 3), np.int8)], base)


# ---------------------------------------------------------------- grouped / 1x1 conv2d


def test_grouped_conv2d_matches_torch():
    g, cpg, opg = 3, 2, 4
    x = rng(7).normal(0, 1, (g, cpg, 9, 8)).astype(np.float32)  # G C H W
    w = rng(8).normal(0, 1, (g, opg, cpg, 3, 3)).astype(np.float32)  # G O C H W
    attrs = {"input_dims": "GCHW", "weight_dims": "GOCHW", "output_dims": "GOHW", "stride": [1, 2],
             "dilation": [1, 1]}
    y, macs = run_principal("conv2d", [x, w], attrs)
    xt, wt = t64(x.reshape(1, g * cpg, 9, 8)), t64(w.reshape(g * opg, cpg, 3, 3))
    ref = F.conv2d(xt, wt, stride=(1, 2), groups=g).numpy().reshape(g, opg, 7, 3)
    terms = F.conv2d(xt.abs(), wt.abs(), stride=(1, 2), groups=g).numpy().reshape(g, opg, 7, 3)
    assert_f32_close(y, ref, terms)
    assert macs == ref.size * cpg * 9


def test_depthwise_multiplier_as_grouped_conv2d_without_c():
    x = rng(9).normal(0, 1, (5, 8, 8)).astype(np.float32)  # G H W: one channel per group
    w = rng(10).normal(0, 1, (5, 2, 3, 3)).astype(np.float32)  # G O H W: multiplier 2
    attrs = {"input_dims": "GHW", "weight_dims": "GOHW", "output_dims": "GOHW", "stride": [1, 1],
             "dilation": [1, 1]}
    y, macs = run_principal("conv2d", [x, w], attrs)
    ref = F.conv2d(t64(x)[None], t64(w.reshape(10, 1, 3, 3)), groups=5).numpy().reshape(5, 2, 6, 6)
    terms = F.conv2d(t64(np.abs(x))[None], t64(np.abs(w).reshape(10, 1, 3, 3)), groups=5).numpy().reshape(5, 2, 6, 6)
    assert_f32_close(y, ref, terms)
    assert macs == ref.size * 9


def test_pointwise_conv2d_weight_without_kernel_dims():
    x = rng(11).integers(-128, 128, (16, 5, 7)).astype(np.int8)  # C H W
    w = rng(12).integers(-128, 128, (8, 16)).astype(np.int8)  # O C
    attrs = {"input_dims": "CHW", "weight_dims": "OC", "output_dims": "OHW", "stride": [1, 1], "dilation": [1, 1]}
    y, macs = run_principal("conv2d", [x, w], attrs)
    ref = np.einsum("chw,oc->ohw", x.astype(np.int64), w.astype(np.int64))
    np.testing.assert_array_equal(y, ref)
    assert macs == 8 * 5 * 7 * 16


def test_grouped_conv2d_dims_must_agree():
    with pytest.raises(KernelError, match="G must be in all three"):
        run_principal("conv2d", [np.zeros((2, 3, 5, 5), np.float32), np.zeros((2, 4, 3, 3, 3), np.float32)],
                      {"input_dims": "GCHW", "weight_dims": "GOCHW", "output_dims": "OHW"})


# ---------------------------------------------------------------- pooling


@pytest.mark.parametrize("kernel,stride,dilation", [((3, 3), (2, 2), (1, 1)), ((2, 2), (2, 2), (1, 1)),
                                                    ((3, 2), (1, 2), (2, 1))])
def test_maxpool_matches_torch(kernel, stride, dilation):
    x = rng(13).normal(0, 1, (2, 3, 13, 12)).astype(np.float32)
    attrs = {"input_dims": "NCHW", "output_dims": "NCHW", "kernel": list(kernel), "stride": list(stride),
             "dilation": list(dilation)}
    y, count = run_principal("maxpool2d", [x], attrs)
    ref = F.max_pool2d(t64(x), kernel, stride, dilation=dilation).numpy()
    np.testing.assert_array_equal(y, ref.astype(np.float32))  # a max is exact
    assert count == ref.size * kernel[0] * kernel[1]


def test_maxpool_int8_hwc_exact():
    x = rng(14).integers(-128, 128, (9, 9, 6)).astype(np.int8)  # H W C
    attrs = {"input_dims": "HWC", "output_dims": "HWC", "kernel": [3, 3], "stride": [2, 2], "dilation": [1, 1]}
    y, _ = run_principal("maxpool2d", [x], attrs)
    ref = np.array([[[max(int(x[2 * a + i, 2 * b + j, c]) for i in range(3) for j in range(3)) for c in range(6)]
                     for b in range(4)] for a in range(4)])
    np.testing.assert_array_equal(y, ref)


def test_avg_pool_matches_torch_count_include_pad():
    # The op sees the zero-padded input; torch pads by itself with count_include_pad=True.
    x = rng(15).normal(0, 1, (4, 10, 10)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    attrs = {"input_dims": "CHW", "output_dims": "CHW", "kernel": [3, 3], "stride": [2, 2], "dilation": [1, 1]}
    y, count = run_principal("avg_pool2d", [xp], attrs)
    ref = F.avg_pool2d(t64(x)[None], 3, 2, padding=1, count_include_pad=True).numpy()[0]
    terms = F.avg_pool2d(t64(np.abs(x))[None], 3, 2, padding=1, count_include_pad=True).numpy()[0]
    assert_f32_close(y, ref, terms)
    assert count == ref.size * 9


def test_pool_errors():
    x = np.zeros((4, 6, 6), np.float32)
    attrs = {"input_dims": "CHW", "output_dims": "CHW", "kernel": [3, 3]}
    with pytest.raises(KernelError, match="avg_pool2d of integer operands"):
        run_principal("avg_pool2d", [x.astype(np.int8)], attrs)
    with pytest.raises(KernelError, match="maxpool2d attr kernel must be two positive ints, got None"):
        run_principal("maxpool2d", [x], {"input_dims": "CHW", "output_dims": "CHW"})
    with pytest.raises(KernelError, match="window 7x3 larger than input 6x6"):
        run_principal("maxpool2d", [x], {**attrs, "kernel": [7, 3]})
    with pytest.raises(KernelError, match="output_dims HW drops dim C of size 4"):
        run_principal("maxpool2d", [x], {**attrs, "output_dims": "HW"})


# ---------------------------------------------------------------- reduce


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_reduce_float_matches_torch(mode):
    x = rng(16).normal(0, 1, (3, 5, 7, 4)).astype(np.float32)
    y, count = run_principal("reduce", [x], {"mode": mode, "axes": [1, 3]})
    ref = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}[mode](t64(x), dim=(1, 3)).numpy()
    terms = torch.sum(t64(np.abs(x)), dim=(1, 3)).numpy() / (20 if mode == "mean" else 1)
    assert_f32_close(y, ref, terms)
    assert y.shape == (3, 7) and count == x.size


def test_reduce_int_sum_wraps_like_i32_and_max_is_exact():
    x = np.full((2, 3), 2**30, np.int32)
    y, _ = run_principal("reduce", [x], {"mode": "sum", "axes": [1]})
    np.testing.assert_array_equal(y, [3 * 2**30 - 2**32] * 2)  # the i32 accumulator wraps
    x8 = rng(17).integers(-128, 128, (6, 5)).astype(np.int8)
    y, _ = run_principal("reduce", [x8], {"mode": "max", "axes": [0]})
    np.testing.assert_array_equal(y, x8.astype(np.int64).max(axis=0))


def test_reduce_errors():
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(KernelError, match="attr mode='min'"):
        run_principal("reduce", [x], {"mode": "min", "axes": [1]})
    with pytest.raises(KernelError, match="attr axes=\\[2\\]"):
        run_principal("reduce", [x], {"mode": "sum", "axes": [2]})
    with pytest.raises(KernelError, match="mode mean of integer operands"):
        run_principal("reduce", [x.astype(np.int8)], {"mode": "mean", "axes": [1]})


def test_every_op_with_principal_operands_has_one_kernel():
    """The op table (contract/ops.py) and the simulator's kernels name the same ops."""
    from torq.contract.ops import OPS

    assert set(kernels.PRINCIPAL_KERNELS) == {op.name for op in OPS.values() if op.inputs > 0}
    assert {"depthwise_conv2d", "maxpool2d", "avg_pool2d", "reduce"} <= set(kernels.PRINCIPAL_KERNELS)


# ---------------------------------------------------------------- through the simulator


def _depthwise_relu6_program(result_shape=(4, 4, 4), macs=4 * 4 * 4 * 9):
    """bf16 depthwise 3x3 stride 2 (CHW) + ReLU6 on a 4x9x9 input, one tile."""
    w = bf16_round(rng(18).normal(0, 0.5, (4, 3, 3)))
    pb = ProgramBuilder("dw_relu6")
    x = pb.input((4, 9, 9))
    tw = pb.constant(w, "bf16")
    y = pb.output(result_shape)
    bx, bw = pb.dma_in(x), pb.dma_in(tw)
    by = pb.compute("depthwise_conv2d", [(bx, (4, 9, 9), "bf16"), (bw, (4, 3, 3), "bf16")], result_shape, "bf16",
                    {"input_dims": "CHW", "weight_dims": "CHW", "output_dims": "CHW", "stride": [2, 2],
                     "dilation": [1, 1]},
                    [step("max", val(0), const(0.0)), step("min", val(1), const(6.0))], macs=macs)
    pb.dma_out(by, y)
    return pb.build(), w


def test_simulator_runs_depthwise_with_epilogue():
    program, w = _depthwise_relu6_program()
    x = rng(19).normal(0, 3, (4, 9, 9)).astype(np.float32)
    (y,), stats = Simulator(TorqHw()).run(program, [x])
    xb = bf16_round(x)
    ref = torch.clamp(F.conv2d(t64(xb)[None], t64(w)[:, None], stride=2, groups=4), 0, 6).numpy()[0]
    np.testing.assert_array_equal(y, bf16_round(y))  # stored as bf16
    assert np.all(np.abs(y - ref) <= 2.0**-8 * np.abs(ref) + 1e-4)
    assert np.any(y == 0) and np.any(y == 6) and stats.macs == 4 * 4 * 4 * 9


def test_validator_checks_result_shape_and_count():
    program, _ = _depthwise_relu6_program(result_shape=(4, 5, 4), macs=4 * 5 * 4 * 9)
    with pytest.raises(ExecutableError, match=r"command 2 \(depthwise_conv2d\): result shape \(4, 5, 4\), its "
                                              r"attrs and operands give \(4, 4, 4\)"):
        validate_program(program)
    program, _ = _depthwise_relu6_program(macs=1)
    with pytest.raises(ExecutableError, match=r"command 2 \(depthwise_conv2d\): macs field is 1, its attrs and "
                                              r"operands give 576"):
        validate_program(program)


def test_validator_checks_pool_and_reduce_attrs():
    pb = ProgramBuilder("pool")
    x = pb.input((4, 8, 8))
    y = pb.output((4, 3, 3))
    bx = pb.dma_in(x)
    by = pb.compute("avg_pool2d", [(bx, (4, 8, 8), "bf16")], (4, 3, 3), "bf16",
                    {"input_dims": "CHW", "output_dims": "CHW", "kernel": [3, 3], "stride": [2, 2]}, macs=4 * 9 * 9)
    pb.dma_out(by, y)
    validate_program(pb.build())  # well formed: (8 - 3) // 2 + 1 = 3
    pb.commands[1].attrs["kernel"] = [3]
    with pytest.raises(ExecutableError, match=r"command 1 \(avg_pool2d\): attr kernel must be two positive ints"):
        validate_program(pb.build())
    pb.commands[1].op = "reduce"
    pb.commands[1].attrs = {"mode": "mean", "axes": [1, 1]}
    with pytest.raises(ExecutableError, match=r"command 1 \(reduce\): attr axes=\[1, 1\] must be distinct"):
        validate_program(pb.build())
