// A 1x1 convolution whose input map reads H and W at 2 * loop (stride 2) is
// a conv2d with stride [2, 2] (the coefficient used to be dropped, giving a
// stride-1 conv whose result shape the simulator refused at run time).
// MACs = 8 x 5 x 5 outputs x 4 input channels = 800. A strided channel read
// (c at 2 * loop) is no convolution the slices run: see
// lower_pointwise_strided_channel.mlir.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling,torq-lower-to-torq-hl)' | FileCheck %s

#in = affine_map<(o, y, x, c) -> (c, 2 * y, 2 * x)>
#w = affine_map<(o, y, x, c) -> (o, c)>
#out = affine_map<(o, y, x, c) -> (o, y, x)>
// CHECK-LABEL: func.func @strided_1x1(
// CHECK: "torq_hl.conv2d"(%arg0, %arg1) {dilation = [1, 1], {{.*}}input_dims = "CHW", macs = 800 : i64, output_dims = "OHW", stride = [2, 2], weight_dims = "OC"} : (tensor<4x10x10xbf16>, tensor<8x4xbf16>) -> tensor<8x5x5xbf16>
func.func @strided_1x1(%x: tensor<4x10x10xbf16>, %w: tensor<8x4xbf16>) -> tensor<8x5x5xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x5x5xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<8x5x5xbf16>) -> tensor<8x5x5xbf16>
  %r = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x10x10xbf16>, tensor<8x4xbf16>) outs(%f : tensor<8x5x5xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %m = arith.mulf %a, %b : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x5x5xbf16>
  return %r : tensor<8x5x5xbf16>
}
