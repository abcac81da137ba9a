// torq-mark-in-place-updates: of the results dispatch extraction lists as
// updates of a box of a read-write operand (torq.result_updates), the NPU writes
// in place those the host does not finish: result 1 has a dequantize tail
// (torq.host_tail_results, from torq-lower-requantization), so the host inserts
// its box after the tail; result 0 is marked (torq.in_place_results). Both input
// attributes are consumed.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-mark-in-place-updates)' | FileCheck %s

// CHECK-LABEL: func.func @two_updates(
// CHECK-SAME: attributes {torq.dispatch, torq.in_place_results = [{offsets = array<i64: 0, 4>, result = 0 : i64, shape = array<i64: 4, 8>, sizes = array<i64: 4, 4>}]}
// CHECK-NOT: torq.result_updates
// CHECK-NOT: torq.host_tail_results
func.func @two_updates(%a: tensor<4x4xi8>, %b: tensor<4x4xi8>) -> (tensor<4x4xi8>, tensor<4x4xi8>) attributes {
    torq.dispatch, torq.host_tail_results = array<i64: 1>,
    torq.result_updates = [{offsets = array<i64: 0, 4>, result = 0 : i64, shape = array<i64: 4, 8>, sizes = array<i64: 4, 4>},
                           {offsets = array<i64: 0, 0>, result = 1 : i64, shape = array<i64: 4, 8>, sizes = array<i64: 4, 4>}]} {
  return %a, %b : tensor<4x4xi8>, tensor<4x4xi8>
}

// No update, nothing recorded.
// CHECK-LABEL: func.func @no_update(
// CHECK-SAME: attributes {torq.dispatch} {
func.func @no_update(%a: tensor<4x4xi8>) -> tensor<4x4xi8> attributes {torq.dispatch} {
  return %a : tensor<4x4xi8>
}

// An update at a runtime offset (index_dim, index_input: dispatch extraction's
// index operand) is marked like any other, its entry kept whole.
// CHECK-LABEL: func.func @row_at_position(
// CHECK-SAME: torq.in_place_results = [{index_dim = 2 : i64, index_input = 1 : i64, offsets = array<i64: 0, 0, 0, 0>, result = 0 : i64, shape = array<i64: 2, 3, 16, 8>, sizes = array<i64: 2, 3, 1, 8>}]
func.func @row_at_position(%k: tensor<2x3x8xbf16>, %position: tensor<1xi32>) -> tensor<2x3x8xbf16> attributes {
    torq.dispatch,
    torq.result_updates = [{index_dim = 2 : i64, index_input = 1 : i64, offsets = array<i64: 0, 0, 0, 0>,
                            result = 0 : i64, shape = array<i64: 2, 3, 16, 8>, sizes = array<i64: 2, 3, 1, 8>}]} {
  return %k : tensor<2x3x8xbf16>
}
