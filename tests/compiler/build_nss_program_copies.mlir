// torq-build-nss-program on results no compute makes (copies: a function
// argument, a box of one, a padded view) and on results written in place into
// a read-write operand (torq.in_place_results, from dispatch extraction).
// The budget is 1 KiB (lram_kb=15, 14 reserved), alignment 64 bytes.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=15 --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s

// A padded view returned as is (a standalone pad): first the border, from one
// buffer an operand-less elementwise op fills with the pad value (as big as
// the largest border box, 11 elements; the next buffer starts at the next
// 64-byte boundary), DMA-ed out to the four border boxes (rows 0 and 5 whole,
// then columns 0..1 and 10 of rows 1..4); then the source box through LRAM
// into the interior at the low padding (1, 2). The fill is tile 0, the copy
// chunk tile 1.
// CHECK-LABEL: func.func @pad()
// CHECK-SAME: torq.original_type = (tensor<4x8xbf16>) -> tensor<6x11xbf16>
// CHECK-SAME: torq.program = {hw = {{.*}}, lram_peak = 64 : i64, name = "pad", tiles = 2 : i64}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "f32", index = 0 : i64, kind = "input", shape = [4, 8]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "f32", index = 1 : i64, kind = "output", shape = [6, 11]}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 4 : i64, live_start = 0 : i64, offset = 0 : i64, size = 22 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 6 : i64, live_start = 5 : i64, offset = 64 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {result = -1 : i64, steps = [{args = [5.000000e-01, 0.000000e+00], op = "add"}]}, macs = 0 : i64, op = "elementwise", operands = [], result = {buffer = 0 : i64, dtype = "bf16", shape = [11]}, slice = 0 : i64, tile = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 0], sizes = [1, 11], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [5, 0], sizes = [1, 11], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [1, 0], sizes = [4, 2], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [1, 10], sizes = [4, 1], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [0, 0], sizes = [4, 8], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [1, 2], sizes = [4, 8], tensor = 1 : i64}}
// CHECK-NEXT: return
func.func @pad(%a: tensor<4x8xbf16>) -> tensor<6x11xbf16> attributes {torq.host_arg_types = [tensor<4x8xf32>], torq.host_result_types = [tensor<6x11xf32>]} {
  %0 = "torq.pad"(%a) {low = array<i64: 1, 2>, high = array<i64: 1, 1>, value = 5.000000e-01 : bf16} : (tensor<4x8xbf16>) -> tensor<6x11xbf16>
  return %0 : tensor<6x11xbf16>
}

// An argument copied in place into the box [0:1, 0:4, 8:16] of a 1x4x16
// operand (one part of an inner-dim concatenation): the output has the
// operand's shape and aliases it, passed as input 1 after the arguments; the
// DMA-out box gets the box's offsets and its dropped unit dim.
// CHECK-LABEL: func.func @in_place_copy()
// CHECK-SAME: lram_peak = 64 : i64, name = "in_place_copy", tiles = 1 : i64}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 0 : i64, kind = "input", shape = [4, 8]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {aliases = 1 : i64, arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 1 : i64, kind = "output", shape = [1, 4, 16]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 1 : i64, dtype = "bf16", host_dtype = "bf16", index = 2 : i64, kind = "input", shape = [1, 4, 16]}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 1 : i64, live_start = 0 : i64, offset = 0 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0, 0], sizes = [4, 8], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 0, 8], sizes = [1, 4, 8], tensor = 1 : i64}}
// CHECK-NEXT: return
func.func @in_place_copy(%a: tensor<4x8xbf16>) -> tensor<4x8xbf16> attributes {torq.in_place_results = [{offsets = array<i64: 0, 0, 8>, result = 0 : i64, shape = array<i64: 1, 4, 16>, sizes = array<i64: 1, 4, 8>}]} {
  return %a : tensor<4x8xbf16>
}

// A copy of 2 KiB does not fit the 1 KiB budget: chunks of 16 rows (512
// bytes, half the budget) through two buffers that alternate, so the DMA-in
// of one chunk can overlap the DMA-out of the previous one. Each chunk is a
// tile.
// CHECK-LABEL: func.func @chunked_box_copy()
// CHECK-SAME: lram_peak = 512 : i64, name = "chunked_box_copy", tiles = 4 : i64}
// CHECK: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 1 : i64, live_start = 0 : i64, offset = 0 : i64, size = 512 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 3 : i64, live_start = 2 : i64, offset = 512 : i64, size = 512 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 2 : i64, live_end = 5 : i64, live_start = 4 : i64, offset = 0 : i64, size = 512 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 3 : i64, live_end = 7 : i64, live_start = 6 : i64, offset = 512 : i64, size = 512 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [2, 0, 0], sizes = [1, 16, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 0], sizes = [16, 16], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [2, 16, 0], sizes = [1, 16, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [16, 0], sizes = [16, 16], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 2 : i64, offsets = [2, 32, 0], sizes = [1, 16, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 2 : i64, offsets = [32, 0], sizes = [16, 16], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 3 : i64, offsets = [2, 48, 0], sizes = [1, 16, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 3 : i64, offsets = [48, 0], sizes = [16, 16], tensor = 1 : i64}}
// CHECK-NEXT: return
func.func @chunked_box_copy(%a: tensor<3x64x16xbf16>) -> tensor<64x16xbf16> {
  %0 = tensor.extract_slice %a[2, 0, 0] [1, 64, 16] [1, 1, 1] : tensor<3x64x16xbf16> to tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}
