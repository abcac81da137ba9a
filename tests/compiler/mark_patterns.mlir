// torq-mark-patterns-for-super-tiling tags the ops of each Torq pattern and
// rewrites nothing: the principal op gets a fresh UID in torq-fuse-group-id,
// and every op of the group (output back to inputs) gets the UID appended to
// torq-fuse-group. UIDs count up over the whole module in walk order, so the
// functions below get groups 0, 1, 2, ... in source order.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-mark-patterns-for-super-tiling)' | FileCheck %s

#in = affine_map<(o, y, x, c, i, j) -> (c, y + i, x + j)>
#w = affine_map<(o, y, x, c, i, j) -> (o, c, i, j)>
#out = affine_map<(o, y, x, c, i, j) -> (o, y, x)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#ch = affine_map<(d0, d1, d2) -> (d0)>
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// Conv + bias + ReLU: one group (UID 0) of the zero fill, the conv (the
// principal, carrying the id) and the epilogue generic. The constant and the
// tensor.empty are not part of the group.
// CHECK-LABEL: func.func @conv_bias_relu(
// CHECK-NOT: torq-fuse
// CHECK: linalg.fill
// CHECK-SAME: {"torq-fuse-group" = [0]} ins
// CHECK-NOT: torq-fuse
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]
// CHECK-SAME: attrs = {"torq-fuse-group" = [0], "torq-fuse-group-id" = 0 : i64} {
// CHECK: arith.mulf
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [0]} {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.addf
// CHECK-NEXT: arith.cmpf ugt
// CHECK-NEXT: arith.select
// CHECK: return
func.func @conv_bias_relu(%in: tensor<4x10x10xbf16>, %w: tensor<8x4x3x3xbf16>, %b: tensor<8xbf16>) -> tensor<8x8x8xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<8x8x8xbf16>
  %acc = linalg.fill ins(%zero : bf16) outs(%e : tensor<8x8x8xbf16>) -> tensor<8x8x8xbf16>
  %c = linalg.generic {indexing_maps = [#in, #w, #out], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%in, %w : tensor<4x10x10xbf16>, tensor<8x4x3x3xbf16>) outs(%acc : tensor<8x8x8xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %m = arith.mulf %x, %y : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<8x8x8xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #ch, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c, %b : tensor<8x8x8xbf16>, tensor<8xbf16>) outs(%e : tensor<8x8x8xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %s = arith.addf %x, %y : bf16
    %p = arith.cmpf ugt, %s, %zero : bf16
    %q = arith.select %p, %s, %zero : bf16
    linalg.yield %q : bf16
  } -> tensor<8x8x8xbf16>
  return %r : tensor<8x8x8xbf16>
}

// i8 matmul (i32 accumulator) + per-column bias: group 1 = fill, matmul
// (principal), bias add.
// CHECK-LABEL: func.func @matmul_bias(
// CHECK-NOT: torq-fuse
// CHECK: linalg.fill
// CHECK-SAME: {"torq-fuse-group" = [1]} ins
// CHECK-NOT: torq-fuse
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-SAME: attrs = {"torq-fuse-group" = [1], "torq-fuse-group-id" = 1 : i64} {
// CHECK: arith.muli
// CHECK: linalg.generic {{.*}}ins(%{{.*}}, %arg2 : tensor<4x16xi32>, tensor<16xi32>)
// CHECK-SAME: attrs = {"torq-fuse-group" = [1]} {
// CHECK: return
func.func @matmul_bias(%x: tensor<4x8xi8>, %y: tensor<8x16xi8>, %bias: tensor<16xi32>) -> tensor<4x16xi32> {
  %z = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x16xi32>
  %f = linalg.fill ins(%z : i32) outs(%e : tensor<4x16xi32>) -> tensor<4x16xi32>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xi8>, tensor<8x16xi8>) outs(%f : tensor<4x16xi32>) {
  ^bb0(%p: i8, %q: i8, %o: i32):
    %p1 = arith.extsi %p : i8 to i32
    %q1 = arith.extsi %q : i8 to i32
    %m = arith.muli %p1, %q1 : i32
    %s = arith.addi %o, %m : i32
    linalg.yield %s : i32
  } -> tensor<4x16xi32>
  %r = linalg.generic {indexing_maps = [#id2, #col, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %bias : tensor<4x16xi32>, tensor<16xi32>) outs(%e : tensor<4x16xi32>) {
  ^bb0(%p: i32, %q: i32, %o: i32):
    %s = arith.addi %p, %q : i32
    linalg.yield %s : i32
  } -> tensor<4x16xi32>
  return %r : tensor<4x16xi32>
}

// A standalone elementwise add is a group of one op (UID 2), its own principal.
// CHECK-LABEL: func.func @add(
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [2], "torq-fuse-group-id" = 2 : i64} {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.addf
func.func @add(%x: tensor<4x16xbf16>, %y: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x, %y : tensor<4x16xbf16>, tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %s = arith.addf %p, %q : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// math.sin has no Torq lowering: the op gets no marks, the pass does not
// fail, and no UID is spent on it (the next group is 3).
// CHECK-LABEL: func.func @sin(
// CHECK-NOT: torq-fuse
// CHECK: math.sin
// CHECK-NOT: torq-fuse
// CHECK: return
func.func @sin(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %s = math.sin %p : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// A matmul whose only user is a sin: the sin cannot be its epilogue, so the
// group (UID 3) is the fill and the matmul alone, and the sin stays unmarked.
// CHECK-LABEL: func.func @matmul_then_sin(
// CHECK: linalg.fill {"torq-fuse-group" = [3]} ins
// CHECK: linalg.generic {{.*}} attrs = {"torq-fuse-group" = [3], "torq-fuse-group-id" = 3 : i64} {
// CHECK: linalg.generic
// CHECK-NOT: torq-fuse
// CHECK: math.sin
// CHECK: return
func.func @matmul_then_sin(%x: tensor<4x8xbf16>, %y: tensor<8x16xbf16>) -> tensor<4x16xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm : tensor<4x16xbf16>) outs(%e : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %o: bf16):
    %s = math.sin %p : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// Two matmuls accumulating into the same zero fill (as CSE leaves them): the
// fill belongs to both groups and carries both UIDs, in marking order.
// CHECK-LABEL: func.func @shared_fill(
// CHECK: linalg.fill {"torq-fuse-group" = [4, 5]} ins
// CHECK: linalg.generic {{.*}}ins(%arg0, %arg1 : {{.*}} attrs = {"torq-fuse-group" = [4], "torq-fuse-group-id" = 4 : i64} {
// CHECK: linalg.generic {{.*}}ins(%arg0, %arg2 : {{.*}} attrs = {"torq-fuse-group" = [5], "torq-fuse-group-id" = 5 : i64} {
func.func @shared_fill(%x: tensor<4x8xbf16>, %y: tensor<8x16xbf16>, %y2: tensor<8x16xbf16>) -> (tensor<4x16xbf16>, tensor<4x16xbf16>) {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %m1 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  %m2 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %y2 : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%f : tensor<4x16xbf16>) {
  ^bb0(%p: bf16, %q: bf16, %o: bf16):
    %m = arith.mulf %p, %q : bf16
    %s = arith.addf %o, %m : bf16
    linalg.yield %s : bf16
  } -> tensor<4x16xbf16>
  return %m1, %m2 : tensor<4x16xbf16>, tensor<4x16xbf16>
}
