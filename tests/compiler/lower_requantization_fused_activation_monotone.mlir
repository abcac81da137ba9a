// torq-lower-requantization on PT2E's conv + hardswish where every accumulator the conv
// can produce dequantizes to [0.2, 2.6]: hardswish is increasing there (proven:
// a product of two positive increasing values), so the chain is
// monotone in the accumulator, but curved, and the nearest rescale is steps off. It takes the
// same form as a chain that is not monotone (compiler/requant_fused_activation.py); it
// stayed on host (MobileNetV3-Large's 14x14x184 depthwise conv: "the nearest is 2 steps off").
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @conv_hardswish_curved(
// CHECK-NOT: arith.sitofp
// CHECK: %[[U:.+]] = arith.minsi
// CHECK: tensor.extract %{{.*}} : tensor<256xi16>
// CHECK: arith.trunci {{.*}} : i64 to i8
// CHECK-NOT: arith.divf

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#ch = affine_map<(d0, d1) -> (d1)>
func.func @conv_hardswish_curved(%arg0: tensor<16x8xi8>) -> tensor<16x4xi8>
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %sw = arith.constant dense<[1.67e-03, 2.19e-03, 1.97e-03, 1.95e-03]> : tensor<4xf32>
  %bias = arith.constant dense<[1.4, 1.4, 1.4, 1.4]> : tensor<4xf32>
  %sx = arith.constant 2.130000e-02 : f32
  %three = arith.constant 3.000000e+00 : f32
  %six = arith.constant 6.000000e+00 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %sy = arith.constant 2.130000e-02 : f32
  %zy = arith.constant -1.100000e+02 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
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
  %q = linalg.generic {indexing_maps = [#id, #ch, #ch, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %sw, %bias : tensor<16x4xi32>, tensor<4xf32>, tensor<4xf32>) outs(%out : tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %swc: f32, %bc: f32, %o: i8):
    %f = arith.sitofp %acc_v : i32 to f32
    %m1 = arith.mulf %f, %sx : f32
    %m2 = arith.mulf %m1, %swc : f32
    %x = arith.addf %m2, %bc : f32
    %x3 = arith.addf %x, %three : f32
    %pos = arith.cmpf ugt, %x3, %zero : f32
    %r0 = arith.select %pos, %x3, %zero : f32
    %lt6 = arith.cmpf olt, %r0, %six : f32
    %r6 = arith.select %lt6, %r0, %six : f32
    %g = arith.divf %r6, %six : f32
    %hs = arith.mulf %g, %x : f32
    %d = arith.divf %hs, %sy : f32
    %rq = math.roundeven %d : f32
    %t = arith.addf %rq, %zy : f32
    %c1 = arith.maxnumf %t, %lo : f32
    %c2 = arith.minnumf %c1, %hi : f32
    %qv = arith.fptosi %c2 : f32 to i8
    linalg.yield %qv : i8
  } -> tensor<16x4xi8>
  return %q : tensor<16x4xi8>
}
