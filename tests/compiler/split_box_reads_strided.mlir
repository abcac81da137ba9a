// An elementwise op that reads an input strided reads a strided box read of it
// (torq-split-box-reads). FastViT's and MobileOne's stem: a 3x3 stride-2 depthwise conv
// plus a 1x1 stride-2 depthwise branch, which IREE folds into the conv's elementwise
// consumer as x[c, 2y, 2x] * w[c]. Before, the consumer had no Torq pattern ("no Torq
// pattern (loops 8x8x8: p p p)") and IREE's own llvm-cpu then failed on the dispatch.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-box-reads)' | FileCheck %s
// It becomes a strided DMA box of the input and one TorqHL elementwise op:
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-box-reads,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL
// and a DMA-in with strides, tile by tile at a budget that tiles the group:
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=16 --pass-pipeline='builtin.module(torq-split-box-reads,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS

// CHECK-DAG: #[[S:.+]] = affine_map<(d0, d1, d2) -> (d0, d1 * 2, d2 * 2)>
// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @strided_branch(
// CHECK: %[[BOX:.+]] = linalg.generic {indexing_maps = [#[[S]], #[[ID]]]{{.*}} ins(%arg0 : tensor<8x16x16xf32>) outs({{.*}} : tensor<8x8x8xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.+]]: f32, %{{.*}}: f32):
// CHECK-NEXT: linalg.yield %[[IN]]
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #map{{[0-9]*}}, #[[ID]], #[[ID]]]{{.*}} ins(%[[BOX]], %arg1, %arg2 :

// HL-LABEL: func.func @strided_branch(
// HL: tensor.extract_slice %arg0[0, 0, 0] [8, 8, 8] [1, 2, 2] : tensor<8x16x16xbf16> to tensor<8x8x8xbf16>
// HL: "torq_hl.elementwise"
// HL-NOT: linalg.generic

// NSS-LABEL: func.func @strided_branch(
// The second tile starts at column 8 of the input: the tile's offset 4 times the stride.
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [0, 0, 0], sizes = [8, 8, 4], strides = [1, 2, 2], tensor = 0 : i64}}
// NSS: "torq_nss.dma_in"() {spec = {buffer = {{[0-9]+}} : i64, offsets = [0, 0, 8], sizes = [8, 8, 4], strides = [1, 2, 2], tensor = 0 : i64}}
func.func @strided_branch(%arg0: tensor<8x16x16xf32>, %arg1: tensor<8xf32>, %arg2: tensor<8x8x8xf32>) -> tensor<8x8x8xf32> attributes {torq.dispatch} {
  %e = tensor.empty() : tensor<8x8x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1 * 2, d2 * 2)>, affine_map<(d0, d1, d2) -> (d0)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0, %arg1, %arg2 : tensor<8x16x16xf32>, tensor<8xf32>, tensor<8x8x8xf32>) outs(%e : tensor<8x8x8xf32>) {
  ^bb0(%x: f32, %w: f32, %conv: f32, %out: f32):
    %m = arith.mulf %x, %w : f32
    %s = arith.addf %m, %conv : f32
    linalg.yield %s : f32
  } -> tensor<8x8x8xf32>
  return %r : tensor<8x8x8xf32>
}
