"""compiler/runtime_zero_point.py: a contraction that subtracts a run-time zero point from its
input (onnxruntime's ConvInteger after quantize_dynamic) becomes the plain contraction, and its
dequantize epilogue reads acc - z * W, W the constant weights summed over the reduction.
(tests/e2e/test_dynamic_quant.py runs such a model, bit-identical to llvm-cpu.)"""

import re

import numpy as np
import pytest
from iree.compiler import ir

from torq.compiler.constant_args import constant_attrs
from torq.compiler.ir_utils import constant_value, region_ops
from torq.compiler.runtime_zero_point import split_runtime_zero_points

WEIGHTS = np.arange(-9, 9, dtype=np.int8).reshape(3, 2, 3) * 7

# A 1-D conv (3 output channels, 2 input channels, kernel 3) of input x minus the run-time zero
# point z, then its dequantize.
TEXT = """
#x = affine_map<(o, p, c, k) -> (c, p + k)>
#w = affine_map<(o, p, c, k) -> (o, c, k)>
#z = affine_map<(o, p, c, k) -> ()>
#out = affine_map<(o, p, c, k) -> (o, p)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#all = affine_map<(d0, d1) -> ()>
func.func @f(%x: tensor<2x6xi8>, %w: tensor<3x2x3xi8> {torq.constant = WEIGHTS}, %z: tensor<i32>,
             %s: tensor<f32>) -> tensor<3x4xf32> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<3x4xi32>
  %zero = linalg.fill ins(%c0 : i32) outs(%e : tensor<3x4xi32>) -> tensor<3x4xi32>
  %acc = linalg.generic {indexing_maps = [#x, #w, #z, #out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w, %z : tensor<2x6xi8>, tensor<3x2x3xi8>, tensor<i32>) outs(%zero : tensor<3x4xi32>) {
  ^bb0(%a: i8, %b: i8, %zp: i32, %o: i32):
    %0 = arith.extsi %a : i8 to i32
    %1 = arith.subi %0, %zp : i32
    %2 = arith.extsi %b : i8 to i32
    %3 = arith.muli %1, %2 : i32
    %4 = arith.addi %o, %3 : i32
    linalg.yield %4 : i32
  } -> tensor<3x4xi32>
  %f = tensor.empty() : tensor<3x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %s : tensor<3x4xi32>, tensor<f32>) outs(%f : tensor<3x4xf32>) {
  ^bb0(%a: i32, %sc: f32, %o: f32):
    %0 = arith.sitofp %a : i32 to f32
    %1 = arith.mulf %0, %sc : f32
    linalg.yield %1 : f32
  } -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}
""".replace("WEIGHTS", "dense<[" + ", ".join("[" + ", ".join(str(list(map(int, row))) for row in ch) + "]"
                                           for ch in WEIGHTS) + "]> : tensor<3x2x3xi8>")


def _generics(func):
    return [op.operation for op in func.regions[0].blocks[0].operations if op.operation.name == "linalg.generic"]


def test_the_zero_point_moves_to_the_epilogue_as_a_weight_sum_correction():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(TEXT)
        func = module.body.operations[0].operation
        values = split_runtime_zero_points(func)
        assert module.operation.verify()
        sums = WEIGHTS.astype(np.int64).sum(axis=(1, 2))
        assert len(values) == 1 and constant_value(values[0]).tolist() == sums.tolist()
        block = func.regions[0].blocks[0]
        assert len(block.arguments) == 5 and str(block.arguments[4].type) == "tensor<3xi32>"
        assert constant_attrs(func)[4] == values[0]
        con, epilogue = _generics(func)
        assert len(con.operands) == 3 and "arith.subi" not in [o.name for o in region_ops(con)]  # x, w; out
        assert list(epilogue.operands)[2:4] == [block.arguments[2], block.arguments[4]]
        names = [o.name for o in region_ops(epilogue)]
        assert names[:2] == ["arith.muli", "arith.subi"]  # acc - z * W, read where acc was
        # W along the epilogue's first dim: the output channel.
        assert str(ir.ArrayAttr(epilogue.attributes["indexing_maps"])[3]) == "affine_map<(d0, d1) -> (d0)>"


# The accumulator is the function's result (another dispatch dequantizes it: a residual block's
# second conv), the weights a constant IREE inlined into the dispatch.
RETURNED = re.sub(r"%w: tensor<3x2x3xi8> \{torq.constant = [^}]*\}, ", "", TEXT.split("  %f = tensor.empty()")[0]) \
    .replace("-> tensor<3x4xf32> {\n  %c0", "-> tensor<3x4xi32> {\n  %w = arith.constant WEIGHTS\n  %c0") \
    .replace(",\n             %s: tensor<f32>)", ")").replace("WEIGHTS", TEXT.split("{torq.constant = ")[1].split("}")[0]) \
    + "  return %acc : tensor<3x4xi32>\n}\n"


def test_a_returned_accumulator_gets_a_copy_that_takes_the_correction():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(RETURNED)
        func = module.body.operations[0].operation
        values = split_runtime_zero_points(func)
        assert module.operation.verify()
        assert constant_value(values[0]).tolist() == WEIGHTS.astype(np.int64).sum(axis=(1, 2)).tolist()
        block = func.regions[0].blocks[0]
        con, copy = _generics(func)
        assert "arith.subi" not in [o.name for o in region_ops(con)]
        assert copy.operands[0] == con.results[0] and list(copy.operands)[1:3] == [block.arguments[1], block.arguments[2]]
        assert [o.name for o in region_ops(copy)] == ["arith.muli", "arith.subi", "linalg.yield"]  # acc - z * W
        ret = list(block.operations)[-1]
        assert ret.operands[0] == copy.results[0]


TWO_RESULTS = TEXT.replace("-> tensor<3x4xf32> {\n  %c0", "-> (tensor<3x4xf32>, tensor<3x4xf32>) {\n  %c0").replace(
    "outs(%f : tensor<3x4xf32>) {", "outs(%f, %f : tensor<3x4xf32>, tensor<3x4xf32>) {").replace(
    "^bb0(%a: i32, %sc: f32, %o: f32):", "^bb0(%a: i32, %sc: f32, %o: f32, %o2: f32):").replace(
    "linalg.yield %1 : f32\n  } -> tensor<3x4xf32>", "linalg.yield %1, %0 : f32, f32\n  } -> (tensor<3x4xf32>, tensor<3x4xf32>)").replace(
    "%r = linalg.generic {indexing_maps = [#id, #all, #id]", "%r:2 = linalg.generic {indexing_maps = [#id, #all, #id, #id]").replace(
    "return %r : tensor<3x4xf32>", "return %r#0, %r#1 : tensor<3x4xf32>, tensor<3x4xf32>")


def test_a_two_result_epilogue_keeps_both_results():
    # EfficientNet's last conv: its epilogue yields x and sigmoid(x) for the SiLU after it.
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(TWO_RESULTS)
        func = module.body.operations[0].operation
        assert len(split_runtime_zero_points(func)) == 1
        assert module.operation.verify()
        _, epilogue = _generics(func)
        ret = list(func.regions[0].blocks[0].operations)[-1]
        assert len(epilogue.results) == 2 and list(ret.operands) == list(epilogue.results)
        assert [o.name for o in region_ops(epilogue)][:2] == ["arith.muli", "arith.subi"]


@pytest.mark.parametrize("text", [
    TEXT.replace("%1 = arith.subi %0, %zp : i32", "%1 = arith.subi %0, %c0 : i32"),  # no scalar argument
    re.sub(r"dense<\[\[\[.*\]\]\]> : tensor<3x2x3xi8>", "dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi8>", TEXT)
    .replace("tensor<3x2x3xi8>", "tensor<3x2xi8>").replace("(o, p, c, k) -> (o, c, k)", "(o, p, c, k) -> (o, c)")
    .replace("(o, p, c, k) -> (c, p + k)", "(o, p, c, k) -> (c, p, k)").replace("tensor<2x6xi8>", "tensor<2x4x3xi8>"),
], ids=["constant zero point", "a reduction loop the weights do not index"])
def test_what_the_rewrite_does_not_cover_is_left_alone(text):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert module.operation.verify()
        func = module.body.operations[0].operation
        before = str(module)
        assert split_runtime_zero_points(func) == [] and str(module) == before


def test_only_the_correction_is_left_to_the_host():
    # torq-lower-requantization hands `acc - z * W` on the accumulator to the host
    # (requant_tail.is_accumulator_correction), and no other integer epilogue reading a 0-d argument.
    from torq.compiler.requant_channels import Known
    from torq.compiler.requant_tail import is_accumulator_correction

    scaled = RETURNED.replace("  return %acc : tensor<3x4xi32>", """  %e2 = tensor.empty() : tensor<3x4xi32>
  %r = linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %z : tensor<3x4xi32>, tensor<i32>) outs(%e2 : tensor<3x4xi32>) {
  ^bb0(%a: i32, %b: i32, %o: i32):
    %0 = arith.muli %a, %b : i32
    linalg.yield %0 : i32
  } -> tensor<3x4xi32>
  return %r : tensor<3x4xi32>""")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(RETURNED)
        func = module.body.operations[0].operation
        split_runtime_zero_points(func)
        _, copy = _generics(func)
        assert is_accumulator_correction(copy, Known(_Args()))
        assert not is_accumulator_correction(copy, Known(_Args({1: np.array(3, np.int32)})))  # z a constant
        other = ir.Module.parse(scaled)  # acc * z: no correction
        assert not is_accumulator_correction(_generics(other.body.operations[0].operation)[1], Known(_Args()))


class _Args(dict):
    """Constant arguments by number (ConstantArgs' interface)."""

    def has(self, k: int) -> bool:
        return k in self
