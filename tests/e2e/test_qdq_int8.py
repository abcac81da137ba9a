"""QDQ int8 (ONNX QuantizeLinear / DequantizeLinear) convs and Gemms on the NPU, bit-exact.

IREE makes the conv of a QDQ model int8 (i8 x i8 -> i32) but requantizes in
f32; compiler/requant.py replaces that f32 chain by an integer rescale only
where it is exactly equal on every reachable accumulator, else the dispatch
stays on host with a remark. The reference is IREE llvm-cpu compiling the
same imported module (DESIGN §7: int8 bit-exact).

The pointwise models are exhaustive: a 1x1 conv (or Gemm) over 2 input
channels whose input holds every pair of int8 values, with a weight of +-1 on
one channel, so every accumulator value a channel can produce occurs, and
with it every step point of the requantization (an off-by-one anywhere shows).
"""

import json
from fractions import Fraction

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from llvm_cpu import llvm_cpu  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import torq  # noqa: E402
from torq.compiler import f32_chain, requant_channels, rescale_batch, rescale_fit  # noqa: E402
from torq.compiler.onnx_import import import_onnx  # noqa: E402

GRAPH = "main_graph"
# Per output channel: weights on input channels 0 and 1 (one is +-1: every accumulator occurs).
WEIGHTS = np.array([[1, 127], [-1, 127], [1, -128], [-1, 100], [1, 77], [1, 0]], np.int8)
# Scales as calibration gives them (not round numbers: with sx * sw / sy = 1/80 exactly, every
# step point sits on an exact tie that f32 noise breaks either way, and no line fits).
SX, ZX = np.float32(0.0213), np.int8(-3)


def pointwise_qdq_model(per_channel: bool, relu: bool, gemm: bool = False, sy=0.0171, zy=4, weights=WEIGHTS,
                        seed=0) -> onnx.ModelProto:
    """x -> Q/DQ (SX, ZX) -> Conv 1x1 (or Gemm) with DQ int8 weights and DQ int32 bias -> [Relu]
    -> Q/DQ (sy, zy). Weight scales per channel (axis 0) or per tensor."""
    rng = np.random.default_rng(seed)
    cout = len(weights)
    sw = (rng.uniform(0.006, 0.014, cout) if per_channel else np.full(cout, 0.0097)).astype(np.float32)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    nodes.append(helper.make_node("QuantizeLinear", ["x", const("sx", SX), const("zx", ZX)], ["xq"]))
    nodes.append(helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]))
    w = weights if gemm else weights.reshape(cout, 2, 1, 1)
    w_scale = sw if per_channel else sw[0]
    w_zp = np.zeros(cout, np.int8) if per_channel else np.int8(0)
    nodes.append(helper.make_node("DequantizeLinear", [const("w", w), const("sw", w_scale), const("zw", w_zp)],
                                  ["wd"], axis=0))
    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
    nodes.append(helper.make_node("DequantizeLinear", [const("b", bias), const("sb", (SX * sw).astype(np.float32)),
                                                       const("zb", np.zeros(cout, np.int32))], ["bd"], axis=0))
    if gemm:
        nodes.append(helper.make_node("Gemm", ["xd", "wd", "bd"], ["c"], name="fc", transB=1))
    else:
        nodes.append(helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv"))
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, const("sy", np.float32(sy)), const("zy", np.int8(zy))],
                                  ["yq"]))
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
    in_shape = [256 * 256, 2] if gemm else [1, 2, 256, 256]
    out_shape = [256 * 256, cout] if gemm else [1, cout, 256, 256]
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def every_int8_pair(gemm: bool = False) -> np.ndarray:
    """Input whose quantized channels 0 and 1 hold every pair (i, j) of int8 values."""
    v = np.arange(-128, 128, dtype=np.float32)
    x = (v - np.float32(ZX)) * SX  # quantizes back to v exactly
    x0, x1 = np.meshgrid(x, x, indexing="ij")
    if gemm:
        return np.stack([x0.ravel(), x1.ravel()], axis=1)
    return np.stack([x0, x1])[None]


def onnx_on_llvm_cpu(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return llvm_cpu(import_onnx(model.SerializeToString(), "m.onnx"), x, function=GRAPH)


class Remarks:
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines.append(s)

    def flush(self):
        pass

    @property
    def text(self):
        return "".join(self.lines)


_REFERENCES: dict = {}


def compile_and_compare(model, x, flags=()):
    key = (model.SerializeToString(), x.tobytes())
    if key not in _REFERENCES:
        _REFERENCES[key] = onnx_on_llvm_cpu(model, x)
    ref = _REFERENCES[key]
    remarks = Remarks()
    cm = torq.compile(model, remarks=remarks, flags=flags)
    y = cm(x)
    assert y.dtype == ref.dtype and y.shape == ref.shape
    return cm, y, ref, remarks.text


def contraction_dispatches(cm, macs):
    return [d for d in cm.report.dispatches if d.macs == macs]


@pytest.mark.parametrize("per_channel,relu,gemm", [(False, False, False), (True, True, False),
                                                   (False, True, True)],
                         ids=["per-tensor", "per-channel-relu", "gemm-per-tensor-relu"])
def test_pointwise_qdq_bit_exact_on_torq(per_channel, relu, gemm):
    model = pointwise_qdq_model(per_channel, relu, gemm)
    cm, y, ref, remarks = compile_and_compare(model, every_int8_pair(gemm))
    convs = contraction_dispatches(cm, 256 * 256 * 2 * len(WEIGHTS))
    assert len(convs) == 1 and convs[0].executor == "torq", (cm.report.dispatches, remarks)
    differ = int((y != ref).sum())
    assert differ == 0, f"{differ} of {y.size} outputs differ from llvm-cpu"
    # Not trivial: many output levels, saturation at both ends (or the ReLU floor).
    levels = np.unique(np.round(ref / np.float32(0.0171)))
    assert len(levels) > 200 if not relu else len(levels) > 100, len(levels)


def test_off_by_one_rescale_is_caught(monkeypatch):
    """The exhaustive input sees every step point: moving them by one accumulator fails."""
    fit = requant_channels.fit_many

    def off_by_one(*args, **kw):
        return [rescale_fit.ChannelFit(
            rescale_fit.Rescale(c.rescale.offset + 1, c.rescale.multiplier, c.rescale.rounding, c.rescale.shift,
                                c.rescale.qmin, c.rescale.qmax), c.differing, c.step_span)
            for c in fit(*args, **kw)]

    monkeypatch.setattr(requant_channels, "fit_many", off_by_one)
    model = pointwise_qdq_model(per_channel=True, relu=True)  # the reference is cached from above
    cm, y, ref, _ = compile_and_compare(model, every_int8_pair())
    assert contraction_dispatches(cm, 256 * 256 * 2 * len(WEIGHTS))[0].executor == "torq"
    differ = int((y != ref).sum())
    # Each step point of each channel now lands one accumulator early (a few pixels each).
    assert differ > 6 * 50, differ


def test_no_exact_rescale_stays_on_host_with_requant_exact():
    """Big accumulator range, fine output scale: f32 rounding moves step points off every line,
    and --torq-requant=exact keeps the dispatch on host."""
    model = wide_conv_qdq_model()
    x = np.random.default_rng(3).standard_normal((1, 32, 10, 10)).astype(np.float32) * 2
    cm, y, ref, remarks = compile_and_compare(model, x, flags=("--torq-requant=exact",))
    conv = contraction_dispatches(cm, 10 * 10 * 8 * 32 * 9)
    assert len(conv) == 1 and conv[0].executor == "host", cm.report.dispatches
    assert "lie on no line" in conv[0].reason and "channel " in conv[0].reason, conv[0].reason
    assert "conv: remark: dispatch" in remarks and "stays on host: conv2d float requantization, channel" in remarks
    assert np.array_equal(y, ref)  # on host: llvm-cpu's own f32 chain


def test_nearest_rescale_within_one_step_of_llvm_cpu(tmp_path):
    """The same conv by default: the nearest integer rescale on the NPU, every output within one
    step of llvm-cpu's f32 chain, and the compile report's measure of how often it differs."""
    model = wide_conv_qdq_model()
    x = np.random.default_rng(3).standard_normal((1, 32, 10, 10)).astype(np.float32) * 2
    dump = tmp_path / "quant.json"
    cm, y, ref, remarks = compile_and_compare(model, x, flags=(f"--torq-dump-quant={dump}",))
    conv = contraction_dispatches(cm, 10 * 10 * 8 * 32 * 9)
    assert len(conv) == 1 and conv[0].executor == "torq", (cm.report.dispatches, remarks)
    steps = np.round((y - ref) / np.float32(0.2)).astype(np.int64)
    assert np.abs(steps).max() <= 1
    assert np.allclose(y - ref, steps * np.float32(0.2), atol=1e-6)  # whole steps: the same output grid
    summary = conv[0].requant[0]
    # Per-tensor scales, but each output channel has its own weights and so its own accumulator range.
    assert summary["kind"] == "conv2d" and summary["channels"] == 8 and summary["exact_channels"] < 8, summary
    assert 0 < summary["differing_share"] < 0.01, summary
    assert "the others nearest (one output step off on" in remarks
    dumped = json.loads(dump.read_text())["dispatches"]
    assert [d["requantizations"] for d in dumped] == [[summary]]
    # Measured share vs observed share: the outputs that differ are few, as the report says.
    assert (steps != 0).mean() <= 0.05, (steps != 0).mean()


def wide_conv_qdq_model(seed=1) -> onnx.ModelProto:
    """3x3 conv, 32 -> 8 channels, pad 1, per-tensor scales with ~1000 accumulator values per level."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    nodes.append(helper.make_node("QuantizeLinear", ["x", const("sx", np.float32(0.05)), const("zx", np.int8(1))],
                                  ["xq"]))
    nodes.append(helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]))
    nodes.append(helper.make_node("DequantizeLinear", [
        const("w", rng.integers(-127, 128, (8, 32, 3, 3)).astype(np.int8)), const("sw", np.float32(0.004)),
        const("zw", np.int8(0))], ["wd"]))
    nodes.append(helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("QuantizeLinear", ["c", const("sy", np.float32(0.2)), const("zy", np.int8(0))],
                                  ["yq"]))
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
    graph = helper.make_graph(nodes, GRAPH, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


# --- the derivation, without the compiler ------------------------------------------------

def numpy_chain(sx, sw, b, sy, zy, relu, fma):
    """The ONNX QDQ requantization of an accumulator a, f32 op by op (FMA: one rounding)."""
    sx, sw, b, sy, zy = (np.float32(v) for v in (sx, sw, b, sy, zy))

    def f(a):
        t = np.asarray(a).astype(np.float32) * sx
        t = f32_chain.fma_f32(t, sw, b) if fma else (t * sw).astype(np.float32) + b
        if relu:
            t = np.where(t > 0, t, np.float32(0))
        t = np.rint((t / sy).astype(np.float32)) + zy
        return np.clip(t, -128, 127).astype(np.int64)

    return f


def no_line_certificate(ts: np.ndarray, qlo: int) -> bool:
    """Two pairs of step points whose slope bounds contradict (so no line has these steps)."""
    ks = np.arange(qlo + 1, qlo + 1 + len(ts))
    best_lo, best_hi = Fraction(0), None
    for i in range(len(ks)):
        for j in range(i + 1, len(ks)):
            dk, dt = int(ks[j] - ks[i]), int(ts[j] - ts[i])
            best_lo = max(best_lo, Fraction(dk, dt + 1))
            if dt >= 2:
                best_hi = Fraction(dk, dt - 1) if best_hi is None else min(best_hi, Fraction(dk, dt - 1))
    return best_hi is not None and best_lo >= best_hi


def test_step_points_and_rescale_against_brute_force():
    rng = np.random.default_rng(7)
    exact = refused = 0
    for trial in range(16):
        relu, fma = bool(trial % 2), bool(trial % 3)
        # Half with few accumulator values per level, half with thousands (where f32 noise shows).
        wide = trial >= 8
        sx, sw = rng.uniform(0.01, 0.1), rng.uniform(0.002, 0.02)
        sy = sx * sw * (rng.uniform(6000, 12000) if wide else rng.uniform(20, 60))
        f = numpy_chain(sx, sw, rng.uniform(-0.5, 0.5), sy, int(rng.integers(-10, 10)), relu, fma)
        span = 1_000_000 if wide else 6000
        lo, hi = -int(rng.integers(span // 3, span)), int(rng.integers(span // 3, span))
        a = np.arange(lo, hi + 1)
        qlo, qhi, ts = rescale_fit.step_points(f, lo, hi)
        bqlo, bqhi, bts = rescale_fit.brute_force_step_points(f, lo, hi)
        assert (qlo, qhi) == (bqlo, bqhi) and np.array_equal(ts, bts)
        # Brute force, independently: a step point is where the value first reaches a level.
        q = f(a)
        assert np.all(np.diff(q) >= 0)
        ks = np.arange(qlo + 1, qhi + 1)
        assert np.all(q[ts - lo] >= ks) and np.all((ts == lo) | (q[np.maximum(ts - 1 - lo, 0)] < ks))
        try:
            r = rescale_batch.derive_rescale(f, lo, hi, 1)
        except rescale_fit.NotExact:
            refused += 1
            assert no_line_certificate(bts, bqlo)
            continue
        exact += 1
        assert np.array_equal(r(a), q)
        assert abs(r.multiplier) < 2 ** 31 and 0 <= r.shift <= 62
    assert exact >= 6 and refused >= 2, (exact, refused)


def test_decreasing_and_constant_chains():
    f = numpy_chain(0.0513, -0.0107, 0.1234, 0.0217, 3, relu=False, fma=True)  # a negative weight scale
    lo, hi = -5000, 5000
    r = rescale_batch.derive_rescale(f, lo, hi, -1)
    a = np.arange(lo, hi + 1)
    assert r.multiplier < 0 and np.array_equal(r(a), f(a))
    g = numpy_chain(0.05, 0.01, -100.0, 0.02, 3, relu=False, fma=True)  # saturated everywhere
    rc = rescale_batch.derive_rescale(g, lo, hi, 1)
    assert rc.multiplier == 0 and np.array_equal(rc(a), g(a)) and np.all(g(a) == -128)


def test_fma_emulation_is_correctly_rounded():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(2000).astype(np.float32)
    y = rng.standard_normal(2000).astype(np.float32)
    z = (rng.standard_normal(2000) * 1e-3).astype(np.float32)
    # Ties: x*y exactly halfway between f32 neighbours of z-sized sums.
    x[:100], y[:100], z[:100] = np.float32(1 + 2 ** -12), np.float32(1 + 2 ** -12), np.float32(2 ** -30)
    # Ties decided by a residual below f64's precision: 2^60 + 2^36 - 2^-10, both signs.
    x[100:110], y[100:110], z[100:110] = np.float32(2 ** 18 * (1 + 2 ** -23)), np.float32(2 ** 18 * (1 - 2 ** -23)), \
        np.float32(2 ** 60)
    x[105:110], z[105:110] = -x[105:110], -z[105:110]
    # Results in f32's subnormal range (the tie test there is by the neighbours).
    x[110:160], y[110:160] = x[110:160] * np.float32(1e-20), y[110:160] * np.float32(1e-20)
    z[110:160] = z[110:160] * np.float32(1e-36)
    got = f32_chain.fma_f32(x, y, z)

    def exact(a, b, c):
        v = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
        f = np.float32(float(v))
        cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
        return min(cands, key=lambda w: (abs(Fraction(float(w)) - v), int(w.view(np.uint32)) & 1))

    want = np.array([exact(a, b, c) for a, b, c in zip(x, y, z)], np.float32)
    assert np.array_equal(got, want)


CHAIN_MLIR = """
func.func @main(%acc: tensor<{n}xi32>, %corr: tensor<{n}xi32>, %bias: tensor<{n}xf32>) -> tensor<{n}xi8> {{
  %e = tensor.empty() : tensor<{n}xi8>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                        affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                        iterator_types = ["parallel"]}}
      ins(%acc, %corr, %bias : tensor<{n}xi32>, tensor<{n}xi32>, tensor<{n}xf32>) outs(%e : tensor<{n}xi8>) {{
  ^bb0(%a: i32, %c: i32, %b: f32, %out: i8):
    %sx = arith.constant 5.000000e-02 : f32
    %sw = arith.constant 0.00999999977 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %sy = arith.constant 8.000000e-01 : f32
    %zy = arith.constant -5.000000e+00 : f32
    %lo = arith.constant -1.280000e+02 : f32
    %hi = arith.constant 1.270000e+02 : f32
    %0 = arith.subi %a, %c : i32
    %1 = arith.sitofp %0 : i32 to f32
    %2 = arith.mulf %1, %sx : f32
    %3 = arith.mulf %2, %sw : f32
    %4 = arith.addf %3, %b : f32
    %5 = arith.cmpf ugt, %4, %zero : f32
    %6 = arith.select %5, %4, %zero : f32
    %7 = arith.divf %6, %sy : f32
    %8 = math.roundeven %7 : f32
    %9 = arith.addf %8, %zy : f32
    %10 = arith.maxnumf %9, %lo : f32
    %11 = arith.minnumf %10, %hi : f32
    %12 = arith.fptosi %11 : f32 to i8
    linalg.yield %12 : i8
  }} -> tensor<{n}xi8>
  return %r : tensor<{n}xi8>
}}
"""


def _host_has_fma() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " fma " in f" {line} " for line in f)
    except OSError:
        pytest.skip("no /proc/cpuinfo to tell whether the host has FMA")


def test_chain_emulation_matches_llvm_cpu_at_step_points():
    """f32_chain.Chain evaluates the ONNX requantization body exactly as llvm-cpu does (on an
    FMA host: mulf + addf fused, one rounding), right at the step points, where a single
    f32 rounding decides the level; the separately rounded emulation would not match."""
    from iree.compiler import ir

    corr, bias = 1234, np.float32(0.8535)
    with ir.Context():
        module = ir.Module.parse(CHAIN_MLIR.format(n=4))
        generic = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations
                   if op.operation.name == "linalg.generic"][0]
        ops = [o.operation for o in generic.regions[0].blocks[0].operations]
        args = generic.regions[0].blocks[0].arguments
        chains = {fma: f32_chain.Chain(ops[:-1], ops[-2].results[0], args[0], f32_chain.HostFloat(fma))
                  .for_channel({args[1]: np.int64(corr), args[2]: bias}) for fma in (True, False)}
        points = []
        for chain in chains.values():
            _, _, ts = rescale_fit.step_points(chain, -600_000, 600_000)
            points.append(np.concatenate([ts - 1, ts, ts + 1]))
        points = np.unique(np.concatenate(points))
        want = {fma: chain(points) for fma, chain in chains.items()}
    assert int((want[True] != want[False]).sum()) > 0  # the two models disagree somewhere
    n = len(points)
    got = llvm_cpu(CHAIN_MLIR.format(n=n), points.astype(np.int32), np.full(n, corr, np.int32),
                   np.full(n, bias, np.float32)).astype(np.int64)
    expected = want[_host_has_fma()]
    assert np.array_equal(got, expected), f"{int((got != expected).sum())} of {n} step-point levels differ"


TORCH_QDQ = """
import torch
import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed

qd = torch.ops.quantized_decomposed


class QdqConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.randint(-127, 128, (8, 4, 3, 3), generator=g, dtype=torch.int8)
        self.b = torch.randn(8, generator=g) * 0.1

    def forward(self, x):
        xd = qd.dequantize_per_tensor(qd.quantize_per_tensor(x, 0.0487, 3, -128, 127, torch.int8),
                                      0.0487, 3, -128, 127, torch.int8)
        wd = qd.dequantize_per_tensor(self.w, 0.0103, 0, -127, 127, torch.int8)
        y = torch.nn.functional.conv2d(xd, wd, self.b, padding=1).relu()
        yq = qd.quantize_per_tensor(y, 0.79, -5, -128, 127, torch.int8)
        return qd.dequantize_per_tensor(yq, 0.79, -5, -128, 127, torch.int8)
"""


def test_torch_quantized_decomposed_conv():
    """torch's quantize_per_tensor / dequantize_per_tensor around a conv, exported with
    iree-turbine, gives the same i8 conv + f32 requantization chain (an f32 bias constant)."""
    torch = pytest.importorskip("torch")
    from iree.turbine import aot

    ns: dict = {}
    exec(TORCH_QDQ, ns)
    mlir = str(aot.export(ns["QdqConv"](), torch.zeros(1, 4, 8, 8)).mlir_module)
    x = (np.random.default_rng(0).standard_normal((1, 4, 8, 8)) * 3).astype(np.float32)
    ref = llvm_cpu(mlir, x)
    cm = torq.compile(mlir, remarks=None)
    conv = contraction_dispatches(cm, 8 * 8 * 8 * 4 * 9)
    assert len(conv) == 1 and conv[0].executor == "torq", cm.report.dispatches
    y = cm(x)
    assert np.array_equal(y, ref), f"{int((y != ref).sum())} of {y.size} outputs differ from llvm-cpu"
    assert len(np.unique(ref)) > 20
