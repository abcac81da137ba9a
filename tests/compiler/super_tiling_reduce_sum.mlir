// torq-super-tiling tiles the reduction loop of a sum of a whole tensor (no result dim
// to tile: GroupNorm(1, C)'s statistics over C x H x W) when it does not fit untiled,
// keeping the running sum in LRAM; torq-lower-to-torq-hl makes each step a
// torq_hl.reduce in accumulate form (mode sum: contract/ops.py), after the step's
// prologue (the squares the body adds up).
//
// Sum of squares of 8192 bf16 at a 2048-byte budget (lram_kb=2,reserved_kb=0): the
// input alone is 16 KiB, so the loop of 8192 runs in steps; a step of 256 holds its
// slice (512 B), the slice's squares (512 B) and, double-buffered, the next slice.
//
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling,torq-super-tiling)' | FileCheck %s --check-prefix=TILE
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=2,reserved_kb=0 --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' | FileCheck %s --check-prefix=LOWER

// The fill, then the loop over the reduced dim whose iter_arg is the running sum,
// initialised from the fill; each step sums the squares of its slice into it.
// TILE-LABEL: func.func @sum_of_squares
// TILE: %[[FILL:.*]] = linalg.fill
// TILE: %[[SUM:.*]] = scf.for %[[K:.*]] = %c0 to %c8192 step %c256 iter_args(%[[ACC:.*]] = %[[FILL]]) -> (tensor<bf16>)
// TILE: %[[SLICE:.*]] = tensor.extract_slice %arg0[%[[K]]] [256] [1]
// TILE: linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} ins(%[[SLICE]] : tensor<256xbf16>) outs(%[[ACC]] : tensor<bf16>)
// TILE: arith.mulf
// TILE: arith.addf
// TILE: scf.yield
// TILE: return %[[SUM]]

// Lowered: an operand-less elementwise zeroes an f32 accumulator before the loop;
// each step squares its slice (an elementwise prologue) and adds its sum to the
// accumulator (torq_hl.reduce, accumulate = 1, the accumulator as operand 1, in
// place: its result offset is the accumulator's); the step counts its own 256 reads;
// after the loop one elementwise reads the accumulator and writes the bf16 result.
// LOWER-LABEL: func.func @sum_of_squares
// LOWER: %[[ZERO:.*]] = "torq_hl.elementwise"() {{.*}}torq.lram_result = [[ACC:[0-9]+]] : i64} : () -> tensor<f32>
// LOWER: %[[SUM:.*]] = scf.for %{{.*}} = %c0 to %c8192 step %c256 iter_args(%[[A:.*]] = %[[ZERO]]) -> (tensor<f32>)
// LOWER: %[[SLICE:.*]] = tensor.extract_slice %arg0
// LOWER: %[[SQ:.*]] = "torq_hl.elementwise"(%[[SLICE]]) {{.*}}op = "mul"{{.*}} : (tensor<256xbf16>) -> tensor<256xbf16>
// LOWER: "torq_hl.reduce"(%[[SQ]], %[[A]]) {accumulate = 1 : i64, axes = [0], {{.*}}macs = 256 : i64, mode = "sum", {{.*}}torq.lram_result = [[ACC]] : i64} : (tensor<256xbf16>, tensor<f32>) -> tensor<f32>
// LOWER: scf.yield
// LOWER: "torq_hl.elementwise"(%[[SUM]]) {{.*}} : (tensor<f32>) -> tensor<bf16>

#id = affine_map<(d0) -> (d0)>
#scalar = affine_map<(d0) -> ()>
func.func @sum_of_squares(%x: tensor<8192xbf16>) -> tensor<bf16> attributes {torq.dispatch} {
  %zero = arith.constant 0.000000e+00 : bf16
  %e = tensor.empty() : tensor<bf16>
  %init = linalg.fill ins(%zero : bf16) outs(%e : tensor<bf16>) -> tensor<bf16>
  %s = linalg.generic {indexing_maps = [#id, #scalar], iterator_types = ["reduction"]}
      ins(%x : tensor<8192xbf16>) outs(%init : tensor<bf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %sq = arith.mulf %in, %in : bf16
    %acc = arith.addf %sq, %out : bf16
    linalg.yield %acc : bf16
  } -> tensor<bf16>
  return %s : tensor<bf16>
}
