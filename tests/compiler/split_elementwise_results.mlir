// torq-split-elementwise-results on DenseNet's transition (IREE's dispatch, smaller):
// a 2x2 window sum, then one elementwise generic yielding both the mean (sum / 4, the
// concatenation's part) and the next layer's batch norm + ReLU of it. It becomes two
// generics: the mean, read by the pooling's group as its division, and the batch
// norm + ReLU reading the mean's result (not dividing again).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-elementwise-results)' | FileCheck %s
// Then the dispatch lowers to TorqHL: the pooling with its division folded, and an
// elementwise op for the batch norm + ReLU.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-elementwise-results,torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL

// CHECK-LABEL: func.func @pool_then_norm(
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]
// CHECK: %[[MEAN:.*]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<8x4x4xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[D:.*]] = arith.divf %[[IN]], %{{.*}} : f32
// CHECK-NEXT: linalg.yield %[[D]] : f32
// CHECK: %[[NORM:.*]] = linalg.generic {{.*}} ins(%arg1, %arg2, %[[MEAN]] : tensor<8xf32>, tensor<8xf32>, tensor<8x4x4xf32>)
// CHECK-NOT: arith.divf
// CHECK: arith.select
// CHECK: return %[[MEAN]], %[[NORM]]

// HL-LABEL: func.func @pool_then_norm(
// HL-NOT: linalg.
// HL: %[[POOL:.*]] = "torq_hl.avg_pool2d"
// HL: "torq_hl.elementwise"({{.*}}%[[POOL]]
// HL-NOT: stays on host

#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
#win = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 * 2 + d3, d2 * 2 + d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>
#out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#scalar = affine_map<(d0, d1, d2) -> ()>
func.func @pool_then_norm(%x: tensor<8x8x8xf32>, %scale: tensor<8xf32>, %shift: tensor<8xf32>)
    -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>) attributes {torq.dispatch} {
  %four = arith.constant 4.000000e+00 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x4x4xf32>
  %init = linalg.generic {indexing_maps = [#scalar, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%zero : f32) outs(%e : tensor<8x4x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<8x4x4xf32>
  %w = tensor.empty() : tensor<2x2xf32>
  %sum = linalg.generic {indexing_maps = [#win, #k, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<8x8x8xf32>, tensor<2x2xf32>) outs(%init : tensor<8x4x4xf32>) {
  ^bb0(%in: f32, %unused: f32, %acc: f32):
    %s = arith.addf %acc, %in : f32
    linalg.yield %s : f32
  } -> tensor<8x4x4xf32>
  %r:2 = linalg.generic {indexing_maps = [#id, #ch, #ch, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%sum, %scale, %shift : tensor<8x4x4xf32>, tensor<8xf32>, tensor<8xf32>) outs(%e, %e : tensor<8x4x4xf32>, tensor<8x4x4xf32>) {
  ^bb0(%in: f32, %a: f32, %b: f32, %o0: f32, %o1: f32):
    %mean = arith.divf %in, %four : f32
    %m = arith.mulf %mean, %a : f32
    %n = arith.addf %m, %b : f32
    %pos = arith.cmpf ugt, %n, %zero : f32
    %relu = arith.select %pos, %n, %zero : f32
    linalg.yield %mean, %relu : f32, f32
  } -> (tensor<8x4x4xf32>, tensor<8x4x4xf32>)
  return %r#0, %r#1 : tensor<8x4x4xf32>, tensor<8x4x4xf32>
}

// wav2vec2's projection bias add, yielded as is and transposed (IREE stores the
// transposed copy for the next conv): the second generic copies the first's result
// through the transposed output map instead of adding again; both lower to TorqHL.
// CHECK-LABEL: func.func @same_value_two_layouts(
// CHECK: %[[ADD:.*]] = linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #[[ID:.*]]], {{.*}} outs(%{{.*}} : tensor<1x49x256xf32>)
// CHECK: arith.addf
// CHECK: %[[T:.*]] = linalg.generic {indexing_maps = [#[[ID]], #{{.*}}], {{.*}} ins(%[[ADD]] : tensor<1x49x256xf32>) outs(%{{.*}} : tensor<256x1x49xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[IN]] : f32
// CHECK: return %[[ADD]], %[[T]]
// HL-LABEL: func.func @same_value_two_layouts(
// HL: %[[A:.*]] = "torq_hl.elementwise"(%arg0, %arg1)
// HL: "torq_hl.elementwise"(%[[A]]) {{.*}}axes = [1, 2, 0]{{.*}} -> tensor<256x1x49xbf16>
func.func @same_value_two_layouts(%x: tensor<1x49x256xf32>, %b: tensor<256xf32>) -> (tensor<1x49x256xf32>, tensor<256x1x49xf32>) {
  %e0 = tensor.empty() : tensor<1x49x256xf32>
  %e1 = tensor.empty() : tensor<256x1x49xf32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2, d0, d1)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %b : tensor<1x49x256xf32>, tensor<256xf32>) outs(%e0, %e1 : tensor<1x49x256xf32>, tensor<256x1x49xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32, %o2: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s, %s : f32, f32
  } -> (tensor<1x49x256xf32>, tensor<256x1x49xf32>)
  return %r#0, %r#1 : tensor<1x49x256xf32>, tensor<256x1x49xf32>
}
