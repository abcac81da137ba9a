// torq-lower-requantization on an f32 dequantize of the accumulator (PT2E's output left in
// f32, or the f32 activation of EfficientNet's depthwise conv before its squeeze-excitation)
// whose zero-point correction multiplies the weights' int64 zero points (all 0) by an i32
// tensor of window sums another dispatch computes: the product is 0, so the host computes
// the dequantize from the accumulator alone and the sums are no longer an argument. The
// unread sums made it stay on host ("operand 1 of the dequantize of the accumulator is not
// read as the result is written").
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @zero_product_tail(
// CHECK-SAME: %arg0: tensor<8x16xi8>) -> tensor<4x16xi32>
// CHECK-NOT: arith.sitofp
// CHECK: %[[MM:.+]] = linalg.generic
// CHECK: return %[[MM]] : tensor<4x16xi32>

#lhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#rhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#ch = affine_map<(d0, d1) -> (d0)>
func.func @zero_product_tail(%arg0: tensor<8x16xi8>, %sums: tensor<16x4xi32>) -> tensor<4x16xf32>
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %zw = arith.constant dense<0> : tensor<4xi64>
  %k = arith.constant dense<[-1024, 3840, -8192, 640]> : tensor<4xi32>
  %sw = arith.constant dense<[6.13e-03, 4.2e-03, 7.7e-03, 5.1e-03]> : tensor<4xf32>
  %sx = arith.constant 2.130000e-02 : f32
  %c0 = arith.constant 0 : i32
  %out = tensor.empty() : tensor<4x16xf32>
  %e = tensor.empty() : tensor<4x16xi32>
  %init = linalg.fill ins(%c0 : i32) outs(%e : tensor<4x16xi32>) -> tensor<4x16xi32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%arg0, %w : tensor<8x16xi8>, tensor<4x8xi8>) outs(%init : tensor<4x16xi32>) {
  ^bb0(%a: i8, %b: i8, %o: i32):
    %a32 = arith.extsi %a : i8 to i32
    %b32 = arith.extsi %b : i8 to i32
    %p = arith.muli %a32, %b32 : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  } -> tensor<4x16xi32>
  %f = linalg.generic {indexing_maps = [#id, #ch, #tr, #ch, #ch, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %zw, %sums, %k, %sw : tensor<4x16xi32>, tensor<4xi64>, tensor<16x4xi32>, tensor<4xi32>, tensor<4xf32>)
      outs(%out : tensor<4x16xf32>) {
  ^bb0(%acc_v: i32, %zwc: i64, %sum: i32, %kc: i32, %swc: f32, %o: f32):
    %z32 = arith.trunci %zwc : i64 to i32
    %zs = arith.muli %z32, %sum : i32
    %corr = arith.addi %zs, %kc : i32
    %a2 = arith.subi %acc_v, %corr : i32
    %x = arith.sitofp %a2 : i32 to f32
    %m1 = arith.mulf %x, %sx : f32
    %y = arith.mulf %m1, %swc : f32
    linalg.yield %y : f32
  } -> tensor<4x16xf32>
  return %f : tensor<4x16xf32>
}
