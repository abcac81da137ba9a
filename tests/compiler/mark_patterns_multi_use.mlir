// torq-mark-patterns-for-super-tiling when a contraction result has more than
// one use: it cannot take an epilogue (the epilogue must be its only user), so
// the contraction group is the fill + the matmul, and an elementwise consumer
// is a group of its own.
//

// Known bug (compiler/patterns/groups.py, match_group): for an elementwise op whose
// operand comes from a contraction, `_single_user(v) == op` is evaluated with
// `_single_user(v)` = None (the value has 2 uses), and
// `ir.Operation.__eq__(None)` raises TypeError, so the pass dies with a
// Python traceback instead of marking.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling)' | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>

// The matmul result is read twice by one op (x + x).
// CHECK-LABEL: func.func @used_twice_by_one_op(
// CHECK: linalg.fill
// CHECK-SAME: {"torq-fuse-group" = [0]} ins
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [1], "torq-fuse-group-id" = 1 : i64} {
func.func @used_twice_by_one_op(%x: tensor<4x8xbf16>, %y: tensor<8x16xbf16>) -> tensor<4x16xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %mm : tensor<4x16xbf16>, tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// The matmul result is also a function result (two users: the add and return).
// CHECK-LABEL: func.func @also_returned(
// CHECK: linalg.fill
// CHECK-SAME: {"torq-fuse-group" = [2]} ins
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64} {
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [3], "torq-fuse-group-id" = 3 : i64} {
func.func @also_returned(%x: tensor<4x8xbf16>, %y: tensor<8x16xbf16>, %w: tensor<4x16xbf16>) -> (tensor<4x16xbf16>, tensor<4x16xbf16>) {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %w : tensor<4x16xbf16>, tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %mm, %r : tensor<4x16xbf16>, tensor<4x16xbf16>
}
