"""math.fpowi in a requantization chain (f32_chain._Evaluation.power): a constant exponent of
1 to 3 is evaluated as the products llvm-cpu makes of it, each rounded to f32 (x * x,
x * (x * x)); any other exponent is refused, not approximated."""

import numpy as np
import pytest
from iree.compiler import ir

from torq.compiler import f32_chain
from torq.compiler.rescale_fit import NotExact

BODY = """
func.func @main(%acc: tensor<8xi32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%acc : tensor<8xi32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: i32, %out: f32):
    %s = arith.constant 3.7e-02 : f32
    %n = arith.constant N : i32
    %0 = arith.sitofp %a : i32 to f32
    %1 = arith.mulf %0, %s : f32
    %2 = math.fpowi %1, %n : f32, i32
    linalg.yield %2 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"""


def _evaluate(exponent: int, a: np.ndarray) -> np.ndarray:
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(BODY.replace("N", str(exponent)), ctx)
        generic = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations
                   if op.operation.name == "linalg.generic"][0]
        ops = [o.operation for o in generic.regions[0].blocks[0].operations]
        arg = generic.regions[0].blocks[0].arguments[0]
        chain = f32_chain.Chain(ops[:-1], ops[-2].results[0], arg, f32_chain.HostFloat(True))
        return chain.evaluate(a).v


@pytest.mark.parametrize("exponent", [1, 2, 3])
def test_small_powers_are_llvm_cpus_products(exponent):
    a = np.arange(-3000, 3000, 7, dtype=np.int64)
    x = (a.astype(np.float32) * np.float32(3.7e-02)).astype(np.float32)
    square = (x * x).astype(np.float32)
    want = {1: x, 2: square, 3: (x * square).astype(np.float32)}[exponent]
    np.testing.assert_array_equal(_evaluate(exponent, a), want)


@pytest.mark.parametrize("exponent", [0, 4, -1])
def test_other_exponents_are_refused(exponent):
    with pytest.raises(NotExact, match="math.fpowi"):
        _evaluate(exponent, np.arange(-10, 10, dtype=np.int64))
