// torq-build-nss-program numbering of tiles when the function body has a
// compute of its own before a tile loop (an untiled group feeding a tiled
// one through a DDR scratch tensor). The program has 3 tiles (the function
// body once, the loop body twice), so the computes carry 3 distinct tile ids
// in execution order, 0, 1, 2: a tile is numbered when its first compute is
// emitted, not when its block ends (before, the function-body compute and
// the first loop tile both got tile 0).
// Slices are dealt per tile body: the function body (one buffer set) splits
// its compute over both slices from slice 0; the loop body (two buffer sets)
// has 2 tiles <= 2 slices, so its iteration k runs on slice k: slices 0, 0, 1.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s

// CHECK-LABEL: func.func @body_then_loop()
// CHECK-SAME: tiles = 3 : i64}
// CHECK: "torq_nss.tensor"() {spec = {arg_index = {{.*}}, index = 2 : i64, kind = "scratch", shape = [4, 16]}}
// CHECK: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 0], sizes = [4, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, split = 2 : i64, tile = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0, 0], sizes = [4, 16], tensor = 2 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [0, 0], sizes = [2, 16], tensor = 2 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, tile = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"()
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = {{.*}}, offsets = [2, 0], sizes = [2, 16], tensor = 2 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 1 : i64, tile = 2 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"()
// CHECK-NEXT: return
func.func @body_then_loop(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> attributes {torq.lram_end = 256 : i64, torq.lram_peak = 256 : i64} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %y = "torq_hl.elementwise"(%x) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 128 : i64} : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %e) -> (tensor<4x16xbf16>) {
    %s = tensor.extract_slice %y[%i, 0] [2, 16] [1, 1] : tensor<4x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 64 : i64, torq.lram_resident = [0], torq.lram_set_stride = 128 : i64, torq.lram_sets = 2 : i64} : (tensor<2x16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<4x16xbf16>
    scf.yield %u : tensor<4x16xbf16>
  }
  return %r : tensor<4x16xbf16>
}
