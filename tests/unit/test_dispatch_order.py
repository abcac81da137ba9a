"""A parallel compile starts the dispatches it expects to take longest first
(dispatch_compile.estimated_seconds): constants (the requantization fit is per channel), the
largest tensor (super tiling prices programs tile by tile) and the op count each add time,
so a dispatch without weights but with a large tensor (attention scores) is not left last."""

from iree.compiler import ir

from torq.compiler.dispatch_cache import bytecode
from torq.compiler.dispatch_compile import estimated_seconds


def _module(ctx: ir.Context, text: str) -> ir.Module:
    return ir.Module.parse(text, ctx)


def test_each_term_adds_time():
    with ir.Context() as ctx:
        small = _module(ctx, """func.func @f(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
          %0 = arith.addf %a, %a : tensor<8x8xf32>
          return %0 : tensor<8x8xf32> }""")
        scores = _module(ctx, """func.func @f(%a: tensor<6x1500x1500xf32>) -> tensor<6x1500x1500xf32> {
          %0 = arith.addf %a, %a : tensor<6x1500x1500xf32>
          return %0 : tensor<6x1500x1500xf32> }""")
        more_ops = _module(ctx, """func.func @f(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
          %0 = arith.addf %a, %a : tensor<8x8xf32>
          %1 = arith.mulf %0, %0 : tensor<8x8xf32>
          %2 = arith.subf %1, %a : tensor<8x8xf32>
          return %2 : tensor<8x8xf32> }""")
        weights = _module(ctx, """func.func @f(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
          %w = arith.constant dense_resource<w> : tensor<8x8xf32>
          %0 = arith.addf %a, %w : tensor<8x8xf32>
          return %0 : tensor<8x8xf32> }""")
        base = estimated_seconds(small, bytecode(small))
        assert estimated_seconds(scores, bytecode(scores)) > base + 0.5  # 13.5M elements
        assert estimated_seconds(more_ops, bytecode(more_ops)) > base
        assert estimated_seconds(weights, bytecode(weights) + bytes(1 << 20)) > \
            estimated_seconds(weights, bytecode(weights)) + 0.5  # a MiB of constants
