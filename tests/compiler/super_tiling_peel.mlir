// torq-super-tiling with a tile size that does not divide the extent: the
// tile loop is peeled (transform.loop.peel), a loop of full tiles and one
// smaller last tile, both of static shape.
//
// Elementwise x + 1 on 64x29 bf16: over the 3,072 B of lram_kb=3,reserved_kb=0
// untiled. Sizes tried for a dim of extent n: per tile count k, ceil(n / k)
// (search.tile_sizes). Rows of 29 elements are padded to one 32-lane vector
// in LRAM (64 B): t rows take 64*t B in and 64*t B out, so t=22 (2,816 B)
// fits and t=32 (4,096 B) does not; divisors of 64 alone would give 16 rows,
// 4 tiles. Columns (the vector dim: a tile of 9 to 15 pads to 16) fit 8 at a
// time, 4 tiles. Both move the same bytes; 22 rows make fewer tiles: a loop
// over rows 0..44 in tiles of 22, then the last 20 rows at offset 44,
// outside the loop, written into the loop's result.
//
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --torq-super-tiling-strategy=traffic --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s

// CHECK-LABEL: func.func @add_one(
// CHECK: %[[LOOP:.*]] = scf.for %[[R:arg[0-9]+]] = %c0 to %c44 step %c22 iter_args(%[[ACC:arg[0-9]+]] =
// CHECK: tensor.extract_slice %arg0[%[[R]], 0] [22, 29] [1, 1]
// CHECK: linalg.generic {{.*}}outs(%{{.*}} : tensor<22x29xbf16>)
// CHECK: tensor.insert_slice %{{.*}} into %[[ACC]][%[[R]], 0] [22, 29] [1, 1]
// CHECK: scf.yield
// CHECK: %[[REST:.*]] = tensor.extract_slice %arg0[44, 0] [20, 29] [1, 1]
// CHECK: linalg.generic {{.*}}ins(%[[REST]] : tensor<20x29xbf16>) outs(%{{.*}} : tensor<20x29xbf16>)
// CHECK: %[[OUT:.*]] = tensor.insert_slice %{{.*}} into %[[LOOP]][44, 0] [20, 29] [1, 1]
// CHECK: return %[[OUT]]
func.func @add_one(%x: tensor<64x29xbf16>) -> tensor<64x29xbf16> {
  %one = arith.constant 1.0 : bf16
  %e = tensor.empty() : tensor<64x29xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(a, b) -> (a, b)>, affine_map<(a, b) -> (a, b)>],
                       iterator_types = ["parallel", "parallel"]}
       ins(%x : tensor<64x29xbf16>) outs(%e : tensor<64x29xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%a: bf16, %o: bf16):
    %s = arith.addf %a, %one : bf16
    linalg.yield %s : bf16
  } -> tensor<64x29xbf16>
  return %r : tensor<64x29xbf16>
}
