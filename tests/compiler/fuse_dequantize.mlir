// torq-fuse-dequantize on a pre-norm transformer's attention output (DeiT): the
// residual stream's int8 tensor is dequantized by a generic of its own (IREE
// clones the dequantize into the dispatch because the block's LayerNorm reads it
// too), and the matmul's requantization adds its f32 result. The requantization
// now reads the int8 tensor, through its own map of the f32 one (here transposed)
// composed with the dequantize's, and computes the dequantize in its body; the
// dequantize is gone; so when the dequantize itself reads its int8 tensor
// transposed. A dequantize read by an op that is no requantization is
// left alone.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fuse-dequantize)' | FileCheck %s
// Then the requantization lowers to the integer rescale with an int8 residual,
// and the dispatch to one TorqHL matmul with the residual as an epilogue operand.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fuse-dequantize,torq-lower-requantization,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL

// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[TR:.+]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @residual_dequantized_apart(
// CHECK: %[[MM:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: } -> tensor<16x4xi32>
// CHECK-NEXT: linalg.generic {indexing_maps = [#[[ID]], #[[TR]], #[[ID]]]
// CHECK-SAME: ins(%[[MM]], %arg1 : tensor<16x4xi32>, tensor<4x16xi8>)
// CHECK: ^bb0(%{{.*}}: i32, %[[RES:.+]]: i8, %{{.*}}: i8):
// CHECK: arith.extsi %[[RES]] : i8 to i16
// CHECK: arith.fptosi {{.*}} : f32 to i8
// CHECK-NOT: linalg.generic
// CHECK: return
// The dequantize itself reads its int8 tensor transposed (EdgeNeXt's conv encoder: the
// residual is NCHW, the pointwise MLP's tokens NHWC): the requantization reads it so.
// CHECK-LABEL: func.func @dequantize_reads_transposed(
// CHECK: %[[MM2:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[TR]], #[[ID]]]
// CHECK-SAME: ins(%[[MM2]], %arg1 : tensor<16x4xi32>, tensor<4x16xi8>)
// CHECK: arith.fptosi {{.*}} : f32 to i8
// CHECK-NOT: linalg.generic
// CHECK: return
// CHECK-LABEL: func.func @dequantize_read_by_a_float_op(
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<16x4xi8>) outs(%{{.*}} : tensor<16x4xf32>)
// CHECK: arith.sitofp
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<16x4xf32>)
// CHECK: arith.mulf

// HL-LABEL: func.func @residual_dequantized_apart(
// HL-NOT: linalg.generic
// HL: torq_hl.matmul
// HL-SAME: {axes = [1, 0], operand = 2 : i64}
// HL-NOT: stays on host
// HL-LABEL: func.func @dequantize_reads_transposed(
// HL-NOT: linalg.generic
// HL: torq_hl.matmul
// HL-SAME: {axes = [1, 0], operand = 2 : i64}

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @residual_dequantized_apart(%arg0: tensor<16x8xi8>, %arg1: tensor<4x16xi8>) -> tensor<16x4xi8>
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
  %ef = tensor.empty() : tensor<4x16xf32>
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
  %dq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%arg1 : tensor<4x16xi8>) outs(%ef : tensor<4x16xf32>) {
  ^bb0(%res: i8, %o: f32):
    %lr = arith.extsi %res : i8 to i16
    %dr = arith.subi %lr, %cr : i16
    %fr = arith.sitofp %dr : i16 to f32
    %vr = arith.mulf %fr, %sr : f32
    linalg.yield %vr : f32
  } -> tensor<4x16xf32>
  %q = linalg.generic {indexing_maps = [#id, #tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %dq : tensor<16x4xi32>, tensor<4x16xf32>) outs(%out : tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %vr: f32, %o: i8):
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

func.func @dequantize_reads_transposed(%arg0: tensor<16x8xi8>, %arg1: tensor<4x16xi8>) -> tensor<16x4xi8>
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
  %ef = tensor.empty() : tensor<16x4xf32>
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
  %dq = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%arg1 : tensor<4x16xi8>) outs(%ef : tensor<16x4xf32>) {
  ^bb0(%res: i8, %o: f32):
    %lr = arith.extsi %res : i8 to i16
    %dr = arith.subi %lr, %cr : i16
    %fr = arith.sitofp %dr : i16 to f32
    %vr = arith.mulf %fr, %sr : f32
    linalg.yield %vr : f32
  } -> tensor<16x4xf32>
  %q = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %dq : tensor<16x4xi32>, tensor<16x4xf32>) outs(%out : tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %vr: f32, %o: i8):
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

func.func @dequantize_read_by_a_float_op(%arg0: tensor<16x4xi8>) -> tensor<16x4xf32>
    attributes {torq.dispatch} {
  %s = arith.constant 3.070000e-02 : f32
  %z = arith.constant -1 : i16
  %ef = tensor.empty() : tensor<16x4xf32>
  %dq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%arg0 : tensor<16x4xi8>) outs(%ef : tensor<16x4xf32>) {
  ^bb0(%x: i8, %o: f32):
    %l = arith.extsi %x : i8 to i16
    %d = arith.subi %l, %z : i16
    %f = arith.sitofp %d : i16 to f32
    %v = arith.mulf %f, %s : f32
    linalg.yield %v : f32
  } -> tensor<16x4xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dq : tensor<16x4xf32>) outs(%ef : tensor<16x4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %m = arith.mulf %v, %v : f32
    linalg.yield %m : f32
  } -> tensor<16x4xf32>
  return %sq : tensor<16x4xf32>
}
