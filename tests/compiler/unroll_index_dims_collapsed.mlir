// rotate_half fused into apply_rotary over collapsed dims, as IREE writes Qwen2's (x viewed as
// [T, H, 2, D/2]; the body's head index is d0 % 2 + (d0 / 2) * 2, its sequence index d1 % 8,
// and the half index 1 - d2 / 8 with the column d2 % 8 of the collapsed [2, 8] pair).
// The ranges fold the first two to d0 and d1 (compiler/index_arith.py); d2, read only as
// quotient and remainder by 8, is split into two pieces of 8, in each of which both fold.
// Each piece reads its half of x as a box (a rank-reducing slice: no unit loop dim is
// spare) and is an elementwise generic; the result is assembled with tensor.insert_slice.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// The NPU takes it: no remark from the support check.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-LABEL: func.func @apply_rotary(
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.remsi
// CHECK-NOT: arith.divsi
// CHECK: %[[HI:.*]] = tensor.extract_slice %arg0[0, 0, 1, 0] [8, 4, 1, 8] [1, 1, 1, 1] : tensor<8x4x2x8xf32> to tensor<8x4x8xf32>
// CHECK: %[[NEG:.*]] = linalg.generic {{.*}} ins({{.*}}, %[[HI]] : {{.*}})
// CHECK: arith.negf
// CHECK: %[[R0:.*]] = tensor.insert_slice %[[NEG]] into %{{.*}}[0, 0, 0] [4, 8, 8]
// CHECK: %[[LO:.*]] = tensor.extract_slice %arg0[0, 0, 0, 0] [8, 4, 1, 8] [1, 1, 1, 1] : tensor<8x4x2x8xf32> to tensor<8x4x8xf32>
// CHECK: %[[COPY:.*]] = linalg.generic {{.*}} ins({{.*}}, %[[LO]] : {{.*}})
// CHECK-NOT: arith.negf
// CHECK: %[[R1:.*]] = tensor.insert_slice %[[COPY]] into %[[R0]][0, 0, 8] [4, 8, 8]
// CHECK: return %[[R1]]
// NPU-LABEL: func.func @apply_rotary(
// NPU-NOT: linalg.index

func.func @apply_rotary(%arg0: tensor<8x4x2x8xf32>, %arg1: tensor<8x4x16xf32>, %arg2: tensor<8x16xf32>, %arg3: tensor<8x16xf32>) -> tensor<4x8x16xf32> attributes {torq.dispatch} {
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %0 = tensor.empty() : tensor<4x8x16xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg1, %arg2, %arg3 : tensor<8x4x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) outs(%0 : tensor<4x8x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %in_1: f32, %out: f32):
    %2 = linalg.index 0 : index
    %3 = linalg.index 1 : index
    %4 = linalg.index 2 : index
    %5 = arith.remsi %4, %c8 : index
    %6 = arith.divsi %4, %c8 : index
    %7 = arith.remsi %2, %c2 : index
    %8 = arith.divsi %2, %c2 : index
    %9 = arith.remsi %3, %c8 : index
    %10 = arith.muli %8, %c2 overflow<nsw> : index
    %11 = arith.addi %7, %10 : index
    %12 = arith.subi %c1, %6 : index
    %extracted = tensor.extract %arg0[%9, %11, %12, %5] : tensor<8x4x2x8xf32>
    %13 = arith.negf %extracted : f32
    %14 = arith.cmpi eq, %12, %c1 : index
    %15 = arith.select %14, %13, %extracted : f32
    %16 = arith.mulf %15, %in_1 : f32
    %17 = arith.mulf %in, %in_0 : f32
    %18 = arith.addf %17, %16 : f32
    linalg.yield %18 : f32
  } -> tensor<4x8x16xf32>
  return %1 : tensor<4x8x16xf32>
}
