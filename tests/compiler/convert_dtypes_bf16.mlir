// torq-convert-dtypes on f32 dispatch functions: every f32 value becomes
// bf16 (the slices have no f32 compute), f32 constants are rounded to nearest
// even, and the host types are recorded so the call site keeps passing f32.
// With --torq-keep-f32 the pass does nothing (the dispatch stays on host).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-convert-dtypes)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-convert-dtypes)' | FileCheck %s --check-prefix=NOF32
// RUN: torq-opt %s --torq-keep-f32 --pass-pipeline='builtin.module(torq-convert-dtypes)' | FileCheck %s --check-prefix=KEEP

#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Conv: arguments, result, the zero-fill constant, the accumulator and the
// body block arguments all become bf16; the original f32 signature is kept
// in torq.host_arg_types / torq.host_result_types.
// CHECK-LABEL: func.func @conv(
// CHECK-SAME: %arg0: tensor<4x10x10xbf16>, %arg1: tensor<8x4x3x3xbf16>) -> tensor<8x8x8xbf16>
// CHECK-SAME: torq.host_arg_types = [tensor<4x10x10xf32>, tensor<8x4x3x3xf32>]
// CHECK-SAME: torq.host_result_types = [tensor<8x8x8xf32>]
// CHECK: arith.constant 0.000000e+00 : bf16
// CHECK: tensor.empty() : tensor<8x8x8xbf16>
// CHECK: linalg.fill ins(%{{.*}} : bf16) outs(%{{.*}} : tensor<8x8x8xbf16>)
// CHECK: linalg.generic
// CHECK-SAME: ins(%arg0, %arg1 : tensor<4x10x10xbf16>, tensor<8x4x3x3xbf16>) outs(%{{.*}} : tensor<8x8x8xbf16>)
// CHECK-NEXT: ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: bf16):
// CHECK-NEXT: arith.mulf %{{.*}}, %{{.*}} : bf16
// CHECK-NEXT: arith.addf %{{.*}}, %{{.*}} : bf16
// CHECK: return %{{.*}} : tensor<8x8x8xbf16>
// KEEP-LABEL: func.func @conv(
// KEEP-SAME: %arg0: tensor<4x10x10xf32>, %arg1: tensor<8x4x3x3xf32>) -> tensor<8x8x8xf32> {
// KEEP: arith.constant 0.000000e+00 : f32
// KEEP: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
func.func @conv(%in: tensor<4x10x10xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<8x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<8x8x8xf32>) -> tensor<8x8x8xf32>
  %r = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%acc : tensor<8x8x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x8x8xf32>
  return %r : tensor<8x8x8xf32>
}

// Matmul whose operands are already bf16 but accumulate in f32 (the form of
// a bf16 torch matmul): the accumulator becomes bf16 and the extf casts,
// now bf16 -> bf16 (which arith.extf rejects), are dropped. Only the result
// was f32, so only it is recorded as a host type change. The function must
// print in custom form: an invalid op would make the printer fall back to
// the generic form and the CHECK-LABEL would not match.
// CHECK-LABEL: func.func @matmul_bf16_operands_wide_acc(
// CHECK-SAME: %arg0: tensor<4x8xbf16>, %arg1: tensor<8x16xbf16>) -> tensor<4x16xbf16>
// CHECK-SAME: torq.host_arg_types = [tensor<4x8xbf16>, tensor<8x16xbf16>]
// CHECK-SAME: torq.host_result_types = [tensor<4x16xf32>]
// CHECK: ^bb0(%[[P:.*]]: bf16, %[[Q:.*]]: bf16, %[[O:.*]]: bf16):
// CHECK-NOT: arith.extf
// CHECK: %[[M:.*]] = arith.mulf %[[P]], %[[Q]] : bf16
// CHECK-NEXT: arith.addf %[[O]], %[[M]] : bf16
// CHECK: return %{{.*}} : tensor<4x16xbf16>
// KEEP-LABEL: func.func @matmul_bf16_operands_wide_acc(
// KEEP-SAME: -> tensor<4x16xf32> {
// KEEP: arith.extf %{{.*}} : bf16 to f32
// KEEP: arith.extf %{{.*}} : bf16 to f32
func.func @matmul_bf16_operands_wide_acc(%x: tensor<4x8xbf16>, %y: tensor<8x16xbf16>) -> tensor<4x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %p1 = arith.extf %p : bf16 to f32
    %q1 = arith.extf %q : bf16 to f32
    %m = arith.mulf %p1, %q1 : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// Elementwise with constants, rounded to nearest even:
// - scalar 1.00390625 = 1 + 2^-8 lies halfway between bf16 1.0 and
//   1.0078125; ties-to-even gives 1.0 (round-half-away would give 1.0078125);
// - 1.01171875 = 1 + 3*2^-8 lies halfway between 1.0078125 (odd mantissa)
//   and 1.015625; ties-to-even gives 1.015625 (truncation would give
//   1.0078125); checked in a non-splat dense constant;
// - splat 0.1 (f32 0x3DCCCCCD) rounds up to bf16 0x3DCD = 0.10009765625
//   (truncation would give 0.099609375).
// CHECK-LABEL: func.func @elementwise_constants(
// CHECK-SAME: %arg0: tensor<2x2xbf16>) -> tensor<2x2xbf16>
// CHECK-SAME: torq.host_arg_types = [tensor<2x2xf32>]
// CHECK-DAG: arith.constant 1.000000e+00 : bf16
// CHECK-DAG: arith.constant dense<[1.000000e+00, 1.015630e+00]> : tensor<2xbf16>
// CHECK-DAG: arith.constant dense<1.000980e-01> : tensor<2x2xbf16>
// CHECK: linalg.generic
// CHECK-NEXT: ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: bf16):
// CHECK: } -> tensor<2x2xbf16>
// KEEP-LABEL: func.func @elementwise_constants(
// KEEP-SAME: %arg0: tensor<2x2xf32>) -> tensor<2x2xf32> {
// KEEP-DAG: arith.constant 1.00390625 : f32
// KEEP-DAG: arith.constant dense<[1.00390625, 1.01171875]> : tensor<2xf32>
// KEEP-DAG: arith.constant dense<1.000000e-01> : tensor<2x2xf32>
func.func @elementwise_constants(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %s = arith.constant 1.00390625 : f32
  %v = arith.constant dense<[1.00390625, 1.01171875]> : tensor<2xf32>
  %t = arith.constant dense<0.1> : tensor<2x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %r = linalg.generic {indexing_maps = [#id2, #row, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x, %v, %t : tensor<2x2xf32>, tensor<2xf32>, tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) {
  ^bb0(%p: f32, %q: f32, %u: f32, %o: f32):
    %0 = arith.addf %p, %q : f32
    %1 = arith.mulf %0, %u : f32
    %2 = arith.mulf %1, %s : f32
    linalg.yield %2 : f32
  } -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

// dense_resource f32 weights (how torch exports them) are read through the
// resource blob and become an inline bf16 constant: [1.0, 1.5] are exact.
// CHECK-LABEL: func.func @resource_constant(
// CHECK-SAME: -> tensor<2xbf16>
// CHECK-SAME: torq.host_arg_types = [], torq.host_result_types = [tensor<2xf32>]
// CHECK: arith.constant dense<[1.000000e+00, 1.500000e+00]> : tensor<2xbf16>
// KEEP-LABEL: func.func @resource_constant(
// KEEP-SAME: -> tensor<2xf32> {
// KEEP: arith.constant dense_resource<w> : tensor<2xf32>
func.func @resource_constant() -> tensor<2xf32> {
  %w = arith.constant dense_resource<w> : tensor<2xf32>
  return %w : tensor<2xf32>
}

// Default run: after each function's host type records, no f32 is left in
// its body (KEEP lines above pin that --torq-keep-f32 adds no attributes).
// NOF32-LABEL: func.func @conv(
// NOF32-SAME: torq.host_result_types = [tensor<8x8x8xf32>]} {
// NOF32-NOT: f32
// NOF32: return
// NOF32-LABEL: func.func @matmul_bf16_operands_wide_acc(
// NOF32-SAME: torq.host_result_types = [tensor<4x16xf32>]} {
// NOF32-NOT: f32
// NOF32: return
// NOF32-LABEL: func.func @elementwise_constants(
// NOF32-SAME: torq.host_result_types = [tensor<2x2xf32>]} {
// NOF32-NOT: f32
// NOF32: return
// NOF32-LABEL: func.func @resource_constant(
// NOF32-SAME: torq.host_result_types = [tensor<2xf32>]} {
// NOF32-NOT: f32
// NOF32: return

{-#
  dialect_resources: {
    builtin: {
      w: "0x040000000000803F0000C03F"
    }
  }
#-}
