// torq-serialize-executable validates the program before writing it: an
// inconsistent program (here buffers 0 [0, 64) and 1 [32, 96) overlap while
// both are live at command 1) is a clean one-line compile error naming the
// function's location and the problem, with a non-zero exit and no IR.
// RUN: not torq-opt %s --pass-pipeline='builtin.module(torq-serialize-executable)' 2>&1 | FileCheck %s

// CHECK: torq-opt: error: prog.py:9:1: error: program 'prog': LRAM buffers 0 [0, 64) and 1 [32, 96) overlap while both are live (commands 1..1)
// CHECK-NOT: Traceback
// CHECK-NOT: func.func
func.func @prog() attributes {torq.lram_peak = 128 : i64, torq.original_type = (tensor<2x16xbf16>) -> tensor<2x16xbf16>, torq.program = {hw = {name = "SL2610"}, lram_peak = 128 : i64, name = "prog", tiles = 1 : i64}} {
  "torq_nss.tensor"() {spec = {arg_index = 0, dtype = "bf16", host_dtype = "f32", index = 0, kind = "input", shape = [2, 16]}} : () -> ()
  "torq_nss.tensor"() {spec = {arg_index = 0, dtype = "bf16", host_dtype = "f32", index = 1, kind = "output", shape = [2, 16]}} : () -> ()
  "torq_nss.buffer"() {spec = {id = 0, live_end = 1, live_start = 0, offset = 0, size = 64}} : () -> ()
  "torq_nss.buffer"() {spec = {id = 1, live_end = 2, live_start = 1, offset = 32, size = 64}} : () -> ()
  "torq_nss.dma_in"() {spec = {buffer = 0, offsets = [0, 0], sizes = [2, 16], tensor = 0}} : () -> ()
  "torq_nss.compute"() {spec = {attrs = [], epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0, op = "elementwise", operands = [{buffer = 0, dtype = "bf16", shape = [2, 16]}], result = {buffer = 1, dtype = "bf16", shape = [2, 16]}, slice = 0, tile = 0}} : () -> ()
  "torq_nss.dma_out"() {spec = {buffer = 1, offsets = [0, 0], sizes = [2, 16], tensor = 1}} : () -> ()
  return
} loc("prog.py":9:1)
