// torq-lower-requantization on PT2E's 1x1 conv whose zero-point correction multiplies the
// weights' int64 zero points (per channel, all 0) by an i32 tensor of the input's sums per
// position that another dispatch computes (ResNet-50's and MobileNetV2's last convs): the
// product is 0, so the requantization reads no second tensor and is rescaled like any
// other; the sums are no longer an argument of the dispatch.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @zero_product(
// CHECK-SAME: %arg0: tensor<8x16xi8>) -> tensor<4x16xi8>
// CHECK-NOT: arith.sitofp
// CHECK-NOT: tensor<16xi32>
// CHECK: arith.shrsi {{.*}} : i64
// CHECK: arith.trunci {{.*}} : i64 to i8

#lhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#rhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#ch = affine_map<(d0, d1) -> (d0)>
#pos = affine_map<(d0, d1) -> (d1)>
func.func @zero_product(%arg0: tensor<8x16xi8>, %sums: tensor<16xi32>) -> tensor<4x16xi8>
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %zw = arith.constant dense<0> : tensor<4xi64>
  %k = arith.constant dense<[-1024, 3840, -8192, 640]> : tensor<4xi32>
  %sw = arith.constant dense<[6.13e-03, 4.2e-03, 7.7e-03, 5.1e-03]> : tensor<4xf32>
  %sx = arith.constant 2.130000e-02 : f32
  %sy = arith.constant 4.130000e-02 : f32
  %zy = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %c0 = arith.constant 0 : i32
  %out = tensor.empty() : tensor<4x16xi8>
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
  %q = linalg.generic {indexing_maps = [#id, #ch, #pos, #ch, #ch, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %zw, %sums, %k, %sw : tensor<4x16xi32>, tensor<4xi64>, tensor<16xi32>, tensor<4xi32>, tensor<4xf32>)
      outs(%out : tensor<4x16xi8>) {
  ^bb0(%acc_v: i32, %zwc: i64, %sum: i32, %kc: i32, %swc: f32, %o: i8):
    %z32 = arith.trunci %zwc : i64 to i32
    %zs = arith.muli %z32, %sum : i32
    %corr = arith.addi %zs, %kc : i32
    %a2 = arith.subi %acc_v, %corr : i32
    %f = arith.sitofp %a2 : i32 to f32
    %m1 = arith.mulf %f, %sx : f32
    %m2 = arith.mulf %m1, %swc : f32
    %d = arith.divf %m2, %sy : f32
    %rq = math.roundeven %d : f32
    %t = arith.addf %rq, %zy : f32
    %c1 = arith.maxnumf %t, %zy : f32
    %c2 = arith.minnumf %c1, %hi : f32
    %qv = arith.fptosi %c2 : f32 to i8
    linalg.yield %qv : i8
  } -> tensor<4x16xi8>
  return %q : tensor<4x16xi8>
}
