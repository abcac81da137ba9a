// Matmuls whose roles hold two loop dims, and a reduction whose result is
// transposed: what MobileViT's attention blocks and grouped-query attention
// bring (issue 15 item 6, issue 12).
// - MobileViT runs attention over patches x heads (two batch dims) and
//   transposes the heads back beside the patch's tokens: the second batch
//   dim is the matmul's letter A beside B (the primary letter goes to the
//   output's innermost dim of the role), and P V writes its result in the
//   transpose's order (output_dims "AMBN").
// - Grouped-query attention as IREE presents Hugging Face's StableLM reads V
//   once per KV head: the query-head group is a batch dim of Q Kᵀ only.
// - MobileViTv2 unfolds its patches right after a 1x1 conv: IREE writes the
//   conv's result unfolded, four dims of the lhs's role (letters M, L, Q, R).
// - MobileViT's layer norm reads its patches channel-outermost and sums over
//   the channels: a reduce whose result keeps the other two dims swapped
//   (result_axes [2, 1]).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-decompose-attention,func.func(iree-codegen-decompose-softmax{use-fusion=false}),linalg-generalize-named-ops,canonicalize,cse,torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s

// 4 patches x 2 heads x 32 tokens, head dim 16: MACs 4 * 2 * 32 * 32 * 16
// for each matmul.
// CHECK-LABEL: func.func @patches_by_heads(
// CHECK: "torq_hl.matmul"(%arg0, %arg1) {{.*}}lhs_dims = "ABMK", macs = 131072 : i64, output_dims = "ABMN", rhs_dims = "ABNK"}
// CHECK: "torq_hl.matmul"({{.*}}, %arg2) {{.*}}lhs_dims = "ABMK", macs = 131072 : i64, output_dims = "AMBN", rhs_dims = "ABKN"}
// CHECK-SAME: -> tensor<4x32x2x16xbf16>
func.func @patches_by_heads(%q: tensor<4x2x32x16xf32>, %k: tensor<4x2x32x16xf32>, %v: tensor<4x2x32x16xf32>) -> tensor<4x32x2x16xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<4x2x32x16xf32>
  %a = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> ()>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>]> ins(%q, %k, %v, %scale : tensor<4x2x32x16xf32>, tensor<4x2x32x16xf32>, tensor<4x2x32x16xf32>, f32) outs(%e : tensor<4x2x32x16xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<4x2x32x16xf32>
  %te = tensor.empty() : tensor<4x32x2x16xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%a : tensor<4x2x32x16xf32>) outs(%te : tensor<4x32x2x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x32x2x16xf32>
  return %t : tensor<4x32x2x16xf32>
}

// Grouped-query attention as IREE presents Hugging Face's StableLM: K written
// repeated per query head (2 KV heads x 2 heads of a group), V read by KV
// head only. The group dim d1 is a batch dim of Q Kᵀ (letters A, B); P V,
// over KV heads x (group, queries) x keys, reads as a grouped 1x1 conv (G =
// KV heads, H x W = group x queries, C = keys, O = head dim), the form such
// a contraction took before matmul roles held two dims (a matmul "BLMK",
// "KBN" -> "BLMN" computes the same, within 0.1% of the cycles on a
// StableLM layer). V is read once per KV head. 8 queries, 8 keys, head dim
// 16: MACs 2 * 2 * 8 * 8 * 16 for each.
// CHECK-LABEL: func.func @grouped_query_attention(
// CHECK: "torq_hl.matmul"(%arg0, %arg1) {{.*}}lhs_dims = "ABMK", macs = 4096 : i64, output_dims = "ABMN", rhs_dims = "ABNK"}
// CHECK: "torq_hl.conv2d"({{.*}}, %arg2) {{.*}}input_dims = "GHWC", macs = 4096 : i64, output_dims = "GHWO", stride = [1, 1], weight_dims = "CGO"}
func.func @grouped_query_attention(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<8x2x16xf32>) -> tensor<2x2x8x16xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<2x2x8x16xf32>
  %a = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d5, d0, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> ()>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>]> ins(%q, %k, %v, %scale : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<8x2x16xf32>, f32) outs(%e : tensor<2x2x8x16xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<2x2x8x16xf32>
  return %a : tensor<2x2x8x16xf32>
}

// 16 output channels x (2 x 2 patch positions x 4 x 4 patches) over 32
// input channels: MACs 16 * 64 * 32. The output's M dims d1..d4 get R, Q, L,
// M (the primary letter for its innermost); the input reads them as d3, d1,
// d4, d2 after the channel.
// CHECK-LABEL: func.func @project_unfolded(
// CHECK: "torq_hl.matmul"(%arg0, %arg1) {{.*}}lhs_dims = "KLRMQ", macs = 32768 : i64, output_dims = "NRQLM", rhs_dims = "NK"}
func.func @project_unfolded(%x: tensor<32x4x2x4x2xf32>, %w: tensor<16x32xf32>) -> tensor<16x2x2x4x4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<16x2x2x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x2x2x4x4xf32>) -> tensor<16x2x2x4x4xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d5, d3, d1, d4, d2)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<32x4x2x4x2xf32>, tensor<16x32xf32>) outs(%f : tensor<16x2x2x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %o, %p : f32
    linalg.yield %r : f32
  } -> tensor<16x2x2x4x4xf32>
  return %y : tensor<16x2x2x4x4xf32>
}

// CHECK-LABEL: func.func @channel_sum_transposed(
// CHECK: "torq_hl.reduce"(%arg0) {axes = [0], {{.*}}mode = "sum", result_axes = [2, 1]} : (tensor<64x16x4xbf16>) -> tensor<4x16xbf16>
func.func @channel_sum_transposed(%x: tensor<64x16x4xf32>) -> tensor<4x16xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d1, d0)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<64x16x4xf32>) outs(%f : tensor<4x16xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
