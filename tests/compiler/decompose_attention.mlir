// torq-decompose-attention: iree_linalg_ext.attention (torch's
// scaled_dot_product_attention, as IREE presents it at dispatch creation)
// becomes S = Q Kᵀ (a batch-matmul generic over every loop but N: B = d0,
// M = d1, K1 = d3 (reduced), K2 = d4), S * scale (+ an additive mask), a
// linalg.softmax over the key dim of S (laid out B, M, K2) and P V (a
// batch-matmul generic over every loop but K1, reducing K2). Each accumulates
// into a zero fill; none reads its own output. After the dispatch
// normalisation (PRE_PASSES: the softmax becomes max, exp(x - max), sum and
// divide), every op is part of a Torq group: two matmuls (the scale and
// mask are the first one's epilogue; MACs 4 x 32 x 24 x 16 and 4 x 32 x 8 x
// 24), two reductions, two elementwise ops. A boolean (i1) mask, True =
// attend, is an i1 operand of the scores' epilogue: mask ? S * scale : -inf.
// The "unsupported" part is a one-line error naming the op and why.
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-decompose-attention)' | FileCheck %s
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-decompose-attention,func.func(iree-codegen-decompose-softmax{use-fusion=false}),linalg-generalize-named-ops,canonicalize,cse,torq-convert-dtypes,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-decompose-attention)' 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK-DAG: #[[Q:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-DAG: #[[K:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
// CHECK-DAG: #[[S:map[0-9]*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[ID:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[MASK:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @sdpa(
// CHECK-SAME: %[[QA:.*]]: tensor<4x32x16xf32>, %[[KA:.*]]: tensor<4x24x16xf32>, %[[VA:.*]]: tensor<4x24x8xf32>)
// CHECK: %[[SCALE:.*]] = arith.constant 2.500000e-01 : f32
// CHECK: %[[SF:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x32x24xf32>)
// CHECK: %[[QK:.*]] = linalg.generic {indexing_maps = [#[[Q]], #[[K]], #[[S]]], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%[[QA]], %[[KA]] : tensor<4x32x16xf32>, tensor<4x24x16xf32>) outs(%[[SF]] : tensor<4x32x24xf32>)
// CHECK:   arith.mulf
// CHECK:   arith.addf
// CHECK: %[[SC:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[QK]] : tensor<4x32x24xf32>)
// CHECK:   arith.mulf %{{.*}}, %[[SCALE]] : f32
// CHECK: %[[P:.*]] = linalg.softmax dimension(2) ins(%[[SC]] : tensor<4x32x24xf32>)
// CHECK: %[[OF:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x32x8xf32>)
// CHECK: %[[PV:.*]] = linalg.generic {indexing_maps = [#[[S]], #[[K]], #[[Q]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[P]], %[[VA]] : tensor<4x32x24xf32>, tensor<4x24x8xf32>) outs(%[[OF]] : tensor<4x32x8xf32>)
// CHECK: return %[[PV]]
// CHECK-NOT: iree_linalg_ext.attention

// HL-LABEL: func.func @sdpa(
// HL: %[[S:.*]] = "torq_hl.matmul"(%arg0, %arg1) {epilogue = {result = 1 : i64, steps = [{args = [{value = 0 : i64}, 2.500000e-01], op = "mul"}]}, lhs_dims = "BMK", macs = 49152 : i64, output_dims = "BMN", rhs_dims = "BNK"}
// HL: %[[MAX:.*]] = "torq_hl.reduce"(%[[S]]) {axes = [2], {{.*}}mode = "max"}
// HL: %[[EXP:.*]] = "torq_hl.elementwise"(%[[S]], %[[MAX]]) {{.*}}op = "exp"
// HL: %[[SUM:.*]] = "torq_hl.reduce"(%[[EXP]]) {axes = [2], {{.*}}mode = "sum"}
// HL: %[[P:.*]] = "torq_hl.elementwise"(%[[EXP]], %[[SUM]]) {{.*}}op = "div"
// HL: %[[O:.*]] = "torq_hl.matmul"(%[[P]], %arg2) {{.*}}lhs_dims = "BMK", macs = 24576 : i64, output_dims = "BMN", rhs_dims = "BKN"}
// HL: return %[[O]]
func.func @sdpa(%q: tensor<4x32x16xf32>, %k: tensor<4x24x16xf32>, %v: tensor<4x24x8xf32>) -> tensor<4x32x8xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<4x32x8xf32>
  %r = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]> ins(%q, %k, %v, %scale : tensor<4x32x16xf32>, tensor<4x24x16xf32>, tensor<4x24x8xf32>, f32) outs(%e : tensor<4x32x8xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<4x32x8xf32>
  return %r : tensor<4x32x8xf32>
}

// A mask shared by the heads (read along M, K2) is added after the scale.
// CHECK-LABEL: func.func @sdpa_masked(
// CHECK-SAME: %{{.*}}: tensor<2x8x16xf32>, %{{.*}}: tensor<2x8x16xf32>, %{{.*}}: tensor<2x8x16xf32>, %[[M:.*]]: tensor<8x8xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[MASK]], #[[ID]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%{{.*}}, %[[M]] : tensor<2x8x8xf32>, tensor<8x8xf32>)
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32, %[[Y:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT:   %[[XS:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK-NEXT:   %[[XM:.*]] = arith.addf %[[XS]], %[[Y]] : f32
// CHECK-NEXT:   linalg.yield %[[XM]]
// HL-LABEL: func.func @sdpa_masked(
// HL: "torq_hl.matmul"(%arg0, %arg1, %arg3) {{.*}}{axes = [1, 2], operand = 2 : i64}], op = "add"
func.func @sdpa_masked(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>, %m: tensor<8x8xf32>) -> tensor<2x8x16xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<2x8x16xf32>
  %r = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]> ins(%q, %k, %v, %scale, %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, f32, tensor<8x8xf32>) outs(%e : tensor<2x8x16xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<2x8x16xf32>
  return %r : tensor<2x8x16xf32>
}

// A boolean mask (True = attend, one per head) selects the scaled score or
// -inf; on the NPU it is an i1 operand of the Q Kᵀ matmul's epilogue, read
// by a select step (i1 > 0).
// CHECK-LABEL: func.func @sdpa_bool_mask(
// CHECK-SAME: %{{.*}}: tensor<2x8x16xf32>, %{{.*}}: tensor<2x8x16xf32>, %{{.*}}: tensor<2x8x16xf32>, %[[BM:.*]]: tensor<2x8x8xi1>)
// CHECK: %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%{{.*}}, %[[BM]] : tensor<2x8x8xf32>, tensor<2x8x8xi1>)
// CHECK-NEXT: ^bb0(%[[BX:.*]]: f32, %[[BY:.*]]: i1, %{{.*}}: f32):
// CHECK-NEXT:   %[[BXS:.*]] = arith.mulf %[[BX]], %{{.*}} : f32
// CHECK-NEXT:   %[[BXM:.*]] = arith.select %[[BY]], %[[BXS]], %[[NEG]] : f32
// CHECK-NEXT:   linalg.yield %[[BXM]]
// CHECK: linalg.softmax dimension(2)
// HL-LABEL: func.func @sdpa_bool_mask(
// The masked score is -inf, printed 0xFFF0000000000000.
// HL: "torq_hl.matmul"(%arg0, %arg1, %arg3) {epilogue = {result = 2 : i64, steps = [{args = [{value = 0 : i64}, 2.500000e-01], op = "mul"}, {args = [{axes = [0, 1, 2], operand = 2 : i64}, 0.000000e+00, {value = 1 : i64}, 0xFFF0000000000000 : f64], op = "select_gt"}]}{{.*}} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x8xi1>) -> tensor<2x8x8xbf16>
func.func @sdpa_bool_mask(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>, %m: tensor<2x8x8xi1>) -> tensor<2x8x16xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<2x8x16xf32>
  %r = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]> ins(%q, %k, %v, %scale, %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, f32, tensor<2x8x8xi1>) outs(%e : tensor<2x8x16xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<2x8x16xf32>
  return %r : tensor<2x8x16xf32>
}

// --- unsupported
// An integer mask that is not boolean is neither additive nor keep / drop.
// ERR: error: iree_linalg_ext.attention: attention with a tensor<2x8x8xi8> mask has no Torq lowering (only an additive mask of the result's element type or a boolean i1 mask)
func.func @sdpa_i8_mask(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>, %m: tensor<2x8x8xi8>) -> tensor<2x8x16xf32> {
  %scale = arith.constant 2.500000e-01 : f32
  %e = tensor.empty() : tensor<2x8x16xf32>
  %r = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]> ins(%q, %k, %v, %scale, %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, f32, tensor<2x8x8xi8>) outs(%e : tensor<2x8x16xf32>) {
  ^bb0(%s: f32):
    iree_linalg_ext.yield %s : f32
  } -> tensor<2x8x16xf32>
  return %r : tensor<2x8x16xf32>
}
