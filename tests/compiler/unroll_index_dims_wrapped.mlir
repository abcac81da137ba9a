// Falcon's multi-query attention reads its one value head out of the fused QKV through a
// flattened index: out[d] = qkv[d % 8, 5, (d / 8) % 16] for d < 512 (4 query heads x 16
// columns x 8 tokens), each coordinate passed through torch's wrap of a negative index
// (x < 0 ? x + n : x, via i64). No coordinate can be negative (remainders of a loop
// index by positive constants), so the wraps fold (compiler/index_arith.py); the dim,
// read as three digits, becomes three loop dims (compiler/index_digits.py), and the read
// is a box of the argument, copied transposed to every query head: no index is left.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-DAG: #[[BOX:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-LABEL: func.func @falcon_value_head(
// CHECK-SAME: -> tensor<4x16x8xf32>
// CHECK-NOT: arith.select
// CHECK: %[[V:.*]] = tensor.extract_slice %arg0[0, 5, 0] [8, 1, 16] [1, 1, 1] : tensor<8x6x16xf32> to tensor<8x16xf32>
// CHECK: linalg.generic {indexing_maps = [#[[BOX]], {{.*}}]{{.*}} ins(%[[V]] : tensor<8x16xf32>)
// CHECK-NOT: linalg.index
// NPU-LABEL: func.func @falcon_value_head(
// NPU-NOT: linalg.index

func.func @falcon_value_head(%arg0: tensor<8x6x16xf32>) -> tensor<512xf32> attributes {torq.dispatch} {
  %c16 = arith.constant 16 : index
  %c8 = arith.constant 8 : index
  %c0_i64 = arith.constant 0 : i64
  %c8_i64 = arith.constant 8 : i64
  %c16_i64 = arith.constant 16 : i64
  %c5 = arith.constant 5 : index
  %0 = tensor.empty() : tensor<512xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%0 : tensor<512xf32>) {
  ^bb0(%out: f32):
    %2 = linalg.index 0 : index
    %3 = arith.remsi %2, %c8 : index
    %4 = arith.divsi %2, %c8 : index
    %5 = arith.remsi %4, %c16 : index
    %6 = arith.index_cast %5 : index to i64
    %7 = arith.index_cast %3 : index to i64
    %8 = arith.cmpi slt, %7, %c0_i64 : i64
    %9 = arith.addi %7, %c8_i64 : i64
    %10 = arith.select %8, %9, %7 : i64
    %11 = arith.index_cast %10 : i64 to index
    %12 = arith.cmpi slt, %6, %c0_i64 : i64
    %13 = arith.addi %6, %c16_i64 : i64
    %14 = arith.select %12, %13, %6 : i64
    %15 = arith.index_cast %14 : i64 to index
    %extracted = tensor.extract %arg0[%11, %c5, %15] : tensor<8x6x16xf32>
    linalg.yield %extracted : f32
  } -> tensor<512xf32>
  return %1 : tensor<512xf32>
}
