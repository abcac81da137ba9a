// torq-lower-requantization on a QDQ matmul whose requantization adds an int8
// residual stored transposed (ConvNeXt: the block input is a LayerNorm's
// channels-last output, the 1x1 conv's result is channels-first): the level
// after the matmul's rescale and the residual's level sum to the output level
// through a second rescale. The integer rescale reads the residual as the
// float op read it, through (d0, d1) -> (d1, d0); lowered to TorqHL, it is an
// epilogue operand with axes [1, 0].
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL

// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[TR:.+]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @transposed_residual(
// CHECK-NOT: arith.sitofp
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[TR]], #[[ID]]]
// CHECK-SAME: ins(%{{.*}}, %arg1 :
// CHECK: arith.shrsi {{.*}} : i64
// CHECK: arith.trunci {{.*}} : i64 to i8
// HL: torq_hl.matmul
// HL-SAME: {axes = [1, 0], operand = 2 : i64}

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @transposed_residual(%arg0: tensor<16x8xi8>, %arg1: tensor<4x16xi8>) -> tensor<16x4xi8>
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %sx = arith.constant 2.130000e-02 : f32
  %sw = arith.constant 6.130000e-03 : f32
  %s1 = arith.constant 1.710000e-02 : f32
  %z1 = arith.constant 4.000000e+00 : f32
  %sr = arith.constant 3.070000e-02 : f32
  %sy = arith.constant 4.130000e-02 : f32
  %zy = arith.constant -3.000000e+00 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %c4 = arith.constant 4 : i16
  %cr = arith.constant -1 : i16
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
  %q = linalg.generic {indexing_maps = [#id, #tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %arg1 : tensor<16x4xi32>, tensor<4x16xi8>) outs(%out : tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %res: i8, %o: i8):
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
    %lr = arith.extsi %res : i8 to i16
    %dr = arith.subi %lr, %cr : i16
    %fr = arith.sitofp %dr : i16 to f32
    %vr = arith.mulf %fr, %sr : f32
    %sum = arith.addf %v1, %vr : f32
    %y = arith.divf %sum, %sy : f32
    %r = math.roundeven %y : f32
    %z = arith.addf %r, %zy : f32
    %k1 = arith.maxnumf %z, %lo : f32
    %k2 = arith.minnumf %k1, %hi : f32
    %i = arith.fptosi %k2 : f32 to i8
    linalg.yield %i : i8
  } -> tensor<16x4xi8>
  return %q : tensor<16x4xi8>
}
