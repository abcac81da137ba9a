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

// Buffers hold the padded layout (compiler/vector_layout.py): an elementwise
// op vectorises its innermost dim, bf16 vectors are TorqHw.lanes_bf16 = 32
// elements, so 50 (>= 32) pads to 2 x 32 = 64 elements = 128 bytes.
// Two ops on 50 x bf16 buffers of 128 bytes. Commands: 0 dma_in a, 1 dma_in b,
// 2 compute %0, 3 compute %1, 4 dma_out %1. Live ranges: a [0,2], b [1,2],
// %0 [2,3], %1 [3,4].
// Alignment 64: a at 0; b after a at align(128) = 128; %0 after b at
// align(256) = 256; %1 starts when a and b are dead, only %0 (256..384) is
// live, so it reuses offset 0. end = 384; peak = a + b + %0 = 384 (at
// command 2).
// CHECK-LABEL: func.func @chain(
// CHECK-SAME: attributes {torq.lram_end = 384 : i64, torq.lram_peak = 384 : i64}
// CHECK: "torq_hl.elementwise"(%arg0, %arg1) {torq.lram_operands = [0, 128], torq.lram_result = 256 : i64}
// CHECK: "torq_hl.elementwise"(%0, %0) {torq.lram_operands = [256, 256], torq.lram_result = 0 : i64}
// Alignment 256: b at align(128, 256) = 256, %0 at align(384) = 512, %1 again
// at 0; end = 512 + 128 = 640, the peak (live bytes, no alignment gaps) is
// still 384.
// ALIGN-LABEL: func.func @chain(
// ALIGN-SAME: attributes {torq.lram_end = 640 : i64, torq.lram_peak = 384 : i64}
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

// 300 x bf16 buffers padded to ceil(300 / 32) x 32 = 320 elements = 640
// bytes, all live at the compute: a at 0, b at 640, result at 1280;
// end = 1920, peak = 1920. This fits the default budget but not a 1024-byte
// LRAM (where the other functions, ending at 384 and 128, still fit): a clean
// error naming the body's first op, its location, the bytes needed and the
// budget.
// CHECK-LABEL: func.func @too_big(
// CHECK-SAME: attributes {torq.lram_end = 1920 : i64, torq.lram_peak = 1920 : i64}
// CHECK: {torq.lram_operands = [0, 640], torq.lram_result = 1280 : i64}
// ERR: torq-opt: error: big.py:3:1: error: torq_hl.elementwise: tile needs 1920 bytes of LRAM, budget is 1024
// ERR-NOT: func.func
func.func @too_big(%a: tensor<300xbf16>, %b: tensor<300xbf16>) -> tensor<300xbf16> {
  %0 = "torq_hl.elementwise"(%a, %b) : (tensor<300xbf16>, tensor<300xbf16>) -> tensor<300xbf16> loc("big.py":3:1)
  return %0 : tensor<300xbf16>
}

// Narrow channel dims (vector_layout): a conv2d vectorises the input's and the
// weight's C and the result's O. bf16 vectors are 32 lanes; C = 3 < 32 is
// narrow and pads only to the next power of two, 4; O = 24 < 32 pads to 32.
// input 1x3x8x8 -> 1x4x8x8 x 2 B = 512 bytes (dense 384) at 0;
// weight 24x3x3x3 -> 24x4x3x3 x 2 B = 1728 bytes (dense 1296) at 512;
// result 1x24x6x6 -> 1x32x6x6 x 2 B = 2304 bytes (dense 1728) at
// align(512 + 1728 = 2240, 64) = 2240. end = 2240 + 2304 = 4544, and all three
// are live at the compute: peak = 512 + 1728 + 2304 = 4544 (dense: 3408).
// CHECK-LABEL: func.func @narrow_channels(
// CHECK-SAME: attributes {torq.lram_end = 4544 : i64, torq.lram_peak = 4544 : i64}
// CHECK: "torq_hl.conv2d"(%arg0, %arg1) {{{.*}}torq.lram_operands = [0, 512], torq.lram_result = 2240 : i64, weight_dims = "OCHW"}
func.func @narrow_channels(%x: tensor<1x3x8x8xbf16>, %w: tensor<24x3x3x3xbf16>) -> tensor<1x24x6x6xbf16> {
  %0 = "torq_hl.conv2d"(%x, %w) {input_dims = "NCHW", weight_dims = "OCHW", output_dims = "NOHW"} : (tensor<1x3x8x8xbf16>, tensor<24x3x3x3xbf16>) -> tensor<1x24x6x6xbf16>
  return %0 : tensor<1x24x6x6xbf16>
}
