// torq-fold-index-constants: a float computed from the indices inside a generic that
// reads inputs becomes a constant input read along the dims it varies with.
// AvgPool2d(3, 1, 1, count_include_pad=False) on a 4x4 map divides each window sum by
// the positions inside the input (2, 3, 3, 2 per row and column, their product), as
// IREE writes it; the window sum is then an avg_pool2d whose epilogue multiplies the
// mean back by 9 (value 1) and divides it by that operand.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants,torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL
//
// CHECK-LABEL: func.func @pool_count(
// CHECK: %[[COUNT:.*]] = arith.constant dense<{{\[}}[4.000000e+00, 6.000000e+00, 6.000000e+00, 4.000000e+00], [6.000000e+00, 9.000000e+00, 9.000000e+00, 6.000000e+00], [6.000000e+00, 9.000000e+00, 9.000000e+00, 6.000000e+00], [4.000000e+00, 6.000000e+00, 6.000000e+00, 4.000000e+00]]> : tensor<4x4xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], {{.*}} ins(%{{.*}}, %[[COUNT]] : tensor<2x4x4xf32>, tensor<4x4xf32>)
// CHECK-NEXT: ^bb0(%[[S:.*]]: f32, %[[C:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[D:.*]] = arith.divf %[[S]], %[[C]] : f32
// CHECK-NEXT: linalg.yield %[[D]]
// HL-LABEL: func.func @pool_count(
// HL: "torq_hl.avg_pool2d"(%arg0, %{{.*}}) {{.*}}epilogue = {result = 2 : i64, steps = [{args = [{value = 0 : i64}, 9.000000e+00], op = "mul"}, {args = [{value = 1 : i64}, {axes = [1, 2], operand = 1 : i64}], op = "div"}]}
//

#win_in = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 + d4)>
#win = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>
#win_out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @pool_count(%x: tensor<2x6x6xf32>) -> tensor<2x4x4xf32> attributes {torq.dispatch} {
  %zero = arith.constant 0.000000e+00 : f32
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %c2 = arith.constant 2 : i64
  %c4 = arith.constant 4 : i64
  %c5 = arith.constant 5 : i64
  %e = tensor.empty() : tensor<2x4x4xf32>
  %w = tensor.empty() : tensor<3x3xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s = linalg.generic {indexing_maps = [#win_in, #win, #win_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %w : tensor<2x6x6xf32>, tensor<3x3xf32>) outs(%f : tensor<2x4x4xf32>) {
  ^bb0(%in: f32, %unused: f32, %out: f32):
    %a = arith.addf %out, %in : f32
    linalg.yield %a : f32
  } -> tensor<2x4x4xf32>
  %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<2x4x4xf32>) outs(%e : tensor<2x4x4xf32>) {
  ^bb0(%sum: f32, %out: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %ii = arith.index_cast %i : index to i64
    %ilo = arith.subi %ii, %c1 : i64
    %ihi0 = arith.addi %ii, %c2 : i64
    %ihi1 = arith.minsi %ihi0, %c5 : i64
    %ihi = arith.minsi %ihi1, %c4 : i64
    %iclip0 = arith.subi %c1, %ii : i64
    %iclip = arith.maxsi %iclip0, %c0 : i64
    %in0 = arith.subi %ihi, %ilo : i64
    %in1 = arith.subi %in0, %iclip : i64
    %icount = arith.maxsi %in1, %c0 : i64
    %jj = arith.index_cast %j : index to i64
    %jlo = arith.subi %jj, %c1 : i64
    %jhi0 = arith.addi %jj, %c2 : i64
    %jhi1 = arith.minsi %jhi0, %c5 : i64
    %jhi = arith.minsi %jhi1, %c4 : i64
    %jclip0 = arith.subi %c1, %jj : i64
    %jclip = arith.maxsi %jclip0, %c0 : i64
    %jn0 = arith.subi %jhi, %jlo : i64
    %jn1 = arith.subi %jn0, %jclip : i64
    %jcount = arith.maxsi %jn1, %c0 : i64
    %count = arith.muli %icount, %jcount : i64
    %countf = arith.sitofp %count : i64 to f32
    %avg = arith.divf %sum, %countf : f32
    linalg.yield %avg : f32
  } -> tensor<2x4x4xf32>
  return %r : tensor<2x4x4xf32>
}
