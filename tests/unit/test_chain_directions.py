"""Directions of a requantization chain over many channels (requant_channels.channel_directions):
asked once per group of channels whose constants have the same signs, they must equal
`Chain.direction` asked per channel, including channels whose scale is negative or zero."""

import numpy as np
import pytest
from iree.compiler import ir

from torq.compiler import f32_chain, requant_channels
from torq.compiler.rescale_fit import NotExact

BODY = """
func.func @main(%acc: tensor<8xi32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xi8> {
  %e = tensor.empty() : tensor<8xi8>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                       affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%acc, %w, %b : tensor<8xi32>, tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xi8>) {
  ^bb0(%a: i32, %sw: f32, %bias: f32, %out: i8):
    %sx = arith.constant 5.000000e-02 : f32
    %sy = arith.constant 8.000000e-01 : f32
    %lo = arith.constant -1.280000e+02 : f32
    %hi = arith.constant 1.270000e+02 : f32
    %0 = arith.sitofp %a : i32 to f32
    %1 = arith.mulf %0, %sx : f32
    %2 = arith.mulf %1, %sw : f32
    %3 = arith.addf %2, %bias : f32
    %4 = arith.divf %3, %sy : f32
    %5 = math.roundeven %4 : f32
    %6 = arith.maxnumf %5, %lo : f32
    %7 = arith.minnumf %6, %hi : f32
    %8 = arith.fptosi %7 : f32 to i8
    linalg.yield %8 : i8
  } -> tensor<8xi8>
  return %r : tensor<8xi8>
}
"""


def _chain_and_args(ctx):
    module = ir.Module.parse(BODY, ctx)
    generic = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations
               if op.operation.name == "linalg.generic"][0]
    ops = [o.operation for o in generic.regions[0].blocks[0].operations]
    args = generic.regions[0].blocks[0].arguments
    return module, f32_chain.Chain(ops[:-1], ops[-2].results[0], args[0], f32_chain.HostFloat(True)), args


def test_grouped_directions_equal_per_channel_directions():
    scales = [0.003, -0.002, 0.0, 0.004, -0.001, 0.002, 0.0, -0.003]
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module, chain, args = _chain_and_args(ctx)
        channels = [({args[1]: np.float32(s), args[2]: np.float32(0.25 * i)}, -50_000, 50_000)
                    for i, s in enumerate(scales)]
        want = [chain.for_channel(v).direction(lo, hi) for v, lo, hi in channels]
        got = requant_channels.channel_directions(chain, channels, "test")
        keys = chain.for_channels([v for v, _, _ in channels]).sign_signatures(
            np.array([[lo, hi] for _, lo, hi in channels]))
    assert want == [1, -1, 0, 1, -1, 1, 0, -1]
    assert got == want
    assert keys[2] is None and keys[6] is None  # a zero scale: asked on its own
    assert keys[0] == keys[3] == keys[5] and keys[1] == keys[4] == keys[7] and keys[0] != keys[1]


def test_a_failing_channel_is_named():
    """A channel whose arithmetic is undefined (a NaN scale) is reported with that channel."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module, chain, args = _chain_and_args(ctx)
        channels = [({args[1]: np.float32(s), args[2]: np.float32(0)}, -50_000, 50_000) for s in (0.003, np.nan)]
        with pytest.raises(NotExact, match="channel 1 .*NaN"):
            requant_channels.channel_directions(chain, channels, "test")


def test_an_infinity_inside_the_chain_is_ieee_s():
    """f32 overflow inside the chain (x * 3e37) is +-inf, which the clamps take to the int8
    range's ends, as llvm-cpu computes it: a value, not a refusal."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module, chain, args = _chain_and_args(ctx)
        c = chain.for_channel({args[1]: np.float32(3e37), args[2]: np.float32(0)})
        a = np.array([-(1 << 31), -7, 0, 7, (1 << 31) - 1])
        assert list(c.evaluate(a, check=True).v) == [-128, -128, 0, 127, 127]
