// torq-assign-lram-addresses: a tile loop between the commands of another tile body
// (here the function body, as when super tiling peels the last tile of one fuse group
// before the loop of the next) is planned on its own. A value the body computes before
// the loop and reads after it stays in LRAM while the loop runs (it has no DDR copy to
// load again, unlike a DDR slice, see build_nss_program_reload_after_loop.mlir), so the
// loop's buffers go above it (tile_schedule.kept_across). Before, they started at 0 over
// it and the program validator refused the dispatch (deit_tiny's LayerNorm moments,
// main_dispatch_99: LRAM buffers 22 [8448, 8512) and 24 [0, 9600) overlap).
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-assign-lram-addresses)' | FileCheck %s
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-assign-lram-addresses,torq-build-nss-program,torq-serialize-executable)' | FileCheck %s --check-prefix=EXE

// The function body: the DDR slice %s (1 x 64 bf16, 128 B) at 0, the row sum %r (one
// bf16, 2 B) at 128, read after the loop by the last compute (result at 192). %r is
// kept across the loop: the loop body starts at align(130, 64) = 192, its slice (2 x 64
// bf16, 256 B) at 192 and its result at 448; one set is 512 B, 2 tiles get 2 sets:
// end = 192 + 2 x 512 = 1216. The loop's peak counts %r: 512 + 2 = 514.
// CHECK-LABEL: func.func @kept_across_loop(
// CHECK-SAME: torq.lram_end = 1216 : i64, torq.lram_peak = 514 : i64
// CHECK: "torq_hl.reduce"(%{{.*}}) {{.*}}torq.lram_operands = [0], torq.lram_result = 128 : i64}
// CHECK: scf.for
// CHECK: "torq_hl.elementwise"(%{{.*}}) {{.*}}torq.lram_operands = [192], torq.lram_resident = [0], torq.lram_result = 448 : i64, torq.lram_set_stride = 512 : i64, torq.lram_sets = 2 : i64}
// CHECK: "torq_hl.elementwise"(%{{.*}}, %{{.*}}) {{.*}}torq.lram_operands = [0, 128], torq.lram_result = 192 : i64}
// EXE-LABEL: func.func @kept_across_loop()
// EXE-SAME: torq.executable = dense<
func.func @kept_across_loop(%arg0: tensor<5x64xbf16>) -> tensor<5x64xbf16> attributes {torq.dispatch} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %0 = tensor.empty() : tensor<5x64xbf16>
  %s = tensor.extract_slice %arg0[4, 0] [1, 64] [1, 1] : tensor<5x64xbf16> to tensor<1x64xbf16>
  %r = "torq_hl.reduce"(%s) {axes = [1], epilogue = {result = 0 : i64, steps = []}, macs = 64 : i64, mode = "sum"} : (tensor<1x64xbf16>) -> tensor<1xbf16>
  %l = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %0) -> (tensor<5x64xbf16>) {
    %t = tensor.extract_slice %arg0[%i, 0] [2, 64] [1, 1] : tensor<5x64xbf16> to tensor<2x64xbf16>
    %u = "torq_hl.elementwise"(%t) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [0, 1], operand = 0 : i64}], op = "mul"}]}, macs = 0 : i64} : (tensor<2x64xbf16>) -> tensor<2x64xbf16>
    %ins = tensor.insert_slice %u into %acc[%i, 0] [2, 64] [1, 1] : tensor<2x64xbf16> into tensor<5x64xbf16>
    scf.yield %ins : tensor<5x64xbf16>
  }
  %b = "torq_hl.elementwise"(%s, %r) {epilogue = {result = 1 : i64, steps = [{args = [{axes = [0], operand = 1 : i64}, 6.400000e+01], op = "div"}, {args = [{axes = [0, 1], operand = 0 : i64}, {value = 0 : i64}], op = "sub"}]}, macs = 0 : i64} : (tensor<1x64xbf16>, tensor<1xbf16>) -> tensor<1x64xbf16>
  %res = tensor.insert_slice %b into %l[4, 0] [1, 64] [1, 1] : tensor<1x64xbf16> into tensor<5x64xbf16>
  return %res : tensor<5x64xbf16>
}

// The row sum goes to DDR before the loop and only the DDR slice is read after it:
// nothing is kept, the loop body starts at 0 (the slice is loaded again after the loop,
// torq-build-nss-program), as before.
// CHECK-LABEL: func.func @nothing_kept(
// EXE-LABEL: func.func @nothing_kept()
// EXE-SAME: torq.executable = dense<
func.func @nothing_kept(%arg0: tensor<5x64xbf16>) -> (tensor<1xbf16>, tensor<5x64xbf16>) attributes {torq.dispatch} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %0 = tensor.empty() : tensor<5x64xbf16>
  %s = tensor.extract_slice %arg0[4, 0] [1, 64] [1, 1] : tensor<5x64xbf16> to tensor<1x64xbf16>
  %r = "torq_hl.reduce"(%s) {axes = [1], epilogue = {result = 0 : i64, steps = []}, macs = 64 : i64, mode = "sum"} : (tensor<1x64xbf16>) -> tensor<1xbf16>
  %l = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %0) -> (tensor<5x64xbf16>) {
    %t = tensor.extract_slice %arg0[%i, 0] [2, 64] [1, 1] : tensor<5x64xbf16> to tensor<2x64xbf16>
    %u = "torq_hl.elementwise"(%t) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [0, 1], operand = 0 : i64}], op = "mul"}]}, macs = 0 : i64} : (tensor<2x64xbf16>) -> tensor<2x64xbf16>
    %ins = tensor.insert_slice %u into %acc[%i, 0] [2, 64] [1, 1] : tensor<2x64xbf16> into tensor<5x64xbf16>
    scf.yield %ins : tensor<5x64xbf16>
  }
  %b = "torq_hl.elementwise"(%s) {epilogue = {result = 0 : i64, steps = [{args = [{axes = [0, 1], operand = 0 : i64}, {axes = [0, 1], operand = 0 : i64}], op = "mul"}]}, macs = 0 : i64} : (tensor<1x64xbf16>) -> tensor<1x64xbf16>
  %res = tensor.insert_slice %b into %l[4, 0] [1, 64] [1, 1] : tensor<1x64xbf16> into tensor<5x64xbf16>
  return %r, %res : tensor<1xbf16>, tensor<5x64xbf16>
}
