// torq-super-tiling (strategy `traffic`) on marked functions (the marks are
// written by hand, as torq-mark-patterns-for-super-tiling would put them). A
// group whose untiled program fits the LRAM budget is left alone; otherwise
// its bottom op is tiled along the dimension whose largest fitting divisor
// moves the fewest DDR bytes, and the whole group is fused into the loop.
//
// Budgets: SL2610 has (512 - 14) KiB = 509952 bytes; lram_kb=2,reserved_kb=0
// gives 2048 bytes and lram_kb=1,reserved_kb=0 gives 1024 bytes. Footprints
// below are worked out by hand with the allocator's rule: buffers placed
// first fit in order of first use (operands in operand order, then the
// result), each offset rounded up to lram_alignment = 64; all tensors are
// bf16 (2 bytes). The footprint is the highest byte used.
//
// RUN: torq-opt %s --torq-super-tiling-strategy=traffic --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=FIT
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --torq-super-tiling-strategy=traffic --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=T2K
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --torq-super-tiling-strategy=traffic --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=T1K

#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#ba = affine_map<(bb, m, n, k) -> (bb, m, k)>
#bb = affine_map<(bb, m, n, k) -> (bb, k, n)>
#bc = affine_map<(bb, m, n, k) -> (bb, m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>

// Everything fits the default budget (the largest program below needs 2560
// bytes): no loop anywhere, the ops are untouched.
// FIT: func.func @conv_bias_relu(
// FIT-NOT: scf.for
// FIT: linalg.fill
// FIT-SAME: outs(%{{.*}} : tensor<8x8x8xbf16>)
// FIT: linalg.generic {{.*}}ins(%arg0, %arg1 : tensor<4x10x10xbf16>, tensor<8x4x3x3xbf16>) outs(%{{.*}} : tensor<8x8x8xbf16>)
// FIT-NOT: scf.for
// FIT: func.func @matmul(
// FIT-NOT: scf.for
// FIT: func.func @batch_matmul(
// FIT-NOT: scf.for
// FIT: func.func @chain(
// FIT-NOT: scf.for

// Conv 4x10x10 * 8x4x3x3 -> 8x8x8 + bias + ReLU (group 0). Inside a tile
// loop, operands defined outside it are resident (loaded once, at the bottom
// of LRAM, live for the whole loop), the rest is per tile above them.
// Untiled: input 800 at 0, weight 576 at 832, bias 16 at 1408, output 1024 at
// 1472 -> 2496 (too big for 2048).
// Output rows (dim 1) in t rows: weight 0..576 and bias 576..592 resident
// (per-tile base align64(592) = 640); input slice of t + 2 rows (3x3 halo)
// 80*(t+2) B at 640, output 128*t B at align64 after it:
//   t=4: 640 + 480 | 640 + 512..1024 -> 1664;  t=2: 640 + 576 -> 1216;
//   t=1: 640 + 240 | 640 + 256..384 -> 1024.
// Output channels (dim 0) in c channels: input 800 B resident (base 832);
// weight 72*c at 0, bias 2*c, output 128*c, each aligned:
//   c=4: 832 + (288 | 320..328 | 384..896) -> 1728;  c=2: 832 + 512 -> 1344;
//   c=1: 832 + 320 -> 1152.
// 2048 bytes: both 4 rows (1664) and 4 channels (1728) fit; the traffic
// strategy takes the one with less DDR traffic: 4 channels read every byte
// once (input 800 + weight 576 + bias 16 + output 1024 = 2416), 4 rows
// re-read a 2-row halo of the input (2 x 480 + 576 + 16 + 1024 = 2576).
// 1024 bytes: no channel tile fits (c=1 needs 1152), 1-row tiles fit
// exactly (the check is footprint <= budget). The fill, the conv and the
// epilogue are all inside the loop, nothing of the group is left outside.
// T2K-LABEL: func.func @conv_bias_relu(
// T2K-NOT: linalg
// T2K: scf.for %[[IV:arg[0-9]+]] = %c0 to %c8 step %c4 iter_args(%[[ACC:arg[0-9]+]] =
// T2K: tensor.extract_slice %arg1[%[[IV]], 0, 0, 0] [4, 4, 3, 3] [1, 1, 1, 1]
// T2K: linalg.fill
// T2K-SAME: {"torq-fuse-group" = [0]} ins(%{{.*}} : bf16) outs(%{{.*}} : tensor<4x8x8xbf16>)
// T2K: linalg.generic {{.*}}ins(%arg0, %{{.*}} : tensor<4x10x10xbf16>, tensor<4x4x3x3xbf16>) outs(%{{.*}} : tensor<4x8x8xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64}
// T2K: linalg.generic {{.*}}ins(%{{.*}}, %{{.*}} : tensor<4x8x8xbf16>, tensor<4xbf16>) {{.*}}attrs = {"torq-fuse-group" = [0]} {
// T2K: tensor.insert_slice %{{.*}} into %[[ACC]][%[[IV]], 0, 0] [4, 8, 8] [1, 1, 1]
// T2K-NEXT: scf.yield
// T2K-NEXT: }
// T2K-NEXT: return
// T1K-LABEL: func.func @conv_bias_relu(
// T1K: scf.for %[[IV:arg[0-9]+]] = %c0 to %c8 step %c1 iter_args
// T1K: tensor.extract_slice %arg0[0, %[[IV]], 0] [4, 3, 10] [1, 1, 1]
// T1K: linalg.generic {{.*}}outs(%{{.*}} : tensor<8x1x8xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64}
func.func @conv_bias_relu(%in: tensor<4x10x10xbf16>, %w: tensor<8x4x3x3xbf16>, %b: tensor<8xbf16>) -> tensor<8x8x8xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x8x8xbf16>
  %acc = linalg.fill {"torq-fuse-group" = [0]} ins(%zero : bf16) outs(%e : tensor<8x8x8xbf16>) -> tensor<8x8x8xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<4x10x10xbf16>, tensor<8x4x3x3xbf16>) outs(%acc : tensor<8x8x8xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x8x8xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #ch, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %b : tensor<8x8x8xbf16>, tensor<8xbf16>) outs(%e : tensor<8x8x8xbf16>) attrs = {"torq-fuse-group" = [0]} {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %s = arith.addf %x, %y : bf16
    %p = arith.cmpf ugt, %s, %zero : bf16
    %q = arith.select %p, %s, %zero : bf16
    linalg.yield %q : bf16
  } -> tensor<8x8x8xbf16>
  return %r : tensor<8x8x8xbf16>
}

// Matmul 16x16 * 16x32 -> 16x32 (group 1). The seed order tries dim 1 first,
// which for an M x N result is N: tiles of tN columns, the lhs stays whole.
//   lhs 512 B at 0, rhs 32*tN B at 512, out 32*tN B at align64(512 + 32*tN):
//   tN=32: 512..1536 | 1536..2560 -> 2560;  tN=16: 512..1024 | 1024..1536
//   -> 1536;  tN=8: 512..768 | 768..1024 -> 1024.
// 2048 bytes -> 16 columns, 1024 bytes -> 8 columns.
// T2K-LABEL: func.func @matmul(
// T2K: scf.for %[[J:arg[0-9]+]] = %c0 to %c32 step %c16 iter_args
// T2K: tensor.extract_slice %arg1[0, %[[J]]] [16, 16] [1, 1]
// T2K: linalg.generic {{.*}}ins(%arg0, %{{.*}} : tensor<16x16xbf16>, tensor<16x16xbf16>) outs(%{{.*}} : tensor<16x16xbf16>) attrs = {"torq-fuse-group" = [1], "torq-fuse-group-id" = 1 : i64}
// T2K: tensor.insert_slice {{.*}}[0, %[[J]]] [16, 16] [1, 1]
// T1K-LABEL: func.func @matmul(
// T1K: scf.for %[[J:arg[0-9]+]] = %c0 to %c32 step %c8 iter_args
// T1K: tensor.extract_slice %arg1[0, %[[J]]] [16, 8] [1, 1]
func.func @matmul(%x: tensor<16x16xbf16>, %y: tensor<16x32xbf16>) -> tensor<16x32xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<16x32xbf16>
  %f = linalg.fill {"torq-fuse-group" = [1]} ins(%z : bf16) outs(%e : tensor<16x32xbf16>) -> tensor<16x32xbf16>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<16x16xbf16>, tensor<16x32xbf16>) outs(%f : tensor<16x32xbf16>) attrs = {"torq-fuse-group" = [1], "torq-fuse-group-id" = 1 : i64} {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<16x32xbf16>
  return %r : tensor<16x32xbf16>
}

// Batched matmul 1x32x16 * 1x16x16 -> 1x32x16 (group 2): dim 1 is M, so the
// matmul is tiled along its rows; the rhs stays whole.
//   lhs 32*tM B at 0, rhs 512 B at align64(32*tM), out 32*tM B after it:
//   tM=32: 1024 | 1024..1536 | 1536..2560 -> 2560;  tM=16: 512 | 512..1024 |
//   1024..1536 -> 1536;  tM=8: 256 | 256..768 | 768..1024 -> 1024.
// 2048 bytes -> 16 rows, 1024 bytes -> 8 rows.
// T2K-LABEL: func.func @batch_matmul(
// T2K: scf.for %[[I:arg[0-9]+]] = %c0 to %c32 step %c16 iter_args
// T2K: tensor.extract_slice %arg0[0, %[[I]], 0] [1, 16, 16] [1, 1, 1]
// T2K: linalg.generic {{.*}}ins(%{{.*}}, %arg1 : tensor<1x16x16xbf16>, tensor<1x16x16xbf16>) outs(%{{.*}} : tensor<1x16x16xbf16>) attrs = {"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64}
// T2K: tensor.insert_slice {{.*}}[0, %[[I]], 0] [1, 16, 16] [1, 1, 1]
// T1K-LABEL: func.func @batch_matmul(
// T1K: scf.for %[[I:arg[0-9]+]] = %c0 to %c32 step %c8 iter_args
// T1K: tensor.extract_slice %arg0[0, %[[I]], 0] [1, 8, 16] [1, 1, 1]
func.func @batch_matmul(%x: tensor<1x32x16xbf16>, %y: tensor<1x16x16xbf16>) -> tensor<1x32x16xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<1x32x16xbf16>
  %f = linalg.fill {"torq-fuse-group" = [2]} ins(%z : bf16) outs(%e : tensor<1x32x16xbf16>) -> tensor<1x32x16xbf16>
  %r = linalg.generic {indexing_maps = [#ba, #bb, #bc], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %y : tensor<1x32x16xbf16>, tensor<1x16x16xbf16>) outs(%f : tensor<1x32x16xbf16>) attrs = {"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64} {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<1x32x16xbf16>
  return %r : tensor<1x32x16xbf16>
}

// Two groups in a chain: matmul (group 3) feeding an elementwise x + x
// (group 4). Consumers first: the add is tiled and the whole matmul group is
// fused into its loop; the matmul, now inside a loop, is not tiled again,
// so there is exactly one loop. (The pass must not touch the original
// matmul op, which the fusion erased.)
//   lhs 512 B [live cmds 0-2], rhs 32*tN [1-2], matmul result 32*tN [2-3],
//   add result 32*tN [3-4]: the add reuses offset 0 (lhs is dead by then):
//   tN=32: end 2560; tN=16: 512..1024 | 1024..1536 -> 1536; tN=8: 1024.
// T2K-LABEL: func.func @chain(
// T2K-NOT: linalg
// T2K: tensor.empty() : tensor<16x32xbf16>
// T2K-NEXT: scf.for %[[J:arg[0-9]+]] = %c0 to %c32 step %c16 iter_args
// T2K: linalg.fill
// T2K-SAME: {"torq-fuse-group" = [3]}
// T2K: linalg.generic {{.*}}outs(%{{.*}} : tensor<16x16xbf16>) attrs = {"torq-fuse-group" = [3], "torq-fuse-group-id" = 3 : i64}
// T2K: linalg.generic {{.*}}outs(%{{.*}} : tensor<16x16xbf16>) attrs = {"torq-fuse-group" = [4], "torq-fuse-group-id" = 4 : i64}
// T2K-NOT: scf.for
// T2K: tensor.insert_slice {{.*}}[0, %[[J]]] [16, 16] [1, 1]
// T2K-NEXT: scf.yield
// T2K-NEXT: }
// T2K-NEXT: return
// T1K-LABEL: func.func @chain(
// T1K: scf.for %{{.*}} = %c0 to %c32 step %c8 iter_args
// T1K-NOT: scf.for
// T1K: return
func.func @chain(%x: tensor<16x16xbf16>, %y: tensor<16x32xbf16>) -> tensor<16x32xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<16x32xbf16>
  %f = linalg.fill {"torq-fuse-group" = [3]} ins(%z : bf16) outs(%e : tensor<16x32xbf16>) -> tensor<16x32xbf16>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<16x16xbf16>, tensor<16x32xbf16>) outs(%f : tensor<16x32xbf16>) attrs = {"torq-fuse-group" = [3], "torq-fuse-group-id" = 3 : i64} {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<16x32xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %mm : tensor<16x32xbf16>, tensor<16x32xbf16>) outs(%e : tensor<16x32xbf16>) attrs = {"torq-fuse-group" = [4], "torq-fuse-group-id" = 4 : i64} {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    linalg.yield %s : bf16
  } -> tensor<16x32xbf16>
  return %r : tensor<16x32xbf16>
}
