// torq-convert-dtypes leaves functions without f32 unchanged: an i8 x i8 ->
// i32 matmul + bias keeps every type, constant and attribute (no host type
// records are added), with or without --torq-keep-f32.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-convert-dtypes)' | FileCheck %s
// RUN: torq-opt %s --torq-keep-f32 --pass-pipeline='builtin.module(torq-convert-dtypes)' | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// The signature line ends right after the result type: no attributes.
// CHECK-LABEL: func.func @matmul_i8(
// CHECK-SAME: %arg0: tensor<4x8xi8>, %arg1: tensor<8x16xi8>, %arg2: tensor<16xi32>) -> tensor<4x16xi32> {
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[K:.*]] = arith.constant dense<[1, -2, 3, -4]> : tensor<4xi8>
// CHECK-NEXT: tensor.empty() : tensor<4x16xi32>
// CHECK-NEXT: linalg.fill ins(%[[Z]] : i32)
// CHECK-NEXT: linalg.generic
// CHECK-NEXT: ^bb0(%{{.*}}: i8, %{{.*}}: i8, %{{.*}}: i32):
// CHECK-NEXT: arith.extsi %{{.*}} : i8 to i32
// CHECK-NEXT: arith.extsi %{{.*}} : i8 to i32
// CHECK-NEXT: arith.muli
// CHECK-NEXT: arith.addi
// CHECK: linalg.generic
// CHECK-NEXT: ^bb0(%{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32):
// CHECK: return %{{.*}} : tensor<4x16xi32>
// CHECK-NOT: bf16
// CHECK-NOT: torq.host
func.func @matmul_i8(%x: tensor<4x8xi8>, %y: tensor<8x16xi8>, %bias: tensor<16xi32>) -> tensor<4x16xi32> {
  %z = arith.constant 0 : i32
  %k = arith.constant dense<[1, -2, 3, -4]> : tensor<4xi8>
  %e = tensor.empty() : tensor<4x16xi32>
  %f = linalg.fill ins(%z : i32) outs(%e : tensor<4x16xi32>) -> tensor<4x16xi32>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xi8>, tensor<8x16xi8>) outs(%f : tensor<4x16xi32>) {
  ^bb0(%p: i8, %q: i8, %o: i32):
    %p1 = arith.extsi %p : i8 to i32
    %q1 = arith.extsi %q : i8 to i32
    %m = arith.muli %p1, %q1 : i32
    %s = arith.addi %o, %m : i32
    linalg.yield %s : i32
  } -> tensor<4x16xi32>
  %r = linalg.generic {indexing_maps = [#id2, #col, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %bias : tensor<4x16xi32>, tensor<16xi32>) outs(%e : tensor<4x16xi32>) {
  ^bb0(%p: i32, %q: i32, %o: i32):
    %s = arith.addi %p, %q : i32
    linalg.yield %s : i32
  } -> tensor<4x16xi32>
  return %r : tensor<4x16xi32>
}
