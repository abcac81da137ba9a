// The seed's multi-consumer case: a feeds b and c; a and b need tiles, c
// alone fits. bf16, budget lram_kb=3,reserved_kb=0 = 3,072 bytes.
//   a (group 0): A = X + 1        X, A: 16x64 = 2,048 B each
//   b (group 1): B = A * A        B: 16x64 = 2,048 B
//   c (group 2): C = sum_j A[i,j] C: 16 = 32 B
// Visiting order (DFS post-order along def-use edges from a; A's use list
// holds c's use first): c, b, a.
//
// seed: footprints (group inputs + output) a 4,096, b 4,096, c 2,080 B.
// c fits the 3,072 B untiled; b does not: factor 2, columns (dim 1) in
// tiles of 32, with a fused into b's loop; max fused footprint 4,096 / 2 =
// 2,048 <= 3,072: done. a is "already fused" and never revisited, but its
// original still feeds c: X + A = 4,096 B outside any loop. The allocator
// in torq-assign-lram-addresses stops the compile.
//
// default: c's slice is a + c (X, A, C live together: 4,128 B), so c is
// tiled (rows: c's only tileable dim) and a is recomputed in c's loop; b's
// slice is a + b, tiled too with a fused. a's original loses its last user
// and is gone: every linalg op is inside one of the two loops, and the
// program fits (checked by torq-assign-lram-addresses). b's loop (16x32
// tiles): X tile 1,024 B at 0, A tile at 1,024, B tile at 0 again (X is dead
// once a ran) -> 2,048 B; c's loop (8 rows): X 1,024 at 0, A 1,024 at 1,024,
// C 16 B at 0 -> 2,048 B with one buffer set (more sets, for double
// buffering, only where they fit).
//
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=SEED
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --torq-super-tiling-strategy=seed --pass-pipeline='builtin.module(torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' 2>&1 | FileCheck %s --check-prefix=SEED-OVERFLOW
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=DEFAULT
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=3,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' | FileCheck %s --check-prefix=FITS

// SEED-LABEL: func.func @multi_consumer(
// SEED: linalg.generic {{.*}}outs(%{{.*}} : tensor<16x64xbf16>) attrs = {"torq-fuse-group" = [0]
// SEED: scf.for %{{.*}} = %c0 to %c64 step %c32
// SEED: linalg.generic {{.*}}"torq-fuse-group" = [0]
// SEED: linalg.generic {{.*}}"torq-fuse-group" = [1]
// SEED: scf.yield
// SEED-NOT: scf.for
// SEED: linalg.generic {{.*}}outs(%{{.*}} : tensor<16xbf16>) attrs = {"torq-fuse-group" = [2]

// SEED-OVERFLOW: torq-opt: error: {{.*}}: error: torq_hl.elementwise: tile needs 4096 bytes of LRAM, budget is 3072
// SEED-OVERFLOW-NOT: func.func

// DEFAULT-LABEL: func.func @multi_consumer(
// DEFAULT-NOT: linalg
// DEFAULT: scf.for
// DEFAULT: linalg.generic {{.*}}"torq-fuse-group" = [0]
// DEFAULT: linalg.generic {{.*}}"torq-fuse-group" = [1]
// DEFAULT: scf.yield
// DEFAULT-NOT: linalg
// DEFAULT: scf.for
// DEFAULT: linalg.generic {{.*}}"torq-fuse-group" = [0]
// DEFAULT: linalg.fill
// DEFAULT: linalg.generic {{.*}}"torq-fuse-group" = [2]
// DEFAULT: scf.yield
// DEFAULT-NOT: linalg
// DEFAULT: return

// FITS-LABEL: func.func @multi_consumer(
// FITS-SAME: torq.lram_end =
func.func @multi_consumer(%x: tensor<16x64xbf16>) -> (tensor<16x64xbf16>, tensor<16xbf16>) {
  %one = arith.constant 1.0 : bf16
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<16x64xbf16>
  %a = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
       ins(%x : tensor<16x64xbf16>) outs(%e : tensor<16x64xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%p: bf16, %o: bf16):
    %s = arith.addf %p, %one : bf16
    linalg.yield %s : bf16
  } -> tensor<16x64xbf16>
  %b = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
       ins(%a, %a : tensor<16x64xbf16>, tensor<16x64xbf16>) outs(%e : tensor<16x64xbf16>) attrs = {"torq-fuse-group" = [1], "torq-fuse-group-id" = 1 : i64} {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    linalg.yield %m : bf16
  } -> tensor<16x64xbf16>
  %e1 = tensor.empty() : tensor<16xbf16>
  %f = linalg.fill {"torq-fuse-group" = [2]} ins(%zero : bf16) outs(%e1 : tensor<16xbf16>) -> tensor<16xbf16>
  %c = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
       ins(%a : tensor<16x64xbf16>) outs(%f : tensor<16xbf16>) attrs = {"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64} {
  ^bb0(%p: bf16, %o: bf16):
    %s = arith.addf %o, %p : bf16
    linalg.yield %s : bf16
  } -> tensor<16xbf16>
  return %b, %c : tensor<16x64xbf16>, tensor<16xbf16>
}
