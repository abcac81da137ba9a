// RUN: torq-opt %s --pass-pipeline='builtin.module(linalg-generalize-named-ops,torq-convert-dtypes,torq-mark-patterns-for-super-tiling)' | FileCheck %s --check-prefix=MARK
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=20 --pass-pipeline='builtin.module(linalg-generalize-named-ops,torq-convert-dtypes,torq-mark-patterns-for-super-tiling,torq-super-tiling)' | FileCheck %s --check-prefix=TILE
// RUN: torq-opt %s --torq-hw=SL2610:lram_kb=20 --pass-pipeline='builtin.module(linalg-generalize-named-ops,torq-convert-dtypes,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses)' | FileCheck %s --check-prefix=HL

#map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d3, d1 + d4, d2 + d5)>
#map1 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d3, d4, d5)>
#map2 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0)>
func.func @conv_bias_relu(%in: tensor<8x34x34xf32>, %w: tensor<16x8x3x3xf32>, %b: tensor<16xf32>) -> tensor<16x32x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x32x32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16x32x32xf32>) -> tensor<16x32x32xf32>
  %c = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<8x34x34xf32>, tensor<16x8x3x3xf32>) outs(%acc : tensor<16x32x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %a = arith.addf %o, %m : f32
    linalg.yield %a : f32
  } -> tensor<16x32x32xf32>
  %r = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %b : tensor<16x32x32xf32>, tensor<16xf32>) outs(%e : tensor<16x32x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %p = arith.cmpf ugt, %s, %zero : f32
    %q = arith.select %p, %s, %zero : f32
    linalg.yield %q : f32
  } -> tensor<16x32x32xf32>
  return %r : tensor<16x32x32xf32>
}

// The fill, the conv and its epilogue form one group (id 0), marked backward
// from the epilogue; f32 is demoted to bf16.
// MARK-LABEL: func.func @conv_bias_relu
// MARK-SAME: tensor<8x34x34xbf16>
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0]
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0], "torq-fuse-group-id" = 0
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0]

// With 6 KiB usable LRAM the output (32 KiB) must be tiled along rows (dim 1),
// and the conv and fill are fused into the loop.
// TILE: scf.for %{{.*}} = %c0 to %c32 step %[[STEP:.*]] iter_args
// TILE: tensor.extract_slice %arg0[0, %{{.*}}, 0] [8, {{[0-9]+}}, 34]
// TILE: linalg.generic {{.*}}"torq-fuse-group" = [0], "torq-fuse-group-id" = 0
// TILE: tensor.insert_slice

// Lowered: one torq_hl.conv2d per tile with LRAM offsets for its operands.
// HL: scf.for
// HL: "torq_hl.conv2d"(%{{.*}}, %arg1, %arg2) {{.*}}input_dims = "CHW"{{.*}}output_dims = "OHW"{{.*}}torq.lram_operands = [{{.*}}], torq.lram_result = {{[0-9]+}}
// HL-NOT: linalg.generic
