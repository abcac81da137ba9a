// torq-lower-requantization on an int8 matmul whose f32 dequantize (PT2E leaves the last
// quantized op's output in f32: ViT's patch embedding) writes the accumulator transposed,
// in the tokens layout. The host computes the dequantize from the accumulator the NPU
// writes, as it is, so the NPU writes it transposed: an i32 copy through the two maps,
// the function's result in the dequantize's layout.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[TR:.+]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @tail_transposed(
// CHECK-SAME: -> tensor<16x4xi32>
// CHECK-NOT: arith.sitofp
// CHECK: %[[MM:.+]] = linalg.generic
// CHECK: %[[T:.+]] = linalg.generic {indexing_maps = [#[[ID]], #[[TR]]]
// CHECK-SAME: ins(%[[MM]] : tensor<4x16xi32>) outs(%{{.*}} : tensor<16x4xi32>)
// CHECK: return %[[T]] : tensor<16x4xi32>

#lhs = affine_map<(d0, d1, d2) -> (d2, d1)>
#rhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#ch = affine_map<(d0, d1) -> (d0)>
func.func @tail_transposed(%arg0: tensor<8x16xi8>) -> tensor<16x4xf32>
    attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127, -3, 5, 9, -100, 17, 2], [-1, 127, 3, 8, -9, 50, 1, -2],
                             [1, -128, 33, -5, 9, 10, -17, 20], [-1, 100, 7, 65, -40, 0, 11, -2]]> : tensor<4x8xi8>
  %sw = arith.constant dense<[6.13e-03, 4.2e-03, 7.7e-03, 5.1e-03]> : tensor<4xf32>
  %bias = arith.constant dense<[0.25, -0.5, 0.125, 0.0]> : tensor<4xf32>
  %sx = arith.constant 2.130000e-02 : f32
  %c0 = arith.constant 0 : i32
  %out = tensor.empty() : tensor<16x4xf32>
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
  %f = linalg.generic {indexing_maps = [#id, #ch, #ch, #tr], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %sw, %bias : tensor<4x16xi32>, tensor<4xf32>, tensor<4xf32>) outs(%out : tensor<16x4xf32>) {
  ^bb0(%acc_v: i32, %swc: f32, %bc: f32, %o: f32):
    %x = arith.sitofp %acc_v : i32 to f32
    %m1 = arith.mulf %x, %sx : f32
    %m2 = arith.mulf %m1, %swc : f32
    %y = arith.addf %m2, %bc : f32
    linalg.yield %y : f32
  } -> tensor<16x4xf32>
  return %f : tensor<16x4xf32>
}
