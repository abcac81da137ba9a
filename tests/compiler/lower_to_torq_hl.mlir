// torq-lower-to-torq-hl replaces each group with one torq_hl.<kind> op:
// operands = principal inputs then epilogue operands, layout attributes
// from the affine maps, the folded epilogue as JSON, and the MAC count.
// Afterwards no linalg op is left; dead empties/slices/constants are erased.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' | FileCheck %s

#in = affine_map<(o, y, x, c, i, j) -> (c, 2 * y + i, 2 * x + 2 * j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
#nin = affine_map<(n, y, x, o, i, j, c) -> (n, y + i, x + j, c)>
#nw = affine_map<(n, y, x, o, i, j, c) -> (i, j, c, o)>
#nout = affine_map<(n, y, x, o, i, j, c) -> (n, y, x, o)>
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Conv (CHW input, OCHW weight) with stride 2 and dilation (1, 2), read off
// the input map (c, 2y + i, 2x + 2j); + bias + ReLU folded as the epilogue:
// value 0 = conv result; step 1 = value 0 + operand 2 (the bias, running
// along output dim 0); step 2 = (value 1 > 0) ? value 1 : 0; result 2.
// MACs = 8*5*4 outputs * 4*3*3 = 5760.
// CHECK-LABEL: func.func @conv_strided_dilated_bias_relu(
// CHECK-NOT: linalg.
// CHECK: %[[R:.*]] = "torq_hl.conv2d"(%arg0, %arg1, %arg2)
// CHECK-SAME: dilation = [1, 2]
// CHECK-SAME: epilogue = {result = 2 : i64, steps = [{args = [{value = 0 : i64}, {axes = [0], operand = 2 : i64}], op = "add"}, {args = [{value = 1 : i64}, 0.000000e+00, {value = 1 : i64}, 0.000000e+00], op = "select_gt"}]}
// CHECK-SAME: input_dims = "CHW", macs = 5760 : i64, output_dims = "OHW", stride = [2, 2], weight_dims = "OCHW"}
// CHECK-SAME: : (tensor<4x11x11xbf16>, tensor<8x4x3x3xbf16>, tensor<8xbf16>) -> tensor<8x5x4xbf16>
// CHECK-NOT: linalg.
// CHECK: return %[[R]] : tensor<8x5x4xbf16>
func.func @conv_strided_dilated_bias_relu(%in: tensor<4x11x11xbf16>, %w: tensor<8x4x3x3xbf16>, %b: tensor<8xbf16>) -> tensor<8x5x4xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x5x4xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x5x4xbf16>) -> tensor<8x5x4xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<4x11x11xbf16>, tensor<8x4x3x3xbf16>) outs(%acc : tensor<8x5x4xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x5x4xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #ch, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %b : tensor<8x5x4xbf16>, tensor<8xbf16>) outs(%e : tensor<8x5x4xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %s = arith.addf %x, %y : bf16
    %p = arith.cmpf ugt, %s, %zero : bf16
    %q = arith.select %p, %s, %zero : bf16
    linalg.yield %q : bf16
  } -> tensor<8x5x4xbf16>
  return %r : tensor<8x5x4xbf16>
}

// Conv in NHWC with HWCF weights (TF layout): the dims strings follow the
// maps; no epilogue (empty steps, result = the conv value 0).
// MACs = 1*4*4*8 * 3*3*4 = 4608.
// CHECK-LABEL: func.func @conv_nhwc_hwcf(
// CHECK: "torq_hl.conv2d"(%arg0, %arg1)
// CHECK-SAME: dilation = [1, 1], epilogue = {result = 0 : i64, steps = []}, input_dims = "NHWC", macs = 4608 : i64, output_dims = "NHWO", stride = [1, 1], weight_dims = "HWCO"}
func.func @conv_nhwc_hwcf(%in: tensor<1x6x6x4xbf16>, %w: tensor<3x3x4x8xbf16>) -> tensor<1x4x4x8xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<1x4x4x8xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%e : tensor<1x4x4x8xbf16>) -> tensor<1x4x4x8xbf16>
  %c = linalg.generic {indexing_maps = [#nin, #nw, #nout], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<1x6x6x4xbf16>, tensor<3x3x4x8xbf16>) outs(%acc : tensor<1x4x4x8xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<1x4x4x8xbf16>
  return %c : tensor<1x4x4x8xbf16>
}

// Matmul with a transposed (N x K) rhs + per-column bias: lhs "MK", rhs
// "NK", out "MN"; the bias is operand 2 along output dim 1.
// MACs = 4*16 outputs * 8 = 512.
// CHECK-LABEL: func.func @matmul_nt_bias(
// CHECK: "torq_hl.matmul"(%arg0, %arg1, %arg2)
// CHECK-SAME: epilogue = {result = 1 : i64, steps = [{args = [{value = 0 : i64}, {axes = [1], operand = 2 : i64}], op = "add"}]}
// CHECK-SAME: lhs_dims = "MK", macs = 512 : i64, output_dims = "MN", rhs_dims = "NK"}
// CHECK-SAME: : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
func.func @matmul_nt_bias(%x: tensor<4x8xbf16>, %y: tensor<16x8xbf16>, %bias: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %mm = linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<16x8xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #col, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %bias : tensor<4x16xbf16>, tensor<16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// Standalone elementwise (x + row-broadcast y) * 0.5: torq_hl.elementwise
// with no principal value, so the first step is value 0: step 0 = operand 0
// (axes [0, 1]) + operand 1 (axes [0]); step 1 = value 0 * const 0.5;
// result 1; no MACs.
// CHECK-LABEL: func.func @add_scaled(
// CHECK: "torq_hl.elementwise"(%arg0, %arg1)
// CHECK-SAME: epilogue = {result = 1 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [0], operand = 1 : i64}], op = "add"}, {args = [{value = 0 : i64}, 5.000000e-01], op = "mul"}]}
// CHECK-SAME: macs = 0 : i64}
// CHECK-SAME: : (tensor<4x16xbf16>, tensor<4xbf16>) -> tensor<4x16xbf16>
func.func @add_scaled(%x: tensor<4x16xbf16>, %y: tensor<4xbf16>) -> tensor<4x16xbf16> {
  %half = arith.constant 0.5 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #row, #id2], iterator_types = ["parallel", "parallel"]} ins(%x, %y : tensor<4x16xbf16>, tensor<4xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    %t = arith.mulf %s, %half : bf16
    linalg.yield %t : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// A group inside a tile loop (the form torq-super-tiling leaves) is lowered
// in place: the matmul reads the loop's rhs slice, the now-dead slice of the
// empty accumulator is erased with the fill, and the result is inserted.
// CHECK-LABEL: func.func @tiled_matmul(
// CHECK-NOT: linalg.
// CHECK: scf.for %[[J:arg[0-9]+]] = %c0 to %c32 step %c16 iter_args(%[[ACC:arg[0-9]+]] =
// CHECK-NEXT: %[[S:.*]] = tensor.extract_slice %arg1[0, %[[J]]] [16, 16] [1, 1]
// CHECK-NEXT: %[[M:.*]] = "torq_hl.matmul"(%arg0, %[[S]]) {{.*}}lhs_dims = "MK", macs = 4096 : i64, output_dims = "MN", rhs_dims = "KN"} : (tensor<16x16xbf16>, tensor<16x16xbf16>) -> tensor<16x16xbf16>
// CHECK-NEXT: tensor.insert_slice %[[M]] into %[[ACC]][0, %[[J]]] [16, 16] [1, 1]
// CHECK-NEXT: scf.yield
// CHECK-NOT: linalg.
// CHECK: return
func.func @tiled_matmul(%x: tensor<16x16xbf16>, %y: tensor<16x32xbf16>) -> tensor<16x32xbf16> {
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<16x32xbf16>
  %r = scf.for %j = %c0 to %c32 step %c16 iter_args(%acc = %e) -> (tensor<16x32xbf16>) {
    %ys = tensor.extract_slice %y[0, %j] [16, 16] [1, 1] : tensor<16x32xbf16> to tensor<16x16xbf16>
    %es = tensor.extract_slice %e[0, %j] [16, 16] [1, 1] : tensor<16x32xbf16> to tensor<16x16xbf16>
    %f = linalg.fill ins(%z : bf16) outs(%es : tensor<16x16xbf16>) -> tensor<16x16xbf16>
    %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %ys : tensor<16x16xbf16>, tensor<16x16xbf16>) outs(%f : tensor<16x16xbf16>) {
    ^bb0(%p: bf16, %q: bf16, %o: bf16):
      %m = arith.mulf %p, %q : bf16
      %s = arith.addf %o, %m : bf16
      linalg.yield %s : bf16
    } -> tensor<16x16xbf16>
    %u = tensor.insert_slice %mm into %acc[0, %j] [16, 16] [1, 1] : tensor<16x16xbf16> into tensor<16x32xbf16>
    scf.yield %u : tensor<16x32xbf16>
  }
  return %r : tensor<16x32xbf16>
}
