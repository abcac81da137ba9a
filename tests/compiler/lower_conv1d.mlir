// A 1-D convolution (torch Conv1d, or a Conv2d over one row: IREE folds the
// unit H away) is a generic with one sliding window `out * stride + k`. It
// lowers to torq_hl.conv2d without H: input_dims CW, weight_dims OCW,
// output_dims OW, stride and dilation [1, s]; its padding folds into the
// conv and reaches the program as pad [0, 0, left, right].
// RUN: sed '/^\/\/ --- padded/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s
// RUN: sed -n '/^\/\/ --- padded/,$p' %s | torq-opt - --pass-pipeline='builtin.module(torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS

// CHECK-LABEL: func.func @conv1d(
// CHECK: "torq_hl.conv2d"(%arg0, %arg1) {dilation = [1, 1], {{.*}}input_dims = "CW", macs = 6144 : i64, output_dims = "OW", stride = [1, 2], weight_dims = "OCW"} : (tensor<16x34xbf16>, tensor<8x16x3xbf16>) -> tensor<8x16xbf16>
func.func @conv1d(%x: tensor<16x34xf32>, %w: tensor<8x16x3xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d2, d1 * 2 + d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%x, %w : tensor<16x34xf32>, tensor<8x16x3xf32>) outs(%f : tensor<8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// --- padded
// NSS: "torq_nss.compute"() {spec = {attrs = [{{.*}}["input_dims", "CW"]{{.*}}["pad", [0, 0, 1, 1]]{{.*}}op = "conv2d"
func.func @padded_conv1d(%x: tensor<16x32xf32>, %w: tensor<8x16x3xf32>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[0, 1] high[0, 1] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<16x32xf32> to tensor<16x34xf32>
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d2, d1 * 2 + d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%p, %w : tensor<16x34xf32>, tensor<8x16x3xf32>) outs(%f : tensor<8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
