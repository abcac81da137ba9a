// GPT-2's causal mask as IREE leaves it (a generic over a flattened [16, 16] computing
// d % 16 <= (d / 16) % 16 from its loop index) is evaluated at compile time into a
// constant, which the NSS program copies into the result with a DMA-in and a DMA-out.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants,torq-check-npu-support,torq-convert-dtypes,torq-build-nss-program)' | FileCheck %s --check-prefix=NSS
// Signed division truncates and the remainder takes the dividend's sign, as in arith:
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-fold-index-constants)' | FileCheck %s --check-prefix=SIGNED
//
// CHECK-LABEL: func.func @causal_mask()
// CHECK-NOT: linalg.generic
// First row [1, 0, ..., 0], second [1, 1, 0, ...]:
// CHECK: %[[M:.*]] = arith.constant dense<"0x0100000000000000000000000000000001010000
// CHECK: return %[[M]] : tensor<256xi1>
// NSS: "torq_nss.tensor"() {spec = {arg_index = -1 : i64, dtype = "i1", host_dtype = "i1", index = 1 : i64, kind = "constant", shape = [256]}
// NSS: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [256], tensor = 1 : i64}}
// NSS-NEXT: "torq_nss.dma_out"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [256], tensor = 0 : i64}}
// SIGNED-LABEL: func.func @signed()
// (d - 3) / 2 and (d - 3) % 2 for d = 0..5: -1 -1 0 0 0 1 and -1 0 -1 0 1 0, summed:
// SIGNED: arith.constant dense<[-2, -1, -1, 0, 1, 1]> : tensor<6xi32>

func.func @causal_mask() -> tensor<256xi1> attributes {torq.dispatch} {
  %c16 = arith.constant 16 : index
  %0 = tensor.empty() : tensor<256xi1>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%0 : tensor<256xi1>) {
  ^bb0(%out: i1):
    %2 = linalg.index 0 : index
    %3 = arith.remsi %2, %c16 : index
    %4 = arith.divsi %2, %c16 : index
    %5 = arith.remsi %4, %c16 : index
    %6 = arith.index_cast %5 : index to i64
    %7 = arith.index_cast %3 : index to i64
    %8 = arith.cmpi sle, %7, %6 : i64
    linalg.yield %8 : i1
  } -> tensor<256xi1>
  return %1 : tensor<256xi1>
}

func.func @signed() -> tensor<6xi32> attributes {torq.dispatch} {
  %c3 = arith.constant 3 : index
  %c2 = arith.constant 2 : index
  %0 = tensor.empty() : tensor<6xi32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%0 : tensor<6xi32>) {
  ^bb0(%out: i32):
    %2 = linalg.index 0 : index
    %3 = arith.subi %2, %c3 : index
    %4 = arith.divsi %3, %c2 : index
    %5 = arith.remsi %3, %c2 : index
    %6 = arith.addi %4, %5 : index
    %7 = arith.index_cast %6 : index to i32
    linalg.yield %7 : i32
  } -> tensor<6xi32>
  return %1 : tensor<6xi32>
}
