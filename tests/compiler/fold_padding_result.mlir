// torq-fold-padding on a `tensor.pad` that is a result of the dispatch (a pad
// IREE gives its own dispatch because its reader is in another one): it
// becomes a `torq.pad` view too, and the passes after it leave it alone (no
// group, nothing to tile or lower). torq-build-nss-program writes it with
// DMAs: the border from a buffer an operand-less elementwise op fills with the
// pad value (-5, exact in i8; the buffer holds the largest border box, 2x1x7),
// then the source through LRAM into the interior at the low padding (0, 1, 2).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-padding)' | FileCheck %s --check-prefix=FOLD
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS

// FOLD-LABEL: func.func @pad_result
// FOLD-NOT: tensor.pad
// FOLD: %[[V:.*]] = "torq.pad"(%arg0) {high = array<i64: 0, 1, 1>, low = array<i64: 0, 1, 2>, value = -5 : i8} : (tensor<2x3x4xi8>) -> tensor<2x5x7xi8>
// FOLD: return %[[V]]
// NSS-LABEL: func.func @pad_result()
// NSS-SAME: lram_peak = 24 : i64, name = "pad_result", tiles = 2 : i64}
// NSS-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[2,3,4],\22dtype\22:\22i8\22,\22host_dtype\22:\22i8\22,\22arg_index\22:0}"}
// NSS-NEXT: "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22output\22,\22shape\22:[2,5,7],\22dtype\22:\22i8\22,\22host_dtype\22:\22i8\22,\22arg_index\22:0}"}
// NSS-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:14,\22live_start\22:0,\22live_end\22:4}"}
// NSS-NEXT: "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:64,\22size\22:24,\22live_start\22:5,\22live_end\22:6}"}
// NSS-NEXT: "torq_nss.compute"() {spec = "{\22op\22:\22elementwise\22,\22operands\22:[],\22result\22:{\22buffer\22:0,\22shape\22:[14],\22dtype\22:\22i8\22},{{.*}}\22const\22:-5.0},{{.*}}\22macs\22:0,\22tile\22:0}"}
// NSS-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,0,0],\22sizes\22:[2,1,7]}"}
// NSS-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,4,0],\22sizes\22:[2,1,7]}"}
// NSS-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,1,0],\22sizes\22:[2,3,2]}"}
// NSS-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:0,\22tensor\22:1,\22offsets\22:[0,1,6],\22sizes\22:[2,3,1]}"}
// NSS-NEXT: "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0,0],\22sizes\22:[2,3,4],\22buffer\22:1}"}
// NSS-NEXT: "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:1,\22offsets\22:[0,1,2],\22sizes\22:[2,3,4]}"}
// NSS-NEXT: return
func.func @pad_result(%x: tensor<2x3x4xi8>) -> tensor<2x5x7xi8> {
  %v = arith.constant -5 : i8
  %p = tensor.pad %x low[0, 1, 2] high[0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index):
    tensor.yield %v : i8
  } : tensor<2x3x4xi8> to tensor<2x5x7xi8>
  return %p : tensor<2x5x7xi8>
}
