// Depthwise / grouped / 1x1 convolutions, pooling and reductions, as IREE
// presents them at dispatch creation (after torq-convert-dtypes): marking
// tags each group, lowering replaces it with one torq_hl op (or two: a
// reduction's elementwise prologue; a gathering reduction's constant result).
// The last function (after the "unsupported" marker) is an average pooling
// with a position-dependent divisor: marking leaves it alone, lowering it is
// a one-line error.
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling)' | FileCheck %s --check-prefix=MARK
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling)' | FileCheck %s --check-prefix=UNSUP
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s --check-prefix=ERR

#dw_in = affine_map<(d0, d1, d2, d3, d4) -> (d2, d0 * 2 + d3, d1 * 2 + d4)>
#dw_w = affine_map<(d0, d1, d2, d3, d4) -> (d2, d3, d4)>
#dw_out = affine_map<(d0, d1, d2, d3, d4) -> (d2, d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch3 = affine_map<(d0, d1, d2) -> (d0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// torch Conv2d(8, 8, 3, stride=2, groups=8) + bias + ReLU6: the channel d2
// is read by input, weight and output, so this is a depthwise conv; the
// spatial pairs give stride [2, 2]. Epilogue: value 1 = value 0 + bias
// (operand 2 along output dim 0), value 2 = max(value 1, 0), value 3 =
// min(6, value 2). MACs = 8*5*5 outputs * 3*3 = 1800.
// MARK-LABEL: func.func @depthwise_s2_bias_relu6(
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0]}
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64}
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [0]}
// HL-LABEL: func.func @depthwise_s2_bias_relu6(
// HL-NOT: linalg.
// HL: "torq_hl.depthwise_conv2d"(%arg0, %arg1, %arg2)
// HL-SAME: dilation = [1, 1]
// HL-SAME: epilogue = {result = 3 : i64, steps = [{args = [{value = 0 : i64}, {axes = [0], operand = 2 : i64}], op = "add"}, {args = [{{.*}}], op = "select_gt"}, {args = [{{.*}}], op = "select_lt"}]}
// HL-SAME: input_dims = "CHW", macs = 1800 : i64, output_dims = "CHW", stride = [2, 2], weight_dims = "CHW"}
// HL-SAME: : (tensor<8x11x11xbf16>, tensor<8x3x3xbf16>, tensor<8xbf16>) -> tensor<8x5x5xbf16>
// HL-NOT: linalg.
// HL: return
func.func @depthwise_s2_bias_relu6(%x: tensor<8x11x11xbf16>, %w: tensor<8x3x3xbf16>, %b: tensor<8xbf16>) -> tensor<8x5x5xbf16> {
  %zero = arith.constant 0.0 : bf16
  %six = arith.constant 6.0 : bf16
  %e = tensor.empty() : tensor<8x5x5xbf16>
  %f = linalg.generic {indexing_maps = [#sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%zero : bf16) outs(%e : tensor<8x5x5xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<8x5x5xbf16>
  %c = linalg.generic {indexing_maps = [#dw_in, #dw_w, #dw_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %w : tensor<8x11x11xbf16>, tensor<8x3x3xbf16>) outs(%f : tensor<8x5x5xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x5x5xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #ch3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %b : tensor<8x5x5xbf16>, tensor<8xbf16>) outs(%e : tensor<8x5x5xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    %gt = arith.cmpf ogt, %s, %zero : bf16
    %lo = arith.select %gt, %s, %zero : bf16
    %lt = arith.cmpf olt, %six, %lo : bf16
    %hi = arith.select %lt, %six, %lo : bf16
    linalg.yield %hi : bf16
  } -> tensor<8x5x5xbf16>
  return %r : tensor<8x5x5xbf16>
}

// TOSA int8 depthwise_conv2d (NHWC, batch folded): i8 x i8 accumulated in
// i32 from a zero fill, no epilogue. Dims strings follow the maps (HWC);
// MACs = 4*4*16 * 9 = 2304.
// HL-LABEL: func.func @depthwise_int8_hwc(
// HL: "torq_hl.depthwise_conv2d"(%arg0, %arg1)
// HL-SAME: epilogue = {result = 0 : i64, steps = []}, input_dims = "HWC", macs = 2304 : i64, output_dims = "HWC", stride = [1, 1], weight_dims = "HWC"}
// HL-SAME: : (tensor<6x6x16xi8>, tensor<3x3x16xi8>) -> tensor<4x4x16xi32>
#q_in = affine_map<(d0, d1, d2, d3, d4) -> (d0 + d3, d1 + d4, d2)>
#q_w = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4, d2)>
#q_out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
func.func @depthwise_int8_hwc(%x: tensor<6x6x16xi8>, %w: tensor<3x3x16xi8>) -> tensor<4x4x16xi32> {
  %zero = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x4x16xi32>
  %f = linalg.fill ins(%zero : i32) outs(%e : tensor<4x4x16xi32>) -> tensor<4x4x16xi32>
  %c = linalg.generic {indexing_maps = [#q_in, #q_w, #q_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %w : tensor<6x6x16xi8>, tensor<3x3x16xi8>) outs(%f : tensor<4x4x16xi32>) {
  ^bb0(%p: i8, %q: i8, %o: i32):
    %pe = arith.extsi %p : i8 to i32
    %qe = arith.extsi %q : i8 to i32
    %m = arith.muli %pe, %qe : i32
    %s = arith.addi %o, %m : i32
    linalg.yield %s : i32
  } -> tensor<4x4x16xi32>
  return %c : tensor<4x4x16xi32>
}

// torch Conv2d(8, 16, 3, groups=4) with bias: IREE splits channels into
// (group d0, per-group input channel d4, per-group output d1) and starts the
// accumulator from the bias broadcast. A grouped conv2d (G letters); the
// broadcast becomes the epilogue add of operand 2 along output dims [0, 1],
// and is part of the group. MACs = 4*4*6*6 outputs * 2*3*3 = 10368.
// MARK-LABEL: func.func @grouped_bias_in_accumulator(
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [2]}
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64}
// HL-LABEL: func.func @grouped_bias_in_accumulator(
// HL: "torq_hl.conv2d"(%arg0, %arg1, %arg2)
// HL-SAME: epilogue = {result = 1 : i64, steps = [{args = [{value = 0 : i64}, {axes = [0, 1], operand = 2 : i64}], op = "add"}]}
// HL-SAME: input_dims = "GCHW", macs = 10368 : i64, output_dims = "GOHW", stride = [1, 1], weight_dims = "GOCHW"}
// HL-SAME: : (tensor<4x2x8x8xbf16>, tensor<4x4x2x3x3xbf16>, tensor<4x4xbf16>) -> tensor<4x4x6x6xbf16>
#g_b = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#g_in = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>
#g_w = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d4, d5, d6)>
#g_out = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>
func.func @grouped_bias_in_accumulator(%x: tensor<4x2x8x8xbf16>, %w: tensor<4x4x2x3x3xbf16>, %b: tensor<4x4xbf16>) -> tensor<4x4x6x6xbf16> {
  %e = tensor.empty() : tensor<4x4x6x6xbf16>
  %init = linalg.generic {indexing_maps = [#g_b, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%b : tensor<4x4xbf16>) outs(%e : tensor<4x4x6x6xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<4x4x6x6xbf16>
  %c = linalg.generic {indexing_maps = [#g_in, #g_w, #g_out], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%x, %w : tensor<4x2x8x8xbf16>, tensor<4x4x2x3x3xbf16>) outs(%init : tensor<4x4x6x6xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x4x6x6xbf16>
  return %c : tensor<4x4x6x6xbf16>
}

// A 1x1 conv over C x H x W with an O x C weight is no matmul (two M-like
// dims): conv2d with a weight without kernel dims. MACs = 8*4*5 * 16 = 2560.
// HL-LABEL: func.func @pointwise_chw(
// HL: "torq_hl.conv2d"(%arg0, %arg1)
// HL-SAME: input_dims = "CHW", macs = 2560 : i64, output_dims = "OHW", stride = [1, 1], weight_dims = "OC"}
#p_in = affine_map<(d0, d1, d2, d3) -> (d3, d1, d2)>
#p_w = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#p_out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @pointwise_chw(%x: tensor<16x4x5xbf16>, %w: tensor<8x16xbf16>) -> tensor<8x4x5xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x4x5xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x4x5xbf16>) -> tensor<8x4x5xbf16>
  %c = linalg.generic {indexing_maps = [#p_in, #p_w, #p_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %w : tensor<16x4x5xbf16>, tensor<8x16xbf16>) outs(%f : tensor<8x4x5xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x4x5xbf16>
  return %c : tensor<8x4x5xbf16>
}

// MaxPool2d(3, 2) on a -inf padded input: window operand (a shape-only
// 3x3 empty), -inf fill (part of the group), body max(out, in).
// Count = 8*4*4 outputs * 9 window elements = 1152.
// MARK-LABEL: func.func @maxpool_3x3_s2(
// MARK: linalg.fill {{.*}}"torq-fuse-group" = [4]}
// MARK: linalg.generic {{.*}}"torq-fuse-group" = [4], "torq-fuse-group-id" = 4 : i64}
// HL-LABEL: func.func @maxpool_3x3_s2(
// HL-NOT: linalg.
// HL: "torq_hl.maxpool2d"(%arg0)
// HL-SAME: dilation = [1, 1], epilogue = {result = 0 : i64, steps = []}, input_dims = "CHW", kernel = [3, 3], macs = 1152 : i64, output_dims = "CHW", stride = [2, 2]}
// HL-SAME: : (tensor<8x10x10xbf16>) -> tensor<8x4x4xbf16>
#pool_in = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 * 2 + d3, d2 * 2 + d4)>
#pool_win = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>
#pool_out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
func.func @maxpool_3x3_s2(%x: tensor<8x10x10xbf16>) -> tensor<8x4x4xbf16> {
  %ninf = arith.constant 0xFF80 : bf16
  %e = tensor.empty() : tensor<8x4x4xbf16>
  %win = tensor.empty() : tensor<3x3xbf16>
  %f = linalg.fill ins(%ninf : bf16) outs(%e : tensor<8x4x4xbf16>) -> tensor<8x4x4xbf16>
  %r = linalg.generic {indexing_maps = [#pool_in, #pool_win, #pool_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %win : tensor<8x10x10xbf16>, tensor<3x3xbf16>) outs(%f : tensor<8x4x4xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.maximumf %o, %p : bf16
    linalg.yield %m : bf16
  } -> tensor<8x4x4xbf16>
  return %r : tensor<8x4x4xbf16>
}

// AvgPool2d(3, 2): a window sum then a division by 9 (the window size).
// The division is folded into avg_pool2d: no epilogue step is left.
// HL-LABEL: func.func @avgpool_3x3_s2(
// HL-NOT: linalg.
// HL: "torq_hl.avg_pool2d"(%arg0)
// HL-SAME: epilogue = {result = 0 : i64, steps = []}, input_dims = "CHW", kernel = [3, 3], macs = 1152 : i64, output_dims = "CHW", stride = [2, 2]}
// HL-NOT: linalg.
func.func @avgpool_3x3_s2(%x: tensor<8x10x10xbf16>) -> tensor<8x4x4xbf16> {
  %zero = arith.constant 0.0 : bf16
  %nine = arith.constant 9.0 : bf16
  %e = tensor.empty() : tensor<8x4x4xbf16>
  %win = tensor.empty() : tensor<3x3xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x4x4xbf16>) -> tensor<8x4x4xbf16>
  %s = linalg.generic {indexing_maps = [#pool_in, #pool_win, #pool_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %win : tensor<8x10x10xbf16>, tensor<3x3xbf16>) outs(%f : tensor<8x4x4xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %a = arith.addf %o, %p : bf16
    linalg.yield %a : bf16
  } -> tensor<8x4x4xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<8x4x4xbf16>) outs(%e : tensor<8x4x4xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %d = arith.divf %p, %nine : bf16
    linalg.yield %d : bf16
  } -> tensor<8x4x4xbf16>
  return %r : tensor<8x4x4xbf16>
}

// x.mean((2, 3)) after IREE collapses H x W: a sum over dim 1 divided by
// 256 is reduce mode "mean"; count = 16*256 input elements = 4096.
// HL-LABEL: func.func @mean_hw(
// HL: "torq_hl.reduce"(%arg0)
// HL-SAME: axes = [1], epilogue = {result = 0 : i64, steps = []}, macs = 4096 : i64, mode = "mean"}
// HL-SAME: : (tensor<16x256xbf16>) -> tensor<16xbf16>
#r_in = affine_map<(d0, d1) -> (d0, d1)>
#r_out = affine_map<(d0, d1) -> (d0)>
#id1 = affine_map<(d0) -> (d0)>
func.func @mean_hw(%x: tensor<16x256xbf16>) -> tensor<16xbf16> {
  %zero = arith.constant 0.0 : bf16
  %n = arith.constant 256.0 : bf16
  %e = tensor.empty() : tensor<16xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<16xbf16>) -> tensor<16xbf16>
  %s = linalg.generic {indexing_maps = [#r_in, #r_out], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<16x256xbf16>) outs(%f : tensor<16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %a = arith.addf %p, %o : bf16
    linalg.yield %a : bf16
  } -> tensor<16xbf16>
  %r = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%s : tensor<16xbf16>) outs(%e : tensor<16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %d = arith.divf %p, %n : bf16
    linalg.yield %d : bf16
  } -> tensor<16xbf16>
  return %r : tensor<16xbf16>
}

// relu(x + y * s).mean((2, 3)) as IREE fuses it: the reduction body first
// computes, elementwise, what it accumulates. Lowered to a torq_hl.elementwise
// over all loops (16 x 64, operands along their loop dims) feeding the
// reduce: value 0 = operand 1 * operand 2, value 1 = operand 0 + value 0,
// value 2 = max(value 1, 0).
// HL-LABEL: func.func @mean_with_prologue(
// HL: %[[P:.*]] = "torq_hl.elementwise"(%arg0, %arg1, %arg2)
// HL-SAME: epilogue = {result = 2 : i64, steps = [{args = [{axes = [0, 1], operand = 1 : i64}, {axes = [0], operand = 2 : i64}], op = "mul"}, {args = [{{.*}}], op = "add"}, {args = [{{.*}}], op = "select_gt"}]}
// HL-SAME: : (tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16xbf16>) -> tensor<16x64xbf16>
// HL-NEXT: "torq_hl.reduce"(%[[P]])
// HL-SAME: axes = [1], {{.*}}macs = 1024 : i64, mode = "mean"}
func.func @mean_with_prologue(%x: tensor<16x64xbf16>, %y: tensor<16x64xbf16>, %sc: tensor<16xbf16>) -> tensor<16xbf16> {
  %zero = arith.constant 0.0 : bf16
  %n = arith.constant 64.0 : bf16
  %e = tensor.empty() : tensor<16xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<16xbf16>) -> tensor<16xbf16>
  %s = linalg.generic {indexing_maps = [#r_in, #r_in, #r_out, #r_out], iterator_types = ["parallel", "reduction"]} ins(%x, %y, %sc : tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16xbf16>) outs(%f : tensor<16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %c: bf16, %o: bf16):
    %m = arith.mulf %q, %c : bf16
    %a = arith.addf %p, %m : bf16
    %gt = arith.cmpf ugt, %a, %zero : bf16
    %relu = arith.select %gt, %a, %zero : bf16
    %acc = arith.addf %relu, %o : bf16
    linalg.yield %acc : bf16
  } -> tensor<16xbf16>
  %r = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%s : tensor<16xbf16>) outs(%e : tensor<16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %d = arith.divf %p, %n : bf16
    linalg.yield %d : bf16
  } -> tensor<16xbf16>
  return %r : tensor<16xbf16>
}

// EfficientFormer's head, LayerNorm(C)(x).mean(tokens) as IREE fuses it: each
// element times its token's 1/std (%w, read along the reduced dim alone) and
// its channel's scale. The prologue is materialised over all loops (64 x 16
// here, the size of %x, which is read along every loop): value 0 = operand
// 0 * operand 1 (axes [1]: the token), value 1 = value 0 * operand 2.
// HL-LABEL: func.func @mean_with_token_weight(
// HL: %[[P:.*]] = "torq_hl.elementwise"(%arg0, %arg1, %arg2)
// HL-SAME: epilogue = {result = 1 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [1], operand = 1 : i64}], op = "mul"}, {args = [{{.*}}], op = "mul"}]}
// HL-NEXT: "torq_hl.reduce"(%[[P]])
// HL-SAME: axes = [1], {{.*}}mode = "sum"}
#t_w = affine_map<(d0, d1) -> (d1)>
func.func @mean_with_token_weight(%x: tensor<64x16xbf16>, %w: tensor<16xbf16>, %sc: tensor<64xbf16>) -> tensor<64xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<64xbf16>) -> tensor<64xbf16>
  %s = linalg.generic {indexing_maps = [#r_in, #t_w, #r_out, #r_out], iterator_types = ["parallel", "reduction"]} ins(%x, %w, %sc : tensor<64x16xbf16>, tensor<16xbf16>, tensor<64xbf16>) outs(%f : tensor<64xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %c: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %ms = arith.mulf %m, %c : bf16
    %acc = arith.addf %ms, %o : bf16
    linalg.yield %acc : bf16
  } -> tensor<64xbf16>
  return %s : tensor<64xbf16>
}

// torch AdaptiveAvgPool2d(1) on 8x7x7 as torch-mlir lowers it: the input is
// padded to 8x8x8, the body gathers x[c, k / 7, k % 7] with always-true
// masks and sums; a second result yields the pool size 49. Lowered to a
// reduce (sum: the division is another dispatch) of the 8x7x7 box, read
// through an extract_slice, and an operand-less elementwise yielding 49.
// Count = 8*49 = 392 elements.
// HL-LABEL: func.func @adaptive_avg_pool(
// HL: %[[BOX:.*]] = tensor.extract_slice %arg0[0, 0, 0] [8, 7, 7] [1, 1, 1]
// HL: %[[S:.*]] = "torq_hl.reduce"(%[[BOX]])
// HL-SAME: axes = [1, 2], {{.*}}macs = 392 : i64, mode = "sum"}
// HL-SAME: : (tensor<8x7x7xbf16>) -> tensor<8xbf16>
// HL: %[[N:.*]] = "torq_hl.elementwise"()
// HL-SAME: epilogue = {result = 0 : i64, steps = [{args = [4.900000e+01, 0.000000e+00], op = "add"}]}
// HL-SAME: : () -> tensor<bf16>
// HL-NOT: linalg.
// HL: return %[[S]], %[[N]]
#a_sc = affine_map<(d0) -> ()>
#a_dummy = affine_map<(d0, d1) -> (d1)>
#a_out = affine_map<(d0, d1) -> (d0)>
#a_cnt = affine_map<(d0, d1) -> ()>
func.func @adaptive_avg_pool(%x: tensor<8x8x8xbf16>) -> (tensor<8xbf16>, tensor<bf16>) {
  %n = arith.constant 49.0 : bf16
  %zero = arith.constant 0.0 : bf16
  %c7 = arith.constant 7 : index
  %ec = tensor.empty() : tensor<bf16>
  %e = tensor.empty() : tensor<8xbf16>
  %f = linalg.generic {indexing_maps = [#a_sc, #id1], iterator_types = ["parallel"]} ins(%zero : bf16) outs(%e : tensor<8xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<8xbf16>
  %dummy = tensor.empty() : tensor<49xi1>
  %r:2 = linalg.generic {indexing_maps = [#a_dummy, #a_out, #a_cnt], iterator_types = ["parallel", "reduction"]} ins(%dummy : tensor<49xi1>) outs(%f, %ec : tensor<8xbf16>, tensor<bf16>) {
  ^bb0(%in: i1, %o: bf16, %o2: bf16):
    %i = linalg.index 0 : index
    %k = linalg.index 1 : index
    %col = arith.remsi %k, %c7 : index
    %row = arith.divsi %k, %c7 : index
    %v = tensor.extract %x[%i, %row, %col] : tensor<8x8x8xbf16>
    %in_r = arith.cmpi ult, %row, %c7 : index
    %m1 = arith.select %in_r, %v, %zero : bf16
    %in_c = arith.cmpi ult, %col, %c7 : index
    %m2 = arith.select %in_c, %m1, %zero : bf16
    %a = arith.addf %m2, %o : bf16
    linalg.yield %a, %n : bf16, bf16
  } -> (tensor<8xbf16>, tensor<bf16>)
  return %r#0, %r#1 : tensor<8xbf16>, tensor<bf16>
}

// --- unsupported
// A divisor computed from the output position (linalg.index) in the window
// sum's consumer, as IREE leaves AvgPool2d(count_include_pad=False) before
// torq-fold-index-constants makes it a constant input (see
// fold_index_constants_cases.mlir): the window sum alone is an avg_pool2d
// group (its epilogue multiplies the mean back by the window size), the
// consumer is no epilogue of it, and lowering refuses the consumer, naming
// the index.
// UNSUP-LABEL: func.func @avgpool_position_dependent_divisor(
// UNSUP: linalg.fill {"torq-fuse-group" = {{\[}}[[G:[0-9]+]]]}
// UNSUP: linalg.generic {{.*}}"torq-fuse-group-id" = [[G]]
// UNSUP: linalg.generic
// UNSUP-NOT: torq-fuse-group
// UNSUP: return
// ERR: torq-opt: error: {{.*}}: error: linalg.generic: 'linalg.index' in an elementwise body has no Torq lowering
#u_in = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 + d4)>
#u_win = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>
#u_out = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#u_id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @avgpool_position_dependent_divisor(%x: tensor<4x6x6xbf16>) -> tensor<4x5x5xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x5x5xbf16>
  %win = tensor.empty() : tensor<2x2xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<4x5x5xbf16>) -> tensor<4x5x5xbf16>
  %s = linalg.generic {indexing_maps = [#u_in, #u_win, #u_out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %win : tensor<4x6x6xbf16>, tensor<2x2xbf16>) outs(%f : tensor<4x5x5xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %a = arith.addf %o, %p : bf16
    linalg.yield %a : bf16
  } -> tensor<4x5x5xbf16> loc("pool.py":3:7)
  %r = linalg.generic {indexing_maps = [#u_id, #u_id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x5x5xbf16>) outs(%e : tensor<4x5x5xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %y = linalg.index 1 : index
    %yi = arith.index_cast %y : index to i64
    %yf = arith.sitofp %yi : i64 to bf16
    %d = arith.divf %p, %yf : bf16
    linalg.yield %d : bf16
  } -> tensor<4x5x5xbf16>
  return %r : tensor<4x5x5xbf16>
}
