// torq-lower-requantization on ONNX Runtime's QDQ grouped convolution as IREE forms
// it: the int8 input dequantized to f32, a grouped conv in f32 with constant f32
// weights (int8 levels times a per-channel scale, dequantized at compile time) from
// a bias broadcast along groups x channels, then the quantize. The conv becomes an
// i8 x i8 -> i32 one of the input and the weight levels, and the quantize an integer
// rescale whose per-channel parameters are 2x2 tensors read along (group, channel)
// (compiler/requant_float_contraction.py); the f32 weight and bias arguments are
// dropped. With --torq-requant=exact it stays on host: here no rescale of channel 3 is
// exact (an exact one would still be refused by the accumulators llvm-cpu's f32 rounding
// may put a step off; tests/e2e/test_ort_quantized.py).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s
// RUN: not torq-opt %s --torq-requant=exact --pass-pipeline='builtin.module(torq-lower-requantization)' 2>&1 | FileCheck %s --check-prefix=EXACT

// CHECK: #[[GC:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// CHECK-LABEL: func.func @qdq_grouped_conv(%arg0: tensor<2x2x6x6xi8>) -> tensor<2x2x4x4xi8>
// CHECK-NOT: arith.sitofp
// CHECK-NOT: torq.f32_sum_error
// CHECK: linalg.generic
// CHECK-SAME: ins(%arg0, %{{.*}} : tensor<2x2x6x6xi8>, tensor<2x2x2x3x3xi8>) outs(%{{.*}} : tensor<2x2x4x4xi32>)
// CHECK: arith.muli {{.*}} : i32
// CHECK: linalg.generic
// CHECK-SAME: #[[GC]]
// CHECK-SAME: tensor<2x2xi32>
// CHECK: arith.shrsi {{.*}} : i64
// CHECK: arith.trunci {{.*}} : i64 to i8
// EXACT: torq-lower-requantization: no NPU form: conv2d float requantization, channel 3
// EXACT-NOT: Traceback

#in = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>
#w = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d4, d5, d6)>
#out = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#gc = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
func.func @qdq_grouped_conv(%arg0: tensor<2x2x6x6xi8>,
    %arg1: tensor<2x2xf32> {torq.constant = dense<[[0.19793212, 0.09459133], [0.10967934, 0.19204545]]> : tensor<2x2xf32>},
    %arg2: tensor<2x2x2x3x3xf32> {torq.constant = dense<"0x89836F3FBFE847BF8FA51ABF22B7FCBEC2C218BF9037113F2747313F286B1E3E8BA75CBF594042BFC230A2BE5E3E00BE23DB693EF6DF16BDF14FE2BE8E1324BF5AD2B83EF14FE23E528EF93F2689C2BF06A43CBEB114DCBE2689C23F5D857B3D5A339DBE047B8DBE850F253FB0EBAC3E7A18A3BF1DBB6F3F72737F3FDCF0E33F0F728F3F9C2658BFDBC734BF2F57153FBED2F33F9DFC3F3FB377B43F88814BBF7306D73FBED2F3BF8158CFBFD34DE83FEFF1D83F96D343BFBAA0B0BFB37734BFE19FE0BF9DFCBF3FDD6D1D3FC8F2A83E339579BF7306D7BD1005413F17C7D43EE0382ABD826136BFFB7FBFBE661AA13EAD2CF33C248A42BEFB7FBFBE3D101EBFE0382A3EFE40793EAD2CF33CB72E273FA3A9253FE2F9E3BEE0382A3E759E483E"> : tensor<2x2x2x3x3xf32>})
    -> tensor<2x2x4x4xi8> attributes {torq.dispatch, torq.host_fma = true} {
  %sx = arith.constant 0.00887533277 : f32
  %sy = arith.constant 0.0384713802 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %zx = arith.constant -128 : i16
  %q0 = tensor.empty() : tensor<2x2x4x4xi8>
  %xe = tensor.empty() : tensor<2x2x6x6xf32>
  %ye = tensor.empty() : tensor<2x2x4x4xf32>
  %x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<2x2x6x6xi8>) outs(%xe : tensor<2x2x6x6xf32>) {
  ^bb0(%in: i8, %out: f32):
    %0 = arith.extsi %in : i8 to i16
    %1 = arith.subi %0, %zx : i16
    %2 = arith.sitofp %1 : i16 to f32
    %3 = arith.mulf %2, %sx : f32
    linalg.yield %3 : f32
  } -> tensor<2x2x6x6xf32>
  %bias = linalg.generic {indexing_maps = [#gc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%arg1 : tensor<2x2xf32>) outs(%ye : tensor<2x2x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x2x4x4xf32>
  %y = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %arg2 : tensor<2x2x6x6xf32>, tensor<2x2x2x3x3xf32>) outs(%bias : tensor<2x2x4x4xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %0 = arith.mulf %in, %in_w : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<2x2x4x4xf32>
  %q = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%y : tensor<2x2x4x4xf32>) outs(%q0 : tensor<2x2x4x4xi8>) {
  ^bb0(%in: f32, %out: i8):
    %0 = arith.divf %in, %sy : f32
    %1 = math.roundeven %0 : f32
    %2 = arith.addf %1, %lo : f32
    %3 = arith.maxnumf %2, %lo : f32
    %4 = arith.minnumf %3, %hi : f32
    %5 = arith.fptosi %4 : f32 to i8
    linalg.yield %5 : i8
  } -> tensor<2x2x4x4xi8>
  return %q : tensor<2x2x4x4xi8>
}
