// torq-super-tiling when even size-1 tiles do not fit: a clean one-line
// error naming the op, its location, the smallest footprint reached and the
// budget, and a non-zero exit (no IR printed).
//
// Conv 64x5x5 * 2x64x3x3 -> 2x3x3 (bf16), budget 1024 bytes. The reduction
// dims are not tiled, so the smallest tile (1 channel, 1 row, 1 column) still
// reads a 64x3x3 input box and the whole 1x64x3x3 weight slice:
//   input 1152 B at 0, weight 1152 B at 1152 (1152 = 18 * 64), output 2 B at
//   2304 -> 2306 bytes.
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: model.py:42:7: error: linalg.generic: cannot fit LRAM even with size-1 tiles: smallest footprint 2306 bytes, budget 1024 bytes
// CHECK-NOT: func.func

// The seed strategy has no such check: its footprint (inputs + output: 3,200
// + 2,304 + 36 = 5,540 B) gives factor ceil(5,540 / 1,024) = 6, rows in tiles
// of ceil(3 / 6) = 1, estimate 5,540 / 6 = 924 B <= 1,024: accepted. The
// allocator then refuses the real tile (the whole 2,304 B weight alone is
// over the budget) with a one-line error, and no program.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=SEED
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' 2>&1 | FileCheck %s --check-prefix=SEED-OVERFLOW
// SEED: scf.for %{{.*}} = %c0 to %c3 step %c1
// SEED-OVERFLOW: torq-opt: error: model.py:42:7: error: torq_hl.conv2d: tile needs {{[0-9]+}} bytes of LRAM, budget is 1024
// SEED-OVERFLOW-NOT: func.func

#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
func.func @wide_conv(%in: tensor<64x5x5xbf16>, %w: tensor<2x64x3x3xbf16>) -> tensor<2x3x3xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<2x3x3xbf16>
  %acc = linalg.fill {"torq-fuse-group" = [0]} ins(%zero : bf16) outs(%e : tensor<2x3x3xbf16>) -> tensor<2x3x3xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<64x5x5xbf16>, tensor<2x64x3x3xbf16>) outs(%acc : tensor<2x3x3xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<2x3x3xbf16> loc("model.py":42:7)
  return %c : tensor<2x3x3xbf16>
}
