// torq-lower-requantization on PT2E GoogLeNet's inception pool (3x3, stride 1, ceil mode),
// which torch-mlir left in f32: the int8 input dequantized, padded with -inf (low 1, high 2),
// max pooled and quantized back at the same scale. It is an int8 max pool of the input
// padded with -128 (compiler/requant_max_pool.py), with only the padding the windows read
// (high 1: the NPU's pool takes its output size from its padded input).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s

// CHECK-LABEL: func.func @main_dispatch_11(
// CHECK-NOT: arith.sitofp
// CHECK: tensor.pad %arg0 low[0, 1, 1] high[0, 1, 1]
// CHECK: arith.constant -128 : i8
// CHECK: arith.maxsi %{{.*}}, %{{.*}} : i8
// CHECK-NOT: arith.fptosi

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 + d4)>
#map2 = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>
#map3 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
func.func @main_dispatch_11(%arg0: tensor<192x28x28xi8>) -> tensor<192x28x28xi8> attributes {torq.dispatch, torq.host_fma = true} {
  %cst = arith.constant 0xFF800000 : f32
  %cst_0 = arith.constant 8.87689122E-4 : f32
  %cst_1 = arith.constant -1.280000e+02 : f32
  %cst_2 = arith.constant 1.270000e+02 : f32
  %c-128_i16 = arith.constant -128 : i16
  %0 = tensor.empty() : tensor<192x28x28xi8>
  %1 = tensor.empty() : tensor<192x28x28xf32>
  %2 = tensor.empty() : tensor<3x3xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<192x28x28xi8>) outs(%1 : tensor<192x28x28xf32>) {
  ^bb0(%in: i8, %out: f32):
    %7 = arith.extsi %in : i8 to i16
    %8 = arith.subi %7, %c-128_i16 : i16
    %9 = arith.sitofp %8 : i16 to f32
    %10 = arith.mulf %9, %cst_0 : f32
    linalg.yield %10 : f32
  } -> tensor<192x28x28xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%1 : tensor<192x28x28xf32>) -> tensor<192x28x28xf32>
  %padded = tensor.pad %3 low[0, 1, 1] high[0, 2, 2] {
  ^bb0(%arg1: index, %arg2: index, %arg3: index):
    tensor.yield %cst : f32
  } : tensor<192x28x28xf32> to tensor<192x31x31xf32>
  %5 = linalg.generic {indexing_maps = [#map1, #map2, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%padded, %2 : tensor<192x31x31xf32>, tensor<3x3xf32>) outs(%4 : tensor<192x28x28xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %7 = arith.maximumf %out, %in : f32
    linalg.yield %7 : f32
  } -> tensor<192x28x28xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<192x28x28xf32>) outs(%0 : tensor<192x28x28xi8>) {
  ^bb0(%in: f32, %out: i8):
    %7 = arith.divf %in, %cst_0 : f32
    %8 = math.roundeven %7 : f32
    %9 = arith.addf %8, %cst_1 : f32
    %10 = arith.maxnumf %9, %cst_1 : f32
    %11 = arith.minnumf %10, %cst_2 : f32
    %12 = arith.fptosi %11 : f32 to i8
    linalg.yield %12 : i8
  } -> tensor<192x28x28xi8>
  return %6 : tensor<192x28x28xi8>
}
