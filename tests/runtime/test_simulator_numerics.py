"""Simulator numerics against independent references (torch f32, numpy int64).

bf16 results: the simulator accumulates in f32 and rounds once to bf16 on
store, so |sim - ref| <= 2^-8 |ref| (half a bf16 ulp) plus a small f32
accumulation-order slack proportional to sum |terms|.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from nss_builders import (
    ProgramBuilder,
    bf16_round,
    const,
    conv_tiled_program,
    conv_weights,
    opnd,
    step,
    val,
)

from torq.contract.hw import TorqHw
from torq.runtime.simulator import Simulator

HALF_ULP_BF16 = 2.0**-8


def assert_bf16_close(sim: np.ndarray, ref: np.ndarray, abs_terms: np.ndarray) -> None:
    assert sim.dtype == np.float32 and sim.shape == ref.shape
    # Every output is a bf16 value widened exactly to f32.
    np.testing.assert_array_equal(sim, bf16_round(sim))
    bound = HALF_ULP_BF16 * np.abs(ref) + 1e-5 * abs_terms + 1e-30
    err = np.abs(sim.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}"


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def run(program, inputs, hw: TorqHw | None = None):
    return Simulator(hw or TorqHw()).run(program, inputs)


# ---------------------------------------------------------------- bf16 conv


def test_conv2d_tiled_bias_matches_torch():
    x = np.random.default_rng(1).normal(0, 1, (1, 4, 10, 10)).astype(np.float32)
    (y,), stats = run(conv_tiled_program(), [x])
    w, b = conv_weights()
    xb = bf16_round(x)  # the input the NPU sees (f32 -> bf16 RNE on the way in)
    ref = F.conv2d(t(xb), t(w), t(b)).numpy()
    terms = F.conv2d(t(np.abs(xb)), t(np.abs(w)), t(np.abs(b))).numpy()
    assert_bf16_close(y, ref, terms)
    assert stats.tiles == 2


def test_conv2d_relu6_epilogue_matches_torch_clamp():
    x = np.random.default_rng(2).normal(0, 3, (1, 4, 10, 10)).astype(np.float32)
    (y,), _ = run(conv_tiled_program(relu6=True), [x])
    w, b = conv_weights()
    xb = bf16_round(x)
    ref = torch.clamp(F.conv2d(t(xb), t(w), t(b)), 0.0, 6.0).numpy()
    terms = F.conv2d(t(np.abs(xb)), t(np.abs(w)), t(np.abs(b))).numpy()
    assert_bf16_close(y, ref, terms)
    assert np.any(y == 0.0) and np.any(y == 6.0) and np.any((y > 0) & (y < 6))


def test_conv2d_single_tile_equals_two_tiles():
    x = np.random.default_rng(3).normal(0, 1, (1, 4, 10, 10)).astype(np.float32)
    (a,), _ = run(conv_tiled_program(tiles=1), [x])
    (b,), _ = run(conv_tiled_program(tiles=2), [x])
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- bf16 matmul


def matmul_program(rhs: np.ndarray, bias: np.ndarray, tiles: int = 2):
    """lhs (16,32) @ rhs^T with rhs stored N x K ("NK"), + bias over N; tiled over M."""
    pb = ProgramBuilder("matmul_m_tiles")
    a = pb.input((16, 32))
    tr, tb = pb.constant(rhs, "bf16"), pb.constant(bias, "bf16")
    out = pb.output((16, 24))
    br, bb = pb.dma_in(tr), pb.dma_in(tb)
    rows = 16 // tiles
    for i in range(tiles):
        ba = pb.dma_in(a, (i * rows, 0), (rows, 32))
        by = pb.compute(
            "matmul", [(ba, (rows, 32), "bf16"), (br, (24, 32), "bf16"), (bb, (24,), "bf16")], (rows, 24), "bf16",
            {"lhs_dims": "MK", "rhs_dims": "NK", "output_dims": "MN"},
            [step("add", val(0), opnd(2, 1))], macs=rows * 24 * 32, tile=i,
        )  # fmt: skip
        pb.dma_out(by, out, (i * rows, 0), (rows, 24))
    return pb.build(tiles=tiles)


def test_matmul_two_tiles_over_m_matches_torch():
    rng = np.random.default_rng(4)
    rhs, bias = bf16_round(rng.normal(0, 1, (24, 32))), bf16_round(rng.normal(0, 1, (24,)))
    lhs = rng.normal(0, 1, (16, 32)).astype(np.float32)
    (y,), stats = run(matmul_program(rhs, bias), [lhs])
    lb = bf16_round(lhs)
    ref = (torch.matmul(t(lb), t(rhs).T) + t(bias)).numpy()
    terms = (torch.matmul(t(np.abs(lb)), t(np.abs(rhs)).T) + t(np.abs(bias))).numpy()
    assert_bf16_close(y, ref, terms)
    assert stats.macs == 16 * 24 * 32


def test_batched_matmul_dims_strings():
    rng = np.random.default_rng(5)
    pb = ProgramBuilder("bmm")
    a, b = pb.input((3, 4, 8)), pb.input((3, 8, 5))
    out = pb.output((3, 5, 4))  # output stored B, N, M
    ba, bb = pb.dma_in(a), pb.dma_in(b)
    by = pb.compute("matmul", [(ba, (3, 4, 8), "bf16"), (bb, (3, 8, 5), "bf16")], (3, 5, 4), "bf16",
                    {"lhs_dims": "BMK", "rhs_dims": "BKN", "output_dims": "BNM"}, macs=3 * 4 * 5 * 8)
    pb.dma_out(by, out)
    xa, xb = rng.normal(0, 1, (3, 4, 8)).astype(np.float32), rng.normal(0, 1, (3, 8, 5)).astype(np.float32)
    (y,), _ = run(pb.build(), [xa, xb])
    ra, rb = bf16_round(xa), bf16_round(xb)
    ref = torch.matmul(t(ra), t(rb)).transpose(1, 2).numpy()
    terms = torch.matmul(t(np.abs(ra)), t(np.abs(rb))).transpose(1, 2).numpy()
    assert_bf16_close(y, ref, terms)


# ---------------------------------------------------------------- elementwise


def test_elementwise_add_broadcast_bias_and_permuted_operand():
    """out[a,b,c] = (x[a,b,c] + bias[b]) * s[c,b]  (bias along dim 1, s transposed)."""
    rng = np.random.default_rng(6)
    bias, s = bf16_round(rng.normal(0, 1, (6,))), rng.normal(0, 1, (5, 6)).astype(np.float32)
    pb = ProgramBuilder("ew")
    x, ts = pb.input((2, 6, 5)), pb.input((5, 6))
    tb = pb.constant(bias, "bf16")
    out = pb.output((2, 6, 5))
    bx, bs, bb = pb.dma_in(x), pb.dma_in(ts), pb.dma_in(tb)
    by = pb.compute(
        "elementwise", [(bx, (2, 6, 5), "bf16"), (bb, (6,), "bf16"), (bs, (5, 6), "bf16")], (2, 6, 5), "bf16",
        steps=[step("add", opnd(0, 0, 1, 2), opnd(1, 1)), step("mul", val(0), opnd(2, 2, 1))],
    )  # fmt: skip
    pb.dma_out(by, out)
    xin = rng.normal(0, 1, (2, 6, 5)).astype(np.float32)
    (y,), stats = run(pb.build(), [xin, s])
    xb, sb = t(bf16_round(xin)), t(bf16_round(s))
    ref = ((xb + t(bias)[None, :, None]) * sb.T[None]).numpy()
    terms = ((xb.abs() + t(np.abs(bias))[None, :, None]) * sb.abs().T[None]).numpy()
    assert_bf16_close(y, ref, terms)
    assert stats.macs == 0


def test_lram_offsets_reused_across_tiles():
    """Tile 1 reuses tile 0's LRAM bytes (disjoint live ranges): results stay exact."""
    pb = ProgramBuilder("reuse")
    x, out = pb.input((4, 16)), pb.output((4, 16))
    for i in range(2):
        bx = pb.buffer(2 * 16 * 2, offset=0)
        by = pb.buffer(2 * 16 * 2, offset=64)
        pb.dma_in(x, (2 * i, 0), (2, 16), bx)
        pb.compute("elementwise", [(bx, (2, 16), "bf16")], (2, 16), "bf16",
                   steps=[step("mul", opnd(0), const(2.0))], result_buffer=by, tile=i)
        pb.dma_out(by, out, (2 * i, 0), (2, 16))
    xin = np.random.default_rng(8).normal(0, 1, (4, 16)).astype(np.float32)
    (y,), stats = run(pb.build(tiles=2), [xin])
    np.testing.assert_array_equal(y, bf16_round(xin) * 2)  # doubling a bf16 is exact
    assert stats.lram_peak_bytes == 2 * 64


# ---------------------------------------------------------------- int8 conv, bit exact


def ref_conv_int64(x: np.ndarray, w: np.ndarray, stride: int, dil: int) -> np.ndarray:
    """Independent reference: NCHW x OCHW -> NOHW, exact int64, loop over taps."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - dil * (kh - 1) - 1) // stride + 1, (wd - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    x64, w64 = x.astype(np.int64), w.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = x64[:, :, i * dil : i * dil + stride * (oh - 1) + 1 : stride, j * dil : j * dil + stride * (ow - 1) + 1 : stride]
            out += np.einsum("nchw,oc->nohw", patch, w64[:, :, i, j])
    return out


def test_int8_conv_i32_accumulator_bit_exact():
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 3, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    pb = ProgramBuilder("conv_i8_acc")
    tx, tw, ty = pb.input((1, 3, 9, 9), "i8", "i8"), pb.constant(w, "i8"), pb.output((1, 4, 7, 7), "i32", "i32")
    bx, bw = pb.dma_in(tx), pb.dma_in(tw)
    by = pb.compute("conv2d", [(bx, (1, 3, 9, 9), "i8"), (bw, (4, 3, 3, 3), "i8")], (1, 4, 7, 7), "i32",
                    {"input_dims": "NCHW", "weight_dims": "OCHW", "output_dims": "NOHW", "stride": [1, 1], "dilation": [1, 1]},
                    macs=4 * 49 * 27)  # fmt: skip
    pb.dma_out(by, ty)
    (y,), _ = run(pb.build(), [x])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref_conv_int64(x, w, 1, 1))


def test_int8_conv_nhwc_stride_dilation_requant_tiled_bit_exact():
    """NHWC x OHWC, stride 2, dilation 2, + i32 bias, requant (x*m + 2^(s-1)) >> s, + zp, clamp, i8."""
    rng = np.random.default_rng(10)
    x = rng.integers(-128, 128, (1, 11, 11, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 3, 3, 5), dtype=np.int8)
    bias = rng.integers(-20000, 20000, (6,), dtype=np.int32)
    mult, shift, zp = 1517, 20, -3
    pb = ProgramBuilder("conv_i8_requant")
    tx, tw, tb = pb.input((1, 11, 11, 5), "i8", "i8"), pb.constant(w, "i8"), pb.constant(bias, "i32")
    ty = pb.output((1, 4, 4, 6), "i8", "i8")
    bw, bb = pb.dma_in(tw), pb.dma_in(tb)
    steps = [
        step("add", val(0), opnd(2, 3)),
        step("mul", val(1), const(mult)),
        step("add", val(2), const(1 << (shift - 1))),
        step("div", val(3), const(1 << shift)),
        step("add", val(4), const(zp)),
        step("max", val(5), const(-128)),
        step("min", val(6), const(127)),
        step("cast", val(7), to="i8"),
    ]
    for tile in range(2):  # output rows [2*tile, 2*tile+2) need input rows [4*tile, 4*tile+7)
        bx = pb.dma_in(tx, (0, 4 * tile, 0, 0), (1, 7, 11, 5))
        by = pb.compute(
            "conv2d", [(bx, (1, 7, 11, 5), "i8"), (bw, (6, 3, 3, 5), "i8"), (bb, (6,), "i32")], (1, 2, 4, 6), "i8",
            {"input_dims": "NHWC", "weight_dims": "OHWC", "output_dims": "NHWO", "stride": [2, 2], "dilation": [2, 2]},
            steps, macs=2 * 4 * 6 * 45, tile=tile,
        )  # fmt: skip
        pb.dma_out(by, ty, (0, 2 * tile, 0, 0), (1, 2, 4, 6))
    (y,), _ = run(pb.build(tiles=2), [x])
    acc = ref_conv_int64(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), 2, 2) + bias.astype(np.int64)[None, :, None, None]
    ref = np.clip(((acc * mult + (1 << (shift - 1))) >> shift) + zp, -128, 127).astype(np.int8).transpose(0, 2, 3, 1)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, ref)
    assert len(np.unique(y)) > 20  # the requant scale keeps a real spread of values
