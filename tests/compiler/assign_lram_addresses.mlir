// torq-assign-lram-addresses: one LRAM buffer per operand/result value of
// each tile body, placed first fit in order of first use (commands: DMA-in of
// each operand not produced in the body, then the compute, then a DMA-out of
// results used outside), each offset aligned to TorqHw.lram_alignment, a
// buffer reusing the space of buffers no longer live. Offsets go to
// torq.lram_operands / torq.lram_result; the function gets torq.lram_peak
// (highest sum of live bytes) and torq.lram_end (highest byte used).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s
// RUN: torq-opt %s --torq-hw=SL2610:lram_alignment=256 --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s --check-prefix=ALIGN
// RUN: torq-opt %s --torq-hw=SL2610:slices=1 --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s --check-prefix=SETS2
// RUN: not torq-opt %s --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --pass-pipeline='builtin.module(torq-assign-lram-addresses)' 2>&1 | FileCheck %s --check-prefix=ERR

// Two ops on 50 x bf16 = 100-byte buffers. Commands: 0 dma_in a, 1 dma_in b,
// 2 compute %0, 3 compute %1, 4 dma_out %1. Live ranges: a [0,2], b [1,2],
// %0 [2,3], %1 [3,4].
// Alignment 64: a at 0; b after a at align(100) = 128; %0 after b at
// align(228) = 256; %1 starts when a and b are dead, only %0 (256..356) is
// live, so it reuses offset 0. end = 356; peak = a + b + %0 = 300 (at
// command 2). end > peak because of the alignment padding.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME: attributes {torq.lram_end = 356 : i64, torq.lram_peak = 300 : i64}
// CHECK: "torq_hl.elementwise"(%arg0, %arg1) {torq.lram_operands = [0, 128], torq.lram_result = 256 : i64}
// CHECK: "torq_hl.elementwise"(%0, %0) {torq.lram_operands = [256, 256], torq.lram_result = 0 : i64}
// Alignment 256: b at 256, %0 at align(356) = 512, %1 again at 0;
// end = 612, the peak (live bytes, no padding) is still 300.
// ALIGN-LABEL: func.func @chain(
// ALIGN-SAME: attributes {torq.lram_end = 612 : i64, torq.lram_peak = 300 : i64}
// ALIGN: "torq_hl.elementwise"(%arg0, %arg1) {torq.lram_operands = [0, 256], torq.lram_result = 512 : i64}
// ALIGN: "torq_hl.elementwise"(%0, %0) {torq.lram_operands = [512, 512], torq.lram_result = 0 : i64}
func.func @chain(%a: tensor<50xbf16>, %b: tensor<50xbf16>) -> tensor<50xbf16> {
  %0 = "torq_hl.elementwise"(%a, %b) : (tensor<50xbf16>, tensor<50xbf16>) -> tensor<50xbf16>
  %1 = "torq_hl.elementwise"(%0, %0) : (tensor<50xbf16>, tensor<50xbf16>) -> tensor<50xbf16>
  return %1 : tensor<50xbf16>
}

// A tile loop: the body is allocated once for one tile (2 x 16 x bf16 =
// 64 bytes per buffer): slice [0,1] at 0, result [1,2] after it at 64; one
// set ends at 128 (the footprint), peak 128. The loop runs 2 tiles and there
// is room, so the body gets 2 buffer sets (2 x slices = 4 is more than the
// trip count) at a stride of align(128) = 128: end = 128 + 128 = 256.
// With alignment 256 the result goes to 256: one set ends at 320, stride
// align(320, 256) = 512, end 320 + 512 = 832, peak still 128.
// CHECK-LABEL: func.func @tiled(
// CHECK-SAME: attributes {torq.lram_end = 256 : i64, torq.lram_peak = 128 : i64}
// CHECK: scf.for
// CHECK: "torq_hl.elementwise"(%{{.*}}) {torq.lram_operands = [0], torq.lram_resident = [0], torq.lram_result = 64 : i64, torq.lram_set_stride = 128 : i64, torq.lram_sets = 2 : i64}
// ALIGN-LABEL: func.func @tiled(
// ALIGN-SAME: attributes {torq.lram_end = 832 : i64, torq.lram_peak = 128 : i64}
// ALIGN: "torq_hl.elementwise"(%{{.*}}) {torq.lram_operands = [0], torq.lram_resident = [0], torq.lram_result = 256 : i64, torq.lram_set_stride = 512 : i64, torq.lram_sets = 2 : i64}
func.func @tiled(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %e) -> (tensor<4x16xbf16>) {
    %s = tensor.extract_slice %x[%i, 0] [2, 16] [1, 1] : tensor<4x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s) : (tensor<2x16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<4x16xbf16>
    scf.yield %u : tensor<4x16xbf16>
  }
  return %r : tensor<4x16xbf16>
}

// A loop-invariant operand: %w (16 x bf16 = 32 bytes) is defined outside
// the loop, so it is resident: loaded by the first tile and kept, at the
// bottom of LRAM (offset 0, live for the whole body). The per-tile buffers
// (the 2x16 slice, 64 bytes, and the result, 64 bytes) go above it from
// align(32) = 64: slice at 64, result at 128; one set ends at 192. 8 tiles
// (0 to 16 step 2), 2 slices: 4 sets at stride align(128) = 128 fit, so
// end = 192 + 3 x 128 = 576. Peak = resident 32 + one tile's 128 = 160.
// CHECK-LABEL: func.func @resident(
// CHECK-SAME: attributes {torq.lram_end = 576 : i64, torq.lram_peak = 160 : i64}
// CHECK: "torq_hl.elementwise"(%{{.*}}, %{{.*}}) {torq.lram_operands = [64, 0], torq.lram_resident = [0, 1], torq.lram_result = 128 : i64, torq.lram_set_stride = 128 : i64, torq.lram_sets = 4 : i64}
// With one slice the choices are 2 x 1 = 2 sets or 1: end 192 + 128 = 320.
// SETS2-LABEL: func.func @resident(
// SETS2-SAME: attributes {torq.lram_end = 320 : i64, torq.lram_peak = 160 : i64}
// SETS2: torq.lram_set_stride = 128 : i64, torq.lram_sets = 2 : i64}
func.func @resident(%x: tensor<16x16xbf16>, %w: tensor<16xbf16>) -> tensor<16x16xbf16> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %e = tensor.empty() : tensor<16x16xbf16>
  %r = scf.for %i = %c0 to %c16 step %c2 iter_args(%acc = %e) -> (tensor<16x16xbf16>) {
    %s = tensor.extract_slice %x[%i, 0] [2, 16] [1, 1] : tensor<16x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s, %w) : (tensor<2x16xbf16>, tensor<16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<16x16xbf16>
    scf.yield %u : tensor<16x16xbf16>
  }
  return %r : tensor<16x16xbf16>
}

// 300 x bf16 = 600-byte buffers, all live at the compute: a at 0, b at
// align(600) = 640, result at align(1240) = 1280; end = 1880, peak = 1800.
// This fits the default budget but not a 1024-byte LRAM (where the other
// functions, ending at 356 and 128, still fit): a clean error naming the
// body's first op, its location, the bytes needed and the budget.
// CHECK-LABEL: func.func @too_big(
// CHECK-SAME: attributes {torq.lram_end = 1880 : i64, torq.lram_peak = 1800 : i64}
// CHECK: {torq.lram_operands = [0, 640], torq.lram_result = 1280 : i64}
// ERR: torq-opt: error: big.py:3:1: error: torq_hl.elementwise: tile needs 1880 bytes of LRAM, budget is 1024
// ERR-NOT: func.func
func.func @too_big(%a: tensor<300xbf16>, %b: tensor<300xbf16>) -> tensor<300xbf16> {
  %0 = "torq_hl.elementwise"(%a, %b) : (tensor<300xbf16>, tensor<300xbf16>) -> tensor<300xbf16> loc("big.py":3:1)
  return %0 : tensor<300xbf16>
}
