// torq-build-nss-program: the function (after LRAM assignment) is executed at
// compile time and replaced by one torq_nss op per DDR tensor, LRAM buffer
// and command. Per tile, in order: a DMA-in for each operand not produced in
// the tile (just before the compute that first needs it), the compute at the
// assigned offsets, a DMA-out of each result used outside the tile. Tiles of
// a body with several LRAM buffer sets go to slices cyclically (tile i on
// slice i % slices); in a body with one set (the function body, or a loop
// whose tiles reuse the same bytes) each compute is split over all slices
// instead (`split` = slices, from slice 0), along its result's outermost dim
// whose extent the slice count divides.
// RUN: torq-opt %s --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s
// RUN: torq-opt %s --torq-hw=SL2610:slices=1 --pass-pipeline='builtin.module(torq-build-nss-program)' | FileCheck %s --check-prefix=ONE

// One tile, two ops, a constant operand (offsets as the allocator assigns
// them for commands 0 dma a, 1 dma b, 2 compute %0, 3 dma %k, 4 compute %1,
// 5 dma_out %1).
// Tensors: the two inputs, the output, then the constant (its bytes inline:
// bf16 2.0 = 0x4000, little-endian [0, 64] x 50). Host dtypes come from
// torq.host_arg_types / torq.host_result_types (f32 demoted to bf16).
// Buffers: one per DMA-in and per compute result, live from the command
// that fills it to the last command that reads it (%0 = buffer 2 is read by
// the second compute, command 4). The chained value %0 stays in LRAM: no
// DMA-out for it, and %1 is written once to the output tensor.
// Vector padding (compiler/vector_layout.py): an elementwise op vectorises
// its innermost dim; bf16 vectors have TorqHw.lanes_bf16 = 32 elements and
// 50 >= 32 rounds up to 2 x 32 = 64, so every buffer is 64 x 2 = 128 bytes
// (shape [50] stored in padded_shape [64]) and each compute's padded work is
// 64 result elements (the DMAs still move 50 elements).
// The function body has one buffer set: both computes are split over the 2
// slices (50 = 2 x 25 elements each); with one slice there is no split.
// CHECK-LABEL: func.func @one_tile()
// CHECK-SAME: torq.original_type = (tensor<50xbf16>, tensor<50xbf16>) -> tensor<50xbf16>
// CHECK-SAME: torq.program = {hw = {clock_mhz = 800 : i64, {{.*}}name = "SL2610", {{.*}}}, lram_peak = 300 : i64, name = "one_tile", tiles = 1 : i64}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "f32", index = 0 : i64, kind = "input", shape = [50]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 1 : i64, dtype = "bf16", host_dtype = "f32", index = 1 : i64, kind = "input", shape = [50]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "f32", index = 2 : i64, kind = "output", shape = [50]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = -1 : i64, dtype = "bf16", host_dtype = "bf16", index = 3 : i64, kind = "constant", shape = [50]}, value = dense<[0, 64, 0, 64, {{.*}}, 0, 64]> : tensor<100xi8>}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 2 : i64, live_start = 0 : i64, offset = 0 : i64, padded_shape = [64], shape = [50], size = 128 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 2 : i64, live_start = 1 : i64, offset = 128 : i64, padded_shape = [64], shape = [50], size = 128 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 2 : i64, live_end = 4 : i64, live_start = 2 : i64, offset = 256 : i64, padded_shape = [64], shape = [50], size = 128 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 3 : i64, live_end = 4 : i64, live_start = 3 : i64, offset = 0 : i64, padded_shape = [64], shape = [50], size = 128 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 4 : i64, live_end = 5 : i64, live_start = 4 : i64, offset = 128 : i64, padded_shape = [64], shape = [50], size = 128 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0], sizes = [50], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 1 : i64, offsets = [0], sizes = [50], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {{.*}}op = "add"}]}, macs = 0 : i64, op = "elementwise", operands = [{buffer = 0 : i64, {{.*}}}, {buffer = 1 : i64, {{.*}}}], padded_work = 64 : i64, result = {buffer = 2 : i64, {{.*}}}, slice = 0 : i64, split = 2 : i64, tile = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 3 : i64, offsets = [0], sizes = [50], tensor = 3 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {{.*}}op = "mul"}]}, macs = 0 : i64, op = "elementwise", operands = [{buffer = 2 : i64, {{.*}}}, {buffer = 3 : i64, {{.*}}}], padded_work = 64 : i64, result = {buffer = 4 : i64, {{.*}}}, slice = 0 : i64, split = 2 : i64, tile = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 4 : i64, offsets = [0], sizes = [50], tensor = 2 : i64}}
// CHECK-NEXT: return
// CHECK-NEXT: }
func.func @one_tile(%a: tensor<50xbf16>, %b: tensor<50xbf16>) -> tensor<50xbf16> attributes {torq.host_arg_types = [tensor<50xf32>, tensor<50xf32>], torq.host_result_types = [tensor<50xf32>], torq.lram_end = 356 : i64, torq.lram_peak = 300 : i64} {
  %k = arith.constant dense<2.0> : tensor<50xbf16>
  %0 = "torq_hl.elementwise"(%a, %b) {epilogue = {result = 0, steps = [{args = [{axes = [0], operand = 0}, {axes = [0], operand = 1}], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0, 128], torq.lram_result = 256 : i64} : (tensor<50xbf16>, tensor<50xbf16>) -> tensor<50xbf16>
  %1 = "torq_hl.elementwise"(%0, %k) {epilogue = {result = 0, steps = [{args = [{axes = [0], operand = 0}, {axes = [0], operand = 1}], op = "mul"}]}, macs = 0 : i64, torq.lram_operands = [256, 0], torq.lram_result = 128 : i64} : (tensor<50xbf16>, tensor<50xbf16>) -> tensor<50xbf16>
  return %1 : tensor<50xbf16>
}

// ONE-LABEL: func.func @one_tile()
// ONE: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}padded_work = 64 : i64, {{.*}}slice = 0 : i64, tile = 0 : i64}}
// ONE: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}padded_work = 64 : i64, {{.*}}slice = 0 : i64, tile = 0 : i64}}

// Two tiles of 2 rows (scf.for 0 to 4 step 2): the loop is unrolled, each
// tile is dma_in (its 2x16 box of the input, at row 0 then row 2), compute,
// dma_out (the same box of the output), with fresh buffers; two buffer sets
// 128 bytes apart (torq.lram_sets), so tile 1's buffers sit at 128 and 192.
// Tile 0 runs on slice 0, tile 1 on slice 1; with one slice both run on
// slice 0. No host type records: host dtypes are the bf16 types.
// CHECK-LABEL: func.func @two_tiles()
// CHECK-SAME: torq.original_type = (tensor<4x16xbf16>) -> tensor<4x16xbf16>
// CHECK-SAME: torq.program = {hw = {{.*}}, lram_peak = 128 : i64, name = "two_tiles", tiles = 2 : i64}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 0 : i64, kind = "input", shape = [4, 16]}}
// CHECK-NEXT: "torq_nss.tensor"() {spec = {arg_index = 0 : i64, dtype = "bf16", host_dtype = "bf16", index = 1 : i64, kind = "output", shape = [4, 16]}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 0 : i64, live_end = 1 : i64, live_start = 0 : i64, offset = 0 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 1 : i64, live_end = 2 : i64, live_start = 1 : i64, offset = 64 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 2 : i64, live_end = 4 : i64, live_start = 3 : i64, offset = 128 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.buffer"() {spec = {id = 3 : i64, live_end = 5 : i64, live_start = 4 : i64, offset = 192 : i64, size = 64 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 0 : i64, offsets = [0, 0], sizes = [2, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {{.*}}, macs = 0 : i64, op = "elementwise", operands = [{buffer = 0 : i64, dtype = "bf16", shape = [2, 16]}], result = {buffer = 1 : i64, dtype = "bf16", shape = [2, 16]}, slice = 0 : i64, tile = 0 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 1 : i64, offsets = [0, 0], sizes = [2, 16], tensor = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_in"() {spec = {buffer = 2 : i64, offsets = [2, 0], sizes = [2, 16], tensor = 0 : i64}}
// CHECK-NEXT: "torq_nss.compute"() {spec = {attrs = [], epilogue = {{.*}}, macs = 0 : i64, op = "elementwise", operands = [{buffer = 2 : i64, dtype = "bf16", shape = [2, 16]}], result = {buffer = 3 : i64, dtype = "bf16", shape = [2, 16]}, slice = 1 : i64, tile = 1 : i64}}
// CHECK-NEXT: "torq_nss.dma_out"() {spec = {buffer = 3 : i64, offsets = [2, 0], sizes = [2, 16], tensor = 1 : i64}}
// CHECK-NEXT: return
// CHECK-NEXT: }
// ONE-LABEL: func.func @two_tiles()
// ONE: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, tile = 0 : i64}}
// ONE: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, tile = 1 : i64}}
func.func @two_tiles(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> attributes {torq.lram_end = 256 : i64, torq.lram_peak = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %e) -> (tensor<4x16xbf16>) {
    %s = tensor.extract_slice %x[%i, 0] [2, 16] [1, 1] : tensor<4x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 64 : i64, torq.lram_resident = [0], torq.lram_set_stride = 128 : i64, torq.lram_sets = 2 : i64} : (tensor<2x16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<4x16xbf16>
    scf.yield %u : tensor<4x16xbf16>
  }
  return %r : tensor<4x16xbf16>
}

// The same two tiles with one buffer set (tile 1 reuses tile 0's bytes, so
// the tiles run one after the other whatever their slices): each compute is
// split over both slices (its 2x16 result cut along rows, one row each), on
// slice 0. A result with no dim the slice count divides (3x5) is not split.
// With one slice nothing is split.
// CHECK-LABEL: func.func @one_set()
// CHECK-SAME: torq.distribution = {bodies = [{form = "split", slices_used = 1 : i64, split_computes = 0 : i64, tiles = 1 : i64}, {form = "split", slices_used = 2 : i64, split_computes = 2 : i64, tiles = 2 : i64}], slices = 2 : i64, strategy = "cyclic"}
// CHECK: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}shape = [3, 5]{{.*}}padded_work = 24 : i64, {{.*}}slice = 0 : i64, tile = 0 : i64}}
// CHECK: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, split = 2 : i64, tile = 1 : i64}}
// CHECK: "torq_nss.compute"() {{.*}}macs = 0 : i64, {{.*}}slice = 0 : i64, split = 2 : i64, tile = 2 : i64}}
// ONE-LABEL: func.func @one_set()
// ONE-SAME: torq.distribution = {bodies = [{form = "exact", slices_used = 1 : i64, tiles = 1 : i64}, {form = "general", slices_used = 1 : i64, tiles = 2 : i64}]
// ONE-NOT: split
func.func @one_set(%x: tensor<4x16xbf16>, %z: tensor<3x5xbf16>) -> (tensor<4x16xbf16>, tensor<3x5xbf16>) attributes {torq.lram_end = 128 : i64, torq.lram_peak = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %w = "torq_hl.elementwise"(%z) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}], op = "neg"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 64 : i64} : (tensor<3x5xbf16>) -> tensor<3x5xbf16>
  %e = tensor.empty() : tensor<4x16xbf16>
  %r = scf.for %i = %c0 to %c4 step %c2 iter_args(%acc = %e) -> (tensor<4x16xbf16>) {
    %s = tensor.extract_slice %x[%i, 0] [2, 16] [1, 1] : tensor<4x16xbf16> to tensor<2x16xbf16>
    %t = "torq_hl.elementwise"(%s) {epilogue = {result = 0, steps = [{args = [{axes = [0, 1], operand = 0}, 1.0], op = "add"}]}, macs = 0 : i64, torq.lram_operands = [0], torq.lram_result = 64 : i64, torq.lram_resident = [0], torq.lram_set_stride = 128 : i64, torq.lram_sets = 1 : i64} : (tensor<2x16xbf16>) -> tensor<2x16xbf16>
    %u = tensor.insert_slice %t into %acc[%i, 0] [2, 16] [1, 1] : tensor<2x16xbf16> into tensor<4x16xbf16>
    scf.yield %u : tensor<4x16xbf16>
  }
  return %r, %w : tensor<4x16xbf16>, tensor<3x5xbf16>
}
