// An elementwise op that reads part of an input through its indexing map reads a box
// read of it instead (torq-split-box-reads). MobileViT's k: the second of q, k, v taken
// from one int8 tensor and transposed, fused with its int8 table (after
// torq-lower-requantization); EdgeNeXt's channel split: channels 24..47, fused with an
// integer rescale. Before, neither had a Torq pattern ("no Torq pattern (loops ...)").
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-box-reads)' | FileCheck %s
// Each becomes a DMA box of the input and one TorqHL elementwise op, reading the box
// transposed where the slice was:
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-split-box-reads,torq-check-npu-support,torq-convert-dtypes,torq-fold-padding,torq-mark-patterns-for-super-tiling,torq-super-tiling,torq-lower-to-torq-hl)' | FileCheck %s --check-prefix=HL

// CHECK-DAG: #[[K:.+]] = affine_map<(d0, d1, d2) -> (1, d0, d1, d2)>
// CHECK-DAG: #[[ID3:.+]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[T:.+]] = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
// CHECK-DAG: #[[CH:.+]] = affine_map<(d0, d1, d2) -> (0, d0 + 24, d1, d2)>
// CHECK-LABEL: func.func @transposed_slice(
// CHECK: %[[BOX:.+]] = linalg.generic {indexing_maps = [#[[K]], #[[ID3]]]
// CHECK-SAME: ins(%arg0 : tensor<3x4x16x8xi8>) outs(%{{.*}} : tensor<4x16x8xi8>)
// CHECK-NEXT: ^bb0(%[[IN:.+]]: i8, %{{.*}}: i8):
// CHECK-NEXT: linalg.yield %[[IN]] : i8
// CHECK: linalg.generic {indexing_maps = [#[[T]], #[[ID3]]]
// CHECK-SAME: ins(%[[BOX]] : tensor<4x16x8xi8>) outs(%{{.*}} : tensor<4x8x16xi8>)
// CHECK: tensor.extract
// CHECK-LABEL: func.func @channel_slice(
// CHECK: %[[CBOX:.+]] = linalg.generic {indexing_maps = [#[[CH]], #[[ID3]]]
// CHECK-SAME: ins(%arg0 : tensor<1x48x6x6xi8>) outs(%{{.*}} : tensor<24x6x6xi8>)
// CHECK: linalg.generic {indexing_maps = [#[[ID3]], #[[ID3]], #[[ID3]]]
// CHECK-SAME: ins(%[[CBOX]], %arg1 : tensor<24x6x6xi8>, tensor<24x6x6xi8>)
// CHECK-LABEL: func.func @whole_read_untouched(
// CHECK: linalg.generic {indexing_maps = [#[[T]], #[[ID3]]]
// CHECK-SAME: ins(%arg0 : tensor<4x16x8xi8>)

// HL-LABEL: func.func @transposed_slice(
// HL: %[[S:.+]] = tensor.extract_slice %arg0[1, 0, 0, 0] [1, 4, 16, 8] [1, 1, 1, 1]
// HL: "torq_hl.elementwise"(%[[S]]) {epilogue = {{.*}}axes = [0, 2, 1]
// HL-NOT: linalg.generic
// HL-LABEL: func.func @channel_slice(
// HL: %[[C:.+]] = tensor.extract_slice %arg0[0, 24, 0, 0] [1, 24, 6, 6] [1, 1, 1, 1]
// HL: "torq_hl.elementwise"(%[[C]], %arg1)
// HL-NOT: linalg.generic

#k = affine_map<(d0, d1, d2) -> (1, d0, d2, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
#ch = affine_map<(d0, d1, d2) -> (0, d0 + 24, d1, d2)>

func.func @transposed_slice(%arg0: tensor<3x4x16x8xi8>) -> tensor<4x8x16xi8> attributes {torq.dispatch} {
  %table = arith.constant dense<[-128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -127, -125, -123, -121, -119, -117, -115, -113, -111, -109, -107, -105, -103, -101, -99, -97, -95, -93, -91, -89, -87, -85, -83, -81, -79, -77, -75, -73, -71, -69, -67, -65, -63, -61, -59, -57, -55, -53, -51, -49, -47, -45, -43, -41, -39, -37, -35, -33, -31, -29, -27, -25, -23, -21, -19, -17, -15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63, 65, 67, 69, 71, 73, 75, 77, 79, 81, 83, 85, 87, 89, 91, 93, 95, 97, 99, 101, 103, 105, 107, 109, 111, 113, 115, 117, 119, 121, 123, 125, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 127]> : tensor<256xi8>
  %c128 = arith.constant 128 : i64
  %e = tensor.empty() : tensor<4x8x16xi8>
  %r = linalg.generic {indexing_maps = [#k, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<3x4x16x8xi8>) outs(%e : tensor<4x8x16xi8>) {
  ^bb0(%in: i8, %out: i8):
    %w = arith.extsi %in : i8 to i64
    %s = arith.addi %w, %c128 : i64
    %i = arith.index_cast %s : i64 to index
    %v = tensor.extract %table[%i] : tensor<256xi8>
    linalg.yield %v : i8
  } -> tensor<4x8x16xi8>
  return %r : tensor<4x8x16xi8>
}

func.func @channel_slice(%arg0: tensor<1x48x6x6xi8>, %arg1: tensor<24x6x6xi8>) -> tensor<24x6x6xi8> attributes {torq.dispatch} {
  %e = tensor.empty() : tensor<24x6x6xi8>
  %lo = arith.constant -128 : i32
  %hi = arith.constant 127 : i32
  %r = linalg.generic {indexing_maps = [#ch, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0, %arg1 : tensor<1x48x6x6xi8>, tensor<24x6x6xi8>) outs(%e : tensor<24x6x6xi8>) {
  ^bb0(%a: i8, %b: i8, %out: i8):
    %a32 = arith.extsi %a : i8 to i32
    %b32 = arith.extsi %b : i8 to i32
    %s = arith.addi %a32, %b32 : i32
    %c1 = arith.maxsi %s, %lo : i32
    %c2 = arith.minsi %c1, %hi : i32
    %t = arith.trunci %c2 : i32 to i8
    linalg.yield %t : i8
  } -> tensor<24x6x6xi8>
  return %r : tensor<24x6x6xi8>
}

func.func @whole_read_untouched(%arg0: tensor<4x16x8xi8>) -> tensor<4x8x16xi8> attributes {torq.dispatch} {
  %e = tensor.empty() : tensor<4x8x16xi8>
  %r = linalg.generic {indexing_maps = [#t, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<4x16x8xi8>) outs(%e : tensor<4x8x16xi8>) {
  ^bb0(%in: i8, %out: i8):
    linalg.yield %in : i8
  } -> tensor<4x8x16xi8>
  return %r : tensor<4x8x16xi8>
}

