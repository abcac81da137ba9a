// torq-split-box-reads leaves a read of all of an input alone, even through a constant:
// a unit dim read at 0 is no box (box_read would not take the copy), so nothing is split.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-box-reads)' | FileCheck %s

// CHECK-LABEL: func.func @unit_dim_whole_read_untouched(
// CHECK-NEXT: tensor.empty
// CHECK-NEXT: linalg.generic {{.*}} ins(%arg0 : tensor<1x16x8xi8>)
// CHECK-NOT: linalg.generic
func.func @unit_dim_whole_read_untouched(%arg0: tensor<1x16x8xi8>) -> tensor<8x16xi8> attributes {torq.dispatch} {
  %e = tensor.empty() : tensor<8x16xi8>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (0, d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%arg0 : tensor<1x16x8xi8>) outs(%e : tensor<8x16xi8>) {
  ^bb0(%in: i8, %out: i8):
    %w = arith.addi %in, %in : i8
    linalg.yield %w : i8
  } -> tensor<8x16xi8>
  return %r : tensor<8x16xi8>
}
