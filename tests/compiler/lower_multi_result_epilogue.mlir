// A matmul whose elementwise user has two results (IREE fuses a batch norm's
// output and the hardsigmoid computed from it into one generic): one TorqHL op
// writes one result, so the user is not taken as the matmul's epilogue and is
// refused on its own, a clean error instead of rewriting the matmul again and
// again (the user kept it alive: torq-lower-to-torq-hl never returned).
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: se.py:9:3: error: linalg.generic: elementwise op with 2 results has no Torq pattern (one TorqHL op writes one result)
// CHECK-NOT: func.func
// CHECK-NOT: Traceback

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @matmul_two_result_user(%x: tensor<4x16xbf16>, %w: tensor<16x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %z = arith.constant 0.0 : bf16
  %three = arith.constant 3.0 : bf16
  %e = tensor.empty() : tensor<4x8xbf16>
  %acc = linalg.fill ins(%z : bf16) outs(%e : tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %c = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x16xbf16>, tensor<16x8xbf16>) outs(%acc : tensor<4x8xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x8xbf16>
  %r:2 = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<4x8xbf16>) outs(%e, %e : tensor<4x8xbf16>, tensor<4x8xbf16>) {
  ^bb0(%v: bf16, %o1: bf16, %o2: bf16):
    %a = arith.addf %v, %three : bf16
    linalg.yield %v, %a : bf16, bf16
  } -> (tensor<4x8xbf16>, tensor<4x8xbf16>) loc("se.py":9:3)
  return %r#0, %r#1 : tensor<4x8xbf16>, tensor<4x8xbf16>
}
