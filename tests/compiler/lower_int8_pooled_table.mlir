// MobileNetV3's head as ONNX Runtime quantizes it: the int8 feature map
// dequantized, hardswish left in f32 (x * hardsigmoid(x), so IREE's
// aggressive fusion yields x and hardsigmoid(x) as two results of one
// generic), averaged, quantized (compiler/requant_pooling.py). Each f32 term is
// a function of one int8 value: it becomes a 256-entry table of i16
// fixed-point values summed in i32, then the integer rescale of the sum. A
// per-channel dequantize scale would need a table per channel: it stays
// float, with the reason.
// RUN: sed '/^\/\/ --- per channel/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s
// RUN: sed -n '/^\/\/ --- per channel/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-requantization)' 2>&1 | FileCheck %s --check-prefix=ERR

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
#id1 = affine_map<(d0) -> (d0)>

// CHECK-LABEL: func.func @hardswish_mean(
// CHECK-NOT: arith.sitofp
// CHECK-NOT: math.roundeven
// CHECK: tensor.extract {{.*}} : tensor<256xi16>
// CHECK: arith.addi {{.*}} : i32
// CHECK: arith.shrsi {{.*}} : i64
// CHECK: arith.trunci {{.*}} : i64 to i8
func.func @hardswish_mean(%x: tensor<16x49xi8>) -> tensor<16xi8> attributes {torq.dispatch, torq.host_fma = true} {
  %scale = arith.constant 0.0188526325 : f32
  %three = arith.constant 3.000000e+00 : f32
  %six = arith.constant 6.000000e+00 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 4.900000e+01 : f32
  %out_scale = arith.constant 0.00164521951 : f32
  %zp = arith.constant -7.400000e+01 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %zp_in = arith.constant 5 : i16
  %e = tensor.empty() : tensor<16xi8>
  %se = tensor.empty() : tensor<16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%se : tensor<16xf32>) -> tensor<16xf32>
  %fe = tensor.empty() : tensor<16x49xf32>
  %xs:2 = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<16x49xi8>) outs(%fe, %fe : tensor<16x49xf32>, tensor<16x49xf32>) {
  ^bb0(%in: i8, %o1: f32, %o2: f32):
    %0 = arith.extsi %in : i8 to i16
    %1 = arith.subi %0, %zp_in : i16
    %2 = arith.sitofp %1 : i16 to f32
    %3 = arith.mulf %2, %scale : f32
    %4 = arith.addf %3, %three : f32
    %5 = arith.cmpf ugt, %4, %zero : f32
    %6 = arith.select %5, %4, %zero : f32
    %7 = arith.cmpf olt, %6, %six : f32
    %8 = arith.select %7, %6, %six : f32
    %9 = arith.divf %8, %six : f32
    linalg.yield %3, %9 : f32, f32
  } -> (tensor<16x49xf32>, tensor<16x49xf32>)
  %s = linalg.generic {indexing_maps = [#id2, #id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%xs#1, %xs#0 : tensor<16x49xf32>, tensor<16x49xf32>) outs(%init : tensor<16xf32>) {
  ^bb0(%h: f32, %v: f32, %acc: f32):
    %0 = arith.mulf %h, %v : f32
    %1 = arith.addf %0, %acc : f32
    linalg.yield %1 : f32
  } -> tensor<16xf32>
  %q = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%s : tensor<16xf32>) outs(%e : tensor<16xi8>) {
  ^bb0(%in: f32, %out: i8):
    %0 = arith.divf %in, %n : f32
    %1 = arith.divf %0, %out_scale : f32
    %2 = math.roundeven %1 : f32
    %3 = arith.addf %2, %zp : f32
    %4 = arith.maxnumf %3, %lo : f32
    %5 = arith.minnumf %4, %hi : f32
    %6 = arith.fptosi %5 : f32 to i8
    linalg.yield %6 : i8
  } -> tensor<16xi8>
  return %q : tensor<16xi8>
}

// --- per channel
// ERR: the pooled f32 term is neither an integer times a constant nor a function of one int8 value with scalar parameters
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#ch2 = affine_map<(d0, d1) -> (d0)>
#row2 = affine_map<(d0, d1) -> (d0)>
#id1 = affine_map<(d0) -> (d0)>
func.func @per_channel_scale(%x: tensor<16x49xi8>, %scales: tensor<16xf32> {torq.constant = dense<[0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16]> : tensor<16xf32>}) -> tensor<16xi8> attributes {torq.dispatch, torq.host_fma = true} {
  %zero = arith.constant 0.000000e+00 : f32
  %six = arith.constant 6.000000e+00 : f32
  %out_scale = arith.constant 0.01 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %e = tensor.empty() : tensor<16xi8>
  %se = tensor.empty() : tensor<16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%se : tensor<16xf32>) -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [#id2, #ch2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x, %scales : tensor<16x49xi8>, tensor<16xf32>) outs(%init : tensor<16xf32>) {
  ^bb0(%in: i8, %c: f32, %acc: f32):
    %0 = arith.sitofp %in : i8 to f32
    %1 = arith.mulf %0, %c : f32
    %2 = arith.minnumf %1, %six : f32
    %3 = arith.mulf %2, %1 : f32
    %4 = arith.addf %3, %acc : f32
    linalg.yield %4 : f32
  } -> tensor<16xf32>
  %q = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%s : tensor<16xf32>) outs(%e : tensor<16xi8>) {
  ^bb0(%in: f32, %out: i8):
    %0 = arith.divf %in, %out_scale : f32
    %1 = math.roundeven %0 : f32
    %2 = arith.maxnumf %1, %lo : f32
    %3 = arith.minnumf %2, %hi : f32
    %4 = arith.fptosi %3 : f32 to i8
    linalg.yield %4 : i8
  } -> tensor<16xi8>
  return %q : tensor<16xi8>
}
