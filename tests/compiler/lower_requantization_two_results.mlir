// torq-lower-requantization on a QDQ matmul whose requantization has a second result, its
// int8 level requantized again to another scale (GhostNet: the primary conv's map is
// quantized for the cheap conv, and again for the concatenation it is a part of). The
// two-result generic is split first: the matmul's rescale writes the first result and a
// 256-entry table of that result the second, no f32 left.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @requantized_twice(
// CHECK-NOT: arith.sitofp
// CHECK: %[[MM:.+]] = linalg.generic
// CHECK-NOT: arith.sitofp
// CHECK: %[[Q1:.+]] = linalg.generic {{.*}} ins(%[[MM]] : tensor<16x4xi32>)
// CHECK-NOT: arith.sitofp
// CHECK: arith.shrsi {{.*}} : i64
// CHECK-NOT: arith.sitofp
// CHECK: %[[Q2:.+]] = linalg.generic {{.*}} ins(%[[Q1]] : tensor<16x4xi8>)
// CHECK-NOT: arith.sitofp
// CHECK: tensor.extract {{.*}} : tensor<256xi8>
// CHECK-NOT: arith.sitofp
// CHECK: return %[[Q1]], %[[Q2]]

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @requantized_twice(%arg0: tensor<16x8xi8>) -> (tensor<16x4xi8>, tensor<16x4xi8>)
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %sx = arith.constant 2.130000e-02 : f32
  %sw = arith.constant 6.130000e-03 : f32
  %s1 = arith.constant 1.710000e-02 : f32
  %z1 = arith.constant 4.000000e+00 : f32
  %s2 = arith.constant 2.930000e-02 : f32
  %z2 = arith.constant 7.000000e+00 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %c4 = arith.constant 4 : i16
  %c0 = arith.constant 0 : i32
  %out = tensor.empty() : tensor<16x4xi8>
  %e = tensor.empty() : tensor<16x4xi32>
  %init = linalg.fill ins(%c0 : i32) outs(%e : tensor<16x4xi32>) -> tensor<16x4xi32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%arg0, %w : tensor<16x8xi8>, tensor<4x8xi8>) outs(%init : tensor<16x4xi32>) {
  ^bb0(%a: i8, %b: i8, %o: i32):
    %a32 = arith.extsi %a : i8 to i32
    %b32 = arith.extsi %b : i8 to i32
    %p = arith.muli %a32, %b32 : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  } -> tensor<16x4xi32>
  %q:2 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm : tensor<16x4xi32>) outs(%out, %out : tensor<16x4xi8>, tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %o: i8, %o2: i8):
    %f = arith.sitofp %acc_v : i32 to f32
    %m1 = arith.mulf %f, %sx : f32
    %m2 = arith.mulf %m1, %sw : f32
    %y1 = arith.divf %m2, %s1 : f32
    %r1 = math.roundeven %y1 : f32
    %t1 = arith.addf %r1, %z1 : f32
    %c1 = arith.maxnumf %t1, %lo : f32
    %c2 = arith.minnumf %c1, %hi : f32
    %q1 = arith.fptosi %c2 : f32 to i8
    %l1 = arith.extsi %q1 : i8 to i16
    %d1 = arith.subi %l1, %c4 : i16
    %f1 = arith.sitofp %d1 : i16 to f32
    %v1 = arith.mulf %f1, %s1 : f32
    %y = arith.divf %v1, %s2 : f32
    %r = math.roundeven %y : f32
    %z = arith.addf %r, %z2 : f32
    %k1 = arith.maxnumf %z, %lo : f32
    %k2 = arith.minnumf %k1, %hi : f32
    %i = arith.fptosi %k2 : f32 to i8
    linalg.yield %q1, %i : i8, i8
  } -> (tensor<16x4xi8>, tensor<16x4xi8>)
  return %q#0, %q#1 : tensor<16x4xi8>, tensor<16x4xi8>
}
