// A strided load of a dispatch input folds into the convolution reading it.
// The input feeds a 3x3 stride-2 convolution and a 1x1 stride-2 one, so IREE
// gives the 1x1 convolution's dispatch a strided load x[:, ::2, ::2] of the
// 8x16x16 input and a stride-1 1x1 convolution of the 8x8x8 box. Dispatch
// extraction composes the box map (c, y, x) -> (c, 2y, 2x) into the
// convolution's input map (d3, d1, d2): the convolution reads the whole
// input at (d3, 2 d1, 2 d2), a 1x1 conv2d with stride 2. Without the fold
// the dispatch stayed on the host ("dispatch loads a strided or dynamic part
// of an input").
// RUN: torq-compile %s --compile-to=torq-hl --torq-print-ir-after-all 2>&1 | FileCheck %s --check-prefix=FOLD
// RUN: torq-compile %s --compile-to=torq-hl 2>&1 | FileCheck %s --check-prefix=HL

// FOLD-LABEL: IR Dump After torq-convert-dtypes
// FOLD-DAG: #[[IN:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d3, d1 * 2, d2 * 2)>
// FOLD-DAG: #[[W:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// FOLD-LABEL: func.func @main_dispatch_0(%arg0: tensor<8x16x16xbf16>, %arg1: tensor<16x8xbf16>)
// FOLD-NOT: tensor.extract_slice
// FOLD: linalg.generic {indexing_maps = [#[[IN]], #[[W]], {{.*}}]{{.*}} ins(%arg0, %arg1 : tensor<8x16x16xbf16>, tensor<16x8xbf16>)

// HL-NOT: stays on host
// HL-LABEL: func.func @main_dispatch_0(
// HL-NOT: linalg.
// HL: "torq_hl.conv2d"({{.*}}) {dilation = [1, 1], {{.*}}input_dims = "CHW", {{.*}}output_dims = "OHW", stride = [2, 2]{{.*}}weight_dims = "OC"}
// HL-LABEL: func.func @main_dispatch_1(
// HL: "torq_hl.conv2d"({{.*}}stride = [2, 2]
// HL-NOT: stays on host
func.func @main(%x: tensor<1x8x16x16xf32>, %w3: tensor<16x8x3x3xf32>, %w1: tensor<16x8x1x1xf32>) -> tensor<1x16x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x8x8xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %zero : f32
  } : tensor<1x8x16x16xf32> to tensor<1x8x18x18xf32>
  %wide = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%padded, %w3 : tensor<1x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%acc : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %down = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%x, %w1 : tensor<1x8x16x16xf32>, tensor<16x8x1x1xf32>) outs(%acc : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %sum = arith.addf %wide, %down : tensor<1x16x8x8xf32>
  return %sum : tensor<1x16x8x8xf32>
}
