// torchvision's nn.MultiheadAttention exported to ONNX, 3 heads: IREE gathers one of q, k,
// v into the head-major layout ([3 heads, 197 tokens, 64]) from the packed projection
// ([197, q|k|v, 3 x 64]), reading x[t, 1, h * 64 + d] at digits of the flat index. Split
// along the heads, three pieces: splitting the second piece again writes pieces 2 and 3
// into a slice of the first split's result, put back after. The pass flattens that: each
// piece goes into the result at its own box, so the NPU takes the dispatch (before, its
// support check refused the nested 'tensor.insert_slice').
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-LABEL: func.func @head_split(
// CHECK-SAME: -> tensor<3x197x64xf32>
// CHECK-NOT: linalg.index
// CHECK: %[[E:.*]] = tensor.empty() : tensor<3x197x64xf32>
// CHECK: tensor.extract_slice %arg0[0, 1, 0] [197, 1, 64]
// CHECK: %[[I0:.*]] = tensor.insert_slice %{{.*}} into %[[E]][0, 0, 0] [1, 197, 64]
// CHECK: tensor.extract_slice %arg0[0, 1, 64] [197, 1, 64]
// CHECK: tensor.extract_slice %arg0[0, 1, 128] [197, 1, 64]
// CHECK-NOT: tensor.extract_slice %[[I0]]
// CHECK: %[[I1:.*]] = tensor.insert_slice %{{.*}} into %[[I0]][1, 0, 0] [1, 197, 64]
// CHECK: %[[I2:.*]] = tensor.insert_slice %{{.*}} into %[[I1]][2, 0, 0] [1, 197, 64]
// CHECK: return %[[I2]] : tensor<3x197x64xf32>
// NPU-LABEL: func.func @head_split(
// NPU-NOT: linalg.index

func.func @head_split(%0: tensor<197x3x192xf32>) -> tensor<37824xf32> attributes {torq.dispatch} {
  %c197 = arith.constant 197 : index
  %cst = arith.constant 0.353553385 : f32
  %c64 = arith.constant 64 : index
  %c1 = arith.constant 1 : index
  %1 = tensor.empty() : tensor<37824xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%1 : tensor<37824xf32>) {
  ^bb0(%out: f32):
    %3 = linalg.index 0 : index
    %4 = arith.remsi %3, %c64 : index
    %5 = arith.divsi %3, %c64 : index
    %6 = arith.remsi %5, %c197 : index
    %7 = arith.divsi %5, %c197 : index
    %8 = arith.muli %7, %c64 overflow<nsw> : index
    %9 = arith.addi %4, %8 : index
    %extracted = tensor.extract %0[%6, %c1, %9] : tensor<197x3x192xf32>
    %10 = arith.mulf %extracted, %cst : f32
    linalg.yield %10 : f32
  } -> tensor<37824xf32>
  return %2 : tensor<37824xf32>
}
