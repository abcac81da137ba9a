// torq-super-tiling on a root whose result map is a permutation of its
// loops: tile sizes are chosen per result dimension and must reach
// transform.structured.fuse as sizes of the loops those dims index.
//
// Elementwise x + 1 that also transposes: loops (a, b, c) over the input
// 8x16x32 (bf16, 8,192 B), result map (c, a, b) -> 32x8x16 (8,192 B).
// Untiled: 16,384 B, over the 12,288 B of lram_kb=12,reserved_kb=0.
// Seed order tries result dim 1 first: extent 8, indexed by loop a. With t
// of its 8 rows both buffers take 1,024*t B: t=4 -> 8,192 B fits (t=8 is
// the untiled program). So loop a (trip count 8) is tiled by 4, and the
// input slice is [4, 16, 32] at offset a, the result slice [32, 4, 16] at
// offset a in dim 1. Tiling loop 1 instead (b, 16 iterations) would be
// the bug this test guards against.
//
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=12,reserved_kb=0 --torq-super-tiling-strategy=traffic --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=12,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s

// CHECK-LABEL: func.func @transpose_add(
// CHECK: scf.for %[[A:arg[0-9]+]] = %c0 to %c8 step %c4 iter_args(%[[ACC:arg[0-9]+]] =
// CHECK: tensor.extract_slice %arg0[%[[A]], 0, 0] [4, 16, 32] [1, 1, 1]
// CHECK: linalg.generic {{.*}}outs(%{{.*}} : tensor<32x4x16xbf16>)
// CHECK: tensor.insert_slice %{{.*}} into %[[ACC]][0, %[[A]], 0] [32, 4, 16] [1, 1, 1]
func.func @transpose_add(%x: tensor<8x16x32xbf16>) -> tensor<32x8x16xbf16> {
  %one = arith.constant 1.0 : bf16
  %e = tensor.empty() : tensor<32x8x16xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (c, a, b)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
       ins(%x : tensor<8x16x32xbf16>) outs(%e : tensor<32x8x16xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%a: bf16, %o: bf16):
    %s = arith.addf %a, %one : bf16
    linalg.yield %s : bf16
  } -> tensor<32x8x16xbf16>
  return %r : tensor<32x8x16xbf16>
}
