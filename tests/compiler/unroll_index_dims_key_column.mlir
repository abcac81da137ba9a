// Falcon's key rotary, as IREE fuses it with the key's gather out of the fused QKV: for
// d < 128 (8 tokens x 2 halves x 8 columns), rotate_half reads k[d / 16, 1 - (d / 8) % 2,
// d % 8] and the gather reads qkv[d / 16, 4, d % 8 + ((d / 8) % 2) * 8] through torch's
// wrap of negative indices. The wraps fold (no coordinate can be negative); the column
// d % 8 + ((d / 8) % 2) * 8 is d % 16 (compiler/index_arith.py); d becomes three loop
// dims (compiler/index_digits.py) and the half dim splits in two: in the second piece
// the key column is c + 8, a box at offset 8.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-LABEL: func.func @falcon_key_rotary(
// CHECK-SAME: -> tensor<8x2x8xf32>
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.select {{.*}} : i64
// CHECK-DAG: tensor.extract_slice %arg1[0, 4, 0] [8, 1, 8] [1, 1, 1] : tensor<8x6x16xf32> to tensor<8x1x8xf32>
// CHECK-DAG: tensor.extract_slice %arg1[0, 4, 8] [8, 1, 8] [1, 1, 1] : tensor<8x6x16xf32> to tensor<8x1x8xf32>
// CHECK: return
// NPU-LABEL: func.func @falcon_key_rotary(
// NPU-NOT: linalg.index

func.func @falcon_key_rotary(%arg0: tensor<8x2x8xf32>, %arg1: tensor<8x6x16xf32>, %arg2: tensor<128xf32>, %arg3: tensor<128xf32>) -> tensor<128xf32> attributes {torq.dispatch} {
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c0_i64 = arith.constant 0 : i64
  %c8_i64 = arith.constant 8 : i64
  %c16_i64 = arith.constant 16 : i64
  %c4 = arith.constant 4 : index
  %0 = tensor.empty() : tensor<128xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%arg2, %arg3 : tensor<128xf32>, tensor<128xf32>) outs(%0 : tensor<128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %2 = linalg.index 0 : index
    %3 = arith.remsi %2, %c8 : index
    %4 = arith.divsi %2, %c8 : index
    %5 = arith.remsi %4, %c2 : index
    %6 = arith.divsi %4, %c2 : index
    %7 = arith.subi %c1, %5 : index
    %extracted = tensor.extract %arg0[%6, %7, %3] : tensor<8x2x8xf32>
    %8 = arith.negf %extracted : f32
    %9 = arith.cmpi eq, %7, %c1 : index
    %10 = arith.select %9, %8, %extracted : f32
    %11 = arith.muli %5, %c8 overflow<nsw> : index
    %12 = arith.addi %3, %11 : index
    %13 = arith.index_cast %12 : index to i64
    %14 = arith.index_cast %6 : index to i64
    %15 = arith.cmpi slt, %14, %c0_i64 : i64
    %16 = arith.addi %14, %c8_i64 : i64
    %17 = arith.select %15, %16, %14 : i64
    %18 = arith.index_cast %17 : i64 to index
    %19 = arith.cmpi slt, %13, %c0_i64 : i64
    %20 = arith.addi %13, %c16_i64 : i64
    %21 = arith.select %19, %20, %13 : i64
    %22 = arith.index_cast %21 : i64 to index
    %extracted_1 = tensor.extract %arg1[%18, %c4, %22] : tensor<8x6x16xf32>
    %23 = arith.mulf %10, %in_0 : f32
    %24 = arith.mulf %extracted_1, %in : f32
    %25 = arith.addf %24, %23 : f32
    linalg.yield %25 : f32
  } -> tensor<128xf32>
  return %1 : tensor<128xf32>
}
