// Global average pooling of int8 values as compiler/requant_pooling.py writes
// it: an i32 sum reduction whose prologue widens the int8 input, then the
// integer rescale of the sum. It lowers to one torq_hl.reduce (mode "sum" in
// the i32 accumulator, of the prologue's widened values, an elementwise op of
// the same group) whose epilogue is the rescale. A sum into a narrower integer would wrap: refused.
// RUN: sed '/^\/\/ --- unsupported/,$d' %s | torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' | FileCheck %s
// RUN: sed -n '/^\/\/ --- unsupported/,$p' %s | not torq-opt - --pass-pipeline='builtin.module(torq-lower-to-torq-hl)' 2>&1 | FileCheck %s --check-prefix=ERR

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
#id1 = affine_map<(d0) -> (d0)>

// CHECK-LABEL: func.func @int8_global_average_pool(
// CHECK-NOT: linalg.generic
// CHECK: %[[W:.*]] = "torq_hl.elementwise"(%arg0)
// CHECK-SAME: (tensor<72x784xi8>) -> tensor<72x784xi32>
// CHECK: "torq_hl.reduce"(%[[W]]) {axes = [1], epilogue = {{.*}}op = "shr_s"{{.*}}op = "trunc", to = "i8"}]}, {{.*}}mode = "sum"}
// CHECK-SAME: (tensor<72x784xi32>) -> tensor<72xi8>
func.func @int8_global_average_pool(%x: tensor<72x784xi8>) -> tensor<72xi8> {
  %zero = arith.constant 0 : i32
  %se = tensor.empty() : tensor<72xi32>
  %init = linalg.fill ins(%zero : i32) outs(%se : tensor<72xi32>) -> tensor<72xi32>
  %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<72x784xi8>) outs(%init : tensor<72xi32>) {
  ^bb0(%in: i8, %acc: i32):
    %w = arith.extsi %in : i8 to i32
    %sum = arith.addi %acc, %w : i32
    linalg.yield %sum : i32
  } -> tensor<72xi32>
  %e = tensor.empty() : tensor<72xi8>
  %q = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%s : tensor<72xi32>) outs(%e : tensor<72xi8>) {
  ^bb0(%S: i32, %out: i8):
    %S64 = arith.extsi %S : i32 to i64
    %off = arith.constant 7216 : i64
    %m = arith.constant 1505204275 : i64
    %r = arith.constant 987243013 : i64
    %sh = arith.constant 40 : i64
    %lo = arith.constant -128 : i64
    %hi = arith.constant 127 : i64
    %0 = arith.addi %S64, %off : i64
    %1 = arith.muli %0, %m : i64
    %2 = arith.addi %1, %r : i64
    %3 = arith.shrsi %2, %sh : i64
    %4 = arith.maxsi %3, %lo : i64
    %5 = arith.minsi %4, %hi : i64
    %6 = arith.trunci %5 : i64 to i8
    linalg.yield %6 : i8
  } -> tensor<72xi8>
  return %q : tensor<72xi8>
}

// --- unsupported
// ERR: integer sum reduction (i8) has no Torq lowering
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @int8_sum_wraps(%x: tensor<72x784xi8>) -> tensor<72xi8> {
  %zero = arith.constant 0 : i8
  %se = tensor.empty() : tensor<72xi8>
  %init = linalg.fill ins(%zero : i8) outs(%se : tensor<72xi8>) -> tensor<72xi8>
  %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<72x784xi8>) outs(%init : tensor<72xi8>) {
  ^bb0(%in: i8, %acc: i8):
    %sum = arith.addi %acc, %in : i8
    linalg.yield %sum : i8
  } -> tensor<72xi8>
  return %s : tensor<72xi8>
}
