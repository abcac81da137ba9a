// torq-super-tiling tiles a contraction's reduction dim when no parallel-only
// tiling fits, keeping the accumulator in LRAM; torq-lower-to-torq-hl turns
// the reduction loop into the accumulate form.
//
// Fully connected 64x1024 . 1024x16 (bf16) + bias + ReLU at a 2048-byte
// budget (lram_kb=2,reserved_kb=0). One output column alone reads 1024 x 2 B
// of weights plus a 64 x 1024 x 2 B input: no parallel tiling fits, so K is
// tiled too. Footprints with the allocator's rule (first fit in order of
// first use, offsets rounded up to 64 B; the bias, read whole by every tile,
// is resident at the bottom: 32 B -> per-tile buffers from 64):
//   the f32 accumulator of a rows x 16 tile takes rows x 64 B: 32 rows = 2048 B
//   (over the budget with the bias), 16 rows = 1024 B at 64;
//   16 rows, K slice 8: input 16x8 (256 B) at 1088, weight 8x16 (256 B) at
//   1344, then the bf16 result (512 B) reuses the slices' bytes -> 1600 B;
//   K slice 16: 512 + 512 B slices end at 64 + 1024 + 1024 = 2112 > 2048.
// So 4 row tiles, each running K in 128 steps of 8 (the input is read once,
// the weights once per row tile).
//
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling)' | FileCheck %s --check-prefix=TILE
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --pass-pipeline='builtin.module(torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' | FileCheck %s --check-prefix=LOWER

// The parallel loop over rows, then inside it the fill and the K loop whose
// iter_arg is the accumulator (initialised from the fill), then the epilogue
// (bias + ReLU) once, after the K loop, on the full sum.
// TILE-LABEL: func.func @fc
// TILE: scf.for %[[M:.*]] = %c0 to %c64 step %c16 iter_args(%[[OUT:.*]] = %{{.*}}) -> (tensor<64x16xbf16>)
// TILE: %[[FILL:.*]] = linalg.fill {{.*}} -> tensor<16x16xbf16>
// TILE: %[[SUM:.*]] = scf.for %[[K:.*]] = %c0 to %c1024 step %c8 iter_args(%[[ACC:.*]] = %[[FILL]]) -> (tensor<16x16xbf16>)
// TILE: tensor.extract_slice {{.*}}[0, %[[K]]] [16, 8]
// TILE: tensor.extract_slice %arg1[%[[K]], 0] [8, 16]
// TILE: %[[STEP:.*]] = linalg.generic {{.*}} outs(%[[ACC]] : tensor<16x16xbf16>)
// TILE: scf.yield %[[STEP]]
// TILE-NEXT: }
// TILE: linalg.generic {{.*}} ins(%[[SUM]], %arg2 : tensor<16x16xbf16>, tensor<16xbf16>)
// TILE: arith.cmpf
// TILE: tensor.insert_slice
// TILE: return

// Lowered: an operand-less elementwise zeroes an f32 accumulator before the K
// loop; each step is torq_hl.matmul with accumulate = 1 and the accumulator as
// operand 2, in place (its result offset is the accumulator's), counting the
// MACs of its step (16 x 16 x 8 = 2048; 128 steps x 4 tiles = 64 x 16 x 1024);
// after the loop one elementwise reads the accumulator (operand 0) and the bias
// and produces the bf16 output.
// LOWER-LABEL: func.func @fc
// LOWER: scf.for %{{.*}} = %c0 to %c64 step %c16
// LOWER: %[[ZERO:.*]] = "torq_hl.elementwise"() {{.*}}torq.lram_result = [[ACC:[0-9]+]] {{.*}} : () -> tensor<16x16xf32>
// LOWER: %[[SUM:.*]] = scf.for %{{.*}} = %c0 to %c1024 step %c8 iter_args(%[[A:.*]] = %[[ZERO]]) -> (tensor<16x16xf32>)
// LOWER: "torq_hl.matmul"(%{{.*}}, %{{.*}}, %[[A]]) {accumulate = 1 : i64, {{.*}}macs = 2048 : i64{{.*}}torq.lram_operands = [{{[0-9]+}}, {{[0-9]+}}, [[ACC]]], {{.*}}torq.lram_result = [[ACC]] : i64{{.*}} : (tensor<16x8xbf16>, tensor<8x16xbf16>, tensor<16x16xf32>) -> tensor<16x16xf32>
// LOWER: scf.yield
// LOWER: "torq_hl.elementwise"(%[[SUM]], %arg2) {{.*}} : (tensor<16x16xf32>, tensor<16xbf16>) -> tensor<16x16xbf16>
// LOWER: tensor.insert_slice
// LOWER-NOT: linalg.

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
#bias = affine_map<(m, n) -> (n)>
func.func @fc(%x: tensor<64x1024xbf16>, %w: tensor<1024x16xbf16>, %b: tensor<16xbf16>) -> tensor<64x16xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64x16xbf16>
  %acc = linalg.fill {"torq-fuse-group" = [0]} ins(%zero : bf16) outs(%e : tensor<64x16xbf16>) -> tensor<64x16xbf16>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<64x1024xbf16>, tensor<1024x16xbf16>) outs(%acc : tensor<64x16xbf16>) attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
  ^bb0(%a: bf16, %bb: bf16, %o: bf16):
    %m = arith.mulf %a, %bb : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<64x16xbf16> loc("fc.py":7:3)
  %r = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<64x16xbf16>, tensor<16xbf16>) outs(%e : tensor<64x16xbf16>) attrs = {"torq-fuse-group" = [0]} {
  ^bb0(%a: bf16, %bb: bf16, %o: bf16):
    %s = arith.addf %a, %bb : bf16
    %c = arith.cmpf ugt, %s, %zero : bf16
    %y = arith.select %c, %s, %zero : bf16
    linalg.yield %y : bf16
  } -> tensor<64x16xbf16>
  return %r : tensor<64x16xbf16>
}
