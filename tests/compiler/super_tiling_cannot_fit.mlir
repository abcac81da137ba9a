// torq-super-tiling when even size-1 tiles do not fit: a clean one-line
// error naming the op, its location, the smallest footprint reached and the
// budget, and a non-zero exit (no IR printed).
//
// Depthwise conv 2x3x700 * 2x1x600 -> 2x3x101 (bf16), budget 1024 bytes. Its
// parallel dims (channel, row, column) tile down to 1, and a depthwise conv
// has no contraction dim to split (its window sums are tiled only for conv2d
// and matmul, see super_tiling_reduction.mlir), so the smallest tile (1
// channel, 1 row, 1 column) still reads a 1x1x600 input box and the 1x1x600
// weight row:
//   input 1200 B at 0, weight 1200 B at 1216 (1200 rounded up to 64), output
//   2 B at 2432 -> 2434 bytes.
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: model.py:42:7: error: linalg.generic: cannot fit LRAM even with size-1 tiles: smallest footprint 2434 bytes, budget 1024 bytes
// CHECK-NOT: func.func

// The seed strategy has no such check: its footprint (inputs + output: 8,400
// + 2,400 + 1,212 = 12,012 B) gives factor ceil(12,012 / 1,024) = 12, rows in
// tiles of ceil(3 / 12) = 1, estimate 12,012 / 12 = 1,001 B <= 1,024:
// accepted. The allocator then refuses the real tile (a 2x1x700 input row,
// 2,800 B, alone is over the budget; with the whole 2,400 B weight at 2,816
// and the 404 B output at 5,248 it needs 5,652 B) with a one-line error, and
// no program.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=SEED
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' 2>&1 | FileCheck %s --check-prefix=SEED-OVERFLOW
// SEED: scf.for %{{.*}} = %c0 to %c3 step %c1
// SEED-OVERFLOW: torq-opt: error: model.py:42:7: error: torq_hl.depthwise_conv2d: tile needs 5652 bytes of LRAM, budget is 1024
// SEED-OVERFLOW-NOT: func.func

#in = affine_map<(c, y, x, i, j) -> (c, y + i, x + j)>
#w = affine_map<(c, y, x, i, j) -> (c, i, j)>
#out = affine_map<(c, y, x, i, j) -> (c, y, x)>
func.func @wide_depthwise(%in: tensor<2x3x700xbf16>, %w: tensor<2x1x600xbf16>) -> tensor<2x3x101xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<2x3x101xbf16>
  %acc = linalg.fill {"torq-fuse-group" = [0]} ins(%zero : bf16) outs(%e : tensor<2x3x101xbf16>) -> tensor<2x3x101xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%in, %w : tensor<2x3x700xbf16>, tensor<2x1x600xbf16>) outs(%acc : tensor<2x3x101xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<2x3x101xbf16> loc("model.py":42:7)
  return %c : tensor<2x3x101xbf16>
}
