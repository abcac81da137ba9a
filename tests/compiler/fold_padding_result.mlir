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
// NSS-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "i8", host_dtype = "i8", index = 0 : i64, kind = "input", shape = [2, 3, 4]}}
// NSS-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "i8", host_dtype = "i8", index = 1 : i64, kind = "output", shape = [2, 5, 7]}}
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 4 : i64, live_start = 0 : i64, offset = 0 : i64, size = 14 : i64}}
// NSS-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 6 : i64, live_start = 5 : i64, offset = 64 : i64, size = 24 : i64}}
// NSS-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {result = -1 : i64, steps = [{args = [-5.000000e+00, {{.*}}], op = "add"}]}, macs = 0 : i64, op = "elementwise", operands = [], result = {buffer = 0 : i64, dtype = "i8", shape = [14]}, {{.*}}tile = 0 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 0, 0], sizes = [2, 1, 7], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 4, 0], sizes = [2, 1, 7], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 1, 0], sizes = [2, 3, 2], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0, 1, 6], sizes = [2, 3, 1], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [0, 0, 0], sizes = [2, 3, 4], tensor = 0 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0, 1, 2], sizes = [2, 3, 4], tensor = 1 : i64}}
// NSS-NEXT: return
func.func @pad_result(%x: tensor<2x3x4xi8>) -> tensor<2x5x7xi8> {
  %v = arith.constant -5 : i8
  %p = tensor.pad %x low[0, 1, 2] high[0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index):
    tensor.yield %v : i8
  } : tensor<2x3x4xi8> to tensor<2x5x7xi8>
  return %p : tensor<2x5x7xi8>
}
