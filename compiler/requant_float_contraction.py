"""A float contraction of dequantized int8 values, as an integer contraction.

ONNX Runtime quantizes a grouped convolution (RegNet's, ResNeXt's) like any
other, but the importer makes an integer convolution of a QDQ one only
without groups: IREE then forms a dispatch that computes it in f32,

    X = fl((x - zx) * sx)       x an int8 tensor, dequantized (an elementwise generic)
    W                           an f32 constant: int8 levels Wq times a scale sw per
                                output channel, dequantized at compile time
    Y = B + sum_r X * W         the contraction, from a bias B (zero, or a constant
                                broadcast along the output channels)
    q = quantize(Y)

`integer_contractions` rewrites it as an i8 x i8 -> i32 contraction of x and
Wq, and an elementwise generic computing Y's model from the accumulator a:

    A  = a - zx * sum_r Wq      (the zero point's share, per output channel)
    Y' = fl(fl(fl(A) * sx) * sw) + B

The quantize then reads Y', so lower_float_requantization fits its integer
rescale as after any int8 contraction (the elementwise fusion makes the two
generics one). Y' is not llvm-cpu's Y bit for bit: llvm-cpu rounds every
product and partial sum, so |Y - Y'| <= e accumulator units (sx * sw), with

    e = gamma_{n+6} * (max |x - zx| * sum_r |Wq| + |B| / (sx * sw))

(n products per output; Higham, Accuracy and Stability, 3.1 and 4.3: three
roundings per product, n in the sum, three in Y'). The rescale's fit counts the
accumulators within e of a step point (one output step from llvm-cpu at most),
the summary reports them, and --torq-requant=exact refuses a contraction with
any (`requant_channels.ambiguous_accumulators`). e rides on the integer
contraction as the attribute `F32_SUM_ERROR`, which requant.py consumes.

What is recognised, and only that: x an i8 tensor whose dequantize is exactly
fl32((x - zx) * sx) on all 256 levels (evaluated as llvm-cpu does); W a
constant whose every element is fl32(Wq * sw) for an int8 Wq and one f32 sw
per output channel (found by trying the scales its largest element allows);
|A| < 2^24 (sitofp exact). Anything else stays a float contraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from .f32_chain import Chain, HostFloat, type_name
from .ir_utils import (
    erase_unused,
    indexing_maps,
    inline_function_text,
    iterator_types,
    loop_ranges,
    n_inputs,
    region_ops,
    static_shape,
    walk_ops,
)
from .requant_channels import Known, on_channel_grid, weight_rows
from .rescale_fit import NotExact

# Attribute of the integer contraction: llvm-cpu's f32 rounding of the contraction it
# replaces, in accumulator units (e in the module docstring).
F32_SUM_ERROR = "torq.f32_sum_error"
_F32_UNIT = 2.0 ** -24
# Largest |A| the f32 model converts exactly.
_EXACT_F32_INT = 1 << 24


@dataclass
class _Dequantized:
    """An int8 tensor `x` dequantized as fl32((x - zero) * scale)."""
    x: ir.Value
    zero: int
    scale: np.float32


@dataclass
class _Weights:
    """The constant weight as int8 `levels` (its shape) times a per-channel `scale` over the
    output channels (the points of the contraction's result dims `chan`, sorted)."""
    levels: np.ndarray
    scale: np.ndarray  # f32, over the channel grid
    chan: tuple[int, ...]
    rows: np.ndarray  # levels as (channels, elements) in grid order
    multiplicity: int  # how often each element enters one output (requant_channels.WeightRows)


def integer_contractions(func: ir.Operation, known: Known, host: HostFloat | None) -> int:
    """Rewrites every f32 contraction of `func` of the form in the module docstring; returns
    how many. The rest of `func` is untouched."""
    from .pass_managers import run_pipeline
    from .patterns import classify_contraction

    ops = list(walk_ops(func))
    if not any(o.name == "arith.sitofp" for o in ops):  # no dequantize: a float model's dispatch
        return 0
    done = 0
    for con in [o for o in ops if o.name == "linalg.generic"]:
        if classify_contraction(con) is None or type_name(ir.RankedTensorType(con.results[0].type).element_type) \
                != "f32":
            continue
        plan = _plan(con, known, host or HostFloat(fma=False))
        if plan is None:
            continue
        value = inline_function_text(_function_text(con, *plan), con, [plan[0].x])
        con.results[0].replace_all_uses_with(value)
        con.erase()
        done += 1
    if done:
        erase_unused(lambda: walk_ops(func), {"linalg.generic", "linalg.fill", "tensor.empty", "arith.constant"})
        run_pipeline("func.func(linalg-fuse-elementwise-ops)", func)
    return done


def _plan(con: ir.Operation, known: Known, host: HostFloat):
    """(dequantized input, weights, bias over the channel grid, e) for contraction `con`, or
    None when it is not a dequantized int8 contraction this module reproduces."""
    x = _dequantized(con.operands[0], host)
    w = known(con.operands[1]) if x is not None else None
    if w is None:
        return None
    weights = _weight_levels(con, w)
    bias = _bias(con, known, weights.chan) if weights is not None else None
    if bias is None:
        return None
    e = _f32_sum_error(con, x, weights, bias)
    return None if e is None else (x, weights, bias, e)


def _dequantized(v: ir.Value, host: HostFloat) -> _Dequantized | None:
    """`v` as an int8 tensor dequantized exactly as fl32((x - zero) * scale), or None."""
    op = v.owner
    if isinstance(op, ir.Block) or op.name != "linalg.generic" or n_inputs(op) != 1 or \
            any(it != "parallel" for it in iterator_types(op)):
        return None
    maps = indexing_maps(op)
    if maps[0] != maps[1] or type_name(ir.RankedTensorType(op.operands[0].type).element_type) != "i8":
        return None
    body = region_ops(op)
    try:
        g = np.asarray(Chain(body[:-1], body[-1].operands[0], op.regions[0].blocks[0].arguments[0], host)(
            np.arange(-128, 128, dtype=np.int64)), np.float32)
    except NotExact:  # a body the chain cannot evaluate is not a dequantize
        return None
    zeros = np.flatnonzero(g == 0)
    if len(zeros) != 1 or g.shape != (256,):
        return None
    z = int(zeros[0]) - 128
    scale = g[z + 129] if z < 127 else -g[z + 127]
    levels = np.arange(-128, 128) - z
    if not scale > 0 or not np.array_equal(g, levels.astype(np.float32) * scale):
        return None
    return _Dequantized(op.operands[0], z, np.float32(scale))


def _weight_levels(con: ir.Operation, w: np.ndarray) -> _Weights | None:
    """The constant weight operand (operand 1) of `con` as int8 levels times an f32 scale per
    output channel, each element exactly fl32(level * scale); None if it is not."""
    if w.dtype != np.float32:
        return None
    try:
        rows = weight_rows(con, 1, w)
    except NotExact:
        return None
    grid = rows.rows.shape[:-1]
    levels, scale = _rows_as_levels(rows.rows.reshape(math.prod(grid), -1))
    if levels is None:
        return None
    return _Weights(_unflatten(levels, w.shape, rows.axes), scale.reshape(grid), tuple(rows.chan), levels,
                    rows.multiplicity)


def _rows_as_levels(rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Per row of f32 values: int8 levels and an f32 scale with fl32(level * scale) == value,
    trying the scales near max|row| / m (m = 127, 128: symmetric int8), near the whole
    tensor's (a per-tensor scale), then near max|row| / m for m from 126 down to 64: a row
    whose largest level is not the range's end (a row of PT2E RegNet-Y-400MF's grouped convs:
    at most 123 levels of 2^-12)."""
    top = np.abs(rows).max(1).astype(np.float64)
    levels = np.zeros(rows.shape, np.int64)
    scale = np.ones(len(rows), np.float32)
    for r, row in enumerate(rows):
        if top[r] == 0:
            continue
        found = _row_levels(row, [top[r] / 127, top[r] / 128, top.max() / 127, top.max() / 128]) or \
            _row_levels(row, [top[r] / m for m in range(126, 63, -1)])
        if found is None:
            return None, scale
        levels[r], scale[r] = found
    return levels, scale


def _row_levels(row: np.ndarray, guesses: list[float]) -> tuple[np.ndarray, np.float32] | None:
    """(levels, scale) of one row for the first scale within two f32 ulps of a guess that
    reproduces it, or None."""
    for guess in guesses:
        s = np.float32(guess)
        for k in (0, 1, -1, 2, -2):
            cand = s
            for _ in range(abs(k)):
                cand = np.nextafter(cand, np.float32(np.inf if k > 0 else 0))
            q = np.rint(row.astype(np.float64) / np.float64(cand))
            if np.all((q >= -128) & (q <= 127)) and np.array_equal(q.astype(np.float32) * cand, row):
                return q.astype(np.int64), np.float32(cand)
    return None


def _unflatten(rows: np.ndarray, shape: tuple[int, ...], par: list[int]) -> np.ndarray:
    """`rows` (made by `_weight_levels` from a tensor of `shape`) back in that shape."""
    rest = [k for k in range(len(shape)) if k not in par]
    order = par + rest
    return rows.reshape([shape[k] for k in order]).transpose(np.argsort(order))


def _bias(con: ir.Operation, known: Known, chan: tuple[int, ...]) -> np.ndarray | None:
    """The contraction's init as f32 values over the channel grid of `chan`: a scalar fill, or
    a constant broadcast along channel dims only; None otherwise."""
    from .patterns.contraction import dim_of
    from .patterns.inits import broadcast_source, fill_value

    init = con.operands[n_inputs(con)].owner
    shape = static_shape(con.results[0].type)
    grid = [shape[d] for d in chan]
    if isinstance(init, ir.Block):
        return None
    c = fill_value(init)
    if c is not None:
        return np.full(grid, c, np.float32)
    source = broadcast_source(init)
    values = known(source[0]) if source is not None else None
    if values is None or values.dtype != np.float32:
        return None
    pos = [dim_of(e) for e, n in zip(source[1].results, values.shape) if n != 1]
    if any(p not in chan for p in pos) or len(set(pos)) != len(pos):
        return None
    values = values.reshape([n for n in values.shape if n != 1]).transpose(np.argsort(pos))
    return on_channel_grid(values, tuple(sorted(pos)), chan, shape).reshape(grid)


def _f32_sum_error(con: ir.Operation, x: _Dequantized, weights: _Weights, bias: np.ndarray) -> float | None:
    """e of the module docstring (the largest over channels), or None when |A| can reach 2^24."""
    ranges, its = loop_ranges(con), iterator_types(con)
    red = [d for d, it in enumerate(its) if it == "reduction"]
    n = math.prod(ranges[d] for d in red)
    mult = weights.multiplicity
    x_top = max(abs(-128 - x.zero), abs(127 - x.zero))
    a_top = x_top * np.abs(weights.rows).sum(1) * mult
    if a_top.max(initial=0) >= _EXACT_F32_INT:
        return None
    unit = np.float64(x.scale) * weights.scale.reshape(-1).astype(np.float64)
    b = np.abs(bias.reshape(-1).astype(np.float64))
    b_units = np.divide(b, unit, out=np.zeros_like(b), where=a_top > 0)  # a zero row's Y is B exactly
    return sum_error_bound(n, a_top, b_units)


def sum_error_bound(n: int, a_top: np.ndarray, b_units: np.ndarray) -> float:
    """e: the largest over channels of gamma_{n+6} (a_top + b_units), where a channel's
    |A| <= a_top (over every input) and |B| = b_units accumulator units."""
    gamma = (n + 6) * _F32_UNIT / (1 - (n + 6) * _F32_UNIT)
    return float(gamma * (np.asarray(a_top) + np.asarray(b_units)).max(initial=0))


def _dense(values: np.ndarray, elt: str) -> str:
    """A dense elements literal of `values` (hex for the weights: fast to parse)."""
    arr = np.asarray(values)
    if elt == "i8" and arr.size > 1:
        return f'dense<"0x{arr.astype(np.int8).tobytes().hex().upper()}">'
    return f"dense<{arr.tolist()}>"


def _function_text(con: ir.Operation, x: _Dequantized, weights: _Weights, bias: np.ndarray, e: float) -> str:
    """A module whose function @integer computes `con`'s model Y' from the int8 tensor x."""
    maps = [str(ir.AffineMapAttr.get(m)) for m in indexing_maps(con)]
    shape = static_shape(con.results[0].type)
    rank = len(shape)
    out_t, acc_t = (f"tensor<{'x'.join(map(str, shape))}x{t}>" for t in ("f32", "i32"))
    grid = [shape[d] for d in weights.chan]

    def grid_t(elt: str) -> str:
        return f"tensor<{''.join(f'{n}x' for n in grid)}{elt}>"

    w_t = f"tensor<{'x'.join(map(str, weights.levels.shape))}xi8>"
    corr = (x.zero * weights.rows.sum(1) * weights.multiplicity).reshape(grid)
    dims = ", ".join(f"d{k}" for k in range(rank))
    ident = f"affine_map<({dims}) -> ({dims})>"
    chan_map = f"affine_map<({dims}) -> ({', '.join(f'd{d}' for d in weights.chan)})>"
    its = ", ".join(f'"{it}"' for it in iterator_types(con))
    parallel = ", ".join(['"parallel"'] * rank)
    return f"""
func.func @integer(%x: {x.x.type}) -> {out_t} {{
  %wq = arith.constant {_dense(weights.levels, "i8")} : {w_t}
  %corr = arith.constant {_dense(corr, "i32")} : {grid_t("i32")}
  %sw = arith.constant {_dense(weights.scale, "f32")} : {grid_t("f32")}
  %b = arith.constant {_dense(bias, "f32")} : {grid_t("f32")}
  %zero = arith.constant 0 : i32
  %ae = tensor.empty() : {acc_t}
  %a0 = linalg.fill ins(%zero : i32) outs(%ae : {acc_t}) -> {acc_t}
  %a = linalg.generic {{indexing_maps = [{", ".join(maps)}], iterator_types = [{its}], {F32_SUM_ERROR} = {e!r} : f64}}
      ins(%x, %wq : {x.x.type}, {w_t}) outs(%a0 : {acc_t}) {{
  ^bb0(%xi: i8, %wi: i8, %acc: i32):
    %x32 = arith.extsi %xi : i8 to i32
    %w32 = arith.extsi %wi : i8 to i32
    %p = arith.muli %x32, %w32 : i32
    %s = arith.addi %acc, %p : i32
    linalg.yield %s : i32
  }} -> {acc_t}
  %ye = tensor.empty() : {out_t}
  %y = linalg.generic {{indexing_maps = [{ident}, {chan_map}, {chan_map}, {chan_map}, {ident}], iterator_types = [{parallel}]}}
      ins(%a, %corr, %sw, %b : {acc_t}, {grid_t("i32")}, {grid_t("f32")}, {grid_t("f32")}) outs(%ye : {out_t}) {{
  ^bb0(%ai: i32, %ci: i32, %si: f32, %bi: f32, %o: f32):
    %sx = arith.constant {float(x.scale)!r} : f32
    %level = arith.subi %ai, %ci : i32
    %f = arith.sitofp %level : i32 to f32
    %t = arith.mulf %f, %sx : f32
    %u = arith.mulf %t, %si : f32
    %v = arith.addf %u, %bi : f32
    linalg.yield %v : f32
  }} -> {out_t}
  return %y : {out_t}
}}"""
