// torq-serialize-executable validates the program before writing it: an
// inconsistent program (here buffers 0 [0, 64) and 1 [32, 96) overlap while
// both are live at command 1) is a clean one-line compile error naming the
// function's location and the problem, with a non-zero exit and no IR.
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-serialize-executable)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: prog.py:9:1: error: program 'prog': LRAM buffers 0 [0, 64) and 1 [32, 96) overlap while both are live (commands 1..1)
// CHECK-NOT: Traceback
// CHECK-NOT: func.func
func.func @prog() attributes {torq.lram_peak = 128 : i64, torq.original_type = (tensor<2x16xbf16>) -> tensor<2x16xbf16>, torq.program = {hw = {name = "SL2610"}, lram_peak = 128 : i64, name = "prog", tiles = 1 : i64}} {
  "torq_nss.tensor"() {spec = "{\22index\22:0,\22kind\22:\22input\22,\22shape\22:[2,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"} : () -> ()
  "torq_nss.tensor"() {spec = "{\22index\22:1,\22kind\22:\22output\22,\22shape\22:[2,16],\22dtype\22:\22bf16\22,\22host_dtype\22:\22f32\22,\22arg_index\22:0}"} : () -> ()
  "torq_nss.buffer"() {spec = "{\22id\22:0,\22offset\22:0,\22size\22:64,\22live_start\22:0,\22live_end\22:1}"} : () -> ()
  "torq_nss.buffer"() {spec = "{\22id\22:1,\22offset\22:32,\22size\22:64,\22live_start\22:1,\22live_end\22:2}"} : () -> ()
  "torq_nss.dma_in"() {spec = "{\22tensor\22:0,\22offsets\22:[0,0],\22sizes\22:[2,16],\22buffer\22:0}"} : () -> ()
  "torq_nss.compute"() {spec = "{\22op\22:\22elementwise\22,\22operands\22:[{\22buffer\22:0,\22shape\22:[2,16],\22dtype\22:\22bf16\22}],\22result\22:{\22buffer\22:1,\22shape\22:[2,16],\22dtype\22:\22bf16\22},\22attrs\22:{},\22epilogue\22:{\22steps\22:[{\22op\22:\22add\22,\22args\22:[{\22kind\22:\22operand\22,\22index\22:0,\22axes\22:[0,1],\22const\22:0.0},{\22kind\22:\22const\22,\22index\22:0,\22axes\22:[],\22const\22:1.0}],\22to\22:\22\22}],\22result\22:0},\22slice\22:0,\22macs\22:0,\22tile\22:0}"} : () -> ()
  "torq_nss.dma_out"() {spec = "{\22buffer\22:1,\22tensor\22:1,\22offsets\22:[0,0],\22sizes\22:[2,16]}"} : () -> ()
  return
} loc("prog.py":9:1)
