// An int8 activation after an integer rescale (what compiler/requant.py makes of a
// QDQ hardswish): `tensor.extract` of a constant 256-entry table at (level + 128)
// lowers to one "lut" epilogue step whose constant arguments are the table, after
// the rescale's steps (the index_cast adds no step): value 6 is level + 128, and
// the table holds hardswish: its first entry (for -128) is 0, its last 127.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @matmul_rescale_table(
// CHECK-NOT: linalg.
// CHECK: "torq_hl.matmul"(%arg0, %arg1)
// CHECK-SAME: epilogue = {result = 7 : i64, steps = [{{.*}}{args = [{value = 6 : i64}, 0.000000e+00, {{.*}}, 1.270000e+02], op = "lut", to = "i8"}]}
// CHECK-SAME: -> tensor<4x8xi8>
// CHECK-NOT: tensor.extract
func.func @matmul_rescale_table(%x: tensor<4x16xi8>, %w: tensor<16x8xi8>) -> tensor<4x8xi8> {
  %z = arith.constant 0 : i32
  %ea = tensor.empty() : tensor<4x8xi32>
  %acc = linalg.fill ins(%z : i32) outs(%ea : tensor<4x8xi32>) -> tensor<4x8xi32>
  %c = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x16xi8>, tensor<16x8xi8>) outs(%acc : tensor<4x8xi32>) {
  ^bb0(%p: i8, %q: i8, %o: i32):
    %p32 = arith.extsi %p : i8 to i32
    %q32 = arith.extsi %q : i8 to i32
    %m = arith.muli %p32, %q32 : i32
    %s = arith.addi %o, %m : i32
    linalg.yield %s : i32
  } -> tensor<4x8xi32>
  %e = tensor.empty() : tensor<4x8xi8>
  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<4x8xi32>) outs(%e : tensor<4x8xi8>) {
  ^bb0(%a: i32, %out: i8):
    %a64 = arith.extsi %a : i32 to i64
    %m = arith.constant 1374389535 : i64
    %r = arith.constant 68719476736 : i64
    %sh = arith.constant 37 : i64
    %lo = arith.constant -128 : i64
    %hi = arith.constant 127 : i64
    %scaled = arith.muli %a64, %m : i64
    %rounded = arith.addi %scaled, %r : i64
    %down = arith.shrsi %rounded, %sh : i64
    %above = arith.maxsi %down, %lo : i64
    %below = arith.minsi %above, %hi : i64
    %first = arith.constant 128 : i64
    %i64 = arith.addi %below, %first : i64
    %index = arith.index_cast %i64 : i64 to index
    %table = arith.constant dense<[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127]> : tensor<256xi8>
    %v = tensor.extract %table[%index] : tensor<256xi8>
    linalg.yield %v : i8
  } -> tensor<4x8xi8>
  return %r : tensor<4x8xi8>
}
