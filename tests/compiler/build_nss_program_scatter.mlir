// torq-build-nss-program on a copy written in place at a runtime offset (a KV
// cache row at `position`: compiler/torch_index_put.py, dispatch extraction's
// index operand): the entry of torq.in_place_results names the dim
// (index_dim) and the argument holding the offset (index_input, a
// tensor<1xi32>). The offset goes first into the start of LRAM (4 bytes, the
// copies' buffers start at the next 64-byte boundary), then the copy's DMA-out
// is placed in the operand's box and scatters along dim 2, reading the offset
// from that buffer (live until then), bound by the operand's 16 positions.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=15 --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s

// CHECK-LABEL: func.func @row_at_position()
// CHECK-SAME: name = "row_at_position", tiles = 1 : i64}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 0 : i64, kind = "input", shape = [2, 3, 8]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 1 : i64, dtype = "i32", host_dtype = "i32", index = 1 : i64, kind = "input", shape = [1]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {aliases = 2 : i64, arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 2 : i64, kind = "output", shape = [2, 3, 16, 8]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 2 : i64, dtype = "bf16", host_dtype = "bf16", index = 3 : i64, kind = "input", shape = [2, 3, 16, 8]}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 2 : i64, live_start = 0 : i64, offset = 0 : i64, size = 4 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 2 : i64, live_start = 1 : i64, offset = 64 : i64, size = 96 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [1], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [0, 0, 0], sizes = [2, 3, 8], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, index_bound = 16 : i64, index_buffer = 0 : i64, index_dim = 2 : i64, index_dtype = "i32", offsets = [0, 0, 0, 0], sizes = [2, 3, 1, 8], tensor = 2 : i64}}
// CHECK-NEXT: return
func.func @row_at_position(%k: tensor<2x3x8xbf16>, %position: tensor<1xi32>) -> tensor<2x3x8xbf16> attributes {
    torq.in_place_results = [{index_dim = 2 : i64, index_input = 1 : i64, offsets = array<i64: 0, 0, 0, 0>,
                              result = 0 : i64, shape = array<i64: 2, 3, 16, 8>, sizes = array<i64: 2, 3, 1, 8>}]} {
  return %k : tensor<2x3x8xbf16>
}
