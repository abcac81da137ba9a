// torq-lower-requantization on a QDQ Gemm as dispatch extraction hands it over:
// an int8 x int8 -> i32 contraction, then ONNX's float requantization (bias,
// scales, relu, divide, round-to-even, zero point, clamp in f32). The bias and
// the per-channel bias scale are dispatch operands whose flow-level values ride
// on the arguments (torq.constant); llvm-cpu fuses f32 mul + add (torq.host_fma).
// The f32 chain becomes one integer rescale per channel (i64 multiply, add,
// arithmetic shift, zero point, clamp), and the two constant arguments, now
// unread, are dropped with the attributes the pass consumed.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-requantization)' | FileCheck %s
// Without the constants the scales are unknown: the dispatch has no NPU form.
// RUN: sed 's/ {torq.constant = [^}]*}//g' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-requantization)' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK-LABEL: func.func @qdq_gemm(%arg0: tensor<16x2xi8>) -> tensor<16x4xi8> attributes {torq.dispatch} {
// CHECK-NOT: torq.constant
// CHECK-NOT: torq.host_fma
// CHECK-NOT: arith.sitofp
// CHECK-NOT: math.roundeven
// CHECK: linalg.generic
// CHECK-SAME: ins(%arg0
// CHECK: arith.muli {{.*}} : i64
// CHECK: arith.shrsi {{.*}} : i64
// CHECK: arith.trunci {{.*}} : i64 to i8
// UNKNOWN: torq-opt: error: torq-lower-requantization: no NPU form: operands [1, 3] of the requantization are tensors
// UNKNOWN-NOT: Traceback

#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs = affine_map<(d0, d1, d2) -> (d1, d2)>
#acc = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#ch = affine_map<(d0, d1) -> (d1)>
func.func @qdq_gemm(%arg0: tensor<16x2xi8>,
    %arg1: tensor<4xi32> {torq.constant = dense<[-384, -378, 381, -297]> : tensor<4xi32>},
    %arg2: tensor<4xf32> {torq.constant = dense<[-0.460623294, 0.326516926, 0.120764576, 0.323405981]> : tensor<4xf32>})
    -> tensor<16x4xi8> attributes {torq.dispatch, torq.host_fma = true} {
  %w = arith.constant dense<[[1, 127], [-1, 127], [1, -128], [-1, 100]]> : tensor<4x2xi8>
  %sx = arith.constant 2.130000e-02 : f32
  %zero = arith.constant 0.000000e+00 : f32
  %sy = arith.constant 1.710000e-02 : f32
  %zy = arith.constant 4.000000e+00 : f32
  %lo = arith.constant -1.280000e+02 : f32
  %hi = arith.constant 1.270000e+02 : f32
  %sw = arith.constant dense<[0.0110956933, 0.00815829355, 0.00632778835, 0.00613222132]> : tensor<4xf32>
  %c0 = arith.constant 0 : i32
  %out = tensor.empty() : tensor<16x4xi8>
  %e = tensor.empty() : tensor<16x4xi32>
  %init = linalg.fill ins(%c0 : i32) outs(%e : tensor<16x4xi32>) -> tensor<16x4xi32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%arg0, %w : tensor<16x2xi8>, tensor<4x2xi8>) outs(%init : tensor<16x4xi32>) {
  ^bb0(%a: i8, %b: i8, %o: i32):
    %a32 = arith.extsi %a : i8 to i32
    %b32 = arith.extsi %b : i8 to i32
    %p = arith.muli %a32, %b32 : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  } -> tensor<16x4xi32>
  %q = linalg.generic {indexing_maps = [#id, #ch, #ch, #ch, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %arg1, %sw, %arg2 : tensor<16x4xi32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) outs(%out : tensor<16x4xi8>) {
  ^bb0(%acc_v: i32, %zp_corr: i32, %w_scale: f32, %bias: f32, %o: i8):
    %d = arith.subi %acc_v, %zp_corr : i32
    %f = arith.sitofp %d : i32 to f32
    %m1 = arith.mulf %f, %sx : f32
    %m2 = arith.mulf %m1, %w_scale : f32
    %b = arith.addf %m2, %bias : f32
    %pos = arith.cmpf ugt, %b, %zero : f32
    %r = arith.select %pos, %b, %zero : f32
    %y = arith.divf %r, %sy : f32
    %rounded = math.roundeven %y : f32
    %z = arith.addf %rounded, %zy : f32
    %c1 = arith.maxnumf %z, %lo : f32
    %c2 = arith.minnumf %c1, %hi : f32
    %i = arith.fptosi %c2 : f32 to i8
    linalg.yield %i : i8
  } -> tensor<16x4xi8>
  return %q : tensor<16x4xi8>
}
