"""A residual added to the accumulator before its quantization (PT2E's conv + add + relu;
compiler/requant_acc_residual.py): the integer form G_c(a + h_c(r)) is checked against the f32
chain evaluated on every (accumulator, residual level) pair of a small range, brute force:
the differing pairs it reports must be exactly those, none more than one step off."""

import numpy as np
import pytest
from iree.compiler import ir
from requant_body import parsed_body

from torq.compiler import f32_chain
from torq.compiler.passes import RequantMode
from torq.compiler.requant_acc_residual import _split_at_join, fit_accumulator_residual, has_accumulator_value
from torq.compiler.rescale_fit import NotExact

# The body IREE forms from X86InductorQuantizer's conv + add + relu (a dispatch of torchvision's
# ResNet-18): the accumulator dequantized per channel, the int8 residual dequantized, added,
# relu, quantized.
BODY = """
func.func @main(%acc: tensor<4xi32>, %w: tensor<4xf32>, %b: tensor<4xf32>, %res: tensor<4xi8>) -> tensor<4xi8> {
  %e = tensor.empty() : tensor<4xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                       affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%acc, %w, %b, %res : tensor<4xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi8>) outs(%e : tensor<4xi8>) {
  ^bb0(%a: i32, %sw: f32, %bias: f32, %r: i8, %out: i8):
    %sx = arith.constant 0.00839792937 : f32
    %sr = arith.constant 0.0304123033 : f32
    %zr = arith.constant 15 : i16
    %zero = arith.constant 0.000000e+00 : f32
    %so = arith.constant 0.0151270917 : f32
    %zo = arith.constant -1.280000e+02 : f32
    %hi = arith.constant 1.270000e+02 : f32
    %0 = arith.extsi %r : i8 to i16
    %1 = arith.subi %0, %zr : i16
    %2 = arith.sitofp %1 : i16 to f32
    %3 = arith.mulf %2, %sr : f32
    %4 = arith.sitofp %a : i32 to f32
    %5 = arith.mulf %4, %sx : f32
    %6 = arith.mulf %5, %sw : f32
    %7 = arith.addf %6, %bias : f32
    %8 = arith.addf %7, %3 : f32
    %9 = arith.cmpf ugt, %8, %zero : f32
    %10 = arith.select %9, %8, %zero : f32
    %11 = arith.divf %10, %so : f32
    %12 = math.roundeven %11 : f32
    %13 = arith.addf %12, %zo : f32
    %14 = arith.maxnumf %13, %zo : f32
    %15 = arith.minnumf %14, %hi : f32
    %16 = arith.fptosi %15 : f32 to i8
    linalg.yield %16 : i8
  } -> tensor<4xi8>
  return %q : tensor<4xi8>
}
"""


# Without the bias, the conv's value is a product llvm-cpu fuses into the residual's add (the
# residual divided by the reciprocal of its scale, a quotient, so that only one product is in
# the sum): the chain is not split at the join, and its step points are searched on the whole
# chain.
BODY_NO_BIAS = BODY.replace("    %7 = arith.addf %6, %bias : f32\n", "").replace(
    "%8 = arith.addf %7, %3", "%8 = arith.addf %6, %3").replace(
    "%3 = arith.mulf %2, %sr", "%3 = arith.divf %2, %sr").replace("0.0304123033 : f32", "32.8814 : f32")


def _parsed(ctx, body=BODY):
    return parsed_body(body, ctx)


def _channels(args, seed: int, span: int):
    """Four channels: weight scales and biases as a conv's, accumulators on [-span, span]."""
    rng = np.random.default_rng(seed)
    return [({args[1]: np.float32(rng.uniform(0.02, 0.1)), args[2]: np.float32(rng.uniform(-0.5, 0.5))},
             -span + int(rng.integers(0, 50)), span - int(rng.integers(0, 50))) for _ in range(4)]


@pytest.mark.parametrize("body, split", [(BODY, True), (BODY_NO_BIAS, False)], ids=["split", "whole-chain"])
@pytest.mark.parametrize("seed", range(4))
def test_reported_pairs_are_those_brute_force_finds(seed, body, split):
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx, body)
        chain = f32_chain.Chain(ops, result, args[0], f32_chain.HostFloat(True))
        assert not has_accumulator_value(ops, args[0], args[3])
        channels = _channels(args, seed, 6_000)
        assert (_split_at_join(ops, result, args[0], args[3], f32_chain.HostFloat(True), channels) is not None) == split
        fit = fit_accumulator_residual(ops, result, args[0], args[3], f32_chain.HostFloat(True), channels, (0,),
                                       "conv2d", RequantMode.NEAREST)
        levels = np.arange(-128, 128)
        for c, (vals, lo, hi) in enumerate(channels):
            a = np.arange(lo, hi + 1)
            want = np.stack([chain.for_channel({**vals, args[3]: r})(a) for r in levels])
            got = fit.rescales[c](a[None, :] + fit.residual_rescales[c](levels)[:, None])
            assert np.abs(got - want).max() <= 1, (seed, c)
            assert int((got != want).sum()) == fit.differing[c], (seed, c)
        assert 0 < sum(fit.differing) < 0.01 * sum(fit.step_span)  # nearest, and close


def test_exact_mode_refuses_a_pair_off():
    with ir.Context() as ctx:
        module, ops, result, args = _parsed(ctx)
        with pytest.raises(NotExact, match="differs on"):
            fit_accumulator_residual(ops, result, args[0], args[3], f32_chain.HostFloat(True), _channels(args, 0, 6_000),
                                     (0,), "conv2d", RequantMode.EXACT)
