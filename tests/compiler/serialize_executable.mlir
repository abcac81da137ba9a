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
  "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[2,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"} : () -> ()
  "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22output\22,\22shape\22:[2,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"} : () -> ()
  "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:64,\22live_start\22:0,\22live_end\22:1}"} : () -> ()
  "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:64,\22size\22:64,\22live_start\22:1,\22live_end\22:2}"} : () -> ()
  "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0],\22sizes\22:[2,16],\22buffer\22:0}"} : () -> ()
  "torq_nss.compute"() {spec = "{\22op\22:\22elementwise\22,\22operands\22:[{\22buffer\22:0,\22shape\22:[2,16],\22dtype\22:\22bf16\22}],\22result\22:{\22buffer\22:1,\22shape\22:[2,16],\22dtype\22:\22bf16\22},\22attrs\22:{},\22epilogue\22:{\22steps\22:[{\22op\22:\22add\22,\22args\22:[{\22kind\22:\22operand\22,\22index\22:0,\22axes\22:[0,1],\22const\22:0.0},{\22kind\22:\22const\22,\22index\22:0,\22axes\22:[],\22const\22:1.0}],\22to\22:\22\22}],\22result\22:0},\22slice\22:0,\22macs\22:0,\22tile\22:0}"} : () -> ()
  "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:1,\22offsets\22:[0,0],\22sizes\22:[2,16]}"} : () -> ()
  return
}

// CHECK-LABEL: func.func @not_a_program(
// CHECK-SAME: %arg0: tensor<4xi8>) -> tensor<4xi8> {
// CHECK-NEXT: return %arg0 : tensor<4xi8>
func.func @not_a_program(%x: tensor<4xi8>) -> tensor<4xi8> {
  return %x : tensor<4xi8>
}

// CHECK-NOT: torq_nss.
