// A 1x1 "convolution" whose input reads the channel at 2 * loop is no
// convolution the slices run: no pattern matches, and lowering it is an
// error naming the op (the Torq target keeps such a dispatch on host).
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl)' 2>&1 | FileCheck %s

#w = affine_map<(o, y, x, c) -> (o, c)>
#out = affine_map<(o, y, x, c) -> (o, y, x)>
#sc = affine_map<(o, y, x, c) -> (2 * c, y, x)>
// CHECK: torq-opt: error: -:{{[0-9]+}}:8: error: linalg.generic: 'linalg.generic' with this structure has no Torq pattern
func.func @strided_channel(%x: tensor<8x5x5xbf16>, %w: tensor<8x4xbf16>) -> tensor<8x5x5xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x5x5xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<8x5x5xbf16>) -> tensor<8x5x5xbf16>
  %r = linalg.generic {indexing_maps = [#sc, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<8x5x5xbf16>, tensor<8x4xbf16>) outs(%f : tensor<8x5x5xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %m = arith.mulf %a, %b : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x5x5xbf16>
  return %r : tensor<8x5x5xbf16>
}
