// Attention's q.k^T of two int8 activations with zero points, as compiler/requant.py
// leaves it: IREE's correction D - (zB * RA + zA * RB - N zA zB), with RA / RB the
// row / column sums (i32 tensors from other dispatches), kept as i32 steps before
// the rescale (compiler/requant_zero_point.py). It lowers to one matmul whose
// epilogue reads RA along the rows (axes [0]) and RB along the columns (axes [1]).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

// CHECK-LABEL: func.func @matmul_zero_point_correction(
// CHECK-NOT: linalg.
// CHECK: "torq_hl.matmul"(%arg0, %arg1, %arg2, %arg3)
// CHECK-SAME: {axes = [0], operand = 2 : i64}
// CHECK-SAME: {axes = [1], operand = 3 : i64}
// CHECK-SAME: op = "shr_s"
// CHECK-SAME: -> tensor<4x8xi8>
func.func @matmul_zero_point_correction(%x: tensor<4x16xi8>, %y: tensor<16x8xi8>, %ra: tensor<4xi32>,
                                        %rb: tensor<8xi32>) -> tensor<4x8xi8> {
  %z = arith.constant 0 : i32
  %ea = tensor.empty() : tensor<4x8xi32>
  %acc = linalg.fill ins(%z : i32) outs(%ea : tensor<4x8xi32>) -> tensor<4x8xi32>
  %c = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x16xi8>, tensor<16x8xi8>) outs(%acc : tensor<4x8xi32>) {
  ^bb0(%p: i8, %q: i8, %o: i32):
    %p32 = arith.extsi %p : i8 to i32
    %q32 = arith.extsi %q : i8 to i32
    %m = arith.muli %p32, %q32 : i32
    %s = arith.addi %o, %m : i32
    linalg.yield %s : i32
  } -> tensor<4x8xi32>
  %e = tensor.empty() : tensor<4x8xi8>
  %r = linalg.generic {indexing_maps = [#id2, #row, #col, #id2], iterator_types = ["parallel", "parallel"]} ins(%c, %ra, %rb : tensor<4x8xi32>, tensor<4xi32>, tensor<8xi32>) outs(%e : tensor<4x8xi8>) {
  ^bb0(%a: i32, %sa: i32, %sb: i32, %out: i8):
    %za = arith.constant 10 : i32
    %zb = arith.constant -3 : i32
    %nzz = arith.constant -480 : i32
    %t0 = arith.muli %sa, %zb : i32
    %t1 = arith.muli %sb, %za : i32
    %t2 = arith.addi %t0, %t1 : i32
    %t3 = arith.subi %t2, %nzz : i32
    %corrected = arith.subi %a, %t3 : i32
    %a64 = arith.extsi %corrected : i32 to i64
    %m = arith.constant 1374389535 : i64
    %rr = arith.constant 68719476736 : i64
    %sh = arith.constant 37 : i64
    %lo = arith.constant -128 : i64
    %hi = arith.constant 127 : i64
    %scaled = arith.muli %a64, %m : i64
    %rounded = arith.addi %scaled, %rr : i64
    %down = arith.shrsi %rounded, %sh : i64
    %above = arith.maxsi %down, %lo : i64
    %below = arith.minsi %above, %hi : i64
    %v = arith.trunci %below : i64 to i8
    linalg.yield %v : i8
  } -> tensor<4x8xi8>
  return %r : tensor<4x8xi8>
}
