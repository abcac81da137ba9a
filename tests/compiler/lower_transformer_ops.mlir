// The transformer ops as IREE presents them at dispatch creation (after
// torq-convert-dtypes): GELU (erf and tanh forms), the scale of a layer norm
// (rsqrt), softmax (linalg.softmax, which the dispatch pipeline's
// normalisation decomposes into max / exp(x - max) / sum / divide), and
// attention batch matmuls whose operands are box reads of one q/k/v tensor
// (what dispatch extraction makes of a partial load) and whose result is
// transposed. Transcendental functions become table steps of the epilogue
// (exp, erf, tanh, rsqrt); x ** 3 (math.fpowi) becomes two multiplications.
// The "tiled" part runs the whole pipeline at a 1 KiB budget: the box read
// becomes a DMA box inside each tile. The "unsupported" part is a one-line
// error.
// RUN: sed '/^\/\/ --- tiled/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling)' | FileCheck %s --check-prefix=MARK
// RUN: sed '/^\/\/ --- tiled/,$d' %s | torq-opt - --pass-pipeline='builtin.module(func.func(iree-codegen-decompose-softmax{use-fusion=false}),linalg-generalize-named-ops,canonicalize,cse,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL
// RUN: sed -n '/^\/\/ --- tiled/,/^\/\/ --- unsupported/p' %s | torq-opt - --torq-hw=SL2610:lram_kb=1,reserved_kb=0 --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl,torq-assign-lram-addresses,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s --check-prefix=ERR

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
#col2 = affine_map<(d0, d1) -> (d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// torch GELU: x * 0.5 * (1 + erf(x / sqrt(2))). sqrt(2) in bf16 is
// 181/128 = 1.4140625. Values: 0 = x / 1.4140625, 1 = erf(0) (a table
// step), 2 = 1 + 1, 3 = 2 * 0.5, 4 = x * 3 (the result).
// MARK-LABEL: func.func @gelu_erf(
// MARK: "torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64
// HL-LABEL: func.func @gelu_erf(
// HL: "torq_hl.elementwise"(%arg0) {epilogue = {result = 4 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, 1.4140625], op = "div"}, {args = [{value = 0 : i64}], op = "erf"}, {args = [{value = 1 : i64}, 1.000000e+00], op = "add"}, {args = [{value = 2 : i64}, 5.000000e-01], op = "mul"}, {args = [{axes = [0, 1], operand = 0 : i64}, {value = 3 : i64}], op = "mul"}]}, macs = 0 : i64}
func.func @gelu_erf(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %sqrt2 = arith.constant 1.414060e+00 : bf16
  %one = arith.constant 1.000000e+00 : bf16
  %half = arith.constant 5.000000e-01 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    %0 = arith.divf %in, %sqrt2 : bf16
    %1 = math.erf %0 : bf16
    %2 = arith.addf %1, %one : bf16
    %3 = arith.mulf %2, %half : bf16
    %4 = arith.mulf %in, %3 : bf16
    linalg.yield %4 : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// torch GELU(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
// x^3))). x^3 is value 1 = (x * x) * x; 0.044715 in bf16 is 183/4096 =
// 0.044677734375, sqrt(2/pi) is 51/64 = 0.796875. Then 2 = 1 * 0.0446..,
// 3 = x + 2, 4 = 3 * 0.796875, 5 = tanh(4), 6 = 5 + 1, 7 = 6 * 0.5,
// 8 = x * 7 (the result).
// HL-LABEL: func.func @gelu_tanh(
// HL: "torq_hl.elementwise"(%arg0) {epilogue = {result = 8 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [0, 1], operand = 0 : i64}], op = "mul"}, {args = [{value = 0 : i64}, {axes = [0, 1], operand = 0 : i64}], op = "mul"}, {args = [{value = 1 : i64}, 0.044677734375], op = "mul"}, {args = [{axes = [0, 1], operand = 0 : i64}, {value = 2 : i64}], op = "add"}, {args = [{value = 3 : i64}, 7.968750e-01], op = "mul"}, {args = [{value = 4 : i64}], op = "tanh"}, {args = [{value = 5 : i64}, 1.000000e+00], op = "add"}, {args = [{value = 6 : i64}, 5.000000e-01], op = "mul"}, {args = [{axes = [0, 1], operand = 0 : i64}, {value = 7 : i64}], op = "mul"}]}
func.func @gelu_tanh(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %c3 = arith.constant 3 : i64
  %k = arith.constant 4.467770e-02 : bf16
  %s = arith.constant 7.968750e-01 : bf16
  %one = arith.constant 1.000000e+00 : bf16
  %half = arith.constant 5.000000e-01 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    %0 = math.fpowi %in, %c3 : bf16, i64
    %1 = arith.mulf %0, %k : bf16
    %2 = arith.addf %in, %1 : bf16
    %3 = arith.mulf %2, %s : bf16
    %4 = math.tanh %3 : bf16
    %5 = arith.addf %4, %one : bf16
    %6 = arith.mulf %5, %half : bf16
    %7 = arith.mulf %in, %6 : bf16
    linalg.yield %7 : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// The second layer-norm dispatch's elementwise op (x already centred, %ss
// the row sums of squares): 0 = ss / 32 (ss along dim 0), 1 = 0 + eps
// (1e-5 in bf16 is 1.0013580322265625e-05), 2 = rsqrt(1), 3 = x * 2,
// 4 = 3 * w (along dim 1), 5 = 4 + b (along dim 1).
// HL-LABEL: func.func @layer_norm_scale(
// HL: "torq_hl.elementwise"(%arg0, %arg1, %arg2, %arg3) {epilogue = {result = 5 : i64, steps = [{args = [{axes = [0], operand = 1 : i64}, 3.200000e+01], op = "div"}, {args = [{value = 0 : i64}, 1.0013580322265625E-5], op = "add"}, {args = [{value = 1 : i64}], op = "rsqrt"}, {args = [{axes = [0, 1], operand = 0 : i64}, {value = 2 : i64}], op = "mul"}, {args = [{value = 3 : i64}, {axes = [1], operand = 2 : i64}], op = "mul"}, {args = [{value = 4 : i64}, {axes = [1], operand = 3 : i64}], op = "add"}]}
func.func @layer_norm_scale(%x: tensor<8x32xbf16>, %ss: tensor<8xbf16>, %w: tensor<32xbf16>, %b: tensor<32xbf16>) -> tensor<8x32xbf16> {
  %n = arith.constant 3.200000e+01 : bf16
  %eps = arith.constant 1.001360e-05 : bf16
  %e = tensor.empty() : tensor<8x32xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #row2, #col2, #col2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x, %ss, %w, %b : tensor<8x32xbf16>, tensor<8xbf16>, tensor<32xbf16>, tensor<32xbf16>) outs(%e : tensor<8x32xbf16>) {
  ^bb0(%in: bf16, %v: bf16, %g: bf16, %h: bf16, %o: bf16):
    %0 = arith.divf %v, %n : bf16
    %1 = arith.addf %0, %eps : bf16
    %2 = math.rsqrt %1 : bf16
    %3 = arith.mulf %in, %2 : bf16
    %4 = arith.mulf %3, %g : bf16
    %5 = arith.addf %4, %h : bf16
    linalg.yield %5 : bf16
  } -> tensor<8x32xbf16>
  return %r : tensor<8x32xbf16>
}

// Softmax over dim 2 of 2x4x16: a max reduction (from IREE's NaN fill,
// the identity of maxnumf) over 128 elements, exp(x - max) with max along
// dims 0, 1, a sum reduction over 128 elements, and x / sum: four ops, each
// reading whole rows. (Marking sees linalg.softmax, which is no generic.)
// HL-LABEL: func.func @softmax(
// HL: %[[MAX:.*]] = "torq_hl.reduce"(%arg0) {axes = [2], epilogue = {result = 0 : i64, steps = []}, macs = 128 : i64, mode = "max"} : (tensor<2x4x16xbf16>) -> tensor<2x4xbf16>
// HL: %[[EXP:.*]] = "torq_hl.elementwise"(%arg0, %[[MAX]]) {epilogue = {result = 1 : i64, steps = [{args = [{axes = [0, 1, 2], operand = 0 : i64}, {axes = [0, 1], operand = 1 : i64}], op = "sub"}, {args = [{value = 0 : i64}], op = "exp"}]}
// HL: %[[SUM:.*]] = "torq_hl.reduce"(%[[EXP]]) {axes = [2], epilogue = {result = 0 : i64, steps = []}, macs = 128 : i64, mode = "sum"}
// HL: %[[DIV:.*]] = "torq_hl.elementwise"(%[[EXP]], %[[SUM]]) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1, 2], operand = 0 : i64}, {axes = [0, 1], operand = 1 : i64}], op = "div"}]}
// HL: return %[[DIV]]
func.func @softmax(%x: tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16> {
  %e = tensor.empty() : tensor<2x4x16xbf16>
  %r = linalg.softmax dimension(2) ins(%x : tensor<2x4x16xbf16>) outs(%e : tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16>
  return %r : tensor<2x4x16xbf16>
}

// Q Kᵀ / sqrt(4) on a 3x1x2x8x4 q/k/v tensor: q is the box at [0, 0] and k
// the box at [1, 0] (dims 0 and 1 dropped), each 2x8x4. The box reads
// compute nothing; they join the group of the matmul that reads them (so
// tiling fuses them into its loop), with the fill, the matmul (B = d0,
// M = d1, N = d2, K = d3; k read as B,N,K) and its division by 2. Lowered,
// the boxes are slices of %arg0 and the matmul has 2*8*8 outputs * K 4 =
// 512 MACs.
// MARK-LABEL: func.func @attention_qk(
// MARK: linalg.generic {indexing_maps = [#map{{[0-9]*}}, #map{{[0-9]*}}], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<3x1x2x8x4xbf16>) outs(%{{.*}} : tensor<2x8x4xbf16>) attrs = {"torq-fuse-group" = [[[G:[0-9]+]]]} {
// MARK: linalg.generic {indexing_maps = [#map{{[0-9]*}}, #map{{[0-9]*}}], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<3x1x2x8x4xbf16>) outs(%{{.*}} : tensor<2x8x4xbf16>) attrs = {"torq-fuse-group" = [[[G]]]} {
// MARK: linalg.fill {"torq-fuse-group" = [[[G]]]}
// MARK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [[[G]]], "torq-fuse-group-id" = [[G]] : i64}
// MARK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [[[G]]]}
// HL-LABEL: func.func @attention_qk(
// HL-DAG: %[[Q:.*]] = tensor.extract_slice %arg0[0, 0, 0, 0, 0] [1, 1, 2, 8, 4] [1, 1, 1, 1, 1] : tensor<3x1x2x8x4xbf16> to tensor<2x8x4xbf16>
// HL-DAG: %[[K:.*]] = tensor.extract_slice %arg0[1, 0, 0, 0, 0] [1, 1, 2, 8, 4] [1, 1, 1, 1, 1] : tensor<3x1x2x8x4xbf16> to tensor<2x8x4xbf16>
// HL: "torq_hl.matmul"(%[[Q]], %[[K]]) {epilogue = {result = 1 : i64, steps = [{args = [{value = 0 : i64}, 2.000000e+00], op = "div"}]}, lhs_dims = "BMK", macs = 512 : i64, output_dims = "BMN", rhs_dims = "BNK"} : (tensor<2x8x4xbf16>, tensor<2x8x4xbf16>) -> tensor<2x8x8xbf16>
#q = affine_map<(d0, d1, d2) -> (0, 0, d0, d1, d2)>
#k = affine_map<(d0, d1, d2) -> (1, 0, d0, d1, d2)>
#qk_a = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#qk_b = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#qk_c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @attention_qk(%qkv: tensor<3x1x2x8x4xbf16>) -> tensor<2x8x8xbf16> {
  %zero = arith.constant 0.0 : bf16
  %two = arith.constant 2.0 : bf16
  %eb = tensor.empty() : tensor<2x8x4xbf16>
  %qv = linalg.generic {indexing_maps = [#q, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%qkv : tensor<3x1x2x8x4xbf16>) outs(%eb : tensor<2x8x4xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<2x8x4xbf16>
  %kv = linalg.generic {indexing_maps = [#k, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%qkv : tensor<3x1x2x8x4xbf16>) outs(%eb : tensor<2x8x4xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<2x8x4xbf16>
  %es = tensor.empty() : tensor<2x8x8xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%es : tensor<2x8x8xbf16>) -> tensor<2x8x8xbf16>
  %m = linalg.generic {indexing_maps = [#qk_a, #qk_b, #qk_c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%qv, %kv : tensor<2x8x4xbf16>, tensor<2x8x4xbf16>) outs(%f : tensor<2x8x8xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %0 = arith.mulf %a, %b : bf16
    %1 = arith.addf %o, %0 : bf16
    linalg.yield %1 : bf16
  } -> tensor<2x8x8xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<2x8x8xbf16>) outs(%es : tensor<2x8x8xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    %0 = arith.divf %in, %two : bf16
    linalg.yield %0 : bf16
  } -> tensor<2x8x8xbf16>
  return %r : tensor<2x8x8xbf16>
}

// P V, then (B, M, N) -> (M, B, N): v is the box at [2, 0]; the transpose
// is folded into the matmul, which writes its result as M, B, N (no
// separate op); 2*8*4 outputs * K 8 = 512 MACs. Marked: the box read
// belongs to the group, the transpose is the group's bottom op.
// MARK-LABEL: func.func @attention_pv(
// MARK: ins(%arg0 : tensor<3x1x2x8x4xbf16>) outs(%{{.*}} : tensor<2x8x4xbf16>) attrs = {"torq-fuse-group" = [[[G:[0-9]+]]]} {
// MARK: "torq-fuse-group-id" = [[G]] : i64
// MARK: linalg.generic {{.*}} ins(%{{.*}} : tensor<2x8x4xbf16>) outs(%{{.*}} : tensor<8x2x4xbf16>) attrs = {"torq-fuse-group" = [[[G]]]}
// HL-LABEL: func.func @attention_pv(
// HL: %[[V:.*]] = tensor.extract_slice %arg0[2, 0, 0, 0, 0] [1, 1, 2, 8, 4] [1, 1, 1, 1, 1] : tensor<3x1x2x8x4xbf16> to tensor<2x8x4xbf16>
// HL: %[[R:.*]] = "torq_hl.matmul"(%arg1, %[[V]]) {epilogue = {result = 0 : i64, steps = []}, lhs_dims = "BMK", macs = 512 : i64, output_dims = "MBN", rhs_dims = "BKN"} : (tensor<2x8x8xbf16>, tensor<2x8x4xbf16>) -> tensor<8x2x4xbf16>
// HL-NOT: torq_hl
// HL: return %[[R]]
#box = affine_map<(d0, d1, d2) -> (2, 0, d0, d1, d2)>
#pv_a = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#pv_b = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#pv_c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#tr = affine_map<(d0, d1, d2) -> (d1, d0, d2)>
func.func @attention_pv(%qkv: tensor<3x1x2x8x4xbf16>, %p: tensor<2x8x8xbf16>) -> tensor<8x2x4xbf16> {
  %zero = arith.constant 0.0 : bf16
  %eb = tensor.empty() : tensor<2x8x4xbf16>
  %v = linalg.generic {indexing_maps = [#box, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%qkv : tensor<3x1x2x8x4xbf16>) outs(%eb : tensor<2x8x4xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<2x8x4xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%eb : tensor<2x8x4xbf16>) -> tensor<2x8x4xbf16>
  %m = linalg.generic {indexing_maps = [#pv_a, #pv_b, #pv_c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<2x8x8xbf16>, tensor<2x8x4xbf16>) outs(%f : tensor<2x8x4xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %0 = arith.mulf %a, %b : bf16
    %1 = arith.addf %o, %0 : bf16
    linalg.yield %1 : bf16
  } -> tensor<2x8x4xbf16>
  %et = tensor.empty() : tensor<8x2x4xbf16>
  %t = linalg.generic {indexing_maps = [#id3, #tr], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<2x8x4xbf16>) outs(%et : tensor<8x2x4xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<8x2x4xbf16>
  return %t : tensor<8x2x4xbf16>
}

// --- tiled
// P V with v the box at [2, 0] of a 3x1x4x8x8 tensor, 4 heads of 8x8: p, v
// and the result are 512 bytes each, 1536 > the 1024-byte budget, so the
// group is tiled (over heads or rows, as super tiling chooses). Whatever the
// tiles, every DMA-in of the q/k/v tensor (tensor 0) reads inside the v box:
// offset 2 in dim 0, 0 in dim 1, sizes 1 and 1 there (dims 0, 1 dropped).
// NSS-LABEL: func.func @attention_pv_tiled(
// NSS-NOT: offsets = [{{[013-9]}}{{.*}}tensor = 0 : i64}
// NSS: torq_nss.dma_in{{.*}}offsets = [2, 0, {{[0-9]+}}, {{[0-9]+}}, 0], sizes = [1, 1, {{[0-9]+}}, {{[0-9]+}}, 8], tensor = 0 : i64}
// NSS: torq_nss.compute{{.*}}op = "matmul"
// NSS: torq_nss.dma_in{{.*}}offsets = [2, 0, {{[0-9]+}}, {{[0-9]+}}, 0], sizes = [1, 1, {{[0-9]+}}, {{[0-9]+}}, 8], tensor = 0 : i64}
// NSS-NOT: offsets = [{{[013-9]}}{{.*}}tensor = 0 : i64}
// NSS: return
#tbox = affine_map<(d0, d1, d2) -> (2, 0, d0, d1, d2)>
#tid3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ta = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#tb = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#tc = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#ttr = affine_map<(d0, d1, d2) -> (d1, d0, d2)>
func.func @attention_pv_tiled(%qkv: tensor<3x1x4x8x8xbf16>, %p: tensor<4x8x8xbf16>) -> tensor<8x4x8xbf16> {
  %zero = arith.constant 0.0 : bf16
  %eb = tensor.empty() : tensor<4x8x8xbf16>
  %v = linalg.generic {indexing_maps = [#tbox, #tid3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%qkv : tensor<3x1x4x8x8xbf16>) outs(%eb : tensor<4x8x8xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<4x8x8xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%eb : tensor<4x8x8xbf16>) -> tensor<4x8x8xbf16>
  %m = linalg.generic {indexing_maps = [#ta, #tb, #tc], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<4x8x8xbf16>, tensor<4x8x8xbf16>) outs(%f : tensor<4x8x8xbf16>) {
  ^bb0(%a: bf16, %b: bf16, %o: bf16):
    %0 = arith.mulf %a, %b : bf16
    %1 = arith.addf %o, %0 : bf16
    linalg.yield %1 : bf16
  } -> tensor<4x8x8xbf16>
  %et = tensor.empty() : tensor<8x4x8xbf16>
  %t = linalg.generic {indexing_maps = [#tid3, #ttr], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<4x8x8xbf16>) outs(%et : tensor<8x4x8xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    linalg.yield %in : bf16
  } -> tensor<8x4x8xbf16>
  return %t : tensor<8x4x8xbf16>
}

// --- unsupported
// x ** 9: more than 8 multiplications is left to the host.
// ERR: torq-opt: error: powi.py:4:3: error: linalg.generic: math.fpowi in linalg.generic body needs a constant nonzero integral exponent of magnitude at most 8
#uid2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @powi9(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %c9 = arith.constant 9 : i64
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#uid2, #uid2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%in: bf16, %o: bf16):
    %0 = math.fpowi %in, %c9 : bf16, i64
    linalg.yield %0 : bf16
  } -> tensor<4x16xbf16> loc("powi.py":4:3)
  return %r : tensor<4x16xbf16>
}
