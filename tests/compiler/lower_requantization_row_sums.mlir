// torq-lower-requantization on int8 arithmetic beside an integer sum: a bias added after a
// quantized matmul and quantized again (onnxruntime's MatMul -> Q -> DQ -> Add -> Q), with
// the row sums of the result the next matmul's zero point correction reads (an i32 result
// of the same dispatch, as IREE fuses it). The float generic becomes a per-channel integer
// rescale; the integer sum is left as it is, reading it, and torq-fold-index-constants
// keeps the sum's init a fill (the NPU patterns read it as the reduction's init). Before,
// the i32 result kept the whole dispatch on the host in f32.
// RUN: torq-opt %s --pass-pipeline='builtin.module(linalg-generalize-named-ops,canonicalize,cse,torq-lower-requantization,torq-fold-index-constants)' | FileCheck %s

// CHECK-LABEL: func.func @main_graph_dispatch_3
// CHECK-SAME: (%[[X:.*]]: tensor<49x16xi8>) -> (tensor<49xi32>, tensor<49x16xi8>)
// CHECK: %[[ZERO:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<49xi32>)
// CHECK-NOT: sitofp
// CHECK: %[[Q:.*]] = linalg.generic {{.*}} ins(%[[X]],
// CHECK-NOT: sitofp
// CHECK: arith.shrsi
// CHECK-NOT: sitofp
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}["parallel", "reduction"]{{.*}} ins(%[[Q]] : tensor<49x16xi8>) outs(%[[ZERO]] : tensor<49xi32>)
// CHECK: return %[[SUM]], %[[Q]]

#map = affine_map<(d0, d1) -> (d1)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main_graph_dispatch_3(%arg0: tensor<16xf32> {torq.constant = dense<[-0.247090623, 0.111990713, -0.120878868, -0.167097256, -0.143988058, 0.143988058, 0.13154465, 0.191984087, 0.0906591489, -0.0835486277, -0.0693275854, 0.07466048, 0.20620513, 0.0675499588, -0.119101241, -0.117323607]> : tensor<16xf32>}, %arg1: tensor<49x16xi8>) -> (tensor<49xi32>, tensor<49x16xi8>) attributes {torq.dispatch, torq.host_fma = true} {
    %cst = arith.constant 0.0150158079 : f32
    %cst_0 = arith.constant 0.0154606616 : f32
    %cst_1 = arith.constant -2.000000e+00 : f32
    %cst_2 = arith.constant -1.280000e+02 : f32
    %cst_3 = arith.constant 1.270000e+02 : f32
    %c0_i32 = arith.constant 0 : i32
    %c-1_i16 = arith.constant -1 : i16
    %0 = tensor.empty() : tensor<49xi32>
    %1 = tensor.empty() : tensor<49x16xi8>
    %2 = linalg.fill ins(%c0_i32 : i32) outs(%0 : tensor<49xi32>) -> tensor<49xi32>
    %3 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<16xf32>, tensor<49x16xi8>) outs(%1 : tensor<49x16xi8>) {
    ^bb0(%in: f32, %in_4: i8, %out: i8):
      %5 = arith.extsi %in_4 : i8 to i16
      %6 = arith.subi %5, %c-1_i16 : i16
      %7 = arith.sitofp %6 : i16 to f32
      %8 = arith.mulf %7, %cst : f32
      %9 = arith.addf %in, %8 : f32
      %10 = arith.divf %9, %cst_0 : f32
      %11 = math.roundeven %10 : f32
      %12 = arith.addf %11, %cst_1 : f32
      %13 = arith.maxnumf %12, %cst_2 : f32
      %14 = arith.minnumf %13, %cst_3 : f32
      %15 = arith.fptosi %14 : f32 to i8
      linalg.yield %15 : i8
    } -> tensor<49x16xi8>
    %4 = linalg.generic {indexing_maps = [#map1, #map2], iterator_types = ["parallel", "reduction"]} ins(%3 : tensor<49x16xi8>) outs(%2 : tensor<49xi32>) {
    ^bb0(%in: i8, %out: i32):
      %5 = arith.extsi %in : i8 to i32
      %6 = arith.addi %out, %5 : i32
      linalg.yield %6 : i32
    } -> tensor<49xi32>
    return %4, %3 : tensor<49xi32>, tensor<49x16xi8>
  }
}
