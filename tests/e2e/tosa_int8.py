"""Builders of int8 TOSA test models (MLIR text) with TFLite-style quantization.

Weights, biases and requantization parameters come from a seeded numpy RNG;
scales are turned into TOSA rescale (multiplier, shift) pairs the way
TFLite's converter does (multiplier in [2**30, 2**31), 32-bit scale).
"""

from __future__ import annotations

import math

import numpy as np


def dense(a: np.ndarray, elt: str) -> str:
    a = np.asarray(a)
    shape = "x".join(str(d) for d in a.shape)
    body = np.array2string(a, separator=", ", threshold=1 << 30, max_line_width=1 << 30)
    return f"dense<{body}> : tensor<{shape}x{elt}>" if a.ndim else f"dense<{int(a)}> : tensor<{elt}>"


def ttype(shape, elt: str) -> str:
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{elt}>"


def quantize_scale(scale: float) -> tuple[int, int]:
    """A real scale in (0, 1) as (multiplier, shift): scale ~= multiplier * 2**-shift."""
    m, e = math.frexp(scale)  # scale = m * 2**e, m in [0.5, 1)
    mult = int(round(m * (1 << 31)))
    shift = 31 - e
    if mult == 1 << 31:
        mult //= 2
        shift -= 1
    assert 2 <= shift <= 62
    return mult, shift


class TosaBuilder:
    """Accumulates TOSA ops in one function body (generic op syntax)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.lines: list[str] = []
        self.n = 0

    def _val(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def const(self, a: np.ndarray, elt: str) -> str:
        v = self._val()
        t = ttype(np.shape(a), elt)
        self.lines.append(f'{v} = "tosa.const"() <{{values = {dense(a, elt)}}}> : () -> {t}')
        return v

    def conv_block(self, x: str, x_shape, x_zp: int, out_ch: int, k: int, stride: int, pad: int,
                   out_zp: int, relu: bool, rounding: str = "DOUBLE_ROUND") -> tuple[str, tuple]:
        """conv2d (NHWC, int8, per-channel weights) + bias + rescale + clamp; returns (value, shape)."""
        c = x_shape[3]
        w = self.rng.integers(-127, 128, (out_ch, k, k, c))
        b = self.rng.integers(-2000, 2000, (out_ch,))
        return self.quantized_conv("tosa.conv2d", x, x_shape, x_zp, w, b, k * k * c, k, stride, pad,
                                   out_zp, relu, rounding)

    def quantized_conv(self, op: str, x: str, x_shape, x_zp: int, w: np.ndarray, bias: np.ndarray,
                       fan_in: int, k: int, stride: int, pad: int, out_zp: int, relu: bool,
                       rounding: str) -> tuple[str, tuple]:
        """`op` (tosa.conv2d / tosa.depthwise_conv2d, int8, i32 accumulator) + rescale + clamp."""
        n, h, w_, _ = x_shape
        oh = (h + 2 * pad - k) // stride + 1
        ow = (w_ + 2 * pad - k) // stride + 1
        # Output scale chosen so the int32 accumulator (fan_in products) spans about
        # the int8 range, per channel, with some channels saturating.
        acc_std = 40.0 * 70.0 * math.sqrt(fan_in)
        scales = self.rng.uniform(0.5, 3.0, len(bias)) * 64.0 / acc_std
        mults, shifts = zip(*(quantize_scale(s) for s in scales))
        wv = self.const(w, "i8")
        bv = self.const(bias, "i32")
        izp = self.const(np.array([x_zp]), "i8")
        wzp = self.const(np.array([0]), "i8")
        acc = self._val()
        acc_shape = (n, oh, ow, len(bias))
        self.lines.append(
            f'{acc} = "{op}"({x}, {wv}, {bv}, {izp}, {wzp}) <{{acc_type = i32, '
            f'dilation = array<i64: 1, 1>, pad = array<i64: {pad}, {pad}, {pad}, {pad}>, '
            f'stride = array<i64: {stride}, {stride}>}}> : ({ttype(x_shape, "i8")}, '
            f'{ttype(w.shape, "i8")}, {ttype(bias.shape, "i32")}, tensor<1xi8>, tensor<1xi8>) -> '
            f'{ttype(acc_shape, "i32")}')
        out = self.rescale(acc, acc_shape, list(mults), list(shifts), out_zp, rounding)
        if relu:
            out = self.clamp(out, acc_shape, out_zp, 127)
        return out, acc_shape

    def rescale(self, x: str, shape, mults: list[int], shifts: list[int], out_zp: int,
                rounding: str) -> str:
        per_channel = len(mults) > 1
        mv = self.const(np.array(mults), "i32")
        sv = self.const(np.array(shifts), "i8")
        izp = self.const(np.array([0]), "i32")
        ozp = self.const(np.array([out_zp]), "i8")
        r = self._val()
        k = len(mults)
        self.lines.append(
            f'{r} = "tosa.rescale"({x}, {mv}, {sv}, {izp}, {ozp}) <{{input_unsigned = false, '
            f'output_unsigned = false, per_channel = {str(per_channel).lower()}, '
            f'rounding_mode = #tosa.rounding_mode<{rounding}>, scale32 = true}}> : '
            f'({ttype(shape, "i32")}, tensor<{k}xi32>, tensor<{k}xi8>, tensor<1xi32>, tensor<1xi8>) -> '
            f'{ttype(shape, "i8")}')
        return r

    def clamp(self, x: str, shape, lo: int, hi: int) -> str:
        r = self._val()
        t = ttype(shape, "i8")
        self.lines.append(f'{r} = "tosa.clamp"({x}) <{{max_val = {hi} : i8, min_val = {lo} : i8}}> : ({t}) -> {t}')
        return r

    def function(self, arg_shape, result: str, result_shape) -> str:
        body = "\n  ".join(self.lines)
        return (f"func.func @main(%x: {ttype(arg_shape, 'i8')}) -> {ttype(result_shape, 'i8')} {{\n"
                f"  {body}\n  return {result} : {ttype(result_shape, 'i8')}\n}}\n")


def conv_rescale_clamp(seed: int, x_shape=(1, 24, 24, 16), out_ch=32, k=3, stride=1, pad=1,
                       x_zp=-3, out_zp=-10, rounding="DOUBLE_ROUND") -> str:
    b = TosaBuilder(np.random.default_rng(seed))
    y, shape = b.conv_block("%x", x_shape, x_zp, out_ch, k, stride, pad, out_zp, relu=True,
                            rounding=rounding)
    return b.function(x_shape, y, shape)


def two_layer_net(seed: int, x_shape=(1, 33, 33, 8)) -> str:
    """conv 3x3 stride 2 + ReLU (requantized) -> conv 1x1 (requantized, no clamp)."""
    b = TosaBuilder(np.random.default_rng(seed))
    h, shape = b.conv_block("%x", x_shape, -5, 24, 3, 2, 1, out_zp=-128, relu=True)
    y, shape = b.conv_block(h, shape, -128, 16, 1, 1, 0, out_zp=7, relu=False, rounding="SINGLE_ROUND")
    return b.function(x_shape, y, shape)


def depthwise_block(b: TosaBuilder, x: str, x_shape, x_zp: int, mult: int, k: int, stride: int, pad: int,
                    out_zp: int, relu: bool, rounding: str = "DOUBLE_ROUND") -> tuple[str, tuple]:
    """depthwise_conv2d (NHWC, int8, weights KH x KW x C x mult) + bias + per-channel rescale
    + clamp; returns (value, shape)."""
    c = x_shape[3]
    w = b.rng.integers(-127, 128, (k, k, c, mult))
    bias = b.rng.integers(-2000, 2000, (c * mult,))
    # One input channel per output: k * k products per accumulator.
    return b.quantized_conv("tosa.depthwise_conv2d", x, x_shape, x_zp, w, bias, k * k, k, stride, pad,
                            out_zp, relu, rounding)


def depthwise_rescale_clamp(seed: int, x_shape=(1, 24, 24, 16), mult=1, k=3, stride=1, pad=1,
                            x_zp=-3, out_zp=-10, rounding="DOUBLE_ROUND") -> str:
    """One int8 depthwise conv block; TOSA needs (H + 2 pad - k) divisible by the stride."""
    b = TosaBuilder(np.random.default_rng(seed))
    y, shape = depthwise_block(b, "%x", x_shape, x_zp, mult, k, stride, pad, out_zp, relu=True,
                               rounding=rounding)
    return b.function(x_shape, y, shape)
