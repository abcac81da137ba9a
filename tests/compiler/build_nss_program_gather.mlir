// An embedding lookup (torch's embedding as IREE writes it: the index tensor is the only
// input, the body extracts the table row after asserting the index is in [0, 256)) is a
// row gather: no pattern group, no TorqHL op; torq-build-nss-program writes the result
// with a DmaIn of the i64 indices, a gather DmaIn of the rows they name (index_buffer,
// index_bound = the table's 256 rows) and a DmaOut. At 20 KiB (6 KiB available) the 16
// rows of 1,152 bytes go in 8 chunks of 2 through two alternating buffer pairs.
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=20 --pass-pipeline='builtin.module(torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s
// A gather that a compute of the same dispatch reads stays on the host, saying why:
// RUN: sed 's/^  return %r : .*/  %n = arith.negf %r : tensor<16x576xf32>\n  return %n : tensor<16x576xf32>/' %s | not torq-opt - --pass-pipeline='builtin.module(torq-check-npu-support)' 2>&1 | FileCheck %s --check-prefix=READ
//
// CHECK: "torq_nss.tensor"() {spec = {arg_index = 1 : i64, dtype = "i64", host_dtype = "i64", index = 1 : i64, kind = "input", shape = [16]}}
// CHECK: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [2], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, index_bound = 256 : i64, index_buffer = 0 : i64, index_dtype = "i64", offsets = [0, 0], sizes = [2, 576], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0, 0], sizes = [2, 576], tensor = 2 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 2 : i64, offsets = [2], sizes = [2], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 3 : i64, index_bound = 256 : i64, index_buffer = 2 : i64, index_dtype = "i64", offsets = [0, 0], sizes = [2, 576], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 3 : i64, offsets = [2, 0], sizes = [2, 576], tensor = 2 : i64}}
// CHECK-COUNT-6: "torq_nss.dma_out"
// CHECK-NOT: "torq_nss.dma_out"
// READ: error: torq-check-npu-support: no NPU form: linalg.generic: a row gather (embedding lookup) that a compute of the same dispatch reads has no Torq form
// READ-NOT: Traceback

func.func @embed(%table: tensor<256x576xf32>, %tokens: tensor<16xi64>) -> tensor<16x576xf32> attributes {torq.dispatch} {
  %c256 = arith.constant 256 : index
  %c0_i64 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<16x576xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%tokens : tensor<16xi64>) outs(%e : tensor<16x576xf32>) {
  ^bb0(%in: i64, %out: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 1 : index
    %lt = arith.cmpi slt, %i, %c256 : index
    cf.assert %lt, "index must be smaller than dim size"
    %ge = arith.cmpi sge, %in, %c0_i64 : i64
    cf.assert %ge, "index must be larger or equal to 0"
    %x = tensor.extract %table[%i, %j] : tensor<256x576xf32>
    linalg.yield %x : f32
  } -> tensor<16x576xf32>
  return %r : tensor<16x576xf32>
}
