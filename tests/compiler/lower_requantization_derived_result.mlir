// torq-lower-requantization on an int8 matmul whose dequantized, relu'd f32 value is both a
// result and quantized again to int8 for another result, in one generic with two results
// (MobileNetV3's and RegNet's squeeze-excitation input under PT2E: the f32 value feeds the
// host's pooling, the int8 one the multiply by the gate). The host computes the f32 value
// from the accumulator the NPU writes, and the int8 one from that f32 value: the function
// returns the accumulator alone, once, and nothing of the float chain is left.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @derived_result(
// CHECK-SAME: -> tensor<4x16xi32>
// CHECK-NOT: arith.sitofp
// CHECK-NOT: arith.fptosi
// CHECK: %[[MM:.+]] = linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return %[[MM]] : tensor<4x16xi32>

#lhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#rhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#ch = affine_map<(d0, d1) -> (d0)>
func.func @derived_result(%arg0: tensor<8x16xi8>) -> (tensor<4x16xf32>, tensor<4x16xi8>)
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %sw = arith.constant dense<[6.13e-03, 4.2e-03, 7.7e-03, 5.1e-03]> : tensor<4xf32>
  %bias = arith.constant dense<[0.25, -0.5, 0.125, 0.0]> : tensor<4xf32>
  %sx = arith.constant 2.130000e-02 : f32
  %sy = arith.constant 7.48644408E-4 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %c0 = arith.constant 0 : i32
  %outf = tensor.empty() : tensor<4x16xf32>
  %outq = tensor.empty() : tensor<4x16xi8>
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
  %r:2 = linalg.generic {indexing_maps = [#id, #ch, #ch, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %sw, %bias : tensor<4x16xi32>, tensor<4xf32>, tensor<4xf32>) outs(%outf, %outq : tensor<4x16xf32>, tensor<4x16xi8>) {
  ^bb0(%acc_v: i32, %swc: f32, %bc: f32, %o: f32, %oq: i8):
    %x = arith.sitofp %acc_v : i32 to f32
    %m1 = arith.mulf %x, %sx : f32
    %m2 = arith.mulf %m1, %swc : f32
    %y = arith.addf %m2, %bc : f32
    %gt = arith.cmpf ugt, %y, %zero : f32
    %relu = arith.select %gt, %y, %zero : f32
    %d = arith.divf %relu, %sy : f32
    %rd = math.roundeven %d : f32
    %z = arith.addf %rd, %lo : f32
    %c1 = arith.maximumf %z, %lo : f32
    %c2 = arith.minimumf %c1, %hi : f32
    %q = arith.fptosi %c2 : f32 to i8
    linalg.yield %relu, %q : f32, i8
  } -> (tensor<4x16xf32>, tensor<4x16xi8>)
  return %r#0, %r#1 : tensor<4x16xf32>, tensor<4x16xi8>
}
