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
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[4,8],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22output\22,\22shape\22:[6,11],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:22,\22live_start\22:0,\22live_end\22:4}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:64,\22size\22:64,\22live_start\22:5,\22live_end\22:6}"}
// CHECK-NEXT: "torq_nss.compute"() {spec = "{\22op\22:\22elementwise\22,\22operands\22:[],\22result\22:{\22buffer\22:0,\22shape\22:[11],\22dtype\22:\22bf16\22},\22attrs\22:{},\22epilogue\22:{\22steps\22:[{\22op\22:\22add\22,\22args\22:[{\22kind\22:\22const\22,\22index\22:0,\22axes\22:[],\22const\22:0.5},{\22kind\22:\22const\22,{{.*}}\22const\22:0.0}],\22to\22:\22\22}],\22result\22:-1},\22slice\22:0,\22macs\22:0,\22tile\22:0}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,0],\22sizes\22:[1,11]}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[5,0],\22sizes\22:[1,11]}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[1,0],\22sizes\22:[4,2]}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[1,10],\22sizes\22:[4,1]}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0],\22sizes\22:[4,8],\22buffer\22:1}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:1,\22offsets\22:[1,2],\22sizes\22:[4,8]}"}
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
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[4,8],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:0}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22output\22,\22shape\22:[1,4,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:0,\22aliases\22:1}"}
// CHECK-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:2,\22kind\22:\22input\22,\22shape\22:[1,4,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22bf16\22,\22arg_index\22:1}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:64,\22live_start\22:0,\22live_end\22:1}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0],\22sizes\22:[4,8],\22buffer\22:0}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,0,8],\22sizes\22:[1,4,8]}"}
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
// CHECK: "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:512,\22live_start\22:0,\22live_end\22:1}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:512,\22size\22:512,\22live_start\22:2,\22live_end\22:3}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:2,\22offset\22:0,\22size\22:512,\22live_start\22:4,\22live_end\22:5}"}
// CHECK-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:3,\22offset\22:512,\22size\22:512,\22live_start\22:6,\22live_end\22:7}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[2,0,0],\22sizes\22:[1,16,16],\22buffer\22:0}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,0],\22sizes\22:[16,16]}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[2,16,0],\22sizes\22:[1,16,16],\22buffer\22:1}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:1,\22offsets\22:[16,0],\22sizes\22:[16,16]}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[2,32,0],\22sizes\22:[1,16,16],\22buffer\22:2}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:2,\22tensor\22:1,\22offsets\22:[32,0],\22sizes\22:[16,16]}"}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[2,48,0],\22sizes\22:[1,16,16],\22buffer\22:3}"}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:3,\22tensor\22:1,\22offsets\22:[48,0],\22sizes\22:[16,16]}"}
// CHECK-NEXT: return
func.func @chunked_box_copy(%a: tensor<3x64x16xbf16>) -> tensor<64x16xbf16> {
  %0 = tensor.extract_slice %a[2, 0, 0] [1, 64, 16] [1, 1, 1] : tensor<3x64x16xbf16> to tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}
