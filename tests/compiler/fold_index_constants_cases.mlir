// torq-fold-index-constants: a result written through a permuted map is left as it is (the
// evaluation is in loop order); an i1 true read as signed (arith.extsi) is -1.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants)' | FileCheck %s
//
// CHECK-LABEL: func.func @transposed()
// CHECK: linalg.generic
// CHECK-LABEL: func.func @bool_signed()
// CHECK-NOT: linalg.generic
// CHECK: arith.constant dense<[0, 0, -1, -1]> : tensor<4xi32>

func.func @transposed() -> tensor<2x3xi32> attributes {torq.dispatch} {
  %0 = tensor.empty() : tensor<2x3xi32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<2x3xi32>) {
  ^bb0(%out: i32):
    %2 = linalg.index 0 : index
    %3 = arith.index_cast %2 : index to i32
    linalg.yield %3 : i32
  } -> tensor<2x3xi32>
  return %1 : tensor<2x3xi32>
}

func.func @bool_signed() -> tensor<4xi32> attributes {torq.dispatch} {
  %c2 = arith.constant 2 : index
  %0 = tensor.empty() : tensor<4xi32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%0 : tensor<4xi32>) {
  ^bb0(%out: i32):
    %2 = linalg.index 0 : index
    %3 = arith.cmpi sge, %2, %c2 : index
    %4 = arith.extsi %3 : i1 to i32
    linalg.yield %4 : i32
  } -> tensor<4xi32>
  return %1 : tensor<4xi32>
}
