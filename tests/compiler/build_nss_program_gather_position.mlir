// A decode step's one-hot row at `position` (`eye.index_select(0, position)`) as IREE
// writes it when it collapsed the position to a 0-d tensor: the column coordinate is
// `linalg.index 0` modulo 16, the row's 16 columns, so the remainder is the index itself
// (torq-unroll-index-dims folds it with the loop range, compiler/index_arith.py) and the
// op is a row gather: the 0-d index DMA-ed in, one gathered row of 16 (bound: the
// table's 16 rows), DMA-ed out.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s
// A remainder by less than the loop range wraps the columns: no gather, the host keeps it.
// RUN: sed 's/arith.remsi %j, %c16/arith.remsi %j, %c8/' %s | not torq-opt - --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' 2>&1 | FileCheck %s --check-prefix=WRAP
//
// CHECK: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [], sizes = [], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, index_bound = 16 : i64, index_buffer = 0 : i64, index_dtype = "i64", offsets = [0, 0], sizes = [1, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0], sizes = [16], tensor = 2 : i64}}
// CHECK-NOT: "torq_nss.dma
// WRAP: error: torq-check-npu-support: no NPU form: linalg.generic: 'linalg.index' in an elementwise body has no Torq lowering

func.func @one_hot_row(%eye: tensor<16x16xf32>, %position: tensor<i64>) -> tensor<16xf32> attributes {torq.dispatch} {
  %c16 = arith.constant 16 : index
  %c8 = arith.constant 8 : index
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%position : tensor<i64>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: i64, %out: f32):
    %j = linalg.index 0 : index
    %col = arith.remsi %j, %c16 : index
    %row = arith.index_cast %in : i64 to index
    %x = tensor.extract %eye[%row, %col] : tensor<16x16xf32>
    linalg.yield %x : f32
  } -> tensor<16xf32>
  return %r : tensor<16xf32>
}
