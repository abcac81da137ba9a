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
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[2,3,8],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:0}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22input\22,\22shape\22:[1],\22dtype\22:\22i32\22,\22host_dtype\22:\22i32\22,\22arg_index\22:1}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:2,\22kind\22:\22output\22,\22shape\22:[2,3,16,8],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:0,\22aliases\22:2}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:3,\22kind\22:\22input\22,\22shape\22:[2,3,16,8],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:2}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:4,\22live_start\22:0,\22live_end\22:2}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:64,\22size\22:96,\22live_start\22:1,\22live_end\22:2}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:1,\22offsets\22:[0],\22sizes\22:[1],\22buffer\22:0}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0,0],\22sizes\22:[2,3,8],\22buffer\22:1}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:2,\22offsets\22:[0,0,0,0],\22sizes\22:[2,3,1,8],\22index_buffer\22:0,\22index_dtype\22:\22i32\22,\22index_bound\22:16,\22index_dim\22:2}"}
// CHECK-NEXT: return
func.func @row_at_position(%k: tensor<2x3x8xbf16>, %position: tensor<1xi32>) -> tensor<2x3x8xbf16> attributes {
    torq.in_place_results = [{index_dim = 2 : i64, index_input = 1 : i64, offsets = array<i64: 0, 0, 0, 0>,
                              result = 0 : i64, shape = array<i64: 2, 3, 16, 8>, sizes = array<i64: 2, 3, 1, 8>}]} {
  return %k : tensor<2x3x8xbf16>
}
