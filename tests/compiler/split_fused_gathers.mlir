// GPT-2's embedding as IREE fuses it (wte[ids] + wpe: one generic whose inputs are the ids
// and the position embedding, whose body extracts the wte row after torch's bounds
// asserts) reads a gathered view instead: torq.gather(wte, ids), the asserts and the ids
// input gone, an elementwise add the patterns know.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-fused-gathers)' | FileCheck %s
// Each tile's box of the view is loaded with a DMA-in of its ids and a gather DMA-in of
// their rows (at 20 KiB: tiles of 6 rows, the last 4):
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=20 --pass-pipeline='builtin.module(torq-split-fused-gathers,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
//
// CHECK-LABEL: func.func @embed_add(
// CHECK: %[[VIEW:.*]] = "torq.gather"(%arg0, %arg1) : (tensor<1000x128xf32>, tensor<16xi64>) -> tensor<16x128xf32>
// CHECK: linalg.generic {{.*}} ins(%arg2, %[[VIEW]] : tensor<16x128xf32>, tensor<16x128xf32>)
// CHECK-NOT: cf.assert
// CHECK-NOT: tensor.extract
// CHECK: arith.addf
// NSS: "torq_nss.dma_in"() {spec = {buffer = [[I:[0-9]+]] : i64, offsets = [0], sizes = [6], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_in"() {spec = {buffer = {{[0-9]+}} : i64, index_bound = 1000 : i64, index_buffer = [[I]] : i64, index_dtype = "i64", offsets = [0, 0], sizes = [6, 128], tensor = 0 : i64}}
// NSS-NEXT: "torq_nss.compute"() {spec = {{.*}}op = "elementwise"
// NSS: "torq_nss.dma_in"() {spec = {buffer = [[J:[0-9]+]] : i64, offsets = [12], sizes = [4], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_in"() {spec = {buffer = {{[0-9]+}} : i64, index_bound = 1000 : i64, index_buffer = [[J]] : i64, index_dtype = "i64", offsets = [0, 0], sizes = [4, 128], tensor = 0 : i64}}

func.func @embed_add(%arg0: tensor<1000x128xf32>, %arg1: tensor<16xi64>, %arg2: tensor<16x128xf32>) -> tensor<16x128xf32> attributes {torq.dispatch} {
  %c1000 = arith.constant 1000 : index
  %c0_i64 = arith.constant 0 : i64
  %0 = tensor.empty() : tensor<16x128xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg1, %arg2 : tensor<16xi64>, tensor<16x128xf32>) outs(%0 : tensor<16x128xf32>) {
  ^bb0(%in: i64, %in_0: f32, %out: f32):
    %2 = linalg.index 1 : index
    %3 = arith.index_cast %in : i64 to index
    %4 = arith.cmpi slt, %3, %c1000 : index
    cf.assert %4, "index must be smaller than dim size"
    %5 = arith.cmpi sge, %in, %c0_i64 : i64
    cf.assert %5, "index must be larger or equal to 0"
    %extracted = tensor.extract %arg0[%3, %2] : tensor<1000x128xf32>
    %6 = arith.addf %extracted, %in_0 : f32
    linalg.yield %6 : f32
  } -> tensor<16x128xf32>
  return %1 : tensor<16x128xf32>
}
