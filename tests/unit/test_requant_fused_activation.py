"""An activation quantized with its contraction (PT2E's conv + hardswish;
compiler/requant_fused_activation.py): the NPU's form, segment tables of a grid level, is
checked against the f32 chain evaluated on every accumulator value of each channel's range,
brute force: the differing values it reports must be exactly those, none more than one step
off. And the direction rules that prove the activation monotone where it is."""

import numpy as np
import pytest
from iree.compiler import ir
from requant_body import parsed_body

from torq.compiler import f32_chain, requant_fused_activation
from torq.compiler.passes import RequantMode
from torq.compiler.requant_fused_activation import composite, fit_fused_activation, split_dequantized
from torq.compiler.rescale_fit import NotExact

# The body IREE forms from X86InductorQuantizer's conv + BatchNorm + hardswish (a dispatch of a
# conv block): the accumulator dequantized per channel, hardswish, quantized.
BODY = """
func.func @main(%acc: tensor<4xi32>, %w: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi8> {
  %e = tensor.empty() : tensor<4xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                       affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%acc, %w, %b : tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xi8>) {
  ^bb0(%a: i32, %sw: f32, %bias: f32, %out: i8):
    %sx = arith.constant 0.0303851012 : f32
    %three = arith.constant 3.000000e+00 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %six = arith.constant 6.000000e+00 : f32
    %so = arith.constant 0.0194978472 : f32
    %zo = arith.constant -1.090000e+02 : f32
    %lo = arith.constant -1.280000e+02 : f32
    %hi = arith.constant 1.270000e+02 : f32
    %0 = arith.sitofp %a : i32 to f32
    %1 = arith.mulf %0, %sx : f32
    %2 = arith.mulf %1, %sw : f32
    %3 = arith.addf %2, %bias : f32
    %4 = arith.addf %3, %three : f32
    %5 = arith.cmpf ugt, %4, %zero : f32
    %6 = arith.select %5, %4, %zero : f32
    %7 = arith.cmpf olt, %6, %six : f32
    %8 = arith.select %7, %6, %six : f32
    %9 = arith.divf %8, %six : f32
    %10 = arith.mulf %9, %3 : f32
    %11 = arith.divf %10, %so : f32
    %12 = math.roundeven %11 : f32
    %13 = arith.addf %12, %zo : f32
    %14 = arith.maxnumf %13, %lo : f32
    %15 = arith.minnumf %14, %hi : f32
    %16 = arith.fptosi %15 : f32 to i8
    linalg.yield %16 : i8
  } -> tensor<4xi8>
  return %q : tensor<4xi8>
}
"""

# conv + BatchNorm + SiLU: x * sigmoid(x), the sigmoid as 1 / (1 + exp(-x)).
SILU_BODY = BODY.replace("""    %4 = arith.addf %3, %three : f32
    %5 = arith.cmpf ugt, %4, %zero : f32
    %6 = arith.select %5, %4, %zero : f32
    %7 = arith.cmpf olt, %6, %six : f32
    %8 = arith.select %7, %6, %six : f32
    %9 = arith.divf %8, %six : f32
    %10 = arith.mulf %9, %3 : f32""", """    %one = arith.constant 1.000000e+00 : f32
    %4 = arith.negf %3 : f32
    %5 = math.exp %4 : f32
    %6 = arith.addf %5, %one : f32
    %7 = arith.divf %one, %6 : f32
    %10 = arith.mulf %7, %3 : f32""")


def _parsed(ctx, body: str = BODY):
    return parsed_body(body, ctx)


def _channels(args, seed: int, span: int):
    """Four channels: weight scales and biases as a conv's, accumulators on about [-span, span]."""
    rng = np.random.default_rng(seed)
    return [({args[1]: np.float32(rng.uniform(2e-4, 1e-3)), args[2]: np.float32(rng.uniform(-1, 1))},
             -span + int(rng.integers(0, 500)), span - int(rng.integers(0, 500))) for _ in range(4)]


@pytest.mark.parametrize("fma", [True, False])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("proofs", [None, 40])
def test_reported_values_are_those_brute_force_finds(seed, fma, proofs, monkeypatch):
    """With the default proofs the f32 axis is proven monotone or constant piecewise but for a
    few accumulators around each level change on [-3, 0], where f32 rounding wiggles; with 40,
    most of hardswish's valley is unproven and evaluated one accumulator at a time: both count
    the same."""
    if proofs:
        monkeypatch.setattr(requant_fused_activation, "_PROOFS", proofs)
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx)
        host = f32_chain.HostFloat(fma)
        chain = f32_chain.Chain(ops, result, args[0], host)
        channels = _channels(args, seed, 400_000)
        with pytest.raises(NotExact, match="not monotone"):
            chain.for_channel(channels[0][0]).direction(channels[0][1], channels[0][2])
        fit = fit_fused_activation(ops, result, args[0], host, channels, "conv2d", RequantMode.NEAREST)
        assert 2 <= len(fit.tables) <= requant_fused_activation.MAX_SEGMENTS
        for c, (vals, lo, hi) in enumerate(channels):
            a = np.arange(lo, hi + 1, dtype=np.int64)
            q = chain.for_channel(vals)(a).astype(np.int64)
            ours = composite(fit.level_rescales[c], fit.tables, a, fit.linear_rescales[c] if fit.linear_rescales else None)
            off = np.abs(ours - q)
            assert off.max() <= 1
            assert int(np.count_nonzero(off)) == fit.differing[c]
            assert 0 < fit.differing[c] < 0.1 * fit.step_span[c]
        assert fit.exhaustive > (10_000 if proofs else 0)
        del module


def test_exact_mode_refuses():
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx)
        with pytest.raises(NotExact, match="differs on"):
            fit_fused_activation(ops, result, args[0], f32_chain.HostFloat(True), _channels(args, 0, 100_000),
                                 "conv2d", RequantMode.EXACT)
        del module


def test_split_at_the_dequantized_accumulator():
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx)
        split = split_dequantized(ops, result, args[0], _channels(args, 0, 1000), f32_chain.HostFloat(True))
        assert split is not None
        b, g = split
        names = [o.name for o in b.ops if o.name != "arith.constant"]
        assert names == ["arith.sitofp", "arith.mulf", "arith.mulf", "arith.addf"]  # (a sx) sw + bias
        g_names = [o.name for o in g.ops if o.name != "arith.constant"]
        assert g_names[0] == "arith.addf" and g_names[-1] == "arith.fptosi" and "arith.sitofp" not in g_names
        del module


def test_directions_of_products_of_monotone_values():
    """hardswish's x * relu6(x + 3) / 6 is proven increasing where x >= 0 (two non-negative
    increasing factors) and constant where x <= -3, not on [-3, 0] (a negative increasing
    factor times a positive increasing one)."""
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx)
        _, g = split_dequantized(ops, result, args[0], _channels(args, 0, 1000), f32_chain.HostFloat(True))
        direction = lambda x1, x2: g.evaluate(np.array([x1, x2], np.float32), check=True).dir  # noqa: E731
        assert direction(0.0, 8.0) == 1
        assert direction(-50.0, -3.0) == 0
        assert direction(-2.0, -1.0) is None
        assert direction(-3.0, 1.0) is None
        del module


@pytest.mark.parametrize("seed", range(2))
def test_silu_reported_values_are_those_brute_force_finds(seed):
    """SiLU's exp: measured against the correctly rounded chain and with exp 4 ulps either way;
    the count is against the first."""
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx, SILU_BODY)
        host = f32_chain.HostFloat(True)
        chain = f32_chain.Chain(ops, result, args[0], host)
        channels = _channels(args, seed, 400_000)
        fit = fit_fused_activation(ops, result, args[0], host, channels, "conv2d", RequantMode.NEAREST)
        for c, (vals, lo, hi) in enumerate(channels):
            a = np.arange(lo, hi + 1, dtype=np.int64)
            ours = composite(fit.level_rescales[c], fit.tables, a, fit.linear_rescales[c] if fit.linear_rescales else None)
            for ulps in (0, -4, 4):
                off = np.abs(ours - chain.with_ulps(ulps).for_channel(vals)(a).astype(np.int64))
                assert off.max() <= 1
                if ulps == 0:
                    assert int(np.count_nonzero(off)) == fit.differing[c]
        del module


# An f32 value through sqrt (NaN below 0), scaled, rounded and converted to i8 unclamped
# (undefined beyond the i8 range): ranges there are refused, their neighbours proven.
UNDEFINED_BODY = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xi8> {
  %e = tensor.empty() : tensor<4xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xi8>) {
  ^bb0(%a: f32, %out: i8):
    %s = arith.constant 1.300000e+01 : f32
    %0 = math.sqrt %a : f32
    %1 = arith.mulf %0, %s : f32
    %2 = math.roundeven %1 : f32
    %3 = arith.fptosi %2 : f32 to i8
    linalg.yield %3 : i8
  } -> tensor<4xi8>
  return %q : tensor<4xi8>
}
"""


def _one_range_direction(g, x1, x2) -> int:
    """The direction of g on [x1, x2] asked alone, as requant_fused_activation used to."""
    try:
        r = g.evaluate(np.array([x1, x2], np.float32), check=True)
    except NotExact:
        return 2
    if r.dir is None:
        return 0 if r.lo is not None and r.lo == r.hi else 2
    return r.dir


@pytest.mark.parametrize("body", ["hardswish", "silu", "undefined"])
def test_directions_of_many_ranges_at_once_equal_each_asked_alone(body):
    """`Chain.directions` proves all ranges in one evaluation, each row with its own direction,
    enclosure and refusals: it must answer what one evaluation per range answers."""
    rng = np.random.default_rng(7)
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx, {"hardswish": BODY, "silu": SILU_BODY,
                                                  "undefined": UNDEFINED_BODY}[body])
        if body == "undefined":
            g = f32_chain.Chain(ops, result, args[0], f32_chain.HostFloat(True))
            centres = rng.uniform(-5, 120, 400)
        else:
            _, g = split_dequantized(ops, result, args[0], _channels(args, 0, 1000), f32_chain.HostFloat(True))
            centres = rng.uniform(-120, 30, 400) if body == "silu" else rng.uniform(-6, 4, 400)
        widths = 10.0 ** rng.uniform(-6, 1.5, 400)
        ends = np.sort(np.stack([centres, centres + widths], 1).astype(np.float32), 1)
        alone = np.array([_one_range_direction(g, x1, x2) for x1, x2 in ends])
        together = g.directions(ends)
        del module
    np.testing.assert_array_equal(together, alone)
    assert {0, 1, 2} <= set(alone.tolist())  # constant, increasing and unproven ranges all asked


def test_summed_levels_are_the_segments_lookups_summed():
    """`composite` reads one table of the segments' summed lookups: at every grid level, and
    beyond the grid at both ends, it must equal the sum of each segment's own lookup."""
    from torq.compiler.requant_fused_activation import segment_index, summed_levels
    from torq.compiler.requant_split import ActivationTable

    rng = np.random.default_rng(3)
    tables = [ActivationTable(-127, np.sort(rng.integers(-3, 4, 256)), 0) for _ in range(5)]
    u = np.arange(-40, 255 * 5 + 40)
    per_segment = sum(t.entries[segment_index(u, i)] for i, t in enumerate(tables))
    sums = summed_levels(tables)
    np.testing.assert_array_equal(sums[np.clip(u + 1, 0, len(sums) - 1)], per_segment)
