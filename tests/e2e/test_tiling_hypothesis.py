"""Random models x random LRAM budgets: super tiling always fits or says it cannot.

hypothesis draws small chains and DAGs (a residual add reuses an earlier
value) of conv / matmul / elementwise ops with random shapes, in bf16 (an f32
linalg model, demoted by the compiler) or int8 (chains of TOSA conv blocks
with rescale), a budget from 16 KiB to 2 MiB (`lram_kb=N,reserved_kb=0`, so the
simulator's LRAM is exactly the budget and its program validation rejects
any buffer beyond it) and a strategy. Every compile must either

- succeed, with the simulator's LRAM peaks (per command and per cycle) within
  the budget and outputs equal to an independent reference: numpy in float64
  for bf16 (rel L2 <= 1e-2, cosine >= 0.9999, DESIGN §7), IREE llvm-cpu on the
  same TOSA for int8 (bit-exact); or
- fail with one clean line: the "cannot fit" error (default strategy), whose
  smallest footprint exceeds the budget it names; the seed strategy may also
  fail with the allocator's "tile needs N bytes" (its estimate overflowed) —
  at compile time, never at run time.

`TORQ_HYPOTHESIS_EXAMPLES=200 pytest tests/e2e/test_tiling_hypothesis.py`
runs a longer search (default 10 random examples plus the explicit ones).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st
from llvm_cpu import TOSA, llvm_cpu
from numpy.lib.stride_tricks import sliding_window_view
from tosa_int8 import TosaBuilder

import torq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
from cnn import within_limits  # noqa: E402

EXAMPLES = int(os.environ.get("TORQ_HYPOTHESIS_EXAMPLES", "10"))
# Skewed small: that is where tiling happens; 2 MiB holds every model here untiled.
BUDGETS_KB = [16, 16, 20, 24, 32, 40, 48, 64, 96, 128, 512, 2048]
CANNOT_FIT = re.compile(r"^[^\n]*: error: [\w.]+: cannot fit LRAM even with size-1 tiles: "
                        r"smallest footprint (\d+) bytes, budget (\d+) bytes$")
SEED_OVERFLOW = re.compile(r"^[^\n]*: error: [\w.]+: tile needs (\d+) bytes of LRAM, budget is (\d+)$")


@dataclass(frozen=True)
class Case:
    family: str  # "conv" | "matmul" | "int8"
    shape: tuple[int, ...]  # the input's
    layers: tuple[tuple, ...]  # see the builders
    budget_kb: int
    strategy: str  # "default" | "seed"
    seed: int = 0
    expect: str = ""  # explicit examples: "tiled" | "cannot-fit"


# --- bf16 models: f32 linalg text and a float64 numpy reference ------------------------

def _t(shape) -> str:
    return "tensor<" + "x".join(str(d) for d in shape) + "xf32>"


def _par(rank: int) -> str:
    return ", ".join(['"parallel"'] * rank)


def _dense(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a, np.float32)
    return f'dense<"0x{a.tobytes().hex().upper()}"> : {_t(a.shape)}'


class FloatModel:
    """Builds `func.func @main` op by op, computing the numpy reference alongside."""

    def __init__(self, x: np.ndarray, rng: np.random.Generator):
        self.rng = rng
        self.lines: list[str] = ["%zero = arith.constant 0.0 : f32"]
        self.n = 0
        self.values = [("%x", x.shape, x.astype(np.float64))]  # (name, shape, reference)

    def _name(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def const(self, a: np.ndarray) -> str:
        v = self._name()
        self.lines.append(f"{v} = arith.constant {_dense(a)}")
        return v

    def _filled(self, shape) -> str:
        e, f = self._name(), self._name()
        self.lines += [f"{e} = tensor.empty() : {_t(shape)}",
                       f"{f} = linalg.fill ins(%zero : f32) outs({e} : {_t(shape)}) -> {_t(shape)}"]
        return f

    def _bias_act(self, v: str, shape, bias: np.ndarray, channel_dim: int, relu: bool) -> str:
        """v + bias (along `channel_dim`), then max(., 0) if `relu`: one elementwise generic."""
        rank = len(shape)
        dims = ", ".join(f"d{i}" for i in range(rank))
        b, e, r = self.const(bias), self._name(), self._name()
        act = "%m = arith.maximumf %s, %zero : f32\n    linalg.yield %m : f32" if relu else "linalg.yield %s : f32"
        self.lines += [
            f"{e} = tensor.empty() : {_t(shape)}",
            f"{r} = linalg.generic {{indexing_maps = [affine_map<({dims}) -> ({dims})>, "
            f"affine_map<({dims}) -> (d{channel_dim})>, affine_map<({dims}) -> ({dims})>], "
            f"iterator_types = [{_par(rank)}]}} ins({v}, {b} : {_t(shape)}, "
            f"{_t(bias.shape)}) outs({e} : {_t(shape)}) {{\n  ^bb0(%a: f32, %c: f32, %o: f32):\n"
            f"    %s = arith.addf %a, %c : f32\n    {act}\n  }} -> {_t(shape)}"]
        return r

    def conv(self, i: int, f: int, k: int, stride: int, relu: bool) -> None:
        x, (n, c, h, w), ref = self.values[i]
        oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
        wt = (self.rng.standard_normal((f, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        bias = (0.1 * self.rng.standard_normal(f)).astype(np.float32)
        out = (n, f, oh, ow)
        wv, acc, r = self.const(wt), self._filled(out), self._name()
        self.lines.append(
            f"{r} = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : tensor<2xi64>, strides = "
            f"dense<{stride}> : tensor<2xi64>}} ins({x}, {wv} : {_t((n, c, h, w))}, {_t(wt.shape)}) "
            f"outs({acc} : {_t(out)}) -> {_t(out)}")
        win = sliding_window_view(ref, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
        y = np.einsum("ncyxij,fcij->nfyx", win, wt.astype(np.float64)) + bias[None, :, None, None]
        self.values.append((self._bias_act(r, out, bias, 1, relu), out, np.maximum(y, 0) if relu else y))

    def matmul(self, i: int, cols: int, relu: bool) -> None:
        x, (m, k), ref = self.values[i]
        wt = (self.rng.standard_normal((k, cols)) / np.sqrt(k)).astype(np.float32)
        bias = (0.1 * self.rng.standard_normal(cols)).astype(np.float32)
        out = (m, cols)
        wv, acc, r = self.const(wt), self._filled(out), self._name()
        self.lines.append(f"{r} = linalg.matmul ins({x}, {wv} : {_t((m, k))}, {_t(wt.shape)}) "
                          f"outs({acc} : {_t(out)}) -> {_t(out)}")
        y = ref @ wt.astype(np.float64) + bias
        self.values.append((self._bias_act(r, out, bias, 1, relu), out, np.maximum(y, 0) if relu else y))

    def _elementwise(self, ins: list[str], shape, body: str) -> str:
        """A linalg.generic over `ins` (all of `shape`, block arguments %a, %b, ...) whose `body`
        computes its element %s; its name."""
        rank = len(shape)
        dims = ", ".join(f"d{j}" for j in range(rank))
        maps = ", ".join([f"affine_map<({dims}) -> ({dims})>"] * (len(ins) + 1))
        args = "".join(f"%{name}: f32, " for name in "ab"[:len(ins)])
        e, r = self._name(), self._name()
        self.lines += [
            f"{e} = tensor.empty() : {_t(shape)}",
            f"{r} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{_par(rank)}]}} "
            f"ins({', '.join(ins)} : {', '.join([_t(shape)] * len(ins))}) outs({e} : {_t(shape)}) {{\n"
            f"  ^bb0({args}%o: f32):\n{body}    linalg.yield %s : f32\n  }} -> {_t(shape)}"]
        return r

    def scale_shift(self, i: int, a: float, b: float) -> None:
        """x * a + b, elementwise."""
        x, shape, ref = self.values[i]
        r = self._elementwise([x], shape, f"    %ca = arith.constant {a!r} : f32\n    %cb = arith.constant {b!r} : f32\n"
                              "    %m = arith.mulf %a, %ca : f32\n    %s = arith.addf %m, %cb : f32\n")
        self.values.append((r, shape, ref * np.float64(np.float32(a)) + np.float64(np.float32(b))))

    def add(self, i: int, j: int) -> None:
        """values[i] + values[j] (same shape): with j an earlier value, a DAG."""
        (x, shape, rx), (y, _, ry) = self.values[i], self.values[j]
        r = self._elementwise([x, y], shape, "    %s = arith.addf %a, %b : f32\n")
        self.values.append((r, shape, rx + ry))

    def text(self) -> tuple[str, np.ndarray]:
        out, shape, ref = self.values[-1]
        body = "\n  ".join(self.lines)
        in_shape = self.values[0][1]
        return (f"func.func @main(%x: {_t(in_shape)}) -> {_t(shape)} {{\n  {body}\n"
                f"  return {out} : {_t(shape)}\n}}\n"), ref


def float_model(case: Case) -> tuple[str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(case.seed)
    x = rng.standard_normal(case.shape).astype(np.float32)
    model = FloatModel(x, rng)
    for layer in case.layers:
        kind, args = layer[0], layer[1:]
        last = len(model.values) - 1
        if kind == "conv":
            model.conv(last, *args)
        elif kind == "matmul":
            model.matmul(last, *args)
        elif kind == "scale_shift":
            model.scale_shift(last, *args)
        elif kind == "add":  # args: how far back the other operand is
            model.add(last, last - args[0])
    mlir, ref = model.text()
    return mlir, x, ref


# --- int8 models: TOSA conv blocks, llvm-cpu reference ---------------------------------

def int8_model(case: Case) -> tuple[str, np.ndarray, None]:
    b = TosaBuilder(np.random.default_rng(case.seed))
    v, shape, zp = "%x", case.shape, case.layers[0][-1]
    for out_ch, k, pad, out_zp in (layer[1:] for layer in case.layers[1:]):
        v, shape = b.conv_block(v, shape, zp, out_ch, k, 1, pad, out_zp, relu=out_zp < 0)
        zp = out_zp
    x = np.random.default_rng(case.seed + 1).integers(-128, 128, case.shape).astype(np.int8)
    return b.function(case.shape, v, shape), x, None


# --- random cases ---------------------------------------------------------------------

def _shape_keeping_layer(draw, kind: str, layers: list[tuple], shapes: list[tuple]) -> None:
    """Appends to `layers` (and the result's shape to `shapes`) a residual "add" of an earlier
    value of the last one's shape when `kind` is "add" and there is one, else a "scale_shift"."""
    back = [i for i in range(1, len(shapes)) if shapes[-1 - i] == shapes[-1]]
    if kind == "add" and back:
        layers.append(("add", draw(st.sampled_from(back))))
    else:
        layers.append(("scale_shift", draw(st.sampled_from([0.5, -1.25, 2.0])), 0.25))
    shapes.append(shapes[-1])


@st.composite
def cases(draw) -> Case:
    family = draw(st.sampled_from(["conv", "matmul", "int8"]))
    budget_kb = draw(st.sampled_from(BUDGETS_KB))
    strategy = draw(st.sampled_from(["default", "seed"]))
    seed = draw(st.integers(0, 2**16))
    n_layers = draw(st.integers(1, 3))
    # Input bytes about `scale` x the budget, so that small and large budgets both tile
    # (capped: the simulator runs every example).
    scale = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]))
    target = scale * budget_kb * 1024
    layers: list[tuple] = []
    if family == "conv":
        c = draw(st.sampled_from([3, 8, 16, 24, 32]))
        h = int(min(48, max(5, round((target / (2 * c)) ** 0.5))))
        shape = (1, c, h, h)
        shapes = [shape]
        for _ in range(n_layers):
            kind = draw(st.sampled_from(["conv", "conv", "scale_shift", "add"]))
            if kind == "conv" and shapes[-1][2] >= 3:
                k = draw(st.sampled_from([1, 3]))
                # k=1 stays at stride 1: a strided 1x1 conv is lowered as a stride-1
                # one today (patterns.contraction._classify_pointwise_conv), whatever the budget.
                stride = draw(st.sampled_from([1, 1, 2])) if k == 3 else 1
                f = draw(st.sampled_from([1, 4, 16, 24, 32]))
                layers.append(("conv", f, k, stride, draw(st.booleans())))
                oh = (shapes[-1][2] - k) // stride + 1
                shapes.append((1, f, oh, oh))
            else:
                _shape_keeping_layer(draw, kind, layers, shapes)
    elif family == "matmul":
        # Sometimes a reduction so long that one output element does not fit small budgets.
        k = draw(st.sampled_from([7, 64, 128, 192, 4096, 8192]))
        shape = (int(min(256, max(1, round(target / (2 * k))))), k)
        shapes = [shape]
        for _ in range(n_layers):
            kind = draw(st.sampled_from(["matmul", "matmul", "scale_shift", "add"]))
            if kind == "matmul":
                cols = draw(st.integers(1, 4) if shapes[-1][1] > 1024 else st.sampled_from([3, 64, 128, 256]))
                layers.append(("matmul", cols, draw(st.booleans())))
                shapes.append((shapes[-1][0], cols))
            else:
                _shape_keeping_layer(draw, kind, layers, shapes)
    else:
        c = draw(st.sampled_from([3, 8, 16, 32]))
        h = int(min(48, max(4, round((target / c) ** 0.5))))
        shape = (1, h, h, c)
        layers.append(("input", draw(st.integers(-20, 20))))
        for _ in range(min(n_layers, 2)):
            k = draw(st.sampled_from([1, 3]))
            pad = draw(st.sampled_from([0, 1])) if k == 3 else 0
            if h + 2 * pad < k:
                break
            h = h + 2 * pad - k + 1
            out_ch, out_zp = draw(st.sampled_from([1, 8, 16, 32])), draw(st.sampled_from([-128, -10, 5]))
            layers.append(("conv", out_ch, k, pad, out_zp))
    return Case(family, shape, tuple(layers), budget_kb, strategy, seed)


def _rel_l2_cosine(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    g, r = got.astype(np.float64).ravel(), ref.ravel()
    rel = float(np.linalg.norm(g - r) / max(np.linalg.norm(r), 1e-30))
    cos = float(g @ r / max(np.linalg.norm(g) * np.linalg.norm(r), 1e-30))
    return rel, cos


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(case=cases())
# A conv chain that must be tiled at 16 KiB (the input alone is 18 KiB in bf16).
@example(case=Case("conv", (1, 16, 24, 24), (("conv", 16, 3, 1, True), ("conv", 8, 3, 1, False)), 16,
                   "default", seed=1, expect="tiled"))
# A reduction of 8192 bf16 per output element: a 1x1 tile reads 16 KiB of each operand,
# so it compiles only with K tiled too (reduction tiling, the accumulator kept in LRAM).
@example(case=Case("matmul", (4, 8192), (("matmul", 2, False),), 16, "default", seed=2))
# An int8 conv block whose input (9 KiB) and output (9 KiB) do not fit 16 KiB together.
@example(case=Case("int8", (1, 24, 24, 16), (("input", -3), ("conv", 16, 3, 1, -10)), 16, "default", seed=3,
                   expect="tiled"))
def test_tiling_fits_or_says_why(case: Case):
    note(repr(case))
    mlir, x, ref = int8_model(case) if case.family == "int8" else float_model(case)
    budget = case.budget_kb * 1024
    flags = [f"--torq-super-tiling-strategy={case.strategy}"]
    if case.family == "int8":
        flags += TOSA
    try:
        cm = torq.compile(mlir, hw=f"SL2610:lram_kb={case.budget_kb},reserved_kb=0", flags=flags)
    except torq.TorqCompileError as e:
        msg = str(e)
        fit = CANNOT_FIT.match(msg)
        overflow = SEED_OVERFLOW.match(msg) if case.strategy == "seed" else None
        assert fit or overflow, msg
        smallest, named_budget = map(int, (fit or overflow).groups())
        assert named_budget == budget and smallest > budget, msg
        assert case.expect in ("", "cannot-fit"), msg
        event(f"{case.strategy}: {'cannot fit' if fit else 'seed overflow'}")
        return
    assert case.expect != "cannot-fit", "compiled a model whose 1x1 tile cannot fit"
    y = cm(x)
    stats = cm.last_stats
    for s in stats:
        assert s["lram_peak_bytes"] <= budget and s["lram_occupancy_peak_bytes"] <= budget, s
    tiled = max((s["tiles"] for s in stats), default=0) > 1
    event(f"{case.strategy}: {case.family} {'tiled' if tiled else 'untiled'}")
    if case.expect == "tiled":
        assert tiled
    if case.family == "int8":
        expected = llvm_cpu(mlir, x, flags=TOSA)
        assert y.shape == expected.shape and int((y != expected).sum()) == 0
    else:
        assert y.shape == ref.shape
        if not np.any(ref):  # e.g. a ReLU that zeroes everything: nothing to correlate
            assert not np.any(y)
            return
        rel, cos = _rel_l2_cosine(y, ref)
        assert within_limits(rel, cos), (rel, cos)
