"""compiler/epilogue_scalars.py: a run-time quantized dispatch's epilogue scale (an f32 scalar
IREE cloned into the body) becomes a constant argument; a constant with another reader stays."""

from iree.compiler import ir

from torq.compiler.constant_args import constant_attrs
from torq.compiler.epilogue_scalars import hoist_epilogue_scalars
from torq.compiler.ir_utils import constant_value, region_ops

# Two dequantize epilogues multiply by %scale; the first also clamps at %low (a max), which a
# loaded value might not fold as a literal does.
TEXT = """
#id = affine_map<(d0) -> (d0)>
#all = affine_map<(d0) -> ()>
func.func @f(%acc: tensor<4xi32>, %acc2: tensor<4xi32>, %s: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %scale = arith.constant 2.500000e-01 : f32
  %low = arith.constant -1.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #all, #id], iterator_types = ["parallel"]}
      ins(%acc, %s : tensor<4xi32>, tensor<f32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: i32, %r: f32, %o: f32):
    %f = arith.sitofp %x : i32 to f32
    %m = arith.mulf %f, %scale : f32
    %n = arith.mulf %m, %r : f32
    %c = arith.maximumf %n, %low : f32
    linalg.yield %c : f32
  } -> tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%acc2 : tensor<4xi32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: i32, %o: f32):
    %f = arith.sitofp %x : i32 to f32
    %m = arith.mulf %scale, %f : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
"""


def test_a_multiplied_scalar_becomes_one_constant_argument_both_epilogues_read():
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(TEXT)
        func = module.body.operations[0].operation
        values = hoist_epilogue_scalars(func)
        assert module.operation.verify()
        assert [float(constant_value(v)) for v in values] == [0.25]
        block = func.regions[0].blocks[0]
        assert len(block.arguments) == 4 and str(block.arguments[3].type) == "tensor<f32>"
        assert constant_attrs(func)[:3] == [None, None, None] and constant_attrs(func)[3] == values[0]
        generics = [op.operation for op in block.operations if op.operation.name == "linalg.generic"]
        assert all(block.arguments[3] in list(g.operands) for g in generics)
        constants = [op.operation for op in block.operations if op.operation.name == "arith.constant"]
        assert [str(c.attributes["value"]) for c in constants] == ["-1.000000e+00 : f32"]  # the clamp's stays
        assert any(o.name == "arith.maximumf" for o in region_ops(generics[0]))


def test_a_function_without_epilogue_scalars_is_left_alone():
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(TEXT.replace("%m = arith.mulf %f, %scale", "%m = arith.addf %f, %scale")
                                 .replace("%m = arith.mulf %scale, %f", "%m = arith.addf %scale, %f"))
        func = module.body.operations[0].operation
        before = str(module)
        assert hoist_epilogue_scalars(func) == [] and str(module) == before
