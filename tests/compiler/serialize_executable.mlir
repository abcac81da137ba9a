// torq-serialize-executable: a function built by torq-build-nss-program (its
// torq_nss ops + torq.program) gets its program as a FlatBuffers blob in
// torq.executable (an i8 elements attribute) and loses its torq_nss ops.
// Functions without torq.program are left alone.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-serialize-executable)' | FileCheck %s

// One tile: DMA a 2x16 bf16 input in, add 1, DMA it out.
// The blob starts with the FlatBuffers header: a 4-byte root offset, then the
// file identifier "TORQ" = 54 4F 52 51; its hw name "SL2610" = 53 4C 32 36 31 30
// (NUL-terminated) is in it too, but not the function's name "prog" = 70 72 6F 67:
// an executable names no call site. The rest of the function is unchanged.
// CHECK-LABEL: func.func @prog()
// CHECK-SAME: attributes {torq.executable = dense<"0x{{[0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F]}}544F5251{{([0-9A-F][0-9A-F])*}}534C3236313000{{([0-9A-F][0-9A-F])*}}"> : tensor<{{[0-9]+}}xi8>
// CHECK-SAME: torq.lram_peak = 128 : i64
// CHECK-SAME: torq.program = {hw = {name = "SL2610"}, lram_peak = 128 : i64, name = "prog", tiles = 1 : i64}
// CHECK-NEXT: return
// CHECK-NEXT: }
func.func @prog() attributes {torq.lram_peak = 128 : i64, torq.original_type = (tensor<2x16xbf16>) -> tensor<2x16xbf16>, torq.program = {hw = {name = "SL2610"}, lram_peak = 128 : i64, name = "prog", tiles = 1 : i64}} {
  "torq_nss.tensor"() {spec = {arg_index = 0, dtype = "bf16", host_dtype = "f32", index = 0, kind = "input", shape = [2, 16]}} : () -> ()
  "torq_nss.tensor"() {spec = {arg_index = 0, dtype = "bf16", host_dtype = "f32", index = 1, kind = "output", shape = [2, 16]}} : () -> ()
  "torq_nss.buffer"() {spec = {id = 0, live_end = 1, live_start = 0, offset = 0, size = 64}} : () -> ()
  "torq_nss.buffer"() {spec = {id = 1, live_end = 2, live_start = 1, offset = 64, size = 64}} : () -> ()
  "torq_nss.dma_in"() {spec = {buffer = 0, offsets = [0, 0], sizes = [2, 16], tensor = 0}} : () -> ()
  "torq_nss.compute"() {spec = {attrs = [], epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0, op = "elementwise", operands = [{buffer = 0, dtype = "bf16", shape = [2, 16]}], result = {buffer = 1, dtype = "bf16", shape = [2, 16]}, slice = 0, tile = 0}} : () -> ()
  "torq_nss.dma_out"() {spec = {buffer = 1, offsets = [0, 0], sizes = [2, 16], tensor = 1}} : () -> ()
  return
}

// CHECK-LABEL: func.func @not_a_program(
// CHECK-SAME: %arg0: tensor<4xi8>) -> tensor<4xi8> {
// CHECK-NEXT: return %arg0 : tensor<4xi8>
func.func @not_a_program(%x: tensor<4xi8>) -> tensor<4xi8> {
  return %x : tensor<4xi8>
}

// CHECK-NOT: torq_nss.
