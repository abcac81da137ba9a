// torq-lower-requantization on the requantization of attention's p.v when IREE leaves it out
// of the matmul's dispatch (it transposes the result back to tokens x heads): the i32
// accumulator another dispatch wrote, corrected by the row and column sums of the two
// operands' zero points (requant_zero_point.separate_correction), then rescaled to int8.
// The correction a' = acc - (3 RA - 128 RB + 6144) stays i32 arithmetic, the rescale is
// fitted on |a'| <= 2^30 (the contraction is out of sight, as for an i32 residual). Before,
// the three i32 inputs kept the dispatch on host in f32 ("a requantization step reads 3
// integer values").
// RUN: torq-opt %s --pass-pipeline='builtin.module(linalg-generalize-named-ops,canonicalize,cse,torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @main_graph_dispatch_12
// CHECK: linalg.generic
// CHECK-NOT: sitofp
// CHECK: ^bb0(%[[ACC:[a-z0-9_]+]]: i32, %[[RA:[a-z0-9_]+]]: i32, %[[RB:[a-z0-9_]+]]: i32,
// CHECK-NOT: sitofp
// CHECK: arith.muli %[[RB]], %{{.*}} : i32
// CHECK-NOT: sitofp
// CHECK: arith.muli %[[RA]], %{{.*}} : i32
// CHECK-NOT: sitofp
// CHECK: %[[C:.*]] = arith.subi
// CHECK-NOT: sitofp
// CHECK: %[[CORR:.*]] = arith.subi %[[ACC]], %[[C]] : i32
// CHECK-NOT: sitofp
// CHECK: arith.extsi %[[CORR]] : i32 to i64
// CHECK-NOT: sitofp
// CHECK: arith.shrsi
// CHECK-NOT: sitofp
// CHECK: arith.trunci %{{.*}} : i64 to i8

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
module {
  func.func @main_graph_dispatch_12(%arg0: tensor<4x2x16x8xi32>, %arg1: tensor<4x2x16xi32>, %arg2: tensor<4x2x8xi32>) -> tensor<4x16x2x8xi8> attributes {torq.dispatch, torq.host_fma = true} {
    %cst = arith.constant 0.00392156886 : f32
    %cst_0 = arith.constant 0.0197207015 : f32
    %cst_1 = arith.constant 0.00570374681 : f32
    %cst_2 = arith.constant -1.900000e+01 : f32
    %cst_3 = arith.constant -1.280000e+02 : f32
    %cst_4 = arith.constant 1.270000e+02 : f32
    %c-128_i32 = arith.constant -128 : i32
    %c3_i32 = arith.constant 3 : i32
    %c-6144_i32 = arith.constant -6144 : i32
    %0 = tensor.empty() : tensor<4x16x2x8xi8>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map2, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0, %arg1, %arg2 : tensor<4x2x16x8xi32>, tensor<4x2x16xi32>, tensor<4x2x8xi32>) outs(%0 : tensor<4x16x2x8xi8>) {
    ^bb0(%in: i32, %in_5: i32, %in_6: i32, %out: i8):
      %2 = arith.muli %in_6, %c-128_i32 : i32
      %3 = arith.muli %in_5, %c3_i32 : i32
      %4 = arith.addi %3, %2 : i32
      %5 = arith.subi %4, %c-6144_i32 : i32
      %6 = arith.subi %in, %5 : i32
      %7 = arith.sitofp %6 : i32 to f32
      %8 = arith.mulf %7, %cst : f32
      %9 = arith.mulf %8, %cst_0 : f32
      %10 = arith.divf %9, %cst_1 : f32
      %11 = math.roundeven %10 : f32
      %12 = arith.addf %11, %cst_2 : f32
      %13 = arith.maxnumf %12, %cst_3 : f32
      %14 = arith.minnumf %13, %cst_4 : f32
      %15 = arith.fptosi %14 : f32 to i8
      linalg.yield %15 : i8
    } -> tensor<4x16x2x8xi8>
    return %1 : tensor<4x16x2x8xi8>
  }
}
