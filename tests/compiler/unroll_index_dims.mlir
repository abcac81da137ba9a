// Llama's rotate_half as IREE writes it (x viewed as [..., 2, D/2]; the body reads x at
// 1 - d2 and negates where that is 1) becomes one generic per value of d2: each reads a
// box of x as an input (no linalg.index left) and the result is assembled from the two
// boxes with tensor.insert_slice.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// The NSS program writes both halves: at 32 KiB the negation of x[:, :, 1] into out[:, :, 0]
// in 16 tiles, and the copy half (cleanup folds its identity generic into the box it reads)
// by DMAs alone, x[h, :, 0] into out[h, :, 1] head by head:
// RUN: sed 's/4x8x2x8/9x128x2x32/g' %s | torq-opt - --torq-hw=SL2610:lram_kb=32 --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
//
// CHECK-LABEL: func.func @rotate_half(
// CHECK-NOT: linalg.index
// CHECK: %[[HI:.*]] = tensor.extract_slice %arg0[0, 0, 1, 0] [4, 8, 1, 8] [1, 1, 1, 1]
// CHECK: %[[NEG:.*]] = linalg.generic {{.*}} ins(%[[HI]] : tensor<4x8x1x8xf32>)
// CHECK: arith.negf
// CHECK: %[[R0:.*]] = tensor.insert_slice %[[NEG]] into %{{.*}}[0, 0, 0, 0] [4, 8, 1, 8]
// CHECK: %[[LO:.*]] = tensor.extract_slice %arg0[0, 0, 0, 0] [4, 8, 1, 8] [1, 1, 1, 1]
// CHECK: %[[COPY:.*]] = linalg.generic {{.*}} ins(%[[LO]] : tensor<4x8x1x8xf32>)
// CHECK-NOT: arith.negf
// CHECK: %[[R1:.*]] = tensor.insert_slice %[[COPY]] into %[[R0]][0, 0, 1, 0] [4, 8, 1, 8]
// CHECK: return %[[R1]]
//
// NSS: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0, 0, 1, 0], sizes = [9, 8, 1, 32], tensor = 0 : i64}}
// NSS: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0, 0, 0, 0], sizes = [9, 8, 1, 32], tensor = 1 : i64}}
// NSS: "torq_nss.dma_out"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [0, 120, 0, 0], sizes = [9, 8, 1, 32], tensor = 1 : i64}}
// NSS: "torq_nss.dma_in"() {spec = {buffer = [[B:[0-9]+]] : i64, offsets = [0, 0, 0, 0], sizes = [1, 128, 1, 32], tensor = 0 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = [[B]] : i64, offsets = [0, 0, 1, 0], sizes = [1, 128, 1, 32], tensor = 1 : i64}}
// NSS: "torq_nss.dma_out"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [8, 0, 1, 0], sizes = [1, 128, 1, 32], tensor = 1 : i64}}

func.func @rotate_half(%arg0: tensor<4x8x2x8xf32>) -> tensor<4x8x2x8xf32> attributes {torq.dispatch} {
  %c1 = arith.constant 1 : index
  %0 = tensor.empty() : tensor<4x8x2x8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%0 : tensor<4x8x2x8xf32>) {
  ^bb0(%out: f32):
    %2 = linalg.index 0 : index
    %3 = linalg.index 1 : index
    %4 = linalg.index 2 : index
    %5 = linalg.index 3 : index
    %6 = arith.subi %c1, %4 : index
    %extracted = tensor.extract %arg0[%2, %3, %6, %5] : tensor<4x8x2x8xf32>
    %7 = arith.negf %extracted : f32
    %8 = arith.cmpi eq, %6, %c1 : index
    %9 = arith.select %8, %7, %extracted : f32
    linalg.yield %9 : f32
  } -> tensor<4x8x2x8xf32>
  return %1 : tensor<4x8x2x8xf32>
}
