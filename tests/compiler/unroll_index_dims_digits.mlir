// Qwen3's rotary as IREE fuses it after the per-head q norm: x is read collapsed
// ([T, H*D], 8 heads of 2 halves of 8) and, for rotate_half, viewed as [T, H, 2, D/2]
// through tensor.extract at (d0, d1 / 16, 1 - (d1 / 8) % 2, d1 % 8). Split along d1,
// that is 16 pieces of 8 columns: too many. The cut points 8 and 16 divide each other
// and 128, so d1 becomes three loop dims (8 heads, 2 halves, 8 columns): the collapsed
// operands and the result get the expanded types (the target reshapes at the call),
// then the half dim splits in two like Llama's rotate_half.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims)' | FileCheck %s
// The NPU takes it: no remark from the support check.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-unroll-index-dims,torq-check-npu-support)' | FileCheck %s --check-prefix=NPU
//
// CHECK-LABEL: func.func @qwen3_rotary(
// CHECK-SAME: %arg0: tensor<4x8x2x8xf32>, %arg1: tensor<4x8x2x8xf32>, %arg2: tensor<8x2x8xf32>, %arg3: tensor<8x2x8xf32>) -> tensor<4x8x2x8xf32>
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.remsi
// CHECK-NOT: arith.divsi
// CHECK: tensor.extract_slice %arg0[0, 0, 1, 0] [4, 8, 1, 8]
// CHECK: arith.negf
// CHECK: tensor.insert_slice
// CHECK: tensor.extract_slice %arg0[0, 0, 0, 0] [4, 8, 1, 8]
// CHECK-NOT: arith.negf
// CHECK: %[[R:.*]] = tensor.insert_slice
// CHECK: return %[[R]] : tensor<4x8x2x8xf32>
// NPU-LABEL: func.func @qwen3_rotary(
// NPU-NOT: linalg.index

func.func @qwen3_rotary(%arg0: tensor<4x8x2x8xf32>, %arg1: tensor<4x128xf32>, %arg2: tensor<128xf32>, %arg3: tensor<128xf32>) -> tensor<4x128xf32> attributes {torq.dispatch} {
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %0 = tensor.empty() : tensor<4x128xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg1, %arg2, %arg3 : tensor<4x128xf32>, tensor<128xf32>, tensor<128xf32>) outs(%0 : tensor<4x128xf32>) {
  ^bb0(%in: f32, %in_4: f32, %in_5: f32, %out: f32):
    %2 = linalg.index 0 : index
    %3 = linalg.index 1 : index
    %4 = arith.remsi %3, %c8 : index
    %5 = arith.divsi %3, %c8 : index
    %6 = arith.remsi %5, %c2 : index
    %7 = arith.divsi %5, %c2 : index
    %8 = arith.subi %c1, %6 : index
    %extracted = tensor.extract %arg0[%2, %7, %8, %4] : tensor<4x8x2x8xf32>
    %9 = arith.negf %extracted : f32
    %10 = arith.cmpi eq, %8, %c1 : index
    %11 = arith.select %10, %9, %extracted : f32
    %12 = arith.mulf %11, %in_5 : f32
    %13 = arith.mulf %in, %in_4 : f32
    %14 = arith.addf %13, %12 : f32
    linalg.yield %14 : f32
  } -> tensor<4x128xf32>
  return %1 : tensor<4x128xf32>
}
