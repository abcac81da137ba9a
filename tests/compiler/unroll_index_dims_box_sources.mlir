// Falcon's rotary reads q out of its fused QKV: both the input the generic reads and the
// value its body extracts from (for rotate_half) are box loads of the arguments, tensor
// slices. Split along the half dim, each piece would read a slice of a slice, which is
// no DMA box ("'tensor.extract_slice' has no Torq lowering": 2 host dispatches per
// layer); each such pair becomes one slice of the argument.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-LABEL: func.func @falcon_rotary(
// CHECK-NOT: linalg.index
// The pieces' boxes: each a slice of an argument, none of a slice.
// CHECK-DAG: tensor.extract_slice %arg0[0, 0, 0, 0, 0, 0] [1, 1, 8, 4, 1, 8] [1, 1, 1, 1, 1, 1] : tensor<1x1x8x6x2x8xf32> to tensor<1x8x4x1x8xf32>
// CHECK-DAG: tensor.extract_slice %arg0[0, 0, 0, 0, 1, 0] [1, 1, 8, 4, 1, 8] [1, 1, 1, 1, 1, 1] : tensor<1x1x8x6x2x8xf32> to tensor<1x8x4x1x8xf32>
// CHECK-DAG: tensor.extract_slice %arg1[0, 0, 0, 1, 0] [1, 8, 4, 1, 8] [1, 1, 1, 1, 1] : tensor<1x8x6x2x8xf32> to tensor<8x4x1x8xf32>
// CHECK-DAG: tensor.extract_slice %arg1[0, 0, 0, 0, 0] [1, 8, 4, 1, 8] [1, 1, 1, 1, 1] : tensor<1x8x6x2x8xf32> to tensor<8x4x1x8xf32>
// CHECK-NOT: tensor.extract_slice %extracted_slice
// CHECK: return
// NPU-LABEL: func.func @falcon_rotary(
// NPU-NOT: linalg.index

func.func @falcon_rotary(%arg0: tensor<1x1x8x6x2x8xf32>, %arg1: tensor<1x8x6x2x8xf32>, %arg2: tensor<1x8x2x8xf32>, %arg3: tensor<1x8x2x8xf32>) -> tensor<4x1x8x2x8xf32> attributes {torq.dispatch} {
  %c1 = arith.constant 1 : index
  %0 = tensor.empty() : tensor<4x1x8x2x8xf32>
  %q = tensor.extract_slice %arg0[0, 0, 0, 0, 0, 0] [1, 1, 8, 4, 2, 8] [1, 1, 1, 1, 1, 1] : tensor<1x1x8x6x2x8xf32> to tensor<1x8x4x2x8xf32>
  %q2 = tensor.extract_slice %arg1[0, 0, 0, 0, 0] [1, 8, 4, 2, 8] [1, 1, 1, 1, 1] : tensor<1x8x6x2x8xf32> to tensor<8x4x2x8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d1, d2, d0, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d2, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d2, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%q, %arg2, %arg3 : tensor<1x8x4x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>) outs(%0 : tensor<4x1x8x2x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: f32, %out: f32):
    %2 = linalg.index 0 : index
    %3 = linalg.index 2 : index
    %4 = linalg.index 3 : index
    %5 = linalg.index 4 : index
    %6 = arith.subi %c1, %4 : index
    %extracted = tensor.extract %q2[%3, %2, %6, %5] : tensor<8x4x2x8xf32>
    %7 = arith.negf %extracted : f32
    %8 = arith.cmpi eq, %6, %c1 : index
    %9 = arith.select %8, %7, %extracted : f32
    %10 = arith.mulf %9, %in_2 : f32
    %11 = arith.mulf %in, %in_1 : f32
    %12 = arith.addf %11, %10 : f32
    linalg.yield %12 : f32
  } -> tensor<4x1x8x2x8xf32>
  return %1 : tensor<4x1x8x2x8xf32>
}
