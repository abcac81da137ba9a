// torq-fold-unit-dims: a batch matmul over three batch dims, one of extent 1 (batch x
// KV heads x heads, as IREE leaves a batch-1 attention of a model that splits its heads
// twice), with the reduction not innermost: more batch dims than the matmul pattern has
// letters (two: B and A), so it does not read it. Without its unit dims (upstream
// linalg-fold-unit-extent-dims) it is a batch matmul over two; the arguments' collapses
// become rank-reducing boxes of them and the result's expansion is dropped: the function
// returns 2x4x8x8 (the target reshapes the call's result back). The support check then
// takes it.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-unit-dims)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-unit-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
// Without the pass the check names the generic's loops:
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s --check-prefix=HOST
//
// CHECK-LABEL: func.func @scores(
// CHECK-SAME: -> tensor<2x4x8x8xf32>
// CHECK: tensor.extract_slice %arg0[0, 0, 0, 0, 0] [1, 2, 4, 8, 16] [1, 1, 1, 1, 1] : tensor<1x2x4x8x16xf32> to tensor<2x4x8x16xf32>
// CHECK: tensor.extract_slice %arg1[0, 0, 0, 0, 0] [1, 2, 4, 8, 16] [1, 1, 1, 1, 1] : tensor<1x2x4x8x16xf32> to tensor<2x4x8x16xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction", "parallel"]
// CHECK-NOT: tensor.expand_shape
// CHECK-NOT: tensor.collapse_shape
// CHECK: return {{.*}} : tensor<2x4x8x8xf32>
// A matmul the pattern reads is left alone:
// CHECK-LABEL: func.func @plain(
// CHECK-SAME: -> tensor<4x8x8xf32>
// CHECK-NOT: tensor.extract_slice
// NPU-LABEL: func.func @scores(
// HOST: error: torq-check-npu-support: no NPU form: linalg.generic: 'linalg.generic' with this structure has no Torq pattern (loops 1x2x4x8x16x8: p p p p r p)

func.func @scores(%q: tensor<1x2x4x8x16xf32>, %k: tensor<1x2x4x8x16xf32>) -> tensor<1x2x4x8x8xf32> attributes {torq.dispatch} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x2x4x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x8x8xf32>) -> tensor<1x2x4x8x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4)>,
                                        affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5, d4)>,
                                        affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d5)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "parallel"]}
      ins(%q, %k : tensor<1x2x4x8x16xf32>, tensor<1x2x4x8x16xf32>) outs(%acc : tensor<1x2x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %o, %m : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x8x8xf32>
  return %s : tensor<1x2x4x8x8xf32>
}

func.func @plain(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>) -> tensor<4x8x8xf32> attributes {torq.dispatch} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>,
                                        affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>,
                                        affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<4x8x16xf32>, tensor<4x8x16xf32>) outs(%acc : tensor<4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %o, %m : f32
    linalg.yield %r : f32
  } -> tensor<4x8x8xf32>
  return %s : tensor<4x8x8xf32>
}
